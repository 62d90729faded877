"""Typed reads of spec values, failing with the field's dotted path.

Specs arrive through protobuf Structs, where every number is a double: an integer field accepts any
whole number and yields an int; booleans are never numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .errors import InvalidArgument

# Integers travel as doubles; beyond this they are no longer exact.
MAX_EXACT_INT = 2**53


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_int(value: Any, path: str) -> int:
    if not is_number(value) or not math.isfinite(value) or float(value) != int(value):
        raise InvalidArgument(f"{path}: must be an integer, got {value!r}")
    if abs(value) > MAX_EXACT_INT:
        raise InvalidArgument(f"{path}: must be at most 2**53 in magnitude, got {value!r}")
    return int(value)


def as_float(value: Any, path: str) -> float:
    if not is_number(value) or not math.isfinite(value):
        raise InvalidArgument(f"{path}: must be a finite number, got {value!r}")
    return float(value)


def required(section: Mapping[str, Any], key: str, path: str) -> Any:
    if section.get(key) is None:
        raise InvalidArgument(f"{path}.{key}: required")
    return section[key]


def int_field(section: Mapping[str, Any], key: str, path: str, *, default: int | None, minimum: int) -> int:
    """`default` None makes the field required."""
    if section.get(key) is None and default is not None:
        return default
    value = as_int(required(section, key, path), f"{path}.{key}")
    if value < minimum:
        raise InvalidArgument(f"{path}.{key}: must be >= {minimum}, got {value}")
    return value


def bool_field(section: Mapping[str, Any], key: str, path: str, *, default: bool) -> bool:
    value = section.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidArgument(f"{path}.{key}: must be true or false, got {value!r}")
    return value
