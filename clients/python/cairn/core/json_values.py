"""What training code reports (metrics, checkpoint metadata) made into plain JSON values.

numpy and torch scalars are recognised by their `.item()` method, so neither library is imported.
JSON has no NaN or infinity: they become the strings the master stores for them ("NaN",
"Infinity", "-Infinity"), which also keeps protobuf's JSON conversion on the master from failing.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2

JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


def _scalar_of(value: Any, where: str) -> Any:
    """The Python number inside a numpy/torch scalar (or one-element tensor)."""
    try:
        return value.item()
    except (ValueError, RuntimeError, TypeError) as exc:
        raise TypeError(
            f"{where}: {type(value).__name__} is not a single number ({exc}); report scalars, "
            "e.g. loss.item() or array.mean()"
        ) from None


def finite_or_name(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def plain_value(value: Any, where: str) -> JsonValue:
    """`value` as JSON: numbers, strings, bools and None, in lists and string-keyed dicts."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return finite_or_name(float(value))
    if isinstance(value, Mapping):
        return plain_mapping(value, where)
    if isinstance(value, (list, tuple)):
        return [plain_value(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if callable(getattr(value, "item", None)):
        scalar = _scalar_of(value, where)
        if isinstance(scalar, (bool, int, float)):
            return plain_value(scalar, where)
        raise TypeError(f"{where}: {type(value).__name__} holds a {type(scalar).__name__}, not a number")
    raise TypeError(
        f"{where}: unsupported value of type {type(value).__name__}; report numbers, strings or bools "
        "(nested in lists and dicts if needed)"
    )


def plain_mapping(values: Mapping[Any, Any], where: str) -> dict[str, JsonValue]:
    if not isinstance(values, Mapping):
        raise TypeError(f"{where}: must be a dict, not {type(values).__name__}")
    plain: dict[str, JsonValue] = {}
    for key, value in values.items():
        if type(key) is not str and not isinstance(key, str):
            raise TypeError(f"{where}: keys must be strings, not {type(key).__name__} ({key!r})")
        kind = type(value)
        # The common case first, without building the error path a bad value would need.
        if kind is float:
            plain[key] = value if math.isfinite(value) else finite_or_name(value)
        elif kind is int or kind is str or kind is bool or value is None:
            plain[key] = value
        else:
            plain[key] = plain_value(value, f"{where}[{key!r}]")
    return plain


def plain_count(value: Any, where: str) -> int:
    """A non-negative whole number (steps, lengths), numpy integers included."""
    if not isinstance(value, (int, float)) and callable(getattr(value, "item", None)):
        value = _scalar_of(value, where)
    if isinstance(value, bool):
        raise TypeError(f"{where}: must be an integer, not a bool")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{where}: must be an integer, not {type(value).__name__} ({value!r})") from None
    if number < 0:
        raise ValueError(f"{where}: must be >= 0, not {number}")
    return number


def plain_number(value: Any, where: str) -> float:
    """A real number (a searcher metric), numpy/torch scalars included."""
    if not isinstance(value, (int, float)) and callable(getattr(value, "item", None)):
        value = _scalar_of(value, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{where}: must be a number, not {type(value).__name__} ({value!r})")
    return float(value)


def to_struct(values: Mapping[str, JsonValue]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def _restore_integers(value: Any) -> Any:
    # A protobuf Struct holds every number as a double; whole numbers were ints when reported
    # (steps_completed above all), and training code expects ints back.
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _restore_integers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_restore_integers(item) for item in value]
    return value


def from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    return dict(_restore_integers(json_format.MessageToDict(struct)))
