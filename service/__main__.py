"""`python -m service`: parse settings, then serve the app with uvicorn."""
from __future__ import annotations

import logging

import uvicorn

from service.app import create_app
from service.config import parse_settings


def main() -> None:
    settings = parse_settings()
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                log_level=settings.log_level)


if __name__ == "__main__":
    main()
