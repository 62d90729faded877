"""Entry point: `python -m services.checkpoint` (or `cairn-checkpoint`)."""

from __future__ import annotations

import argparse

from services.checkpoint.server import DEFAULT_PORT, serve
from services.common.args import add_common_flags
from services.common.logging import configure_logging, get_logger
from services.common.server import install_termination_handlers, wait_for_termination, write_ready_file

log = get_logger(__name__)


def main(argv: list[str] | None = None) -> None:
    install_termination_handlers()
    parser = argparse.ArgumentParser(
        prog="cairn-checkpoint",
        description="Cairn checkpoint service: storage backends, streamed transfer, deletion and GC.",
    )
    add_common_flags(parser, default_port=DEFAULT_PORT)
    args = parser.parse_args(argv)
    configure_logging("checkpoint", args.log_format, args.log_level)
    server = serve(host=args.host, port=args.port, cluster_token=args.cluster_token)
    if not args.cluster_token:
        log.warning("no cluster token configured: every caller is accepted")
    write_ready_file(args.ready_file, grpc_port=server.port)
    wait_for_termination(server.stop)


if __name__ == "__main__":
    main()
