"""Legacy trial lengths: the `max_length` of the `searcher` section (deprecated in Determined 0.38,
still read for the preview and the trials' lengths)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.errors import InvalidSpec
from cairn.searcher_plugin.fields import as_int

LENGTH_UNITS = ("batches", "records", "epochs")
# A bare-int legacy length names no unit; Determined counts it in batches.
DEFAULT_LENGTH_UNIT = "batches"


@dataclass(frozen=True)
class Length:
    """A legacy `max_length`: how far each trial trains, in `unit`."""

    unit: str
    units: int


def legacy_max_length(searcher: Mapping[str, Any], path: str = "searcher") -> Length | None:
    """`max_length` (deprecated in 0.38): a bare int, or exactly one of {batches|records|epochs: N}."""
    raw = searcher.get("max_length")
    if raw is None:
        return None
    where = f"{path}.max_length"
    if isinstance(raw, Mapping):
        keys = sorted(raw)
        if len(keys) != 1 or keys[0] not in LENGTH_UNITS:
            raise InvalidSpec(
                f"{where}: must be an integer or one of {{batches: N}}, {{records: N}}, {{epochs: N}}"
            )
        unit = keys[0]
        units = as_int(raw[unit], f"{where}.{unit}")
    else:
        unit = DEFAULT_LENGTH_UNIT
        units = as_int(raw, where)
    if units < 0:
        raise InvalidSpec(f"{where}: must be >= 0, got {units}")
    return Length(unit, units)
