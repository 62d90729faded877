"""`async_halving` and `adaptive_asha` (Determined's names), in either mode.

`stop_once: true` (the default, and all Determined 0.38 has) runs stopping ASHA: trials train on their
own and are stopped when they fall behind. `stop_once: false` runs Cairn's promotion mode, where trials
train rung by rung and the best are promoted. adaptive_asha runs several brackets of either kind as
one tournament.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.searcher.domain.hyperparameters import HyperparameterSpace
from services.searcher.domain.method import SearchMethod
from services.searcher.domain.methods.adaptive_brackets import make_brackets
from services.searcher.domain.methods.halving_config import (
    HalvingConfig,
    adaptive_config,
    async_halving_config,
    stop_once,
)
from services.searcher.domain.methods.halving_promotion import PromotionHalving
from services.searcher.domain.methods.halving_stopping import StoppingHalving
from services.searcher.domain.methods.tournament import TournamentSearch


def halving_search(config: HalvingConfig, stopping: bool) -> SearchMethod:
    return StoppingHalving(config) if stopping else PromotionHalving(config)


def build_async_halving(searcher: Mapping[str, Any], space: HyperparameterSpace) -> SearchMethod:
    config = async_halving_config(searcher)
    return halving_search(config, stop_once(searcher))


def build_adaptive_asha(searcher: Mapping[str, Any], space: HyperparameterSpace) -> SearchMethod:
    config = adaptive_config(searcher)
    stopping = stop_once(searcher)
    brackets = [
        halving_search(
            HalvingConfig(
                objective=config.objective,
                time=config.time,
                divisor=config.divisor,
                num_rungs=bracket.num_rungs,
                max_trials=bracket.max_trials,
                max_concurrent_trials=bracket.max_concurrent_trials,
            ),
            stopping,
        )
        for bracket in make_brackets(config)
    ]
    return TournamentSearch(brackets)
