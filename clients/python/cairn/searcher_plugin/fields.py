"""Typed reads of the spec's sections, failing with InvalidSpec and the field's dotted path.

Configuration arrives through protobuf Structs, where every number is a float: an integer field
accepts any whole number and yields a Python int.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cairn.searcher_plugin.errors import InvalidSpec

# Integers travel as doubles; beyond this they are no longer exact.
MAX_EXACT_INT = 2**53


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_int(value: Any, path: str) -> int:
    if not is_number(value) or not math.isfinite(value) or float(value) != int(value):
        raise InvalidSpec(f"{path}: must be an integer, got {value!r}")
    result = int(value)
    if abs(result) > MAX_EXACT_INT:
        raise InvalidSpec(f"{path}: must be at most 2**53 in magnitude, got {result}")
    return result


def as_float(value: Any, path: str) -> float:
    if not is_number(value) or not math.isfinite(value):
        raise InvalidSpec(f"{path}: must be a finite number, got {value!r}")
    return float(value)


def required(section: Mapping[str, Any], key: str, path: str, why: str = "") -> Any:
    if section.get(key) is None:
        raise InvalidSpec(f"{path}.{key}: required{why}")
    return section[key]


def int_field(
    section: Mapping[str, Any],
    key: str,
    path: str,
    *,
    default: int | None = None,
    minimum: int | None = None,
    why: str = "",
) -> int:
    raw = section.get(key)
    if raw is None:
        if default is None:
            raise InvalidSpec(f"{path}.{key}: required{why}")
        return default
    value = as_int(raw, f"{path}.{key}")
    if minimum is not None and value < minimum:
        raise InvalidSpec(f"{path}.{key}: must be >= {minimum}, got {value}")
    return value


def optional_int(
    section: Mapping[str, Any], key: str, path: str, *, minimum: int | None = None
) -> int | None:
    if section.get(key) is None:
        return None
    return int_field(section, key, path, minimum=minimum)


def float_field(section: Mapping[str, Any], key: str, path: str) -> float:
    return as_float(required(section, key, path), f"{path}.{key}")


def str_field(section: Mapping[str, Any], key: str, path: str, *, default: str | None = None) -> str:
    raw = section.get(key)
    if raw is None:
        if default is None:
            raise InvalidSpec(f"{path}.{key}: required")
        return default
    if not isinstance(raw, str) or not raw:
        raise InvalidSpec(f"{path}.{key}: must be a non-empty string, got {raw!r}")
    return raw


def bool_field(section: Mapping[str, Any], key: str, path: str, *, default: bool) -> bool:
    raw = section.get(key)
    if raw is None:
        return default
    if not isinstance(raw, bool):
        raise InvalidSpec(f"{path}.{key}: must be true or false, got {raw!r}")
    return raw
