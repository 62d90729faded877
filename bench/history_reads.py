"""What the idle master's periodic reads of live allocations cost as the history grows: the
liveness loop's two reads (scheduling/liveness.py, each every second: preemptions past their
deadline, kills not yet confirmed), the master's way (`state IN` the live states, which the
state's index answers) side by side with the way they were written before (`state !=
TERMINATED`, which reads every allocation the cluster ever ran).

A scratch database (SQLite in a temporary file, or a scratch PostgreSQL database, analysed) with
the master's schema, --allocations finished allocations (each with its task) and 8 live ones; each
read run --rounds times, the median reported.

    .venv/bin/python -m bench.history_reads [--allocations 100000] [--backend sqlite|postgres]

The last line is one summary: `history_reads: state IN N ms, state != M ms a read (A allocations,
B)`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, insert, or_, select, text

from bench.metric_intake import scratch_postgres
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.scheduling import liveness
from services.master.store import models
from services.master.store.db import Database

LIVE = 8
CHUNK = 1000


def _before() -> list[Select[Any]]:
    """The two reads as the base wrote them."""
    return [
        select(models.Allocation.id).where(
            models.Allocation.state != A.TERMINATED,
            models.Allocation.preempt_requested.is_(True),
            models.Allocation.kill_requested.is_(False),
            models.Allocation.kill_deadline < datetime.now(UTC),
        ),
        select(models.Allocation.id).where(
            models.Allocation.state != A.TERMINATED,
            or_(models.Allocation.kill_requested.is_(True), models.Allocation.failed_rank.is_not(None)),
        ),
    ]


@contextmanager
def _database(backend: str) -> Iterator[Database]:
    if backend == "postgres":
        with scratch_postgres() as url:
            db = Database(url)
            yield db
            db.engine.dispose()
    else:
        with tempfile.TemporaryDirectory() as tmp:
            db = Database(f"sqlite:///{tmp}/cairn.db")
            yield db
            db.engine.dispose()


def _fill(db: Database, finished: int) -> None:
    now = datetime.now(UTC)
    with db.transaction() as s:
        s.execute(
            insert(models.User).values(
                id=1, username="bench", password_hash="", created_at=now, modified_at=now
            )
        )
    total = finished + LIVE
    for start in range(0, total, CHUNK):
        ids = range(start, min(start + CHUNK, total))
        with db.transaction() as s:
            s.execute(
                insert(models.Task),
                [
                    {
                        "id": f"t{i}",
                        "kind": "COMMAND",
                        "owner_id": 1,
                        "job_id": f"j{i}",
                        "state": "COMPLETED",
                        "start_time": now,
                    }
                    for i in ids
                ],
            )
            s.execute(
                insert(models.Allocation),
                [
                    {
                        "id": f"t{i}.1",
                        "task_id": f"t{i}",
                        "run_id": 1,
                        "slots": 1,
                        "resource_pool": "default",
                        "requested_at": now,
                        "token_hash": "",
                        "placements": [],
                        "state": A.TERMINATED if i < finished else A.RUNNING,
                    }
                    for i in ids
                ],
            )
    if db.dialect == "postgresql":
        # As autovacuum would have by then; the master never analyses SQLite (without statistics
        # SQLite takes an index's equality to find a few rows).
        with db.engine.connect() as connection:
            connection.execute(text("ANALYZE"))
            connection.commit()


def _median_ms(db: Database, reads: list[Select[Any]], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        with db.read() as s:
            for read in reads:
                s.execute(read, {"now": datetime.now(UTC)}).all()
        times.append((time.perf_counter() - started) / len(reads))
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--allocations", type=int, default=100_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with _database(args.backend) as db:
        db.migrate()
        started = time.perf_counter()
        _fill(db, args.allocations)
        filled = time.perf_counter() - started
        print(f"{args.allocations} finished allocations and {LIVE} live ones in {filled:.1f} s")
        now_way = _median_ms(db, [liveness.EXPIRED_PREEMPTIONS, liveness.KILLS_OWED], args.rounds)
        before = _median_ms(db, _before(), args.rounds)
    print(
        f"history_reads: state IN {now_way:.2f} ms, state != {before:.2f} ms a read "
        f"({args.allocations} allocations, {args.backend})"
    )


if __name__ == "__main__":
    main()
