"""Intake's batch held by column (domain/metrics/metric_columns.py) stores what the same reports stored one
Report each do: the same rows, the same summary, resends still stored once; and the wire reads a
batch by column only when it is one."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from sqlalchemy import select

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.telemetry import Histogram
from services.master.domain.metrics import intake, metric_columns
from services.master.servicers.api import metrics_wire
from services.master.store import metric_rows, models
from tests.unit.master.domain.harness import Master

# On each database: metric intake: the rows and the JSON text each database stores and reads back.
pytestmark = pytest.mark.on_each_database

NAMES = ("loss", "accuracy", "lr")


def _document(
    first_seq: int, count: int, group: str = "training", extra: dict[str, Any] | None = None
) -> bytes:
    """A batch as the Core API sends it (`reports_json`)."""
    rows = []
    for seq in range(first_seq, first_seq + count):
        values = {name: seq * 0.25 + i / 3 for i, name in enumerate(NAMES)} | (extra or {})
        rows.append([seq, group, seq * 10, 1.8e9 + seq / 7, values, None])
    return orjson.dumps(rows)


def _flat(data: bytes) -> metric_columns.FlatBatch | None:
    return metrics_wire._flat_batch(metrics_wire._document(data), data)


def _two_trials(master: Master) -> tuple[int, int]:
    master.add_agent("a1", slots=2)
    first = master.trials(master.create())[0].id
    second = master.trials(master.create())[0].id
    return first, second


def _stored(master: Master, trial_id: int) -> tuple[list[tuple[Any, ...]], Any, int]:
    with master.db.read() as s:
        rows = [
            (m.seq, m.group_name, m.steps_completed, m.report_time, m.metrics, m.batch_metrics, m.archived)
            for m in s.scalars(
                select(models.Metric).where(models.Metric.trial_id == trial_id).order_by(models.Metric.seq)
            )
        ]
        trial = s.get_one(models.Trial, trial_id)
        return rows, trial.summary_metrics, trial.total_batches


def test_a_batch_by_column_stores_what_the_same_reports_do(master: Master) -> None:
    by_report, by_column = _two_trials(master)
    for first in (1, 301):  # the second batch folds into the first one's summary
        data = _document(first, 300)
        flat = _flat(data)
        assert flat is not None
        reports = metrics_wire.reports_from_json(data)
        assert intake.report(master.ctx, master.admin, by_report, 1, reports).stored == 300
        result = intake.report(master.ctx, master.admin, by_column, 1, flat)
        assert (result.stored, result.duplicates, result.max_stored_seq) == (300, 0, first + 299)

    assert _stored(master, by_column) == _stored(master, by_report)
    rows, summary, total_batches = _stored(master, by_column)
    assert len(rows) == 600 and total_batches == 6000
    assert summary["avg_metrics"]["loss"]["count"] == 600
    assert rows[0][3] == datetime.fromtimestamp(1.8e9 + 1 / 7, UTC)

    # Sent again (an answer lost on the way): counted as resends, stored once.
    again = _flat(_document(591, 20))
    assert again is not None
    result = intake.report(master.ctx, master.admin, by_column, 1, again)
    assert (result.stored, result.duplicates, result.max_stored_seq) == (10, 10, 610)
    assert len(_stored(master, by_column)[0]) == 610


def test_columns_refused_by_the_domain_name_the_report(master: Master) -> None:
    trial_id, _ = _two_trials(master)
    flat = _flat(_document(1, 5))
    assert flat is not None
    with pytest.raises(InvalidArgument, match=r"reports\[3\]\.steps_completed"):
        intake.report(master.ctx, master.admin, trial_id, 1, flat._replace(steps=[1, 2, 3, -1, 5]))
    with pytest.raises(InvalidArgument, match=r"reports\[0\]\.group"):
        intake.report(master.ctx, master.admin, trial_id, 1, flat._replace(group="a.b"))
    assert _stored(master, trial_id)[0] == []


def test_the_wire_reads_by_column_only_what_is_flat() -> None:
    flat = _flat(_document(1, 3))
    assert flat is not None
    assert flat.names == NAMES and flat.seqs == [1, 2, 3] and flat.steps == [10, 20, 30]
    assert [json.loads(text) for text in flat.texts] == flat.values
    assert flat.columns[0] == (0.25, 0.5, 0.75)

    # Not by column: the general way reads (and, where wrong, refuses) these.
    assert _flat(_document(1, 3, extra={"epoch": 3})) is None  # an integer value
    assert _flat(_document(1, 3, extra={"note": "text"})) is None  # a string value
    assert _flat(_document(1, 3, group="validation")) is not None  # the domain takes it as reports
    mixed = orjson.loads(_document(1, 3))
    mixed[1][4]["extra"] = 1.5
    assert _flat(orjson.dumps(mixed)) is None  # names that vary
    mixed = orjson.loads(_document(1, 3))
    mixed[1][1] = "other"
    assert _flat(orjson.dumps(mixed)) is None  # two groups
    mixed = orjson.loads(_document(1, 3))
    mixed[0][5] = [{"loss": 1.0}]
    assert _flat(orjson.dumps(mixed)) is None  # batch metrics
    mixed = orjson.loads(_document(1, 3))
    mixed[2][0] = 0
    assert _flat(orjson.dumps(mixed)) is None  # a seq the general way refuses, naming it
    with pytest.raises(InvalidArgument, match=r"reports_json\[2\]\.seq"):
        metrics_wire.reports_from_json(orjson.dumps(mixed))


def test_metric_text_is_cut_from_the_document_only_where_that_is_exact() -> None:
    # Braces in a name: the objects cannot be cut out, so they are encoded again.
    braced = _flat(_document(1, 2, extra={"a{b}": 1.5}))
    assert braced is not None
    assert [orjson.loads(text) for text in braced.texts] == braced.values
    # Whitespace and escapes as another client may write them: cut out as they are, still the
    # same values once COPY's escaping is undone.
    rows = orjson.loads(_document(1, 2, extra={'q"uote\\back\tslash': 2.5}))
    spaced = json.dumps(rows, indent=2).encode()
    flat = _flat(spaced)
    assert flat is not None
    assert [json.loads(text) for text in flat.texts] == flat.values
    assert b"\n" in flat.texts[0]
    copied = metric_rows._copy_bytes(flat.texts[0])
    assert b"\n" not in copied and b"\t" not in copied


def test_stored_spaced_and_escaped_json_reads_back_the_same(master: Master) -> None:
    trial_id, _ = _two_trials(master)
    rows = orjson.loads(_document(1, 4, extra={'q"uote\\back\tslash': 2.5, "é": 0.5}))
    flat = _flat(json.dumps(rows, indent=1, ensure_ascii=False).encode())
    assert flat is not None
    intake.report(master.ctx, master.admin, trial_id, 1, flat)
    stored = _stored(master, trial_id)[0]
    assert [row[4] for row in stored] == flat.values


def test_utc_stamps_are_what_datetime_makes_of_the_same_seconds() -> None:
    rng = random.Random(7)
    times = [rng.uniform(0, 4e9) for _ in range(2000)] + [0.0, 1.5, 1.8e9, 1.9999995]
    for at, stamp in zip(times, metric_rows.utc_stamps(times), strict=True):
        expected = datetime.fromtimestamp(at, UTC)
        assert datetime.fromisoformat(stamp.decode()) == expected, at


def test_a_histogram_observes_many_as_it_observes_each() -> None:
    rng = random.Random(3)
    values = [rng.choice([0.0, 0.001, 0.05, 0.3, 70.0]) * rng.random() for _ in range(500)] + [0.001, 60.0]
    one_by_one, at_once = Histogram(), Histogram()
    for value in values:
        one_by_one.observe(value)
    at_once.observe_many(values)
    assert one_by_one.snapshot().cumulative == at_once.snapshot().cumulative
    assert one_by_one.snapshot().total == pytest.approx(at_once.snapshot().total)


def test_a_restarted_run_by_column_archives_what_it_passes_again(master: Master) -> None:
    """A later run resumed from an earlier checkpoint: the rows of the run before at or past its
    first step are archived and the summary rebuilt, by column as by reports."""
    by_report, by_column = _two_trials(master)
    for trial_id in (by_report, by_column):
        first_run = metrics_wire.reports_from_json(_document(1, 50))
        intake.report(master.ctx, master.admin, trial_id, 1, first_run)
        (container,) = master.run_containers(master.live(trial_id).id)
        master.exit(container, 1)
        assert master.live(trial_id).run_id == 2
    # Run 2 starts again from step 200 (run 1 reached 500): run 1's rows from 200 on are archived.
    data = _document(1001, 30)
    rows = orjson.loads(data)
    for index, row in enumerate(rows):
        row[2] = 200 + 10 * index
    data = orjson.dumps(rows)
    flat = _flat(data)
    assert flat is not None
    intake.report(master.ctx, master.admin, by_report, 2, metrics_wire.reports_from_json(data))
    assert intake.report(master.ctx, master.admin, by_column, 2, flat).stored == 30

    assert _stored(master, by_column) == _stored(master, by_report)
    stored, summary, total_batches = _stored(master, by_column)
    assert sum(1 for row in stored if row[6]) == 31  # run 1's steps 200..500
    assert summary["avg_metrics"]["loss"]["count"] == 19 + 30 and total_batches == 490
