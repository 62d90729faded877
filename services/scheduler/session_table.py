"""The scheduler's sessions (ScheduleChanges): one per master that asks, kept between calls.

A session is a cache of the master's state (domain/session.py), so losing one costs the master a
snapshot, never a wrong decision: the table keeps a few (masters come and go, a standby may take
over) and forgets the least recently used; a session whose changes contradict it is dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.scheduler.convert import answer_to_proto, changes_from_proto, snapshot_from_proto
from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.session import SchedulingSession

# Masters that may hold a session at once: the leader, a standby that just took over, a restart.
MAX_SESSIONS = 4


@dataclass
class _Held:
    version: int
    session: SchedulingSession


class SessionTable:
    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._max = max_sessions
        self._sessions: OrderedDict[str, _Held] = OrderedDict()
        # Passes of one session must not interleave, and a pass is a few milliseconds: one lock.
        self._lock = threading.Lock()

    def held(self, session_id: str) -> tuple[int, SchedulingSession] | None:
        """The session `session_id` and its version, if held."""
        with self._lock:
            found = self._sessions.get(session_id)
            return (found.version, found.session) if found is not None else None

    def handle(self, request: pb.ScheduleChangesRequest) -> pb.ScheduleChangesResponse:
        """Apply the changes and decide. InvalidScheduleInput (naming the field) when they
        contradict the session's state; the session is then gone."""
        if not request.session_id:
            raise InvalidScheduleInput("session_id", "must not be empty")
        with self._lock:
            if request.snapshot:
                self._sessions.pop(request.session_id, None)
                held = _Held(request.version, SchedulingSession(snapshot_from_proto(request)))
                self._sessions[request.session_id] = held
                while len(self._sessions) > self._max:
                    self._sessions.popitem(last=False)
            else:
                found = self._sessions.get(request.session_id)
                if found is None or found.version != request.base_version:
                    return pb.ScheduleChangesResponse(applied=False)
                held = found
                try:
                    held.session.apply(changes_from_proto(request))
                except InvalidScheduleInput:
                    del self._sessions[request.session_id]
                    raise
                held.version = request.version
            self._sessions.move_to_end(request.session_id)
            answer = held.session.decide()
            if request.keep_assignments:
                held.session.keep(answer.assignments)
            return pb.ScheduleChangesResponse(
                applied=True,
                decision=answer_to_proto(answer),
                assignments_kept=request.keep_assignments,
            )
