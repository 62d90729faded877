"""Bad halving specs are refused with the field named, before anything starts."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.searcher_plugin.errors import InvalidSpec
from services.searcher.domain.searcher import Searcher
from tests.unit.searcher.searcher_asha_builders import HPARAMS, halving_spec
from tests.unit.searcher.searcher_builders import REGISTRY, creates, make_spec

CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "async_halving",
        {"time_metric": None, "max_time": None},
        "searcher.time_metric: required, with max_time",
    ),
    (
        "adaptive_asha",
        {"time_metric": None, "max_time": None},
        "searcher.time_metric: required, with max_time",
    ),
    ("async_halving", {"max_time": None}, "searcher.max_time: required with time_metric"),
    ("adaptive_asha", {"time_metric": None}, "searcher.time_metric: required with max_time"),
    ("async_halving", {"max_time": 0}, "searcher.max_time: must be >= 1, got 0"),
    ("async_halving", {"time_metric": ""}, "searcher.time_metric: must be a non-empty string"),
    (
        "async_halving",
        {"time_metric": None, "max_time": None, "max_length": 0},
        "searcher.max_length: must be >= 1, got 0",
    ),
    (
        "async_halving",
        {"time_metric": None, "max_time": None, "max_length": {"steps": 5}},
        "searcher.max_length: must be an integer or one of",
    ),
    ("async_halving", {"divisor": 1}, "searcher.divisor: must be > 1, got 1"),
    ("adaptive_asha", {"divisor": 0.5}, "searcher.divisor: must be > 1, got 0.5"),
    ("adaptive_asha", {"divisor": "4"}, "searcher.divisor: must be a finite number"),
    ("async_halving", {"num_rungs": 0}, "searcher.num_rungs: must be >= 1, got 0"),
    ("async_halving", {"num_rungs": None}, "searcher.num_rungs: required for async_halving"),
    ("async_halving", {"num_rungs": 65}, "searcher.num_rungs: must be <= 64, got 65"),
    ("adaptive_asha", {"max_rungs": 0}, "searcher.max_rungs: must be >= 1, got 0"),
    ("adaptive_asha", {"bracket_rungs": [2, 0]}, "searcher.bracket_rungs[1]: must be >= 1, got 0"),
    (
        "adaptive_asha",
        {"max_rungs": 3, "bracket_rungs": [4]},
        "searcher.bracket_rungs[0]: must be <= max_rungs (3), got 4",
    ),
    ("adaptive_asha", {"bracket_rungs": [1.5]}, "searcher.bracket_rungs[0]: must be an integer"),
    ("adaptive_asha", {"bracket_rungs": 3}, "searcher.bracket_rungs: must be a list of rung counts"),
    ("adaptive_asha", {"bracket_rungs": [1] * 65}, "searcher.bracket_rungs: at most 64 brackets"),
    ("adaptive_asha", {"mode": "wild"}, "searcher.mode: must be one of aggressive, standard, conservative"),
    ("async_halving", {"max_trials": 0}, "searcher.max_trials: must be >= 1, got 0"),
    ("adaptive_asha", {"max_trials": None}, "searcher.max_trials: required for adaptive_asha"),
    ("async_halving", {"metric": None}, "searcher.metric: required"),
    ("async_halving", {"smaller_is_better": "yes"}, "searcher.smaller_is_better: must be true or false"),
    ("adaptive_asha", {"stop_once": 1}, "searcher.stop_once: must be true or false"),
    ("adaptive_asha", {"max_concurrent_trials": -1}, "searcher.max_concurrent_trials: must be >= 0, got -1"),
]


@pytest.mark.parametrize(("name", "fields", "message"), CASES)
def test_bad_halving_specs_name_the_field(name: str, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        Searcher.new(halving_spec(name, **fields), REGISTRY)
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize("name", ["async_halving", "adaptive_asha"])
def test_defaults_fill_what_the_master_left_out(name: str) -> None:
    section: dict[str, Any] = {
        "name": name,
        "metric": "loss",
        "max_trials": 40,
        "time_metric": "batches",
        "max_time": 1000,
    }
    if name == "async_halving":
        section["num_rungs"] = 3
    searcher = Searcher.new(make_spec(section, HPARAMS), REGISTRY)
    # Stopping mode, divisor 4, 16 trials at once (split 8 + 8 over adaptive_asha's two brackets).
    actions = creates(searcher.initial_actions())
    assert len(actions) == 16
    # Each trial trains to its bracket's bottom rung first: 1000 / 4^2 (three rungs) or 1000 / 4 (two).
    expected = {62} if name == "async_halving" else {62, 250}
    assert {a.target_length for a in actions} == expected
