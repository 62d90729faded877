"""The replay's rules are the searchers' rules: its Determined rule decides as Cairn's stopping ASHA
does, its Ray rule as numpy's percentile cutoff, and its policies spend exactly their budget."""

from __future__ import annotations

import random

import pytest

from bench.hpo import replay
from bench.hpo.budget import MAX_EPOCHS
from tests.unit.searcher.searcher_asha_builders import HalvingMaster, halving_spec


def test_the_determined_rule_decides_as_cairns_stopping_asha() -> None:
    # Rung 0 of a divisor-3 search, results arriving in this order; a stop answers ("stop", ...).
    losses = [0.5, 0.7, 0.4, 0.45, 0.9, 0.3, 0.35, 0.6, 0.2]
    n = len(losses)
    m = HalvingMaster.start(
        halving_spec(divisor=3, num_rungs=2, max_time=9, max_trials=n, max_concurrent_trials=n)
    )
    rung: list[tuple[float, int]] = []
    for index, loss in enumerate(losses):
        answer = m.validate(f"T{index}", loss, 3)
        searcher_goes_on = not any(a[0] == "stop" for a in answer)
        rung.append((loss, index))
        assert replay._determined_continues(rung, loss) == searcher_goes_on, (index, loss)


@pytest.mark.parametrize("previous", [[0.5], [0.5, 0.7], [0.3, 0.9, 0.4, 0.6, 0.2]])
def test_the_ray_rule_is_the_linear_percentile_cutoff(previous: list[float]) -> None:
    numpy = pytest.importorskip("numpy")
    cutoff = float(numpy.percentile(previous, 100 / 3))
    for error in (cutoff - 1e-9, cutoff + 1e-9):
        assert replay._ray_continues(previous, error) == (error <= cutoff)


@pytest.mark.parametrize("policy", list(replay.POLICIES.values()))
def test_every_policy_spends_the_budget_when_the_target_is_out_of_reach(policy: replay.Policy) -> None:
    curves = [[1.0 - 0.01 * e for e in range(MAX_EPOCHS)], [0.9] * MAX_EPOCHS]
    run = replay.Replay(curves, random.Random(0), target_error=0.0, budget_epochs=5 * MAX_EPOCHS)
    policy(run)
    assert run.reached_at is None and run.spent == 5 * MAX_EPOCHS
