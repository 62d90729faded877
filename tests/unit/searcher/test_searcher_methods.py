"""random, single and grid against Determined's rules: concurrency, replacement of invalid
hyperparameters, shutdown and its flags, progress."""

from __future__ import annotations

import pytest

from cairn.searcher_plugin.actions import Shutdown
from cairn.searcher_plugin.errors import InvalidEvent
from cairn.searcher_plugin.events import (
    ExitReason,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    TrialProgress,
    ValidationCompleted,
)
from services.searcher.domain.searcher import Searcher
from tests.unit.searcher.searcher_builders import (
    REGISTRY,
    MasterDriver,
    creates,
    grid_spec,
    random_spec,
    shutdowns,
    single_spec,
)

GRID4 = {"x": {"type": "categorical", "vals": [1, 2, 3, 4]}}


@pytest.mark.parametrize(
    ("max_trials", "concurrency", "initial"), [(8, 16, 8), (8, 3, 3), (8, 0, 8), (2, 5, 2)]
)
def test_random_starts_min_of_max_trials_and_concurrency(
    max_trials: int, concurrency: int, initial: int
) -> None:
    driver = MasterDriver.start(random_spec(max_trials, concurrency))
    assert len(driver.created) == initial


@pytest.mark.parametrize("concurrency", [1, 2, 3])
def test_random_never_exceeds_concurrency_and_creates_max_trials(concurrency: int) -> None:
    driver = MasterDriver.start(random_spec(7, concurrency))
    driver.run_to_end()
    assert len(driver.created) == 7
    assert driver.max_running_seen == concurrency
    assert driver.shutdown == Shutdown(cancel=False, failure=False)


def test_single_runs_exactly_one_trial() -> None:
    driver = MasterDriver.start(single_spec())
    assert len(driver.created) == 1
    driver.run_to_end()
    assert len(driver.created) == 1
    assert driver.shutdown == Shutdown()


def test_random_replaces_a_trial_with_invalid_hyperparameters() -> None:
    driver = MasterDriver.start(random_spec(3, 1))
    first = driver.running[0]
    driver.finish(first, ExitReason.INVALID_HP)
    driver.finish(driver.running[0], ExitReason.INIT_INVALID_HP)
    driver.run_to_end()
    # Two invalid trials did not count against max_trials: 3 valid ones ran besides them.
    assert len(driver.created) == 5
    assert driver.shutdown == Shutdown()


@pytest.mark.parametrize("reason", [ExitReason.INVALID_HP, ExitReason.INIT_INVALID_HP])
def test_single_does_not_replace_invalid_hyperparameters(reason: ExitReason) -> None:
    driver = MasterDriver.start(single_spec())
    driver.finish(driver.running[0], reason)
    assert len(driver.created) == 1
    assert driver.shutdown == Shutdown()


def test_grid_does_not_replace_invalid_hyperparameters() -> None:
    driver = MasterDriver.start(grid_spec(GRID4, concurrency=1))
    driver.run_to_end(early=ExitReason.INVALID_HP)
    assert len(driver.created) == 4
    assert driver.shutdown == Shutdown()


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (ExitReason.USER_CANCELED, Shutdown(cancel=True, failure=False)),
        (ExitReason.ERRORED, Shutdown(cancel=False, failure=True)),
    ],
)
def test_shutdown_flags_when_every_trial_ended_the_same_way(reason: ExitReason, expected: Shutdown) -> None:
    for spec in (random_spec(3, 2), grid_spec(GRID4, concurrency=2), single_spec()):
        driver = MasterDriver.start(spec)
        driver.run_to_end(early=reason)
        assert driver.shutdown == expected, spec.searcher["name"]


def test_shutdown_flags_stay_off_when_trials_ended_differently() -> None:
    driver = MasterDriver.start(random_spec(3, 3))
    a, b, c = driver.running
    driver.finish(a, ExitReason.ERRORED)
    driver.finish(b, ExitReason.USER_CANCELED)
    driver.finish(c, ExitReason.ERRORED)
    assert driver.shutdown == Shutdown(cancel=False, failure=False)


def test_shutdown_waits_for_every_requested_trial() -> None:
    driver = MasterDriver.start(random_spec(2, 2))
    a, b = driver.running
    driver.finish(a)
    assert driver.shutdown is None
    driver.finish(b)
    assert driver.shutdown == Shutdown()


def test_repeated_exits_are_ignored_and_shutdown_comes_once() -> None:
    driver = MasterDriver.start(single_spec())
    rid = driver.running[0]
    driver.finish(rid, ExitReason.ERRORED)
    assert driver.searcher.apply(TrialExitedEarly(rid, ExitReason.ERRORED)) == []
    assert driver.searcher.apply(TrialExited(rid)) == []
    assert driver.shutdown == Shutdown(failure=True)


def test_metrics_are_accepted_and_ignored() -> None:
    driver = MasterDriver.start(random_spec(2, 1))
    rid = driver.running[0]
    assert driver.searcher.apply(ValidationCompleted(rid, {"loss": 0.3, "nested": {"a": [1, 2]}}, 100)) == []
    assert driver.searcher.apply(ValidationCompleted(rid, {}, 0)) == []


def test_events_for_unknown_trials_are_refused_and_change_nothing() -> None:
    searcher = Searcher.new(random_spec(2, 1), REGISTRY)
    searcher.initial_actions()
    before = searcher.to_state()
    with pytest.raises(InvalidEvent, match=r"event.trial_exited.request_id: no trial with request id 'nope'"):
        searcher.apply(TrialExited("nope"))
    with pytest.raises(InvalidEvent, match=r"event.trial_created.request_id: required"):
        searcher.apply(TrialCreated(""))
    rid = searcher.requested[0]
    with pytest.raises(InvalidEvent, match=r"event.trial_progress.progress"):
        searcher.apply(TrialProgress(rid, float("nan")))
    assert searcher.to_state() == before


def test_random_progress_is_the_mean_over_created_trials() -> None:
    driver = MasterDriver.start(random_spec(4, 2))
    a, b = driver.running
    assert driver.searcher.progress() == 0.0
    driver.progress(a, 0.5)
    assert driver.searcher.progress() == pytest.approx(0.25)
    driver.finish(b)  # closed counts 1; its replacement c starts at 0
    assert driver.searcher.progress() == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    driver.progress(a, 7.0)  # clamped to a fraction
    assert driver.searcher.progress() == pytest.approx((1.0 + 1.0 + 0.0) / 3)


def test_random_progress_drops_invalid_trials() -> None:
    driver = MasterDriver.start(random_spec(2, 2))
    a, b = driver.running
    driver.progress(a, 0.8)
    driver.finish(b, ExitReason.INVALID_HP)  # b leaves the measure; its replacement c joins at 0
    assert driver.searcher.progress() == pytest.approx((0.8 + 0.0) / 2)
    driver.run_to_end()
    assert driver.searcher.progress() == 1.0


def test_grid_progress_counts_every_point() -> None:
    driver = MasterDriver.start(grid_spec(GRID4, concurrency=2))
    a, b = driver.running
    driver.progress(a, 0.5)
    assert driver.searcher.progress() == pytest.approx(0.5 / 4)
    driver.finish(b, ExitReason.INVALID_HP)  # an invalid point is done too
    assert driver.searcher.progress() == pytest.approx((0.5 + 1) / 4)
    driver.run_to_end()
    assert driver.searcher.progress() == 1.0


def test_initial_answer_for_each_method_has_no_shutdown() -> None:
    for spec in (random_spec(3, 2), grid_spec(GRID4), single_spec()):
        searcher = Searcher.new(spec, REGISTRY)
        actions = searcher.initial_actions()
        assert creates(actions) and not shutdowns(actions)
