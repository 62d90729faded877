"""The task_system_metrics table as the agents' samples fill it: hundreds of rows a second at a
thousand containers, so the rows bypass the ORM's per-row work (as metric_rows.py does for
metrics): to PostgreSQL through COPY, to SQLite as an executemany (written in a few statements,
sqlite_batches.py), in the session's own transaction. The ORM model (models.TaskSystemMetric)
reads them back; a test holds COLUMNS and the model's table together.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from services.master.store.metric_rows import utc_stamps

# Every column but the id (the database's) and `thinned` (false: its default), in this order.
COLUMNS = (
    "task_id",
    "trial_id",
    "allocation_id",
    "container_id",
    "agent_id",
    "at",
    "cpu_util",
    "memory_bytes",
    "disk_read_bytes_per_s",
    "disk_write_bytes_per_s",
    "net_recv_bytes_per_s",
    "net_sent_bytes_per_s",
    "processes",
    "gpus",
)
# (task_id, trial_id, allocation_id, container_id, agent_id, at (seconds since the epoch),
#  cpu_util, memory_bytes, four rates (None: not measured), processes, gpus as JSON text).
Row = tuple[
    str,
    int | None,
    str,
    str,
    str,
    float,
    float,
    int,
    float | None,
    float | None,
    float | None,
    float | None,
    int,
    str,
]

# `thinned` as a parameter, not a literal: a plain INSERT of parameters goes in a few statements
# on SQLite (sqlite_batches.py), not a step a row.
_SQLITE_INSERT = (
    f"INSERT INTO task_system_metrics ({', '.join(COLUMNS)}, thinned) "
    f"VALUES ({', '.join('?' for _ in COLUMNS)}, ?)"
)
_COPY = f"COPY task_system_metrics ({', '.join(COLUMNS)}) FROM STDIN"
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def insert(session: Session, rows: Sequence[Row]) -> None:
    """Insert `rows` in the session's transaction, the fastest way the backend has."""
    if not rows:
        return
    connection = session.connection()
    postgres = connection.dialect.name == "postgresql"
    # UTC timestamps as text: with the zone for timestamptz, without it on SQLite (as SQLAlchemy
    # stores them there, and the model reads them back).
    stamps = [s.decode() for s in utc_stamps([row[5] for row in rows], zone=b"+00" if postgres else b"")]
    if postgres:
        _copy(connection.connection.dbapi_connection, rows, stamps)
        return
    connection.exec_driver_sql(
        _SQLITE_INSERT, [(*row[:5], stamp, *row[6:], 0) for row, stamp in zip(rows, stamps, strict=True)]
    )


def _text(value: object) -> str:
    if value is None:
        return "\\N"
    text = str(value)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_COPY_ESCAPES)
    return text


def _copy(dbapi_connection: Any, rows: Sequence[Row], stamps: list[str]) -> None:
    lines = [
        "\t".join((*(_text(v) for v in row[:5]), stamp, *(_text(v) for v in row[6:]))) + "\n"
        for row, stamp in zip(rows, stamps, strict=True)
    ]
    with dbapi_connection.cursor() as cursor:
        cursor.copy_expert(_COPY, io.StringIO("".join(lines)))
