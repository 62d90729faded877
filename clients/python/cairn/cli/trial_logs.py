"""Reading a trial's logs from the TrialLogs server stream: all, the last N, and following."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from cairn.api.v1 import common_pb2, trial_pb2
from cairn.client.errors import rpc_error_message, rpc_status_code
from cairn.client.session import Session


def log_text(entry: trial_pb2.TrialLogsResponse) -> str:
    """The line as printed; a line a launcher tagged with its rank keeps the tag in front."""
    text = entry.log if entry.HasField("log") else entry.message
    text = text.rstrip("\r\n")
    if entry.HasField("rank_id"):
        return f"[rank={entry.rank_id}] {text}"
    return text


def _just_before(ts: Timestamp) -> Timestamp:
    # timestamp_after may be exclusive or not; start a microsecond early and drop lines seen.
    nanos = ts.seconds * 1_000_000_000 + ts.nanos - 1_000
    return Timestamp(seconds=nanos // 1_000_000_000, nanos=nanos % 1_000_000_000)


def trial_log_entries(
    session: Session,
    trial_id: int,
    *,
    follow: bool,
    tail: int | None,
    ranks: tuple[int, ...] = (),
) -> Iterator[trial_pb2.TrialLogsResponse]:
    """Entries in order: the whole log (or its last `tail` lines), then new ones while the trial
    runs when `follow` is set; only the lines of `ranks` when given."""
    if not tail:
        yield from session.api.TrialLogs(
            trial_pb2.TrialLogsRequest(trial_id=trial_id, follow=follow, rank_ids=ranks)
        )
        return
    newest_first = list(
        session.api.TrialLogs(
            trial_pb2.TrialLogsRequest(
                trial_id=trial_id, limit=tail, order_by=common_pb2.ORDER_BY_DESC, rank_ids=ranks
            )
        )
    )
    last_lines = newest_first[:tail][::-1]
    yield from last_lines
    if not follow:
        return
    request = trial_pb2.TrialLogsRequest(trial_id=trial_id, follow=True, rank_ids=ranks)
    if last_lines:
        request.timestamp_after.CopyFrom(_just_before(last_lines[-1].timestamp))
    seen = {entry.id for entry in last_lines if entry.id}
    for entry in session.api.TrialLogs(request):
        if entry.id and entry.id in seen:
            continue
        yield entry


class TrialLogFollower:
    """Streams one trial's logs on a background thread (for `experiment create --follow --logs`)."""

    def __init__(
        self, session: Session, trial_id: int, emit: Callable[[str], None], report: Callable[[str], None]
    ) -> None:
        self._session = session
        self.trial_id = trial_id
        self._emit = emit
        self._report = report
        self._call: Any = None
        self._lock = threading.Lock()
        self._cancelled = False
        self._thread = threading.Thread(target=self._run, name=f"trial-{trial_id}-logs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._call = self._session.api.TrialLogs(
                trial_pb2.TrialLogsRequest(trial_id=self.trial_id, follow=True)
            )
        try:
            for entry in self._call:
                self._emit(log_text(entry))
        except grpc.RpcError as exc:
            if rpc_status_code(exc) != grpc.StatusCode.CANCELLED:
                self._report(
                    f"logs of trial {self.trial_id}: {rpc_error_message(exc, self._session.master.target)}"
                )

    def finish(self, wait_s: float) -> None:
        """Let the stream end by itself (the master ends it once the trial has ended), then cancel."""
        self._thread.join(timeout=wait_s)
        with self._lock:
            self._cancelled = True
            if self._call is not None:
                self._call.cancel()
        self._thread.join(timeout=2.0)
