"""At most N trials running at once, around any search.

`LimitConcurrency(factory, limit)` serves the searches `factory` builds with their trials throttled:
a search may ask for all of its trials at once, and the wrapper hands the master at most `limit` of
them; the rest wait in a queue, in the order they were asked, and go out one by one as handed-out
trials exit. `limit` 0 means no limit (Determined's `max_concurrent_trials: 0`).

A trial counts as running from the moment its CreateTrial is handed out until its TrialExited
arrives. While anything waits, a Shutdown waits behind it (the search is not over while trials it
asked for have not run). A StopTrial for a trial still waiting drops it from the queue, and the
search is told the trial exited, as the master would have told it after stopping a running one; a
SetTrialTarget for a waiting trial changes the target it will be created with. Events naming a
trial that was never handed out are refused.

The wrapper's state (the limit, the running trials, the queue) goes into the snapshot beside the
search's own bytes, so a restored session holds back exactly what the original did.

Which methods should use it: those whose trials do not depend on one another's results (a fixed
list, a grid, independent random draws). A method that learns from results (TPE, ASHA) should
create a trial only when it can run, as it then knows more: it keeps its own limit.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from cairn.searcher_plugin.actions import Action, CreateTrial, Shutdown, StopTrial
from cairn.searcher_plugin.errors import InvalidEvent, InvalidSnapshot
from cairn.searcher_plugin.events import EVENT_FIELDS, Event, TrialExited
from cairn.searcher_plugin.fields import int_field
from cairn.searcher_plugin.method import Search, SearchFactory
from cairn.searcher_plugin.preview import Preview
from cairn.searcher_plugin.snapshot import Snapshot, canonical_json
from cairn.searcher_plugin.spec import SearchSpec

# Determined's default for `max_concurrent_trials`.
DEFAULT_MAX_CONCURRENT_TRIALS = 16
_STATE = "snapshot.state"

Waiting = CreateTrial | Shutdown


class ConcurrencyLimited(Search):
    def __init__(
        self,
        inner: Search,
        limit: int,
        *,
        running: Iterable[str] = (),
        waiting: Iterable[Waiting] = (),
    ) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0 (0: no limit), got {limit}")
        self.inner = inner
        self.limit = limit
        self.spec = inner.spec
        self.method_name = inner.method_name
        self.running: set[str] = set(running)
        self.waiting: deque[Waiting] = deque(waiting)

    # --- the Search interface ------------------------------------------------------------------

    def initial_actions(self) -> list[Action]:
        return self._take(self.inner.initial_actions())

    def apply(self, event: Event) -> list[Action]:
        rid = event.request_id
        if rid in self._waiting_ids():
            raise InvalidEvent(
                f"event.{EVENT_FIELDS[type(event)]}.request_id: trial '{rid}' is held back by the "
                "concurrency limit and was never handed out"
            )
        actions = self.inner.apply(event)
        if isinstance(event, TrialExited):
            self.running.discard(rid)
        return self._take(actions)

    def progress(self) -> float:
        return self.inner.progress()

    def to_bytes(self) -> bytes:
        return canonical_json(
            {
                "concurrency": {
                    "limit": self.limit,
                    "running": sorted(self.running),
                    "waiting": [_action_state(a) for a in self.waiting],
                },
                "search": base64.b64encode(self.inner.to_bytes()).decode("ascii"),
            }
        )

    # --- holding back and handing out -----------------------------------------------------------

    def _take(self, actions: list[Action]) -> list[Action]:
        """What the master gets of the search's `actions`, in their order, as far as the limit lets."""
        out: list[Action] = []
        for action in actions:
            if isinstance(action, (CreateTrial, Shutdown)):
                self.waiting.append(action)
                out += self._hand_out()
            elif action.request_id not in self._waiting_ids():
                out.append(action)
            elif isinstance(action, StopTrial):
                self.waiting = deque(
                    w
                    for w in self.waiting
                    if not isinstance(w, CreateTrial) or w.request_id != action.request_id
                )
                out += self._take(self.inner.apply(TrialExited(action.request_id)))
            else:
                self.waiting = deque(
                    dataclasses.replace(w, target_length=action.target_length)
                    if isinstance(w, CreateTrial) and w.request_id == action.request_id
                    else w
                    for w in self.waiting
                )
        return out + self._hand_out()

    def _hand_out(self) -> list[Action]:
        out: list[Action] = []
        while self.waiting:
            head = self.waiting[0]
            if isinstance(head, CreateTrial):
                if self.limit and len(self.running) >= self.limit:
                    break
                self.running.add(head.request_id)
            out.append(self.waiting.popleft())
        return out

    def _waiting_ids(self) -> set[str]:
        return {w.request_id for w in self.waiting if isinstance(w, CreateTrial)}


class LimitConcurrency(SearchFactory):
    """The searches of `inner`, with at most `limit` trials running at once. With `limit` None, each
    search's limit is its spec's `searcher.max_concurrent_trials` (`default` when the spec has none;
    0: no limit)."""

    def __init__(
        self, inner: SearchFactory, limit: int | None = None, *, default: int = DEFAULT_MAX_CONCURRENT_TRIALS
    ) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0 (0: no limit), got {limit}")
        self.inner = inner
        self.limit = limit
        self.default = default
        self.snapshot_version = inner.snapshot_version

    def limit_for(self, spec: SearchSpec) -> int:
        if self.limit is not None:
            return self.limit
        return int_field(spec.searcher, "max_concurrent_trials", "searcher", default=self.default, minimum=0)

    def create(self, spec: SearchSpec) -> ConcurrencyLimited:
        limit = self.limit_for(spec)
        return ConcurrencyLimited(self.inner.create(spec), limit)

    def restore(self, snapshot: Snapshot) -> ConcurrencyLimited:
        try:
            state = json.loads(snapshot.state)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidSnapshot(f"{_STATE}: not a concurrency-limited search ({exc})") from None
        if not isinstance(state, dict):
            raise InvalidSnapshot(f"{_STATE}: not a concurrency-limited search (expected a JSON object)")
        own = _mapping(state.get("concurrency"), f"{_STATE}.concurrency")
        limit = own.get("limit")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise InvalidSnapshot(f"{_STATE}.concurrency.limit: must be an integer >= 0, got {limit!r}")
        running = own.get("running")
        if not isinstance(running, list) or not all(isinstance(rid, str) for rid in running):
            raise InvalidSnapshot(f"{_STATE}.concurrency.running: must be a list of request ids")
        raw_waiting = own.get("waiting")
        if not isinstance(raw_waiting, list):
            raise InvalidSnapshot(f"{_STATE}.concurrency.waiting: must be a list of actions")
        waiting = [
            _read_action(raw, f"{_STATE}.concurrency.waiting[{index}]")
            for index, raw in enumerate(raw_waiting)
        ]
        search = state.get("search")
        try:
            if not isinstance(search, str):
                raise ValueError(search)
            inner_state = base64.b64decode(search, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidSnapshot(f"{_STATE}.search: must be the search's state in base64") from None
        inner = self.inner.restore(dataclasses.replace(snapshot, state=inner_state))
        return ConcurrencyLimited(inner, limit, running=running, waiting=waiting)

    def preview(self, spec: SearchSpec) -> Preview:
        # The same trials, whatever the order they run in.
        return self.inner.preview(spec)


def _action_state(action: Waiting) -> dict[str, Any]:
    if isinstance(action, CreateTrial):
        return {"create": dataclasses.asdict(action)}
    return {"shutdown": dataclasses.asdict(action)}


def _mapping(raw: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InvalidSnapshot(f"{path}: must be an object")
    return raw


def _read_action(raw: Any, path: str) -> Waiting:
    action = _mapping(raw, path)
    try:
        if set(action) == {"create"}:
            fields = _mapping(action["create"], f"{path}.create")
            create = CreateTrial(**fields)
            if (
                not isinstance(create.request_id, str)
                or not isinstance(create.hparams, dict)
                or not all(_is_int(n) for n in (create.trial_seed, create.target_length))
            ):
                raise TypeError("request_id, hparams, trial_seed and target_length")
            return create
        if set(action) == {"shutdown"}:
            shutdown = Shutdown(**_mapping(action["shutdown"], f"{path}.shutdown"))
            if not isinstance(shutdown.cancel, bool) or not isinstance(shutdown.failure, bool):
                raise TypeError("cancel and failure")
            return shutdown
    except TypeError as exc:
        raise InvalidSnapshot(f"{path}: not an action this wrapper holds back ({exc})") from None
    raise InvalidSnapshot(f"{path}: must be {{create: ...}} or {{shutdown: ...}}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
