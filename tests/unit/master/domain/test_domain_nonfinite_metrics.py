"""NaN and ±Infinity metrics, as the stock client sends them (strings "NaN", "Infinity",
"-Infinity") or as floats over gRPC: stored as Determined stores them (strings), summarized without
error, and heard by the searcher as numbers, where NaN ranks last (a diverged trial is stopped)."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import select

from cairn.searcher.v1 import searcher_pb2 as spb
from cairn.wire import struct_to_python
from services.master.store import models
from tests.unit.master.domain.harness import Master

# On both databases: NaN and infinities as each database's JSON stores them.
pytestmark = pytest.mark.on_each_database

HALVING = {
    "searcher": {
        "name": "async_halving",
        "metric": "loss",
        "max_length": {"batches": 4},
        "num_rungs": 2,
        "divisor": 2,
        "max_trials": 2,
    },
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
}


def _pending_validations(master: Master, experiment_id: int) -> list[dict[str, object]]:
    with master.db.read() as s:
        payloads = s.scalars(
            select(models.SearcherEvent.payload).where(models.SearcherEvent.experiment_id == experiment_id)
        )
        events = [spb.SearcherEvent.FromString(p) for p in payloads]
    return [
        struct_to_python(e.validation_completed.metrics) for e in events if e.HasField("validation_completed")
    ]


def test_non_finite_metrics_are_stored_as_strings_and_reach_the_searcher_as_numbers(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    master.run_containers(master.live(trial.id).id)
    # As gRPC floats, and as the stock client's JSON strings.
    master.report(trial.id, 1, "training", 1, 1, loss=math.nan, grad=math.inf)
    master.pump.deliver_all = lambda: 0  # type: ignore[method-assign]  # hold the events to read them
    master.report(trial.id, 1, "validation", 2, 2, loss=math.nan, top=math.inf, low=-math.inf)
    (sent,) = _pending_validations(master, experiment_id)
    assert math.isnan(sent["loss"]) and sent["top"] == math.inf and sent["low"] == -math.inf  # type: ignore[arg-type]

    with master.db.read() as s:
        stored = {
            m.group_name: m.metrics
            for m in s.scalars(select(models.Metric).where(models.Metric.trial_id == trial.id))
        }
    assert stored["training"] == {"loss": "NaN", "grad": "Infinity"}
    assert stored["validation"] == {"loss": "NaN", "top": "Infinity", "low": "-Infinity"}
    summary = master.trials(experiment_id)[0].summary_metrics
    assert summary["validation_metrics"]["loss"]["last"] == "NaN"
    assert summary["avg_metrics"]["grad"]["last"] == "Infinity"


def test_a_nan_validation_ranks_last_and_the_searcher_stops_its_trial(master: Master) -> None:
    master.add_agent("a1", slots=2)
    experiment_id = master.create(**HALVING)
    good, diverged = master.trials(experiment_id)
    for trial in (good, diverged):
        master.run_containers(master.live(trial.id).id)
    master.report(good.id, 1, "validation", 2, 1, loss=0.5)
    master.report(diverged.id, 1, "validation", 2, 1, loss=math.nan)
    good, diverged = master.trials(experiment_id)
    assert diverged.searcher_stopped and diverged.state == "STOPPING_COMPLETED"
    assert not good.searcher_stopped and good.state == "ACTIVE"
    # The best validation is a number: NaN is never the best.
    assert good.searcher_metric_value == 0.5 and diverged.searcher_metric_value is None
