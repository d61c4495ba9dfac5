"""`python -m service`: parse settings, then serve the app with uvicorn."""

from __future__ import annotations

import logging
import sys

import uvicorn

from service.app import create_app
from service.auth import AuthConfigError
from service.config import parse_settings
from service.store.lock import StoreLockError, acquire


def main() -> None:
    settings = parse_settings()
    try:
        store_lock = acquire(settings.artifacts)  # held until the process exits
        app = create_app(settings)
    except (StoreLockError, AuthConfigError) as exc:
        sys.exit(f"error: {exc}")
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # uvloop and httptools: the pure-Python h11 parser was the largest cost per request.
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        loop="uvloop",
        http="httptools",
        access_log=settings.access_log,
    )
    store_lock.release()


if __name__ == "__main__":
    main()
