"""Many rows to PostgreSQL: psycopg2 rendering every value into the statement's text (a many-row
INSERT ... VALUES; `execute_batch` of a by-key UPDATE, as SQLAlchemy's flush sends them) against one
JSON document taken apart by the server (`json_to_recordset`, as store/json_rows.py and
store/json_updates.py send them). A table shaped like the master's `allocations`, its indexes with
it, --rows rows, in a scratch database (`createdb NAME`; the master's schema is made there if it
is not yet); the client's CPU (`time.thread_time`: psycopg2's rendering holds the GIL) and the wall
time, medians of --repeats, the two ways alternating.

    createdb NAME && .venv/bin/python -m bench.pg_json_rows --db-url postgresql:///NAME [--rows 30000]

The last line is one summary: `pg_json_rows: insert 100 rows A/B ms wall, update 1000 rows C/D
ms wall (rendered/JSON)`."""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg2
import psycopg2.extras
from sqlalchemy import create_engine, make_url, text

from services.master.domain.allocations.allocations import _pending_row
from services.master.store import models

_TABLE = "bench_json_rows"
# The columns a new allocation request gives (allocations._pending_row, with the defaults).
_INSERTED = {
    "id": "VARCHAR(128)",
    "task_id": "VARCHAR(128)",
    "trial_id": "INTEGER",
    "run_id": "INTEGER",
    "state": "VARCHAR(32)",
    "slots": "INTEGER",
    "resource_pool": "VARCHAR(255)",
    "priority": "INTEGER",
    "requested_at": "TIMESTAMP WITH TIME ZONE",
    "placements": "JSON",
    "token_hash": "VARCHAR(64)",
    "failure_type": "VARCHAR(32)",
    "preempt_requested": "BOOLEAN",
    "preempt_reason": "VARCHAR(255)",
    "preempt_acked": "BOOLEAN",
    "kill_requested": "BOOLEAN",
    "is_ready": "BOOLEAN",
    "releasing": "BOOLEAN",
    "port_offset": "INTEGER",
}


def _measure(run: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    run()
    return time.perf_counter() - wall, time.thread_time() - cpu


def _new_rows(prefix: str, count: int, now: datetime) -> list[dict[str, Any]]:
    """New allocation requests as the domain makes them (allocations._pending_row), with every
    column the table's INSERT names."""
    return [
        _pending_row(
            id=f"{prefix}.{n}",
            task_id=f"{prefix}-task.{n}",
            trial_id=None,
            run_id=1,
            slots=1,
            resource_pool="default",
            priority=42,
            requested_at=now,
            releasing=False,
            port_offset=None,
        )
        for n in range(count)
    ]


def _compare(
    what: str,
    repeats: int,
    rows_for: Callable[[str, int], list[dict[str, Any]]],
    ways: dict[str, Callable[..., None]],
    cur: Any,
    conn: Any,
) -> tuple[float, float]:
    """Each way run `repeats` times on rows of its own, the order alternating; its medians
    printed; the rendered and the JSON way's median walls returned."""
    walls: dict[str, list[float]] = {way: [] for way in ways}
    cpus: dict[str, list[float]] = {way: [] for way in ways}
    for repeat in range(repeats):
        for way in sorted(ways, reverse=bool(repeat % 2)):
            rows = rows_for(way, repeat)
            wall, cpu = _measure(lambda send=ways[way], r=rows: (send(cur, r), conn.commit()))  # type: ignore[misc]
            walls[way].append(wall)
            cpus[way].append(cpu)
    _report(what, walls, cpus)
    return statistics.median(walls["rendered"]), statistics.median(walls["json"])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_json_rows")
    parser.add_argument("--db-url", required=True, help="a PostgreSQL database to make a scratch table in")
    parser.add_argument(
        "--rows", type=int, default=30_000, help="rows in the table the UPDATEs find theirs in"
    )
    parser.add_argument("--repeats", type=int, default=12)
    args = parser.parse_args()
    url = make_url(args.db_url).set(drivername="postgresql+psycopg2")
    engine = create_engine(url)
    models.Base.metadata.create_all(engine)  # the master's schema, where it is not yet
    with engine.begin() as made:
        made.execute(text(f"DROP TABLE IF EXISTS {_TABLE}"))
        # Its columns, defaults and indexes, not its foreign keys (the rows here belong to no trial).
        made.execute(text(f"CREATE TABLE {_TABLE} (LIKE {models.Allocation.__tablename__} INCLUDING ALL)"))
    engine.dispose()
    conn = psycopg2.connect(dbname=url.database, host=url.host, port=url.port, user=url.username)
    cur = conn.cursor()
    now = datetime.now(UTC)
    table_rows = _new_rows("kept", args.rows, now)
    _insert_json(cur, table_rows)
    conn.commit()
    print(f"{_TABLE}: {args.rows} rows shaped like allocations, its indexes with them")
    summary: dict[str, tuple[float, float]] = {}
    inserts = {"rendered": _insert_rendered, "json": _insert_json}
    for count in (100, 1000):
        summary[f"insert {count}"] = _compare(
            f"INSERT of {count} rows ({len(_INSERTED)} columns)",
            args.repeats,
            lambda way, repeat, c=count: _new_rows(f"{way}{repeat}x{c}", c, now),  # type: ignore[misc]
            inserts,
            cur,
            conn,
        )
    updates = {"rendered": _update_rendered, "json": _update_json}
    for count in (100, 256, 1000):

        def changed(_way: str, repeat: int, c: int = count) -> list[dict[str, Any]]:
            state = "RUNNING" if repeat % 2 else "ASSIGNED"
            picked = random.sample(range(args.rows), c)
            # In key order, as the flush sorts them.
            rows = ({"state": state, "start_time": now, "row_id": f"kept.{n}"} for n in picked)
            return sorted(rows, key=lambda row: row["row_id"])

        summary[f"update {count}"] = _compare(
            f"UPDATE of {count} rows by key (2 columns)", args.repeats, changed, updates, cur, conn
        )
    cur.execute(f"DROP TABLE {_TABLE}")
    conn.commit()
    insert, update = summary["insert 100"], summary["update 1000"]
    print(
        f"pg_json_rows: insert 100 rows {insert[0] * 1e3:.1f}/{insert[1] * 1e3:.1f} ms wall, "
        f"update 1000 rows {update[0] * 1e3:.1f}/{update[1] * 1e3:.1f} ms wall (rendered/JSON)"
    )


def _report(what: str, walls: dict[str, list[float]], cpus: dict[str, list[float]]) -> None:
    parts = [
        f"{way}: client CPU {statistics.median(cpus[way]) * 1e3:.2f} ms, "
        f"wall {statistics.median(walls[way]) * 1e3:.1f} ms"
        for way in ("rendered", "json")
    ]
    print(f"{what}: " + "; ".join(parts))


def _insert_rendered(cur: Any, rows: list[dict[str, Any]]) -> None:
    names = list(_INSERTED)
    values = ", ".join(
        "("
        + ", ".join(f"%({name}__{n})s" + ("::JSON" if _INSERTED[name] == "JSON" else "") for name in names)
        + ")"
        for n in range(len(rows))
    )
    params = {
        f"{name}__{n}": (orjson.dumps(row[name]).decode() if _INSERTED[name] == "JSON" else row[name])
        for n, row in enumerate(rows)
        for name in names
    }
    cur.execute(f"INSERT INTO {_TABLE} ({', '.join(names)}) VALUES {values}", params)


def _insert_json(cur: Any, rows: list[dict[str, Any]]) -> None:
    names = list(_INSERTED)
    record = ", ".join(f'"{name}" {kind}' for name, kind in _INSERTED.items())
    document = orjson.dumps([{**row, "n": n} for n, row in enumerate(rows)]).decode()
    cur.execute(
        f"INSERT INTO {_TABLE} ({', '.join(names)}) SELECT {', '.join(names)} "
        f"FROM json_to_recordset(%(rows)s) AS r({record}, n INTEGER) ORDER BY n",
        {"rows": document},
    )


def _update_rendered(cur: Any, rows: list[dict[str, Any]]) -> None:
    psycopg2.extras.execute_batch(
        cur,
        f"UPDATE {_TABLE} SET state=%(state)s, start_time=%(start_time)s WHERE {_TABLE}.id = %(row_id)s",
        rows,
    )


def _update_json(cur: Any, rows: list[dict[str, Any]]) -> None:
    # As store/json_updates.py sends it: the rows locked first, in the document's order.
    cur.execute(
        f'UPDATE {_TABLE} SET state = r."state", start_time = r."start_time" '
        f"FROM (SELECT r.* FROM ROWS FROM (json_to_recordset(%(rows)s) AS "
        f'("state" VARCHAR(32), "start_time" TIMESTAMP WITH TIME ZONE, "row_id" VARCHAR(128))) '
        f'WITH ORDINALITY AS r("state", "start_time", "row_id", n) '
        f'JOIN {_TABLE} AS locked ON locked.id = r."row_id" ORDER BY r.n FOR NO KEY UPDATE OF locked) AS r '
        f'WHERE {_TABLE}.id = r."row_id"',
        {"rows": orjson.dumps(rows).decode()},
    )


if __name__ == "__main__":
    main()
