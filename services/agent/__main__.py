"""`python -m services.agent`: run an agent until SIGTERM (exit 0) or a fatal session error (exit 1)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from services.agent.app import Agent
from services.agent.settings import parse_settings
from services.common.logging import configure_logging


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(argv)
    configure_logging("agent", "json" if settings.log_format == "json" else "console", settings.log_level)
    return Agent(settings).run()


if __name__ == "__main__":
    sys.exit(main())
