"""Entry point: `python -m services.scheduler` (or `cairn-scheduler`)."""

from __future__ import annotations

import argparse
import sys

from services.common.args import add_common_flags
from services.common.logging import configure_logging, get_logger
from services.common.server import install_termination_handlers, wait_for_termination, write_ready_file
from services.scheduler.app import DEFAULT_PORT, start_scheduler


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cairn-scheduler", description="Cairn scheduler: placement and preemption decisions"
    )
    add_common_flags(parser, default_port=DEFAULT_PORT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    install_termination_handlers()
    args = parse_args(argv)
    configure_logging("scheduler", args.log_format, args.log_level)
    log = get_logger(__name__)
    try:
        server = start_scheduler(host=args.host, port=args.port, cluster_token=args.cluster_token)
    except Exception:
        log.exception("scheduler failed to start")
        return 1
    write_ready_file(args.ready_file, grpc_port=server.port)
    log.info("scheduler ready", port=server.port, cluster_token_required=bool(args.cluster_token))
    wait_for_termination(server.stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
