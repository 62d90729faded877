"""Checking an experiment configuration: every problem at once, each naming its field."""

from __future__ import annotations

import copy
from typing import Any

from jsonschema import Draft7Validator

from services.master.domain.config.checks import cross_field_problems
from services.master.domain.config.messages import Problem, describe
from services.master.domain.config.schema import EXPERIMENT_SCHEMA
from services.master.domain.config.schema_walk import SchemaWalker, drop_nulls

SCHEMA_WALKER = SchemaWalker(EXPERIMENT_SCHEMA)
_VALIDATOR = Draft7Validator(EXPERIMENT_SCHEMA)


def normalized(raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of `raw` in which `field: null` on a typed field reads as the field not being given."""
    config = copy.deepcopy(raw)
    drop_nulls(SCHEMA_WALKER, config)
    return config


def report(problems: list[Problem]) -> list[str]:
    """The messages of `problems`, sorted by field path; a value of the wrong type gets that one."""
    wrong_type_paths = {p.path for p in problems if p.wrong_type}
    kept = {p for p in problems if p.wrong_type or p.path not in wrong_type_paths}
    return [p.render() for p in sorted(kept, key=lambda p: (p.path, p.text))]


def problems_of_normalized(config: dict[str, Any]) -> list[str]:
    problems = [found for error in _VALIDATOR.iter_errors(config) for found in describe(error)]
    problems.extend(cross_field_problems(config))
    return report(problems)


def validate_config(raw: dict[str, Any]) -> list[str]:
    """The problems of `raw`, sorted by field path; empty when it is a valid configuration."""
    if not isinstance(raw, dict):
        return ["config: must be a mapping"]
    return problems_of_normalized(normalized(raw))
