"""Snapshots: a searcher's whole state as JSON bytes, and back.

The bytes hold the method name, the format version, the spec the search was started with, the
generator state, the shared bookkeeping and the method's own state. They are canonical (sorted
keys, no spaces), so equal states give equal bytes. Restoring the bytes and applying the same
events gives the same answers the original search gave.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from services.searcher.domain.errors import InvalidSnapshot
from services.searcher.domain.registry import MethodRegistry
from services.searcher.domain.searcher import Searcher

# Bump when the state layout changes, and teach `decode` to read the previous one.
SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class Snapshot:
    seq: int
    state: bytes
    method: str
    version: int


def encode(searcher: Searcher, seq: int) -> Snapshot:
    state = {"version": SNAPSHOT_VERSION, **searcher.to_state()}
    data = json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    return Snapshot(seq=seq, state=data, method=searcher.method_name, version=SNAPSHOT_VERSION)


def decode(snapshot: Snapshot, registry: MethodRegistry) -> Searcher:
    if snapshot.seq < 0:
        raise InvalidSnapshot(f"snapshot.seq: must be >= 0, got {snapshot.seq}")
    if snapshot.version != SNAPSHOT_VERSION:
        raise InvalidSnapshot(
            f"snapshot.version: unsupported snapshot format {snapshot.version} "
            f"(this searcher reads {SNAPSHOT_VERSION})"
        )
    try:
        state = json.loads(snapshot.state)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidSnapshot(f"snapshot.state: not a searcher snapshot ({exc})") from None
    if not isinstance(state, dict):
        raise InvalidSnapshot("snapshot.state: not a searcher snapshot (expected a JSON object)")
    if state.get("version") != snapshot.version:
        raise InvalidSnapshot(
            f"snapshot.version: {snapshot.version}, but the state says {state.get('version')!r}"
        )
    if state.get("method") != snapshot.method:
        raise InvalidSnapshot(
            f"snapshot.method: '{snapshot.method}', but the state is of '{state.get('method')}'"
        )
    return Searcher.from_state(state, registry)
