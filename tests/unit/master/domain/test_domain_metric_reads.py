"""A trial's learning curve read back: the rows the prepared statement reads on each database are
what the ORM reads, and the JSON GetMetrics writes for the REST gateway (metrics_json) is the JSON
the gateway prints for the message GetMetrics builds for gRPC callers, value for value and type for
type, whatever the reports hold."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from sqlalchemy import select, text

from cairn.api.v1 import trial_pb2 as tpb
from services.common import interceptors
from services.common.errors import DatabaseUnavailable
from services.common.local_calls import RenderedJson
from services.master.domain.metrics import intake
from services.master.domain.metrics.reports import Report
from services.master.domain.reads import metrics as reads
from services.master.gateway.json_encoding import JsonEncoder
from services.master.servicers.api import metrics as metrics_api
from services.master.servicers.api.convert import ts
from services.master.servicers.api.metrics import MetricsApi
from services.master.servicers.api.metrics_json import timestamp_json
from services.master.servicers.read_cache import ReadCache
from services.master.store import db as db_module
from services.master.store import models
from services.master.store.db import Database
from tests.unit.master.domain.harness import Master

# On each database: the prepared statement and the JSON each database reads; a lost PostgreSQL connection.
pytestmark = pytest.mark.on_each_database

# What a training loop reports, and everything else a report may hold.
ODD_VALUES: dict[str, Any] = {
    "loss": 0.123456789,
    "whole": 3.0,
    "count": 7,
    "negative_zero": -0.0,
    "big": 2**60 + 1,  # past a double's integers: a Struct rounds it
    "huge": 1e22,  # a whole double printed in exponent form
    "nan": float("nan"),
    "inf": float("inf"),
    "minus_inf": float("-inf"),
    "flag": True,
    "text": 'ünïcode "quoted" \\ slash',
    "nested": {"a": [1, 2.5, None, "x", {"deep": False}], "empty": {}},
    "none": None,
}


def _trial(master: Master) -> int:
    master.add_agent("a1", slots=1)
    return master.trials(master.create())[0].id


class _GatewayCall:
    """What the gateway's in-process stream looks like to a handler: it takes RenderedJson."""

    rendered_json = True


def _api(master: Master) -> MetricsApi:
    return MetricsApi(SimpleNamespace(ctx=master.ctx, read_cache=ReadCache(master.ctx)))  # type: ignore[arg-type]


def _canonical(document: bytes) -> bytes:
    """JSON with keys sorted, ints and floats kept apart: equal only for the same values and types."""
    return orjson.dumps(orjson.loads(document), option=orjson.OPT_SORT_KEYS)


@pytest.fixture(autouse=True)
def _as_the_admin(master: Master) -> Iterator[None]:
    """The servicer is called without the master's interceptors: the caller they would set."""
    token = interceptors._principal.set(master.admin)
    yield
    interceptors._principal.reset(token)


def _both_ways(master: Master, request: tpb.GetMetricsRequest) -> tuple[list[bytes], list[bytes]]:
    api = _api(master)
    encoder = JsonEncoder()
    messages = [m for m in api.GetMetrics(request, object()) if isinstance(m, tpb.GetMetricsResponse)]  # type: ignore[arg-type]
    assert len(messages) == len(list(api.GetMetrics(request, object()))), "a gRPC caller gets messages"  # type: ignore[arg-type]
    printed = [_canonical(orjson.dumps(encoder.to_object(m))) for m in messages]
    rendered = list(api.GetMetrics(request, _GatewayCall()))  # type: ignore[arg-type]
    assert all(isinstance(r, RenderedJson) for r in rendered)
    return printed, [_canonical(r.json) for r in rendered]  # type: ignore[union-attr]


def test_rows_read_on_the_cursor_are_what_the_orm_reads(master: Master) -> None:
    trial = _trial(master)
    reports = [
        Report(group="validation", steps_completed=10 * step, metrics={"acc": step / 3, "odd": ODD_VALUES})
        for step in range(1, 6)
    ]
    reports.append(
        Report(group="training", steps_completed=5, metrics={"loss": 1.5}, batch_metrics=[{"l": 1}])
    )
    intake.report(master.ctx, master.admin, trial, 1, reports)
    with master.db.read_connection() as connection:
        rows = reads.reports_of_trial(connection, trial, "validation")
        training = reads.reports_of_trial(connection, trial, "training")
    with master.db.read() as s:
        orm = list(
            s.scalars(
                select(models.Metric)
                .where(models.Metric.trial_id == trial, models.Metric.group_name == "validation")
                .order_by(models.Metric.steps_completed)
            )
        )
    assert [r.steps_completed for r in rows] == [10, 20, 30, 40, 50]
    for row, stored in zip(rows, orm, strict=True):
        assert (row.id, row.trial_id, row.trial_run_id, row.group_name, row.archived) == (
            stored.id,
            stored.trial_id,
            stored.trial_run_id,
            stored.group_name,
            stored.archived,
        )
        assert type(row.archived) is bool and row.archived is False
        assert row.report_time == stored.report_time and type(row.report_time) is datetime
        assert row.metrics == stored.metrics and row.batch_metrics is None
    assert training[0].batch_metrics == [{"l": 1}]


def test_the_rendered_json_is_what_the_gateway_prints_for_the_message(master: Master) -> None:
    trial = _trial(master)
    base = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    times = [base, base + timedelta(milliseconds=250), base + timedelta(microseconds=123457)]
    reports = [
        Report(
            group=group,
            steps_completed=step,
            metrics=(
                {"loss": 1 / (step + 1), "accuracy": step / 7}
                | ({"epoch": float(step)} if step == 3 else {})  # a whole float among fractions
                if step % 2
                else ODD_VALUES
            ),
            report_time=times[step % 3],
            batch_metrics=[{"loss": 0.5, "step": step}, ODD_VALUES]
            if group == "training" and step == 2
            else None,
        )
        for group in ("training", "validation", "my group")
        for step in range(1, 7)
    ]
    intake.report(master.ctx, master.admin, trial, 1, reports)
    for group in ("training", "validation", "my group", ""):
        printed, rendered = _both_ways(master, tpb.GetMetricsRequest(trial_ids=[trial], group=group))
        assert len(printed) == 1
        assert rendered == printed, group
    # Downsampled, and two trials (one without reports) in one request.
    printed, rendered = _both_ways(
        master, tpb.GetMetricsRequest(trial_ids=[trial, trial + 1000], group="validation", max_datapoints=3)
    )
    assert rendered == printed and len(orjson.loads(rendered[0])["metrics"]) == 3


def test_a_long_series_is_rendered_in_messages_of_the_same_size(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tenth of the real 1,000 a message: the same cut, a tenth of the reports to store and render.
    monkeypatch.setattr(metrics_api, "REPORTS_PER_MESSAGE", metrics_api.REPORTS_PER_MESSAGE // 10)
    per_message = metrics_api.REPORTS_PER_MESSAGE
    trial = _trial(master)
    count = per_message + 5
    reports = [Report(group="training", steps_completed=s, metrics={"loss": s / 9}) for s in range(count)]
    intake.report(master.ctx, master.admin, trial, 1, reports)
    printed, rendered = _both_ways(master, tpb.GetMetricsRequest(trial_ids=[trial]))
    assert rendered == printed
    assert [len(orjson.loads(r)["metrics"]) for r in rendered] == [per_message, 5]


def test_a_read_on_a_lost_connection_is_an_outage_and_the_connection_is_not_reused(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    if master.db.dialect != "postgresql":
        pytest.skip("a lost connection is PostgreSQL's")
    trial = _trial(master)
    intake.report(master.ctx, master.admin, trial, 1, [Report("training", 1, {"loss": 1.0})])
    monkeypatch.setattr(db_module, "PING_AFTER_IDLE_S", 3600.0)  # a dead connection would go out unpinged
    # A pool of its own, used by this test alone: one connection, handed out again and again.
    database = Database(master.db.engine.url.render_as_string(hide_password=False))
    try:
        with database.read() as s:
            pid = s.scalar(text("SELECT pg_backend_pid()"))
        with master.db.transaction() as s:
            s.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(DatabaseUnavailable), database.read_connection() as connection:
            reads.reports_of_trial(connection, trial, "training")
        with database.read_connection() as connection:
            assert len(reads.reports_of_trial(connection, trial, "training")) == 1
            assert connection.scalar(text("SELECT pg_backend_pid()")) != pid
    finally:
        database.dispose()


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 1, 1, 12, 3, 4, 567891),
        datetime(2026, 1, 1, 12, 3, 4, 567000, tzinfo=UTC),
        datetime(2026, 1, 1, 12, 3, 4, tzinfo=UTC),
        datetime(2026, 1, 1, 12, 3, 4, 1000, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        datetime(1960, 5, 6, 7, 8, 9, 1, tzinfo=UTC),
        datetime(1970, 1, 1),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(12, 3, 4, 5, 6, 7, 80, tzinfo=UTC),
    ],
)
def test_timestamps_print_as_protobuf_prints_them(value: datetime) -> None:
    stamp = ts(value)
    assert stamp is not None
    assert timestamp_json(value) == stamp.ToJsonString()
