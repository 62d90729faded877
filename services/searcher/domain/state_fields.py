"""Typed reads of snapshot state, failing with InvalidSnapshot and the field's path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.searcher_plugin.errors import InvalidSnapshot


def read_int(state: Mapping[str, Any], key: str, path: str, *, minimum: int = 0) -> int:
    value = state.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidSnapshot(f"{path}.{key}: must be an integer >= {minimum}, got {value!r}")
    return value


def read_mapping(state: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = state.get(key)
    if not isinstance(value, Mapping):
        raise InvalidSnapshot(f"{path}.{key}: must be an object")
    return value


def read_ids(state: Mapping[str, Any], key: str, path: str) -> list[str]:
    value = state.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidSnapshot(f"{path}.{key}: must be a list of request ids")
    return value
