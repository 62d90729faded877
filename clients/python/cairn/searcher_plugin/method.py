"""The interface a search method implements to be served by the kit.

A method author writes two classes:

- a `Search`: one experiment's search in progress. It answers its first actions, then the actions
  for each event the master sends, says how far along it is, and gives its whole state as bytes.
  It is driven one event at a time (the session table holds its lock), so it needs no locking.
- a `SearchFactory`: builds searches, new ones from a spec and restored ones from the state bytes
  of a snapshot, and optionally previews a spec.

Everything else (sessions, sequence numbers, retried starts, snapshots and their checks, the gRPC
edge, health, reflection, signals) is the kit's. The contract the kit relies on:

- Determinism: a search restored from `to_bytes()` and fed the same events gives the same answers
  as the original did (the master restores sessions from snapshots after any restart). Draw
  anything random from a generator whose state is in the bytes.
- Refusals: an event or spec the search cannot use raises InvalidEvent / InvalidSpec (from
  cairn.searcher_plugin.errors) naming the field, before changing anything. Any other exception
  is a bug: the session falls back to its last snapshot and the caller gets the error.
- Request ids are unique within a search, and a search ends with exactly one Shutdown once every
  trial it created has exited and it wants no more.
"""

from __future__ import annotations

import abc

from cairn.searcher_plugin.actions import Action, CreateTrial
from cairn.searcher_plugin.events import Event
from cairn.searcher_plugin.preview import Preview, PreviewedTrial
from cairn.searcher_plugin.snapshot import Snapshot
from cairn.searcher_plugin.spec import SearchSpec


class Search(abc.ABC):
    # The spec this search runs; after a restore, the one its state holds.
    spec: SearchSpec
    # The snapshot's `method` field: the name the state is of ("tpe", "random", ...).
    method_name: str

    @abc.abstractmethod
    def initial_actions(self) -> list[Action]:
        """The first trials to create, asked once, right after the search is built from its spec."""

    @abc.abstractmethod
    def apply(self, event: Event) -> list[Action]:
        """The actions one event calls for (often none)."""

    @abc.abstractmethod
    def progress(self) -> float:
        """How far the search is, in [0, 1]."""

    @abc.abstractmethod
    def to_bytes(self) -> bytes:
        """The whole state, for `SearchFactory.restore` to read back. Equal states should give equal
        bytes (the master compares nothing, but tests of determinism do)."""


class SearchFactory(abc.ABC):
    # The snapshot format the searches' bytes are in; a snapshot of another version is refused
    # before `restore` sees it. Bump it when the bytes change, and read the old ones if you can.
    snapshot_version: int = 1

    @abc.abstractmethod
    def create(self, spec: SearchSpec) -> Search:
        """A new search for `spec`; InvalidSpec naming the field when it cannot run it."""

    @abc.abstractmethod
    def restore(self, snapshot: Snapshot) -> Search:
        """The search `snapshot.state` holds (at `snapshot.seq`, of `snapshot.method`, in format
        `snapshot_version`); InvalidSnapshot naming the field when it could not have written it."""

    def preview(self, spec: SearchSpec) -> Preview:
        """The trials `spec` would create. By default: the first trials of a new search, with no
        lengths; a method that knows more (how far each trial trains, later trials that depend on no
        result) says so by overriding this."""
        first = self.create(spec).initial_actions()
        return Preview([PreviewedTrial(a.request_id, a.hparams) for a in first if isinstance(a, CreateTrial)])
