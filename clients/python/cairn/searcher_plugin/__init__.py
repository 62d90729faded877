"""A kit for serving a hyperparameter search method to Cairn over its searcher contract
(cairn.searcher.v1.SearcherService), with nothing but `pip install cairn`.

Write a `Search` (one experiment's search: first actions, actions per event, progress, state as
bytes) and a `SearchFactory` (new searches from a spec, restored ones from a snapshot, optionally a
preview), then:

    from cairn.searcher_plugin import serve
    serve(MyFactory(), "127.0.0.1", 9100, ready_file="ready.json")

The kit does the rest: the session table (ids, sequence numbers, retried starts, locks, restore
from snapshots, falling back to the last snapshot when a search fails), snapshot framing and its
version check, conversion between the contract's messages and the plain values here, the gRPC edge
(errors to status codes), health checking, reflection, a ready file and a clean stop on
SIGTERM/SIGINT. `LimitConcurrency` throttles any method to N trials at once. Cairn's built-in
searcher (random, grid, ASHA, ...) is served by this same kit; examples/custom_searcher/tpe is a
complete plug-in built on it.

Modules: `actions`, `events`, `spec`, `preview` (the plain values), `errors`, `fields` (reading
the spec's fields), `method` (the interface), `snapshot`, `sessions`, `convert`, `servicer`,
`server`, `concurrency`.
"""

from cairn.searcher_plugin.actions import Action, CreateTrial, SetTrialTarget, Shutdown, StopTrial
from cairn.searcher_plugin.concurrency import ConcurrencyLimited, LimitConcurrency
from cairn.searcher_plugin.errors import (
    InvalidArgument,
    InvalidEvent,
    InvalidRequest,
    InvalidSnapshot,
    InvalidSpec,
    SearcherError,
    SeqMismatch,
    SessionExists,
    SessionNotFound,
)
from cairn.searcher_plugin.events import (
    Event,
    ExitReason,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    TrialProgress,
    ValidationCompleted,
)
from cairn.searcher_plugin.method import Search, SearchFactory
from cairn.searcher_plugin.preview import Preview, PreviewedTrial
from cairn.searcher_plugin.server import RunningSearcher, serve, start
from cairn.searcher_plugin.sessions import Answer, SessionTable
from cairn.searcher_plugin.snapshot import Snapshot, canonical_json
from cairn.searcher_plugin.spec import SearchSpec

__all__ = [
    "Action",
    "Answer",
    "ConcurrencyLimited",
    "CreateTrial",
    "Event",
    "ExitReason",
    "InvalidArgument",
    "InvalidEvent",
    "InvalidRequest",
    "InvalidSnapshot",
    "InvalidSpec",
    "LimitConcurrency",
    "Preview",
    "PreviewedTrial",
    "RunningSearcher",
    "Search",
    "SearchFactory",
    "SearchSpec",
    "SearcherError",
    "SeqMismatch",
    "SessionExists",
    "SessionNotFound",
    "SessionTable",
    "SetTrialTarget",
    "Shutdown",
    "Snapshot",
    "StopTrial",
    "TrialCreated",
    "TrialExited",
    "TrialExitedEarly",
    "TrialProgress",
    "ValidationCompleted",
    "canonical_json",
    "serve",
    "start",
]
