"""`python -m service`: parse settings, then run the supervisor (engine + protocol fronts)."""

from __future__ import annotations

import sys

from service.config import parse_settings
from service.supervisor import run


def main(argv: list[str] | None = None) -> None:
    sys.exit(run(parse_settings(argv)))


if __name__ == "__main__":
    main()
