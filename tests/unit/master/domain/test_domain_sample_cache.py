"""The learning curves' cache (samples.SampleCache) reads only reports stored since it last read, by
id. On PostgreSQL a report's id is taken at its INSERT and two trials' reports are stored side by
side, so a later id can be committed first: a refresh in between must not leave the earlier report
out of the chart for good, and once nothing is on its way the cache goes on from what it read."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import event, select

from services.master.domain.metrics import intake
from services.master.domain.metrics.reports import Report
from services.master.domain.metrics.samples import SampleCache
from services.master.store import models
from tests.unit.master.domain.harness import Master


def _curve(cache: SampleCache, experiment_id: int) -> dict[int, list[int]]:
    series, _ = cache.sample(
        experiment_id,
        metric_name="loss",
        group="training",
        max_trials=10,
        max_datapoints=100,
        start_batches=0,
        end_batches=0,
    )
    return {s.trial_id: [p.batches for p in s.points] for s in series}


def _settled(cache: SampleCache) -> int:
    (series,) = cache._sets.values()
    return series.settled_id


def _ids(master: Master, trial_id: int) -> list[int]:
    with master.ctx.db.read() as s:
        return list(s.scalars(select(models.Metric.id).where(models.Metric.trial_id == trial_id)))


def test_a_report_committed_after_a_later_one_still_reaches_the_chart(
    master_on_each_database: Master,
) -> None:
    master = master_on_each_database
    if master.ctx.db.dialect != "postgresql":
        pytest.skip("SQLite has one writer: ids become visible in the order they were taken")
    master.add_agent("a1", slots=2)
    experiment_id = master.create(
        searcher={"name": "grid", "metric": "loss", "max_length": {"batches": 10}},
        hyperparameters={"x": {"type": "categorical", "vals": [1, 2]}},
    )
    slow, fast = (t.id for t in master.trials(experiment_id))
    for trial_id in (slow, fast):
        master.run_containers(master.live(trial_id).id)
    cache = SampleCache(master.ctx)

    inside, may_commit = threading.Event(), threading.Event()
    slow_thread: list[threading.Thread] = []

    def hold_the_slow_one(conn: object) -> None:
        """The slow trial's report stops before its COMMIT: its rows in, their ids taken."""
        if threading.current_thread() in slow_thread:
            inside.set()
            may_commit.wait(10)

    def report(trial_id: int, steps: int) -> None:
        intake.report(master.ctx, master.admin, trial_id, 1, [Report("training", steps, {"loss": 0.5})])

    engine = master.ctx.db.engine
    event.listen(engine, "commit", hold_the_slow_one)
    try:
        slow_report = threading.Thread(target=report, args=(slow, 1))
        slow_thread.append(slow_report)
        slow_report.start()
        assert inside.wait(10)
        report(fast, 1)  # a later id, committed first
        assert _curve(cache, experiment_id) == {slow: [], fast: [1]}  # a chart refreshes in between
        # The slow one's id is still on its way: not counted as read.
        assert _settled(cache) < min(_ids(master, fast))
    finally:
        may_commit.set()
        slow_report.join(10)
        event.remove(engine, "commit", hold_the_slow_one)
    report(fast, 2)
    assert _curve(cache, experiment_id) == {slow: [1], fast: [1, 2]}
    # Nothing on its way now: the cache goes on from the last report it read.
    report(fast, 3)
    assert _curve(cache, experiment_id) == {slow: [1], fast: [1, 2, 3]}
    assert _settled(cache) == max(_ids(master, fast))
