"""experiments-search's conditions on a hyperparameter (LOCATION_TYPE_HYPERPARAMETERS), as
Determined's hpToSQL reads them: over the experiment's configured hyperparameter (its
`config.hyperparameters` entry), not over any trial's value.

- A number compared (`=`, `!=`, `<`, `<=`, `>`, `>=`): a const's value, or either end of an int,
  double or log range (Determined's `minval op v OR maxval op v`); a categorical never matches.
- A number `contains`: a range holding it (minval <= v <= maxval; Determined writes OR there, which
  holds for nearly every range, so Cairn reads the evident intent); a categorical of numbers never
  holds one, as in Determined (its test is for a string element). `notContains`: the opposite.
- Text (or a boolean): a const's value compared; `contains` is a const's value holding it as a
  substring, or a categorical listing it; `notContains` the opposite.
- `isEmpty` / `notEmpty`: whether the experiment configures the hyperparameter at all.

Every value is read by its JSON type (json_values.py), so a const of another type is no match."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, String, and_, cast, false, not_, or_

from services.master.domain.reads.json_values import (
    json_number,
    json_present,
    json_text,
    json_value,
    operand,
)
from services.master.store import models

RANGES = ("int", "double", "log")
_COMPARE: dict[str, Callable[[Any, Any], ColumnElement[bool]]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def hp_spec_clause(path: tuple[str, ...], operator: str, value: Any, dialect: str) -> ColumnElement[bool]:
    """The condition on hyperparameter `path` of models.Experiment's config."""
    config = models.Experiment.config
    spec = ("hyperparameters", *path)
    if operator in ("isEmpty", "notEmpty"):
        present = json_present(config, spec, dialect)
        return not_(present) if operator == "isEmpty" else present
    kind = json_text(config, (*spec, "type"), dialect)
    const_value = json_value(config, (*spec, "val"), dialect, value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        minval = json_number(config, (*spec, "minval"), dialect)
        maxval = json_number(config, (*spec, "maxval"), dialect)
        is_range = kind.in_(RANGES)
        if operator == "contains":
            return and_(is_range, minval <= value, maxval >= value)
        if operator == "notContains":
            return or_(kind == "categorical", and_(is_range, or_(minval > value, maxval < value)))
        compare = _COMPARE[operator]
        return or_(
            and_(kind == "const", compare(const_value, value)),
            and_(is_range, or_(compare(minval, value), compare(maxval, value))),
        )
    if operator in ("contains", "notContains"):
        text = str(operand(value))
        in_const = and_(kind == "const", cast(const_value, String).contains(text, autoescape=True))
        # A categorical lists it: its vals' JSON text holds the value's JSON encoding.
        vals = cast(config[(*spec, "vals")], String)
        in_categorical = and_(kind == "categorical", vals.contains(json.dumps(value), autoescape=True))
        holds = or_(in_const, in_categorical)
        if operator == "contains":
            return holds
        return and_(kind.in_(("const", "categorical")), not_(holds))
    if operator not in _COMPARE:
        return false()
    return and_(kind == "const", _COMPARE[operator](const_value, operand(value)))
