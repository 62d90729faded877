"""The master's SQLite file and its -wal / -shm are owner-only (0600) whatever the umask, and a
file an older master left readable is tightened. Its pooled connections are handed out without a
ping: a file has no server that could have dropped them, and each ping let the GIL go; and kept for
the many threads that read at once, not opened (and tuned) again for each burst."""

from __future__ import annotations

import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from services.master.store.db import Database


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_database_and_its_companions_are_created_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "cairn.db"
    old = os.umask(0o022)
    try:
        db = Database(f"sqlite:///{path}")
        with db.transaction() as session:
            session.execute(text("CREATE TABLE t (x INTEGER)"))
            session.execute(text("INSERT INTO t VALUES (1)"))
        companions = [path.with_name("cairn.db-wal"), path.with_name("cairn.db-shm")]
        assert all(p.exists() for p in companions)  # WAL mode, a connection still open
        assert [mode(p) for p in (path, *companions)] == [0o600] * 3
        db.engine.dispose()
    finally:
        os.umask(old)


def test_a_readable_file_from_before_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "cairn.db"
    path.touch(mode=0o644)
    wal = tmp_path / "cairn.db-wal"
    wal.touch(mode=0o644)
    Database(f"sqlite:///{path}").engine.dispose()
    assert (mode(path), mode(wal)) == (0o600, 0o600)


def test_an_in_memory_database_needs_no_file() -> None:
    Database("sqlite://").engine.dispose()
    Database("sqlite:///:memory:").engine.dispose()


def test_pooled_connections_are_handed_out_without_a_ping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'cairn.db'}")
    pinged: list[Any] = []
    monkeypatch.setattr(db.engine.dialect, "do_ping", lambda connection: pinged.append(connection) or True)
    for _ in range(3):
        with db.read() as session:
            assert session.execute(text("SELECT 1")).scalar() == 1
        with db.transaction() as session:
            session.execute(text("SELECT 1"))
    assert pinged == []
    db.engine.dispose()


def test_connections_of_many_threads_reading_at_once_are_kept_for_the_next_burst(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'cairn.db'}")
    opened: list[object] = []
    event.listen(db.engine, "connect", lambda connection, _record: opened.append(connection))
    readers = 20  # the agent streams' threads reading at once (a log batch reads its owners)
    together = threading.Barrier(readers)

    def read(_: int) -> None:
        with db.read() as session:
            together.wait(timeout=10)  # every reader holds its connection at once
            session.execute(text("SELECT 1"))

    with ThreadPoolExecutor(readers) as pool:
        list(pool.map(read, range(readers)))
        first_burst = len(opened)
        list(pool.map(read, range(readers)))
    assert first_burst == readers
    assert len(opened) == readers  # the second burst opened none
    db.engine.dispose()
