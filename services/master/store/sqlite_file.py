"""The master's SQLite file, owner-only (0600) from the start, with its -wal and -shm beside it.

The file holds every user's password hashes, session and allocation tokens. sqlite3 would create
it with 0644 under the usual umask, readable by every user of the machine; its -wal and -shm
files take the database file's permissions when SQLite creates them, so creating the database
file 0600 before SQLite opens it (and tightening files left by an older master) covers all three.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url

FILE_MODE = 0o600
# Files SQLite keeps beside the database: the write-ahead log, its shared-memory index, and the
# rollback journal (outside WAL mode).
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")


def database_path(url: str) -> Path | None:
    """The file a sqlite URL names; None for an in-memory database."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def make_owner_only(url: str) -> None:
    """Create the database file 0600 if it is missing, and make it and its companions 0600."""
    path = database_path(url)
    if path is None:
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    for suffix in COMPANION_SUFFIXES:
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            os.chmod(companion, FILE_MODE)
