"""Configuration fields several methods share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.searcher_plugin.fields import int_field

# Determined's default for every method that has the field.
DEFAULT_MAX_CONCURRENT_TRIALS = 16


def max_concurrent_trials(searcher: Mapping[str, Any], path: str) -> int:
    """0 means unlimited."""
    return int_field(
        searcher, "max_concurrent_trials", path, default=DEFAULT_MAX_CONCURRENT_TRIALS, minimum=0
    )


def initial_count(total: int, concurrency: int) -> int:
    return total if concurrency == 0 else min(total, concurrency)
