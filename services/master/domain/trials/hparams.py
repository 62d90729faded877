"""Hyperparameter values come back from the searcher as protobuf Struct values, where every number is
a float. Trial code must see them typed as the configuration declares: ints as ints, consts and
categorical choices exactly as written."""

from __future__ import annotations

from typing import Any


def _typed(value: Any, spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec  # a bare value is an implicit const: take it as written
    kind = spec.get("type")
    if kind is None:  # a nested group
        if not isinstance(value, dict):
            return value
        return {key: _typed(value.get(key), sub) for key, sub in spec.items() if key in value}
    if kind == "const":
        return spec.get("val")
    if kind == "int":
        return round(value) if isinstance(value, (int, float)) else value
    if kind in ("double", "log"):
        return float(value) if isinstance(value, (int, float)) else value
    if kind == "categorical":
        for choice in spec.get("vals", []):
            # True == 1 in Python; a bool choice only matches a bool value.
            if choice == value and isinstance(choice, bool) == isinstance(value, bool):
                return choice
        return value
    return value


def typed_hparams(values: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in values.items():
        result[name] = _typed(value, definitions[name]) if name in definitions else value
    return result
