"""Metric series read back (domain/metrics/compare.py): the checks of the per-group streams and of
CompareTrials, and a compared series made from stored reports (on both databases)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.metrics import compare, intake
from services.master.domain.metrics.reports import Report
from services.master.domain.reads import metrics as reads
from tests.unit.master.domain.harness import Master

# On both databases: downsampling and filters over JSON metrics in SQL.
pytestmark = pytest.mark.on_each_database


def _query(**overrides: Any) -> compare.CompareQuery:
    args: dict[str, Any] = {
        "trial_ids": [1],
        "max_datapoints": 0,
        "metric_names": ["loss"],
        "metric_ids": [],
        "group": "",
        "start_batches": 0,
        "end_batches": 0,
        "series_filter": compare.SeriesFilter(),
        **overrides,
    }
    return compare.check_compare(**args)


def test_stream_trials_are_sorted_and_checked() -> None:
    assert compare.check_stream_trials([3, 1, 2]) == [1, 2, 3]
    with pytest.raises(InvalidArgument, match="trial_ids: at least one"):
        compare.check_stream_trials([])
    with pytest.raises(InvalidArgument, match="trial_ids: trial 2 is named twice"):
        compare.check_stream_trials([2, 1, 2])
    with pytest.raises(InvalidArgument, match="trial_ids: at most 1000 trials; got 1001"):
        compare.check_stream_trials(list(range(1001)))


def test_a_compare_query_reads_names_and_ids_into_groups() -> None:
    assert _query().names_by_group == {"training": ("loss",), "validation": ("loss",)}
    assert _query(group="validation").names_by_group == {"validation": ("loss",)}
    ids = _query(metric_names=[], metric_ids=["training.loss", "validation.acc.top1", "custom.x"])
    assert ids.names_by_group == {"custom": ("x",), "training": ("loss",), "validation": ("acc.top1",)}
    assert _query().max_datapoints == compare.DEFAULT_DATAPOINTS and _query().end_batches is None
    assert _query(trial_ids=[3, 1, 3]).trial_ids == (3, 1, 3)  # as asked, as Determined answers


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"trial_ids": []}, "trial_ids: at least one"),
        ({"trial_ids": list(range(101))}, "trial_ids: at most 100 trials; got 101"),
        ({"max_datapoints": 10_001}, "max_datapoints: between 0"),
        ({"max_datapoints": -1}, "max_datapoints: between 0"),
        ({"start_batches": -1}, "start_batches: must not be negative"),
        ({"end_batches": -5}, "end_batches: must not be negative"),
        ({"metric_ids": ["training.loss"]}, "metric_names, metric_ids"),
        ({"metric_names": [], "metric_ids": ["nodot"]}, "metric_ids: 'nodot' is not group.metric_name"),
        ({"metric_names": ["m"] * 101}, "metric_names: at most 100"),
        ({"metric_names": [""]}, "metric_names: a metric name"),
    ],
)
def test_bad_compare_input_is_refused_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument, match=field):
        _query(**overrides)


def test_a_filter_names_its_column_and_refuses_ranges_of_the_wrong_kind() -> None:
    assert compare.check_filter(None, None, None, None).column == "batches"
    with pytest.raises(InvalidArgument, match="time_series_filter: 'time' is a time"):
        compare.check_filter("time", compare.Range(gt=1.0), None, None)
    with pytest.raises(InvalidArgument, match=r"time_series_filter\.time_range: 'epoch' is not a time"):
        compare.check_filter("epoch", None, None, compare.Range(gt=datetime.now(UTC)))
    with pytest.raises(InvalidArgument, match=r"time_series_filter\.integer_range: at most 1000"):
        compare.check_filter("batches", None, compare.Range(incl=tuple(range(1001))), None)


def test_a_compared_series_is_windowed_filtered_and_downsampled(master: Master) -> None:
    master.add_agent("a1", slots=1)
    trial = master.trials(master.create())[0].id
    start = datetime(2026, 12, 1, tzinfo=UTC)
    intake.report(
        master.ctx,
        master.admin,
        trial,
        1,
        [
            Report(
                group="training",
                steps_completed=10 * step,
                metrics={"loss": 1.0 / step, "epoch": step // 10, **({"acc": 0.5} if step % 2 else {})},
                report_time=start + timedelta(minutes=step),
            )
            for step in range(1, 101)
        ],
    )
    with master.db.read_connection() as connection:
        rows = reads.reports_of_trial(connection, trial, "training")

    window = compare.series(rows, ["loss"], _query(start_batches=100, end_batches=300))
    assert [p.batches for p in window] == list(range(100, 301, 10))
    assert window[0].values == {"loss": pytest.approx(0.1)} and window[0].epoch == 1.0

    only_acc = compare.series(rows, ["acc"], _query(metric_names=["acc"]))
    assert all(p.batches % 20 == 10 for p in only_acc)  # reports without the metric are left out

    small = compare.series(rows, ["loss"], _query(max_datapoints=10))
    assert len(small) == 10 and small[0].batches == 10 and small[-1].batches == 1000

    by_epoch = compare.check_filter("epoch", compare.Range(gte=5.0), None, None)
    late = compare.series(rows, ["loss"], _query(series_filter=by_epoch))
    assert late[0].batches == 500
    by_time = compare.check_filter("time", None, None, compare.Range(lt=start + timedelta(minutes=3)))
    assert [p.batches for p in compare.series(rows, ["loss"], _query(series_filter=by_time))] == [10, 20]
    not_in = compare.check_filter(None, None, compare.Range(lte=50, not_in=(20, 30)), None)
    assert [p.batches for p in compare.series(rows, ["loss"], _query(series_filter=not_in))] == [10, 40, 50]
