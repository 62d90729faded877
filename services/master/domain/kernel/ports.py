"""What the master's domain needs from the other services, as protocols: the gRPC clients in
remotes/ implement them for a running cluster, and the domain's in-process tests implement them with
the scheduler's and searcher's own domain code. So domain code imports no gRPC, and its tests need
no other process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from google.protobuf import struct_pb2

from cairn.checkpoint.v1 import checkpoint_pb2 as cpb
from cairn.scheduler.v1 import scheduler_pb2 as schpb
from cairn.searcher.v1 import searcher_pb2 as spb


class Scheduler(Protocol):
    """Placement decisions (SchedulerService). Raises DomainError when it cannot be asked."""

    def schedule(self, request: schpb.ScheduleRequest) -> schpb.ScheduleResponse: ...

    def schedule_changes(self, request: schpb.ScheduleChangesRequest) -> schpb.ScheduleChangesResponse:
        """A pass over the scheduler's session (scheduling_view.py); NotImplementedError from a
        scheduler that predates sessions."""
        ...

    def predict_starts(self, request: schpb.PredictStartsRequest) -> schpb.PredictStartsResponse:
        """When each waiting request is expected to start (scheduling/start_forecast.py)."""
        ...


class Searcher(Protocol):
    """One searcher's sessions (SearcherService). Raises NotFound / FailedPrecondition /
    InvalidArgument / Unavailable as the service answers."""

    # Whether a session restored from a stored state and sent the same events again answers as it
    # did: then its state need only be stored every so often (searcher_pump.py). Cairn's own
    # searcher's sessions do; a user's own searcher promises nothing.
    replays_exactly: bool

    def start(self, session_id: str, spec: spb.SearchSpec) -> spb.SearcherResponse: ...

    def handle(
        self, session_id: str, after_seq: int, event: spb.SearcherEvent, state_needed: bool = True
    ) -> spb.SearcherResponse: ...

    def handle_many(
        self, session_id: str, after_seq: int, events: Sequence[spb.SearcherEvent], state_needed: bool = True
    ) -> spb.SearcherResponse:
        """`events` in order as one answer, whose snapshot's seq says how many were applied (a
        searcher without batches takes only the first). Without `state_needed` the snapshot may
        carry no state (the searcher's sessions must then be deterministic: searcher_pump.py)."""
        ...

    def restore(self, session_id: str, spec: spb.SearchSpec, snapshot: spb.Snapshot) -> None: ...

    def close(self, session_id: str) -> None: ...

    def preview(self, spec: spb.SearchSpec) -> spb.PreviewSearchResponse: ...


class Searchers(Protocol):
    """Which searcher runs an experiment's search (the built-in one, a custom one, a plug-in)."""

    def for_config(self, config: Mapping[str, Any]) -> Searcher: ...


class CheckpointService(Protocol):
    """Checkpoint files in storage (CheckpointService): deletion and garbage collection."""

    def collect_garbage(self, request: cpb.CollectGarbageRequest) -> cpb.CollectGarbageResponse: ...

    def delete(
        self, storage: dict[str, Any], uuids: list[str], globs: list[str] | None = None
    ) -> cpb.DeleteResponse: ...

    def list_files(self, storage: dict[str, Any], uuid: str) -> cpb.ListFilesResponse: ...


def storage_struct(storage: Mapping[str, Any]) -> struct_pb2.Struct:
    """A checkpoint_storage section as the checkpoint service's contract carries it."""
    result = struct_pb2.Struct()
    result.update(dict(storage))
    return result
