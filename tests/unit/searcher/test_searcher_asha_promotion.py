"""Promotion ASHA (stop_once: false): the classic asynchronous successive halving, step by step."""

from __future__ import annotations

import random
from typing import Any

import pytest

from cairn.searcher_plugin.events import ExitReason
from services.searcher.domain.methods.halving_promotion import PromotionHalving
from services.searcher.domain.methods.tournament import TournamentSearch
from tests.unit.searcher.searcher_asha_builders import HalvingMaster, halving_spec


def promotion_master(**fields: Any) -> HalvingMaster:
    # Divisor 2, three rungs of 100, 200 and 400 batches; four trials, two at a time.
    defaults: dict[str, Any] = {
        "divisor": 2,
        "num_rungs": 3,
        "max_time": 400,
        "max_trials": 4,
        "max_concurrent_trials": 2,
    }
    return HalvingMaster.start(halving_spec(stop_once=False, **{**defaults, **fields}))


def test_scripted_promotion_run() -> None:
    m = promotion_master()
    assert isinstance(m.searcher.method, PromotionHalving)
    # Every trial is created to train to rung 0's length.
    assert m.answer == [("create", "T0", 100), ("create", "T1", 100)]

    # T0 at 100: rung 0 = [T0]; its top floor(1/2) = 0 promotes nobody, so the freed place starts T2.
    assert m.validate("T0", 0.5, 100) == [("create", "T2", 100)]
    # A validation short of the target is progress, not a result.
    assert m.validate("T1", 0.1, 50) == []
    # T1 at 100: rung 0 = [T1, T0]; top 1 is T1, not yet promoted: promotion comes before a new trial.
    assert m.validate("T1", 0.3, 100) == [("target", "T1", 200)]
    # T2 at 100: rung 0 = [T1*, T2, T0]; top 1 is T1, already promoted; so T3, the last of four.
    assert m.validate("T2", 0.4, 100) == [("create", "T3", 100)]
    # T1 at 200: rung 1 = [T1] promotes nobody; no trial left to create; rung 0 still awaits T3.
    assert m.validate("T1", 0.35, 200) == []
    # T3 at 100: rung 0 = [T1*, T2, T0, T3]: top 2 promotes T2. Rung 0 is final now: T0 and T3, out
    # of its top, will never be promoted and are stopped.
    assert m.validate("T3", 0.9, 100) == [("target", "T2", 200), ("stop", "T0"), ("stop", "T3")]
    assert m.live() == ["T1", "T2"]
    assert m.exit_stopped() == []
    # T2 at 200: rung 1 = [T2, T1]; top 1 is T2, promoted to the top rung; T1 waits in vain: stopped.
    assert m.validate("T2", 0.2, 200) == [("target", "T2", 400), ("stop", "T1")]
    assert m.exit_stopped() == []
    assert m.shutdown is None
    # The top rung is the end of the road.
    assert m.validate("T2", 0.1, 400) == [("stop", "T2")]
    assert m.exit_stopped() == [("shutdown", False, False)]
    assert m.rung(0) == ["T1", "T2", "T0", "T3"] and m.rung(1) == ["T2", "T1"] and m.rung(2) == ["T2"]
    assert m.searcher.progress() == 1.0


def test_ties_rank_by_creation_order() -> None:
    m = promotion_master(max_trials=4, max_concurrent_trials=4)
    # T3 reports first, but T1 was created first: on equal results T1 ranks ahead.
    assert m.validate("T3", 0.5, 100) == []
    assert m.validate("T1", 0.5, 100) == [("target", "T1", 200)]
    assert m.rung(0) == ["T1", "T3"]


def test_unlimited_concurrency_creates_every_trial_at_once() -> None:
    m = promotion_master(max_concurrent_trials=0)
    assert m.answer == [("create", f"T{i}", 100) for i in range(4)]
    assert m.validate("T0", 0.4, 100) == []
    assert m.validate("T1", 0.3, 100) == [("target", "T1", 200)]
    assert m.validate("T2", 0.2, 100) == [("target", "T2", 200)]  # top floor(3/2) = 1: T2
    # Top 2 of [T3, T2*, T1*, T0]: T3 goes up; rung 0 is final and T0 is out of its top.
    assert m.validate("T3", 0.1, 100) == [("target", "T3", 200), ("stop", "T0")]
    assert m.rung(0) == ["T3", "T2", "T1", "T0"]


def test_invalid_hyperparameters_free_the_place_and_the_budget() -> None:
    m = promotion_master(max_trials=2, max_concurrent_trials=1)
    assert m.answer == [("create", "T0", 100)]
    # Out of max_trials and of every rung; its place goes to the next job, a new trial.
    assert m.exit("T0", ExitReason.INVALID_HP) == [("create", "T1", 100)]
    assert m.validate("T1", 0.5, 100) == [("create", "T2", 100)]
    # T2 errors before its target: it ranks last at rung 0, which is now final; T1 is the top 1 of 2.
    assert m.exit("T2", ExitReason.ERRORED) == [("target", "T1", 200)]
    assert m.rung(0) == ["T1", "T2"]
    # Alone in rung 1 (top 0): nothing to promote, nothing to create, nothing left to wait for.
    assert m.validate("T1", 0.4, 200) == [("stop", "T1")]
    assert m.exit_stopped() == [("shutdown", False, False)]


def test_an_early_exit_after_promotion_ranks_last_in_the_next_rung() -> None:
    m = promotion_master(max_trials=2, max_concurrent_trials=2)
    m.validate("T0", 0.5, 100)
    assert m.validate("T1", 0.3, 100) == [("target", "T1", 200), ("stop", "T0")]
    assert m.exit("T1", ExitReason.USER_CANCELED) == []
    assert m.rung(1) == ["T1"]
    assert m.exit_stopped() == [("shutdown", False, False)]


def test_an_idle_trial_that_ends_is_not_promoted() -> None:
    m = promotion_master(max_trials=3, max_concurrent_trials=1)
    assert m.validate("T0", 0.2, 100) == [("create", "T1", 100)]
    # T0 is killed while it waits; it keeps its result but cannot be promoted any more.
    assert m.exit("T0", ExitReason.USER_CANCELED) == []
    assert m.validate("T1", 0.5, 100) == [("create", "T2", 100)]
    assert m.validate("T2", 0.6, 100) == [("stop", "T1"), ("stop", "T2")]
    assert m.exit_stopped() == [("shutdown", False, False)]


def test_a_trial_exiting_short_of_its_target_counts_as_worst() -> None:
    m = promotion_master(max_trials=2, max_concurrent_trials=1)
    assert m.exit("T0") == [("create", "T1", 100)]
    assert m.rung(0) == ["T0"]
    assert m.validate("T1", 0.7, 100) == [("target", "T1", 200)]


def test_validations_of_idle_or_stopped_trials_are_ignored() -> None:
    m = promotion_master(max_trials=2, max_concurrent_trials=2)
    m.validate("T0", 0.5, 100)
    before = m.searcher.to_state()
    assert m.validate("T0", 0.1, 400) == []
    assert m.validate("T1", 0.1, 20) == []
    assert m.searcher.to_state()["method_state"] == before["method_state"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("concurrency", [1, 2, 3])
def test_random_runs_respect_concurrency_and_finish(seed: int, concurrency: int) -> None:
    m = HalvingMaster.start(
        halving_spec(
            stop_once=False,
            divisor=2,
            num_rungs=3,
            max_time=400,
            max_trials=9,
            max_concurrent_trials=concurrency,
        )
    )
    rng = random.Random(seed)
    targets = {name: target for _, name, target in m.answer}
    for _ in range(200):
        training = sorted(targets)
        assert len(training) <= concurrency
        if not training:
            break
        name = rng.choice(training)
        roll = rng.random()
        if roll < 0.05:
            answer = m.exit(name, rng.choice(list(ExitReason)))
        else:
            answer = m.validate(name, rng.random(), targets[name])
        del targets[name]
        for action in answer:
            if action[0] in ("create", "target"):
                targets[action[1]] = action[2]
            elif action[0] == "stop":
                targets.pop(action[1], None)
        m.exit_stopped()
    assert not targets
    assert m.shutdown is not None
    # The whole budget was spent: trials with invalid hyperparameters were replaced.
    assert len(m.ids) - m.bracket.invalid_trials == 9
    # Results above the bottom rung come only from promotions out of the rung below.
    for lower, upper in ((0, 1), (1, 2)):
        promoted = {m.names[e.request_id] for e in m.bracket.rungs[lower].entries if e.promoted}
        assert set(m.rung(upper)) <= promoted


def test_adaptive_asha_in_promotion_mode_runs_promotion_brackets() -> None:
    m = HalvingMaster.start(
        halving_spec(
            "adaptive_asha",
            stop_once=False,
            mode="standard",
            max_rungs=3,
            max_time=900,
            max_trials=16,
            max_concurrent_trials=4,
        )
    )
    method = m.searcher.method
    assert isinstance(method, TournamentSearch)
    assert all(isinstance(sub, PromotionHalving) for sub in method.subsearches)
    # Brackets of 3 and 2 rungs, two places each; each creates to its own bottom rung.
    assert m.answer == [
        ("create", "T0", 100),
        ("create", "T1", 100),
        ("create", "T2", 300),
        ("create", "T3", 300),
    ]
    answer = m.validate("T2", 0.5, 300)
    assert answer == [("create", "T4", 300)]
    assert method.trial_table[m.rid("T4")] == 1
