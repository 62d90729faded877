"""`python -m services.searcher`: serve SearcherService until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse

from services.common.args import add_common_flags
from services.common.logging import configure_logging, get_logger
from services.common.server import install_termination_handlers, wait_for_termination, write_ready_file
from services.searcher.server import DEFAULT_PORT, serve

log = get_logger("services.searcher")


def main(argv: list[str] | None = None) -> None:
    install_termination_handlers()
    parser = argparse.ArgumentParser(prog="cairn-searcher", description="Cairn searcher service")
    add_common_flags(parser, default_port=DEFAULT_PORT)
    args = parser.parse_args(argv)
    configure_logging("searcher", args.log_format, args.log_level)
    server = serve(args.host, args.port, args.cluster_token)
    log.info("searcher ready", port=server.port, cluster_token_required=bool(args.cluster_token))
    write_ready_file(args.ready_file, grpc_port=server.port)
    wait_for_termination(server.stop)


if __name__ == "__main__":
    main()
