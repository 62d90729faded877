"""`python -m tpe_search` (or `python tpe_searcher.py`): serve the TPE searcher until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import os

import optuna

from cairn.searcher_plugin import serve

from .search import TPESearches

DEFAULT_PORT = 9100


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tpe_searcher", description="A TPE searcher (Optuna) serving Cairn's SearcherService"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"gRPC port; 0 picks a free one (default {DEFAULT_PORT})",
    )
    parser.add_argument("--ready-file", help='write {"pid", "grpc_port"} as JSON here once serving')
    parser.add_argument("--log-level", default=os.environ.get("TPE_SEARCHER_LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="seconds in-flight calls get to finish on SIGTERM (default 5)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Optuna logs every tell at INFO; the searcher's own log says what matters.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    serve(TPESearches(), args.host, args.port, ready_file=args.ready_file, grace=args.grace)


if __name__ == "__main__":
    main()
