"""The built-in searcher's snapshot state: its whole state as JSON bytes, and back.

The bytes hold the method name, the format version, the spec the search was started with, the
generator state, the shared bookkeeping and the method's own state. They are canonical (sorted
keys, no spaces), so equal states give equal bytes. Restoring the bytes and applying the same
events gives the same answers the original search gave. The frame around them (seq, method,
version) is the plug-in kit's (cairn.searcher_plugin.snapshot), which checks the version first.
"""

from __future__ import annotations

import json
from typing import Any

from cairn.searcher_plugin.errors import InvalidSnapshot
from cairn.searcher_plugin.snapshot import Snapshot, canonical_json

# Bump when the state layout changes, and teach `read_state` to read the previous one.
SNAPSHOT_VERSION = 1


def state_bytes(state: dict[str, Any]) -> bytes:
    return canonical_json({"version": SNAPSHOT_VERSION, **state})


def read_state(snapshot: Snapshot) -> dict[str, Any]:
    """The state a snapshot holds, checked against its frame (the searcher reads the rest)."""
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
    return state
