"""Snapshots: the frame around a search's state bytes, as the master stores and hands them back.

The frame says after how many events the state was taken (`seq`), which method it is of, and in
which format (`version`); the bytes are the method's own. The kit checks the frame before a method
reads the bytes: a snapshot of a format the searcher does not read is refused naming both versions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.errors import InvalidSnapshot


@dataclass(frozen=True)
class Snapshot:
    seq: int
    state: bytes
    method: str
    version: int


def check_frame(snapshot: Snapshot, version: int) -> None:
    """Refuse a frame no search of format `version` could have been given."""
    if snapshot.seq < 0:
        raise InvalidSnapshot(f"snapshot.seq: must be >= 0, got {snapshot.seq}")
    if snapshot.version != version:
        raise InvalidSnapshot(
            f"snapshot.version: unsupported snapshot format {snapshot.version} "
            f"(this searcher reads {version})"
        )


def canonical_json(value: Any) -> bytes:
    """JSON with sorted keys and no spaces, so that equal states give equal bytes; NaN and infinity
    are refused (ValueError), since JSON cannot hold them."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
