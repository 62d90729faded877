"""core.searcher on a cluster: operations from the master, promotion while running, and a config
without a training length."""

from __future__ import annotations

import pytest

import cairn.core
from tests.unit.core.conftest import ClusterEnv


def test_single_operation_of_the_configured_length(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    master.configured_length = 100
    with cairn.core.init() as core:
        ops = _train_through(core)
        assert core.searcher.get_configured_units() == cairn.core.Unit.BATCHES
    assert ops == [100]
    (completed,) = master.calls.of("CompleteTrialSearcherValidation")
    assert completed.trial_id == 3
    assert completed.completed_operation.validate_after.length == 100
    assert completed.searcher_metric == pytest.approx(0.01)
    # Progress rides on the metric batches (the latest value each time), none a call of its own.
    assert master.batch_progress[-1] == 1.0
    assert set(master.batch_progress) <= {0.5, 1.0}
    assert master.batch_progress == sorted(master.batch_progress)
    assert not master.calls.of("ReportTrialProgress")
    # ...and the progress reported before an operation's completion was stored before it.
    assert master.progress_at_completions == [1.0]
    # Out of operations: acknowledged, so an exit 0 now may be resumed if the searcher wants more.
    assert len(master.calls.of("AckAllocationPreemptionSignal")) == 1


def test_promotion_while_running_gives_a_longer_operation(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    master.set_searcher_target(25)
    master.promotions = [100]
    with cairn.core.init() as core:
        ops = _train_through(core)
    assert ops == [25, 100]
    assert [
        c.completed_operation.validate_after.length
        for c in master.calls.of("CompleteTrialSearcherValidation")
    ] == [
        25,
        100,
    ]


def test_operation_already_done_yields_nothing(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    master.configured_length = 100
    master.completed_length = 100
    with cairn.core.init() as core:
        assert list(core.searcher.operations()) == []


def test_no_training_length_is_a_clear_error(cluster_env: ClusterEnv) -> None:
    with (
        cairn.core.init() as core,
        pytest.raises(cairn.core.SearcherNotConfiguredError, match=r"searcher\.max_time"),
    ):
        next(iter(core.searcher.operations()))


def test_each_operation_must_be_completed(cluster_env: ClusterEnv) -> None:
    cluster_env.master.configured_length = 10
    with cairn.core.init() as core:
        operations = core.searcher.operations()
        op = next(operations)
        op.report_progress(5)
        with pytest.raises(RuntimeError, match="report_completed"):
            next(operations)
        op.report_completed(1.0)
        with pytest.raises(RuntimeError, match="only once"):
            op.report_completed(1.0)
        cluster_env.master.configured_length = 20
        with pytest.raises(TypeError, match="searcher_metric: must be a number"):
            next(iter(core.searcher.operations())).report_completed("high")  # type: ignore[arg-type]


def _train_through(core: cairn.core.Context) -> list[int]:
    """A training loop in the shape of Determined's searcher examples; returns the ops' lengths."""
    lengths = []
    steps = 0
    for op in core.searcher.operations():
        lengths.append(op.length)
        while steps < op.length:
            steps = min(op.length, steps + op.length // 2 or 1)
            op.report_progress(steps)
        core.train.report_validation_metrics(steps, {"loss": 1.0 / steps})
        op.report_completed(1.0 / steps)
    return lengths
