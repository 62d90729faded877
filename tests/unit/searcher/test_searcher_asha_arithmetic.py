"""Rung and bracket arithmetic against Determined's own test expectations (asha_stopping_test.go,
adaptive_asha_test.go) and worked examples."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from services.searcher.domain.method import TrialPlan
from services.searcher.domain.methods.adaptive_brackets import (
    Bracket,
    bracket_max_concurrent_trials,
    bracket_max_trials,
    capped_max_rungs,
    make_brackets,
    mode_rungs,
)
from services.searcher.domain.methods.halving_config import Objective, TimeBudget, adaptive_config
from services.searcher.domain.methods.halving_rungs import (
    WORST_METRIC,
    Reading,
    halving_progress,
    read_validation,
    rung_lengths,
)
from services.searcher.domain.methods.halving_state import Rung, RungEntry
from services.searcher.domain.methods.halving_stopping import StoppingHalving, _insert
from services.searcher.domain.methods.tournament import TournamentSearch
from services.searcher.domain.searcher import Searcher
from tests.unit.searcher.searcher_asha_builders import halving_spec
from tests.unit.searcher.searcher_builders import REGISTRY, creates


@pytest.mark.parametrize(
    ("num_rungs", "max_time", "divisor", "expected"),
    [
        # TestMakeRungs
        (3, 9, 3.0, (1, 3, 9)),
        (4, 10, 2.0, (1, 2, 5, 10)),
        (1, 9, 3.0, (9,)),
        (3, 900, 3.0, (100, 300, 900)),
        # TestASHA: the 4-rung bracket of conservative adaptive_asha, max_time 1000, divisor 2.
        (4, 1000, 2.0, (125, 250, 500, 1000)),
        # Rungs never go below one unit, and a fractional divisor truncates.
        (5, 10, 4.0, (1, 1, 1, 2, 10)),
        (3, 100, 2.5, (16, 40, 100)),
        # A divisor whose powers overflow a float still gives rungs.
        (3, 100, 1e300, (1, 1, 100)),
    ],
)
def test_rung_lengths(num_rungs: int, max_time: int, divisor: float, expected: tuple[int, ...]) -> None:
    assert rung_lengths(max_time, divisor, num_rungs) == expected


@pytest.mark.parametrize(
    ("new", "existing", "index", "after"),
    [
        # TestInsertCompletedMetric
        (1.2, [0.0, 1.5, 2.1], 1, [0.0, 1.2, 1.5, 2.1]),
        (3.0, [0.0, 1.5, 2.0], 3, [0.0, 1.5, 2.0, 3.0]),
        (-3.4, [-3.0, -2.0, -1.0], 0, [-3.4, -3.0, -2.0, -1.0]),
        (1.2, [], 0, [1.2]),
        # An equal result goes before the ones already there (sort.Search on >=).
        (1.5, [0.0, 1.5, 2.0], 1, [0.0, 1.5, 1.5, 2.0]),
    ],
)
def test_stopping_insert_rank(new: float, existing: list[float], index: int, after: list[float]) -> None:
    rung = Rung(1, [RungEntry(f"old-{i}", m) for i, m in enumerate(existing)])
    assert _insert(rung, "new", new) == index
    assert [e.metric for e in rung.entries] == after
    assert rung.entries[index].request_id == "new"


def test_bracket_max_trials() -> None:
    # TestBracketMaxTrials
    assert bracket_max_trials(20, 3.0, [3, 2, 1]) == [12, 5, 3]
    assert bracket_max_trials(50, 3.0, [4, 3]) == [35, 15]
    assert bracket_max_trials(50, 4.0, [3, 2]) == [37, 13]
    assert bracket_max_trials(100, 4.0, [4, 3, 2]) == [70, 22, 8]
    # Every bracket gets a trial even when max_trials is short of one each.
    assert bracket_max_trials(2, 4.0, [3, 2, 1]) == [1, 1, 1]


def test_bracket_max_concurrent_trials() -> None:
    # TestBracketMaxConcurrentTrials
    assert bracket_max_concurrent_trials(0, 3.0, [9, 3, 1]) == [3, 3, 3]
    assert bracket_max_concurrent_trials(11, 3.0, [9, 3, 1]) == [4, 4, 3]
    assert bracket_max_concurrent_trials(0, 4.0, [40, 10]) == [10, 10]
    # Fewer places than brackets: each bracket still gets one.
    assert bracket_max_concurrent_trials(1, 4.0, [5, 3, 1]) == [1, 1, 1]


@pytest.mark.parametrize(
    ("mode", "max_rungs", "expected"),
    [
        ("aggressive", 5, [5]),
        ("standard", 5, [3, 4, 5]),
        ("standard", 4, [2, 3, 4]),
        ("standard", 2, [1, 2]),
        ("standard", 1, [1]),
        ("conservative", 4, [1, 2, 3, 4]),
    ],
)
def test_mode_rungs(mode: str, max_rungs: int, expected: list[int]) -> None:
    assert mode_rungs(mode, max_rungs) == expected


@pytest.mark.parametrize(
    ("max_rungs", "max_time", "max_trials", "divisor", "expected"),
    [
        (5, 100, 10, 4.0, 2),  # floor(log4 10) + 1
        (5, 1000, 10, 3.0, 3),  # floor(log3 10) + 1
        (5, 1000, 10, 2.0, 4),
        (5, 6400, 128, 4.0, 4),  # floor(log4 6400) + 1 = 7; floor(log4 128) + 1 = 4
        (2, 900, 5, 3.0, 2),
        (5, 1, 100, 4.0, 1),  # one unit of training leaves room for one rung
    ],
)
def test_capped_max_rungs(
    max_rungs: int, max_time: int, max_trials: int, divisor: float, expected: int
) -> None:
    assert capped_max_rungs(max_rungs, max_time, max_trials, divisor) == expected


def _adaptive(**fields: Any) -> list[Bracket]:
    return make_brackets(adaptive_config(halving_spec("adaptive_asha", **fields).searcher))


def test_make_brackets_matches_determined() -> None:
    # TestMakeBrackets, case 1: standard, max length 100, 10 trials, concurrency 2, divisor 4.
    assert _adaptive(mode="standard", max_time=100, max_trials=10, max_concurrent_trials=2, divisor=4) == [
        Bracket(2, 7, 1),
        Bracket(1, 3, 1),
    ]
    # Case 2: conservative, max length 1000, divisor 3, 10 trials, concurrency 5.
    assert _adaptive(
        mode="conservative", max_time=1000, max_trials=10, max_concurrent_trials=5, divisor=3
    ) == [Bracket(3, 7, 2), Bracket(2, 2, 2), Bracket(1, 1, 1)]
    # TestASHA: conservative, max_time 1000, divisor 2, 10 trials, concurrency 5 → four brackets.
    assert _adaptive(
        mode="conservative", max_time=1000, max_trials=10, max_concurrent_trials=5, divisor=2
    ) == [Bracket(4, 6, 2), Bracket(3, 2, 1), Bracket(2, 1, 1), Bracket(1, 1, 1)]
    # TestAdaptiveASHAStoppingSearchMethod: standard, max_rungs 2, divisor 3, 900 batches, 5 trials.
    assert _adaptive(mode="standard", max_rungs=2, max_time=900, max_trials=5, divisor=3) == [
        Bracket(2, 3, 8),
        Bracket(1, 2, 8),
    ]


def test_explicit_bracket_rungs_override_the_mode_and_are_sorted() -> None:
    brackets = _adaptive(mode="aggressive", bracket_rungs=[1, 3], max_trials=20, max_time=900, divisor=3)
    assert [b.num_rungs for b in brackets] == [3, 1]
    assert sum(b.max_trials for b in brackets) == 20
    assert _adaptive(mode="aggressive", max_trials=100, max_time=1024, divisor=4) == [Bracket(4, 100, 16)]


def test_unlimited_concurrency_per_bracket() -> None:
    brackets = _adaptive(mode="standard", max_rungs=3, max_time=900, max_trials=16, max_concurrent_trials=0)
    assert [(b.num_rungs, b.max_trials) for b in brackets] == [(3, 11), (2, 5)]
    assert [b.max_concurrent_trials for b in brackets] == [5, 5]  # max(5 trials of the last, divisor 3)


def test_adaptive_asha_sub_searches_and_initial_trials() -> None:
    # TestASHA end to end: four brackets whose rungs are the top of 125/250/500/1000, five trials at once.
    searcher = Searcher.new(
        halving_spec(
            "adaptive_asha",
            mode="conservative",
            max_time=1000,
            max_trials=10,
            max_concurrent_trials=5,
            divisor=2,
        ),
        REGISTRY,
    )
    method = searcher.method
    assert isinstance(method, TournamentSearch)
    all_rungs = (125, 250, 500, 1000)
    subsearches = method.subsearches
    assert len(subsearches) == 4
    for index, sub in enumerate(subsearches):
        assert isinstance(sub, StoppingHalving)
        assert sub.lengths == all_rungs[index:]
    actions = creates(searcher.initial_actions())
    assert len(actions) == 5
    brackets = [method.trial_plan(a.request_id) for a in actions]
    assert [p.bracket for p in brackets] == [0, 0, 1, 2, 3]
    assert brackets[2] == TrialPlan(rungs=(250, 500, 1000), bracket=1)


GOAL = Objective("loss", smaller_is_better=True)
BATCHES = TimeBudget("batches", 900)


@pytest.mark.parametrize(
    ("metrics", "steps", "goal", "time", "expected"),
    [
        # TestGetMetric
        ({"loss": 0.25, "batches": 2.0}, 0, GOAL, BATCHES, Reading(0.25, 2)),
        ({"loss": 0.2, "batches": 3.0}, 0, Objective("loss", False), BATCHES, Reading(-0.2, 3)),
        (
            {"loss": 1.2, "custom_time_step": 5.0},
            0,
            GOAL,
            TimeBudget("custom_time_step", 9),
            Reading(1.2, 5),
        ),
        ({"batches": 2.0}, 2, GOAL, BATCHES, None),
        # A fractional time truncates; batches fall back on steps_completed.
        ({"loss": 1.0, "batches": 2.9}, 0, GOAL, BATCHES, Reading(1.0, 2)),
        ({"loss": 1.0}, 300, GOAL, BATCHES, Reading(1.0, 300)),
        ({"loss": 1.0, "epochs": 2}, 300, GOAL, TimeBudget("epochs", 3), Reading(1.0, 2)),
        # Other units have no fallback; a time that is not a count is no time.
        ({"loss": 1.0}, 300, GOAL, TimeBudget("epochs", 3), None),
        ({"loss": 1.0, "batches": -1}, 0, GOAL, BATCHES, None),
        ({"loss": 1.0, "batches": float("inf")}, 0, GOAL, BATCHES, None),
        ({"loss": 1.0, "batches": "100"}, 0, GOAL, BATCHES, None),
        ({"loss": True, "batches": 100}, 0, GOAL, BATCHES, None),
        ({"loss": "low", "batches": 100}, 0, GOAL, BATCHES, None),
        # A diverged trial ranks last; infinities stay in the float range.
        ({"loss": float("nan"), "batches": 1}, 0, GOAL, BATCHES, Reading(WORST_METRIC, 1)),
        ({"loss": float("inf"), "batches": 1}, 0, GOAL, BATCHES, Reading(WORST_METRIC, 1)),
        (
            {"loss": float("inf"), "batches": 1},
            0,
            Objective("loss", False),
            BATCHES,
            Reading(-WORST_METRIC, 1),
        ),
    ],
)
def test_read_validation(
    metrics: dict[str, Any], steps: int, goal: Objective, time: TimeBudget, expected: Reading | None
) -> None:
    assert read_validation(metrics, steps, goal, time) == expected


def test_progress_formula() -> None:
    assert halving_progress(0, 0, 0, 10) == 0.0
    assert halving_progress(6, 3, 0, 10) == pytest.approx(6 / 12)
    # Bottom rung full: the share of valid trials that exited, if that is more.
    assert halving_progress(10, 4, 0, 10) == pytest.approx(10 / 12)
    assert halving_progress(10, 12, 2, 10) == 1.0
    assert sys.float_info.max == WORST_METRIC
