"""Command-line flags every service takes, with environment fallbacks."""

from __future__ import annotations

import argparse
import os

from services.common.cluster_token import add_cluster_token_flags


def add_common_flags(parser: argparse.ArgumentParser, *, default_port: int) -> None:
    parser.add_argument(
        "--host",
        default=os.environ.get("CAIRN_BIND_HOST", "127.0.0.1"),
        help="address to listen on (default 127.0.0.1)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=default_port,
        help=f"gRPC port; 0 picks a free one (default {default_port})",
    )
    parser.add_argument(
        "--log-format", choices=["console", "json"], default=os.environ.get("CAIRN_LOG_FORMAT", "console")
    )
    parser.add_argument("--log-level", default=os.environ.get("CAIRN_LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--ready-file", default=None, help="write {pid, ports} as JSON here once serving (for supervisors)"
    )
    add_cluster_token_flags(parser, os.environ)
