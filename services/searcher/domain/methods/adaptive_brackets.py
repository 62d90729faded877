"""How adaptive_asha splits a search into brackets (Determined's adaptive_asha.go: makeBrackets).

Each bracket is one halving search with its own number of rungs; brackets with more rungs stop more
trials early. The mode picks the rung counts (unless bracket_rungs names them), capped so that the
bottom rung is at least one unit and the top rung can be reached by at least one trial. Trials are
shared so that each bracket gets roughly the same training budget, and concurrency is split evenly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from services.searcher.domain.methods.halving_config import AdaptiveConfig
from services.searcher.domain.methods.halving_rungs import power


@dataclass(frozen=True)
class Bracket:
    num_rungs: int
    max_trials: int
    max_concurrent_trials: int


def _log_levels(value: int, divisor: float) -> int:
    """floor(log_divisor(value)) + 1: how many rungs, a divisor apart, fit between 1 and value."""
    return int(math.log(value) / math.log(divisor)) + 1


def capped_max_rungs(max_rungs: int, max_time: int, max_trials: int, divisor: float) -> int:
    return min(max_rungs, _log_levels(max_time, divisor), _log_levels(max_trials, divisor))


def mode_rungs(mode: str, max_rungs: int) -> list[int]:
    if mode == "aggressive":
        return [max_rungs]
    if mode == "conservative":
        return list(range(1, max_rungs + 1))
    return list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))


def bracket_max_trials(max_trials: int, divisor: float, rungs: Sequence[int]) -> list[int]:
    """A bracket of r rungs spends about r top-rung trainings per divisor^(r-1) trials, so weighting
    it by divisor^(r-1) / r gives each bracket the same budget. Rounding leftovers go to bracket 0."""
    weights = [power(divisor, count - 1) / count for count in rungs]
    total = sum(weights)
    trials = []
    for weight in weights:
        share = weight / total * max_trials
        # A divisor so large that the weights overflow leaves no share to compute: one trial each.
        trials.append(max(int(share), 1) if math.isfinite(share) else 1)
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def bracket_max_concurrent_trials(max_concurrent: int, divisor: float, trials: Sequence[int]) -> list[int]:
    """An even split, the remainder to the first brackets; every bracket gets at least one. With no
    limit (0), each bracket may run as many as the narrowest bracket's trials, at least divisor."""
    count = len(trials)
    if max_concurrent == 0:
        return [max(trials[-1], int(divisor))] * count
    max_concurrent = max(max_concurrent, count)
    share, remainder = divmod(max_concurrent, count)
    return [share + 1 if index < remainder else share for index in range(count)]


def make_brackets(config: AdaptiveConfig) -> list[Bracket]:
    rungs = list(config.bracket_rungs)
    if not rungs:
        max_rungs = capped_max_rungs(
            config.max_rungs, config.time.max_time, config.max_trials, config.divisor
        )
        rungs = mode_rungs(config.mode, max_rungs)
    # Brackets that stop more trials early go first: they pay off soonest.
    rungs.sort(reverse=True)
    trials = bracket_max_trials(config.max_trials, config.divisor, rungs)
    concurrency = bracket_max_concurrent_trials(config.max_concurrent_trials, config.divisor, trials)
    return [Bracket(r, t, c) for r, t, c in zip(rungs, trials, concurrency, strict=True)]
