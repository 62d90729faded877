"""The client's startup message, as Determined reads it (master/internal/stream/messages.go,
subscription.go): `{"sync_id": "...", "known": {"projects": "1,3-5", ...}, "subscribe":
{"projects": {"workspace_ids": [...], "project_ids": [...], "since": N}, ...}}`. A client sends
one to start and may send another at any time to replace its subscription.

Everything is checked and bounded before anything is read for it: a bad message is refused naming
its field. An absent or null field is empty, as Go's decoder leaves it; a field Determined does
not know is ignored, as Go's decoder ignores it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.streams import keysets
from services.master.domain.streams.entities import BY_NAME, Kind
from services.master.domain.streams.keysets import Interval

# The largest message a client may send (its `known` sets are most of it).
MAX_CLIENT_MESSAGE_BYTES = 1024 * 1024
# Ids in one filter list of a subscription.
MAX_FILTER_IDS = 1000
MAX_SYNC_ID_CHARS = 256


@dataclass(frozen=True)
class Subscription:
    """One kind's subscription: the ids per filter field, and the highest seq the client saw."""

    kind: Kind
    ids: Mapping[str, frozenset[int]]  # message field ("workspace_id") -> ids
    since: int = 0

    @property
    def empty(self) -> bool:
        return not any(self.ids.values())

    def matches(self, fields: Mapping[str, int | None]) -> bool:
        return any(fields.get(name) in ids for name, ids in self.ids.items() if ids)


@dataclass(frozen=True)
class Startup:
    sync_id: str
    known: Mapping[str, list[Interval]] = field(default_factory=dict)  # kind name -> intervals
    subscriptions: tuple[Subscription, ...] = ()


def parse_startup(text: str | bytes) -> Startup:
    if len(text) > MAX_CLIENT_MESSAGE_BYTES:
        raise InvalidArgument(f"startup message: over {MAX_CLIENT_MESSAGE_BYTES} bytes")
    try:
        message = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument("startup message: not JSON") from None
    if not isinstance(message, dict):
        raise InvalidArgument("startup message: a JSON object with sync_id, known and subscribe")
    sync_id = message.get("sync_id")
    if sync_id is None:
        sync_id = ""
    if not isinstance(sync_id, str):
        raise InvalidArgument("sync_id: a string")
    if len(sync_id) > MAX_SYNC_ID_CHARS:
        raise InvalidArgument(f"sync_id: over {MAX_SYNC_ID_CHARS} characters")
    known = _object(message.get("known"), "known")
    known_sets: dict[str, list[Interval]] = {}
    for name, value in known.items():
        if name not in BY_NAME or value is None:
            continue
        if not isinstance(value, str):
            raise InvalidArgument(f"known.{name}: a string of ids and ranges (e.g. 1,3-5)")
        known_sets[name] = keysets.parse(value, f"known.{name}")
    subscribe = _object(message.get("subscribe"), "subscribe")
    subscriptions = tuple(
        _subscription(BY_NAME[name], _object(spec, f"subscribe.{name}"), f"subscribe.{name}")
        for name, spec in subscribe.items()
        if name in BY_NAME and spec is not None
    )
    return Startup(sync_id, known_sets, subscriptions)


def _object(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{name}: a JSON object")
    return value


def _subscription(kind: Kind, spec: dict[str, Any], name: str) -> Subscription:
    ids: dict[str, frozenset[int]] = {}
    for spec_field, message_field in kind.filters.items():
        ids[message_field] = _ids(spec.get(spec_field), f"{name}.{spec_field}")
    since = spec.get("since")
    if since is None:
        since = 0
    if not isinstance(since, int) or isinstance(since, bool) or since < 0:
        raise InvalidArgument(f"{name}.since: a sequence number, 0 or more")
    return Subscription(kind, ids, since)


def _ids(value: Any, name: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise InvalidArgument(f"{name}: a list of ids")
    if len(value) > MAX_FILTER_IDS:
        raise InvalidArgument(f"{name}: more than {MAX_FILTER_IDS} ids")
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool) or not 0 < item <= keysets.MAX_ID:
            # Determined refuses a non-positive id ("invalid workspace id: 0").
            raise InvalidArgument(f"{name}: {item!r} is not an id (a positive integer)")
    return frozenset(value)
