"""What a flush of many rows costs on SQLite while another Python thread is busy, the master's
way (store/sqlite_batches.py: the rows in a few statements) side by side with executemany, a step a
row (SQLAlchemy's own way: the same engine without the hook).

Python's sqlite3 lets the GIL go around every step, and the thread that wants it back waits for
the busy one's turn; the master flushes under its process-wide lock while its asyncio loop and
other threads run. Each round: --rows rows UPDATEd through the ORM (two columns each, as a batch
of agents' reports changes allocations), committed; the median of --rounds, first with no other
thread, then beside one thread that runs Python in a loop. That thread never waits: the worst
case, which the master meets only while another of its threads computes (a pass's view, a big
read's answer); its loop and most of its threads wait on sockets between short runs.

    .venv/bin/python -m bench.sqlite_flush_beside_a_busy_thread [--rows 256] [--rounds 20]

The last line is one summary: `sqlite_flush: executemany A ms alone, B ms beside a busy thread;
few statements C ms alone, D ms beside a busy thread (R rows)`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from sqlalchemy import String, event, select, update
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from services.master.store import sqlite_batches
from services.master.store.db import Database


class _Base(DeclarativeBase):
    pass


class _Allocation(_Base):
    __tablename__ = "bench_allocations"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[str] = mapped_column(String(32))
    exit_code: Mapped[int]


def _flush_times(sessions: sessionmaker[Session], rows: int, rounds: int) -> list[float]:
    times = []
    for round_ in range(rounds):
        with sessions() as s:
            changed = list(s.scalars(select(_Allocation).limit(rows).offset(round_ * rows)))
            started = time.perf_counter()
            for allocation in changed:
                allocation.state, allocation.exit_code = "TERMINATED", round_
            s.commit()
            times.append(time.perf_counter() - started)
    return times


def _busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(100))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    results: dict[tuple[str, bool], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for way in ("executemany", "few statements"):
            path = Path(tmp) / f"{way.replace(' ', '_')}.db"
            # The master's engine (its pragmas); for executemany, without the hook.
            engine = Database(f"sqlite:///{path}").engine
            if way == "executemany":
                event.remove(engine, "do_executemany", sqlite_batches.in_few_statements)
            _Base.metadata.create_all(engine)
            sessions = sessionmaker(engine, expire_on_commit=False)
            total = args.rows * args.rounds
            with sessions() as s:
                s.add_all(_Allocation(id=f"1.{i}.1", state="RUNNING", exit_code=-1) for i in range(total))
                s.commit()
            for beside_busy in (False, True):
                stop = threading.Event()
                busy = threading.Thread(target=_busy, args=(stop,), daemon=True)
                if beside_busy:
                    busy.start()
                try:
                    times = _flush_times(sessions, args.rows, args.rounds)
                finally:
                    stop.set()
                    if beside_busy:
                        busy.join()
                # The next pass changes the same rows from the same values.
                with sessions() as s:
                    s.execute(update(_Allocation).values(state="RUNNING", exit_code=-1))
                    s.commit()
                results[(way, beside_busy)] = statistics.median(times) * 1000
                print(
                    f"{way:14} {'beside a busy thread' if beside_busy else 'alone':21} "
                    f"median {results[(way, beside_busy)]:8.2f} ms, max {max(times) * 1000:8.2f} ms"
                )
            engine.dispose()
    print(
        f"sqlite_flush: executemany {results[('executemany', False)]:.2f} ms alone, "
        f"{results[('executemany', True)]:.2f} ms beside a busy thread; few statements "
        f"{results[('few statements', False)]:.2f} ms alone, {results[('few statements', True)]:.2f} ms "
        f"beside a busy thread ({args.rows} rows)"
    )


if __name__ == "__main__":
    main()
