"""`python -m services.master.migrate` (`cairn-master-migrate`): bring the database's schema to this
version's and exit, before a new master starts (Kubernetes: the master's init container).

On PostgreSQL it first takes the leader lease (leadership.py), as a master would: so it never changes
the schema under a master of the previous version that still serves, and two of it (two new master
pods) migrate one after the other. Releasing the lease on exit lets the master that follows lead.
The master migrates again when it starts; that finds nothing to do.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Sequence

from services.common.logging import configure_logging, get_logger
from services.common.server import install_termination_handlers, termination_requested
from services.master.leadership import CannotLead, LeaderLease
from services.master.store.db import Database

log = get_logger(__name__)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cairn-master-migrate", description="Run the master's database migrations and exit."
    )
    parser.add_argument(
        "--db-url",
        default=os.environ.get("CAIRN_DB_URL", ""),
        help="the master's database URL (env CAIRN_DB_URL), e.g. postgresql://...",
    )
    parser.add_argument(
        "--log-format", choices=["console", "json"], default=os.environ.get("CAIRN_LOG_FORMAT", "console")
    )
    parser.add_argument("--log-level", default=os.environ.get("CAIRN_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    if not args.db_url:
        parser.error("--db-url: required (or env CAIRN_DB_URL): the database the master will use")
    return args


def migrate(db_url: str, stop: threading.Event) -> bool:
    """Migrate DB_URL; False when `stop` was set while another master held the lease."""
    db = Database(db_url)
    lease: LeaderLease | None = None
    try:
        if db.dialect == "postgresql":
            lease = LeaderLease(db_url, on_lost=lambda why: log.error("leader lease lost", reason=why))
            if not lease.wait_until_held(stop):
                return False
        log.info("migrating database", dialect=db.dialect)
        db.migrate()
        log.info("database schema is current")
        return True
    finally:
        if lease is not None:
            lease.release()
        db.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    install_termination_handlers()
    args = parse_args(argv)
    configure_logging("migrate", args.log_format, args.log_level)
    try:
        done = migrate(args.db_url, termination_requested())
    except CannotLead as exc:
        print(f"cairn-master-migrate: {exc}", file=sys.stderr)
        return 1
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
