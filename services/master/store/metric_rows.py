"""The metrics table as metric intake writes it: many rows at once, JSON encoded once per report.

The ORM model (models.Metric) reads rows back; intake writes thousands of reports a second, so it
bypasses the ORM's per-row work: each report's JSON is encoded once with orjson, and the rows go
to PostgreSQL through COPY and to SQLite through the driver's executemany, in the session's own
transaction. Where the new rows' ids are needed (validations, which the trial points at), they are
inserted with RETURNING through METRIC_ROWS, a Core table whose JSON columns take JSON text. A test
holds METRIC_ROWS and the model's table together.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import repeat
from typing import TYPE_CHECKING, Any

import orjson
import psycopg2.extensions
from sqlalchemy import BigInteger, Boolean, Column, Integer, MetaData, String, Table
from sqlalchemy.orm import Session
from sqlalchemy.types import UserDefinedType

from services.master.store.models import UtcDateTime

if TYPE_CHECKING:
    from services.master.domain.metrics.metric_columns import FlatBatch

# What psycopg2 reads from the buffer at a time (its default, 8 KiB, is a Python call per chunk).
_COPY_CHUNK = 1 << 20


class JsonText(UserDefinedType[str]):
    """JSON already encoded as text: bound as it is (no second encoding), and named JSON wherever
    SQLAlchemy casts a bound value to its column's type (PostgreSQL's multi-row RETURNING form)."""

    cache_ok = True

    def get_col_spec(self, **_kw: Any) -> str:
        return "JSON"


METRIC_ROWS = Table(
    "metrics",
    MetaData(),
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("trial_id", Integer, nullable=False),
    Column("trial_run_id", Integer, nullable=False),
    Column("seq", BigInteger),
    Column("group_name", String(64), nullable=False),
    Column("steps_completed", BigInteger, nullable=False),
    Column("report_time", UtcDateTime(), nullable=False),
    Column("metrics", JsonText(), nullable=False),
    Column("batch_metrics", JsonText()),
    Column("archived", Boolean, nullable=False),
)
# What each row holds, in order (every column but the id, which the database gives).
COLUMNS = tuple(c.name for c in METRIC_ROWS.columns if c.name != "id")
# (trial_id, trial_run_id, seq, group_name, steps_completed, report_time, metrics, batch_metrics,
#  archived): metrics and batch_metrics as JSON text, report_time timezone-aware.
Row = tuple[int, int, int | None, str, int, datetime, str, str | None, bool]


def json_text(value: Any) -> str:
    """`value` (JSON values only: NaN and infinities were made strings) as compact JSON text."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


_SQLITE_INSERT = f"INSERT INTO metrics ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"


def insert(session: Session, rows: Sequence[Row]) -> None:
    """Insert `rows` in the session's transaction, the fastest way the backend has."""
    if not rows:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        _copy(connection.connection.dbapi_connection, rows)
        return
    connection.exec_driver_sql(_SQLITE_INSERT, [_sqlite_row(row) for row in rows])


def insert_columns(session: Session, trial_id: int, run_id: int, batch: FlatBatch) -> None:
    """A batch held by column, the fastest way the backend has: on PostgreSQL by COPY, its lines
    formatted by one template mapped in C over the columns, as bytes (the metrics' JSON text
    already is); on SQLite by executemany over the columns zipped."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        _copy_columns(connection.connection.dbapi_connection, trial_id, run_id, batch)
        return
    count = len(batch.seqs)
    rows = zip(
        repeat(trial_id, count),
        repeat(run_id, count),
        batch.seqs,
        repeat(batch.group, count),
        batch.steps,
        [stamp.decode() for stamp in utc_stamps(batch.times, zone=b"")],
        [text.decode() for text in batch.texts],
        repeat(None, count),
        repeat(0, count),
        strict=True,
    )
    connection.exec_driver_sql(_SQLITE_INSERT, list(rows))


def _copy_columns(dbapi_connection: Any, trial_id: int, run_id: int, batch: FlatBatch) -> None:
    # The bytes go as they are: in the connection's encoding (UTF-8, but for a database made in
    # another one).
    codec = psycopg2.extensions.encodings.get(dbapi_connection.encoding, "utf_8")
    group = _copy_text(batch.group).replace("%", "%%").encode(codec)
    template = b"%d\t%d\t%%d\t%s\t%%d\t%%s\t%%s\t\\N\tf\n" % (trial_id, run_id, group)
    texts = batch.texts
    joined = b"".join(texts)
    if b"\\" in joined or b"\t" in joined or b"\n" in joined or b"\r" in joined:
        texts = [_copy_bytes(text) for text in texts]
    if codec != "utf_8" and not joined.isascii():
        texts = [text.decode().encode(codec) for text in texts]
    lines = map(template.__mod__, zip(batch.seqs, batch.steps, utc_stamps(batch.times), texts, strict=True))
    with dbapi_connection.cursor() as cursor:
        cursor.copy_expert(
            f"COPY metrics ({', '.join(COLUMNS)}) FROM STDIN", io.BytesIO(b"".join(lines)), size=_COPY_CHUNK
        )


def _copy_bytes(text: bytes) -> bytes:
    """JSON text in COPY's text format: backslashes doubled, and the whitespace a client's JSON may
    hold between tokens written as COPY's escapes."""
    return text.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n").replace(b"\r", b"\\r")


def utc_stamps(times: Sequence[float], zone: bytes = b"+00") -> list[bytes]:
    """Seconds since the epoch as timestamp text in UTC, to the microsecond (rounded half to even,
    as datetime.fromtimestamp does), followed by `zone` (PostgreSQL's timestamptz takes "+00";
    SQLite's rows hold UTC without one, as SQLAlchemy writes them). The date and time of day are
    made once per second."""
    seconds: dict[int, bytes] = {}
    stamps = []
    for at in times:
        # As CPython splits it: the fraction alone is scaled and rounded, then carried.
        fraction, whole = math.modf(at)
        second, micros = int(whole), round(fraction * 1_000_000)
        if micros >= 1_000_000:
            second, micros = second + 1, micros - 1_000_000
        head = seconds.get(second)
        if head is None:
            head = seconds[second] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(second)).encode()
        stamps.append(b"%s.%06d%s" % (head, micros, zone))
    return stamps


def insert_returning_ids(session: Session, rows: Sequence[Row]) -> list[int]:
    """Insert `rows`; their ids, in order."""
    statement = METRIC_ROWS.insert().returning(METRIC_ROWS.c.id, sort_by_parameter_order=True)
    return list(session.scalars(statement, [dict(zip(COLUMNS, row, strict=True)) for row in rows]))


def _sqlite_row(row: Row) -> tuple[Any, ...]:
    # As SQLAlchemy's DateTime stores it on SQLite (UTC, without the zone), read back by the model.
    at = row[5].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return (*row[:5], at, row[6], row[7], int(row[8]))


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value: str | None) -> str:
    """A text value in COPY's text format. JSON text (orjson's) holds no raw tab, newline or
    carriage return, only backslashes of its escapes, which COPY must see doubled."""
    if value is None:
        return "\\N"
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_COPY_ESCAPES)
    return value


def _copy(dbapi_connection: Any, rows: Sequence[Row]) -> None:
    lines = []
    groups: dict[str, str] = {}
    for trial_id, run_id, seq, group, steps, at, metrics, batch_metrics, archived in rows:
        seq_text = "\\N" if seq is None else seq
        group_text = groups.get(group)
        if group_text is None:
            group_text = groups[group] = _copy_text(group)
        # JSON text: only its backslashes need escaping (see _copy_text).
        metrics_text = metrics if "\\" not in metrics else metrics.translate(_COPY_ESCAPES)
        lines.append(
            f"{trial_id}\t{run_id}\t{seq_text}\t{group_text}\t{steps}\t{at.isoformat()}\t"
            f"{metrics_text}\t{_copy_text(batch_metrics)}\t{'t' if archived else 'f'}\n"
        )
    with dbapi_connection.cursor() as cursor:
        cursor.copy_expert(
            f"COPY metrics ({', '.join(COLUMNS)}) FROM STDIN", io.StringIO("".join(lines)), size=_COPY_CHUNK
        )
