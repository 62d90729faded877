"""Rungs as both halving modes keep them, and their snapshot form.

A rung holds one entry per result, best (smallest signed metric) first. In the snapshot an entry is
`[request_id, metric, promoted]` and a rung `{"units_needed": n, "metrics": [entries]}`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.searcher_plugin.errors import InvalidSnapshot
from services.searcher.domain.state_fields import read_ids


@dataclass
class RungEntry:
    request_id: str
    metric: float
    # Promotion mode: the trial has been sent on to the next rung.
    promoted: bool = False


@dataclass
class Rung:
    units_needed: int
    entries: list[RungEntry] = field(default_factory=list)

    def remove(self, request_id: str) -> None:
        self.entries = [e for e in self.entries if e.request_id != request_id]


def new_rungs(lengths: Sequence[int]) -> list[Rung]:
    return [Rung(length) for length in lengths]


def rungs_to_state(rungs: Sequence[Rung]) -> list[dict[str, Any]]:
    return [
        {
            "units_needed": rung.units_needed,
            "metrics": [[e.request_id, e.metric, e.promoted] for e in rung.entries],
        }
        for rung in rungs
    ]


def _entry(raw: Any, path: str, known: Collection[str]) -> RungEntry:
    if not isinstance(raw, list) or len(raw) != 3:
        raise InvalidSnapshot(f"{path}: must be [request_id, metric, promoted]")
    rid, metric, promoted = raw
    if not isinstance(rid, str) or rid not in known:
        raise InvalidSnapshot(f"{path}: names a trial this search did not create: {rid!r}")
    if not isinstance(metric, (int, float)) or isinstance(metric, bool) or not math.isfinite(metric):
        raise InvalidSnapshot(f"{path}: the metric must be a finite number, got {metric!r}")
    if not isinstance(promoted, bool):
        raise InvalidSnapshot(f"{path}: promoted must be true or false, got {promoted!r}")
    return RungEntry(rid, float(metric), promoted)


def rungs_from_state(
    state: Mapping[str, Any], path: str, lengths: Sequence[int], known: Collection[str]
) -> list[Rung]:
    """The rungs of `state["rungs"]`, which must have exactly the lengths the spec gives."""
    raw = state.get("rungs")
    where = f"{path}.rungs"
    if not isinstance(raw, list) or len(raw) != len(lengths):
        raise InvalidSnapshot(f"{where}: must be a list of {len(lengths)} rungs")
    rungs = []
    for index, (item, length) in enumerate(zip(raw, lengths, strict=True)):
        if not isinstance(item, Mapping) or item.get("units_needed") != length:
            raise InvalidSnapshot(f"{where}[{index}].units_needed: the spec's rung needs {length}")
        entries = item.get("metrics")
        if not isinstance(entries, list):
            raise InvalidSnapshot(f"{where}[{index}].metrics: must be a list")
        rung = Rung(
            length, [_entry(e, f"{where}[{index}].metrics[{i}]", known) for i, e in enumerate(entries)]
        )
        if any(a.metric > b.metric for a, b in zip(rung.entries, rung.entries[1:], strict=False)):
            raise InvalidSnapshot(f"{where}[{index}].metrics: must be sorted best first")
        rungs.append(rung)
    return rungs


def read_id_set(state: Mapping[str, Any], key: str, path: str, known: Collection[str]) -> set[str]:
    ids = read_ids(state, key, path)
    unknown = [rid for rid in ids if rid not in known]
    if unknown:
        raise InvalidSnapshot(f"{path}.{key}: names a trial this search did not create: {unknown[0]!r}")
    return set(ids)


def read_trial_rungs(state: Mapping[str, Any], path: str, num_rungs: int) -> dict[str, int]:
    raw = state.get("trial_rungs")
    if not isinstance(raw, Mapping):
        raise InvalidSnapshot(f"{path}.trial_rungs: must be an object")
    result: dict[str, int] = {}
    for rid, rung in raw.items():
        if not isinstance(rung, int) or isinstance(rung, bool) or not 0 <= rung < num_rungs:
            raise InvalidSnapshot(f"{path}.trial_rungs.{rid}: must be a rung index in [0, {num_rungs})")
        result[rid] = rung
    return result
