"""Entry point: `python -m services.master` (or `cairn-master`)."""

from __future__ import annotations

import sys

from services.common.heap import settle_after_startup
from services.common.logging import configure_logging, get_logger
from services.common.server import install_termination_handlers, termination_requested, wait_for_termination
from services.common.tls import TlsSetupError
from services.master.app import Master
from services.master.configuration.settings import parse_settings
from services.master.domain.identity.exposure import UnsafeExposure
from services.master.leadership import CannotLead


def main(argv: list[str] | None = None) -> int:
    install_termination_handlers()
    settings = parse_settings(argv)
    configure_logging("master", settings.log_format, settings.log_level)  # type: ignore[arg-type]
    master = Master(settings)
    try:
        # A standby waits here until it leads, or until it is told to stop.
        if not master.start(until=termination_requested()):
            return 0
    except (CannotLead, UnsafeExposure, TlsSetupError) as exc:
        get_logger(__name__).error("master cannot start", error=str(exc))
        print(f"cairn-master: cannot start: {exc}", file=sys.stderr)
        return 1
    except Exception:
        get_logger(__name__).exception("master failed to start")
        return 1
    settle_after_startup()
    wait_for_termination(master.stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
