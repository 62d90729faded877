"""The table of live search sessions, one per experiment, held in memory.

Every event names the sequence number of the snapshot it follows; a session applies it only at
that number and then counts one up, so a caller that missed an answer (or a searcher that restarted
empty) is told instead of silently diverging: NOT_FOUND sends the caller to RestoreSession, and
FAILED_PRECONDITION names both numbers. A start retried with the same spec before any event gets
the same answer again (a search is deterministic in its spec); any other start on a live id is
refused.

A batch of events (HandleEvents) is applied in order as one answer, all or nothing, and counts
one up per event. Every answer carries a snapshot of the session after it. If a search raises
while applying an event, the session goes back to its last snapshot, so a refused or failed event
changes nothing.

A caller that will not store an answer's state says so (`state_needed=False`; the master does for
its built-in searcher, whose sessions are deterministic in their state and events): the answer's
snapshot then carries no state, and the search is not serialized for it (a search of 10,000 trials
is a megabyte). Such a session falls back, after a failed event, to its last serialized state and
the events applied since, applied again; after MAX_UNSERIALIZED events it is serialized anyway.

Locking: one lock per session serializes its events; the table's lock is only held to find, add or
remove a session, never while a search runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from cairn.searcher_plugin.actions import Action, CreateTrial
from cairn.searcher_plugin.errors import (
    InvalidEvent,
    InvalidRequest,
    SeqMismatch,
    SessionExists,
    SessionNotFound,
)
from cairn.searcher_plugin.events import Event
from cairn.searcher_plugin.method import Search, SearchFactory
from cairn.searcher_plugin.snapshot import Snapshot, check_frame
from cairn.searcher_plugin.spec import SearchSpec

log = logging.getLogger(__name__)

# A session replaced or closed while an event waited for its lock is looked up again this often.
_LOOKUP_ATTEMPTS = 3
# Events a session applies without serializing its search before it does anyway: what a failed
# event's fall-back applies again, at most.
MAX_UNSERIALIZED = 10_000


@dataclass(frozen=True)
class Answer:
    actions: list[Action]
    snapshot: Snapshot
    progress: float


@dataclass
class Session:
    session_id: str
    search: Search
    # The last snapshot handed out: its seq is the session's.
    snapshot: Snapshot
    # The last serialized one, and the events applied since (answers without their state): what the
    # session falls back to if applying an event fails midway.
    base: Snapshot
    since: list[Event] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set once the session left the table (closed or replaced by a restore).
    retired: bool = False

    @property
    def seq(self) -> int:
        return self.snapshot.seq


def _check_id(session_id: str) -> None:
    if not session_id:
        raise InvalidRequest("session_id: required")


class SessionTable:
    def __init__(self, factory: SearchFactory) -> None:
        self.factory = factory
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._sessions

    # --- operations ----------------------------------------------------------------------------

    def start(self, session_id: str, spec: SearchSpec) -> Answer:
        """Open a session and answer its first trials."""
        _check_id(session_id)
        search = self.factory.create(spec)
        actions = search.initial_actions()
        snapshot = self._snapshot(search, 0)
        answer = Answer(actions, snapshot, search.progress())
        with self._lock:
            existing = self._sessions.get(session_id)
            if existing is None:
                self._sessions[session_id] = Session(session_id, search, snapshot, snapshot)
                log.info(
                    "search session started session_id=%s method=%s trials=%d",
                    session_id,
                    search.method_name,
                    sum(1 for a in actions if isinstance(a, CreateTrial)),
                )
                return answer
        with existing.lock:
            if (
                not existing.retired
                and existing.seq == 0
                and existing.search.spec.canonical() == spec.canonical()
            ):
                log.info("search session start retried session_id=%s", session_id)
                return answer
            raise SessionExists(
                f"search session '{session_id}' already exists (at seq {existing.seq}); a start can only be "
                "retried with the same spec before any event"
            )

    def handle(self, session_id: str, after_seq: int, event: Event, state_needed: bool = True) -> Answer:
        return self.handle_many(session_id, after_seq, [event], state_needed)

    def handle_many(
        self, session_id: str, after_seq: int, events: Sequence[Event], state_needed: bool = True
    ) -> Answer:
        """Apply `events` in order as one answer: their actions in order, one snapshot after the last
        (seq advanced by one per event; without its state unless `state_needed`). A refused event
        refuses them all: the session is left as it was, and the error names the event's index when
        there are several."""
        _check_id(session_id)
        if not events:
            raise InvalidEvent("events: at least one event is needed")
        for _ in range(_LOOKUP_ATTEMPTS):
            session = self._find(session_id)
            with session.lock:
                if session.retired:
                    continue
                if after_seq != session.seq:
                    raise SeqMismatch(
                        f"search session '{session_id}' is at seq {session.seq}, but the event follows seq "
                        f"{after_seq}; restore the session from the snapshot at seq {after_seq}"
                    )
                return self._apply(session, events, state_needed)
        raise SessionNotFound(f"search session '{session_id}' was closed or replaced while the event waited")

    def _apply(self, session: Session, events: Sequence[Event], state_needed: bool) -> Answer:
        actions: list[Action] = []
        applied = 0
        try:
            for event in events:
                actions.extend(session.search.apply(event))
                applied += 1
        except InvalidEvent as exc:
            self._fall_back(session)
            if len(events) > 1:
                raise InvalidEvent(f"events[{applied}]: {exc}") from None
            raise
        except Exception:
            # Refused events leave the search untouched; anything else may have changed it halfway.
            # Either way the session goes back to its last snapshot, so a batch is all or nothing.
            self._fall_back(session)
            raise
        seq = session.seq + len(events)
        if state_needed or len(session.since) + len(events) > MAX_UNSERIALIZED:
            session.snapshot = session.base = self._snapshot(session.search, seq)
            session.since = []
        else:
            session.snapshot = Snapshot(
                seq=seq, state=b"", method=session.search.method_name, version=self.factory.snapshot_version
            )
            session.since.extend(events)
        log.debug(
            "search events applied session_id=%s seq=%d events=%d first_kind=%s actions=%d",
            session.session_id,
            session.seq,
            len(events),
            type(events[0]).__name__,
            len(actions),
        )
        return Answer(actions, session.snapshot, session.search.progress())

    def restore(self, session_id: str, spec: SearchSpec, snapshot: Snapshot) -> float:
        """Replace any session under this id with one rebuilt from `snapshot`; returns its progress."""
        _check_id(session_id)
        check_frame(snapshot, self.factory.snapshot_version)
        search = self.factory.restore(snapshot)
        if search.spec.canonical() != spec.canonical():
            # The state only makes sense with the spec it was taken under, which it carries.
            log.warning(
                "restoring with the spec stored in the snapshot, not the one sent session_id=%s", session_id
            )
        restored = self._snapshot(search, snapshot.seq)
        session = Session(session_id, search, restored, restored)
        with self._lock:
            replaced = self._sessions.get(session_id)
            self._sessions[session_id] = session
        if replaced is not None:
            with replaced.lock:
                replaced.retired = True
        log.info(
            "search session restored session_id=%s method=%s seq=%d replaced=%s",
            session_id,
            search.method_name,
            snapshot.seq,
            replaced is not None,
        )
        return search.progress()

    def close(self, session_id: str) -> None:
        _check_id(session_id)
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            return
        with session.lock:
            session.retired = True
        log.info("search session closed session_id=%s", session_id)

    # --- helpers ---------------------------------------------------------------------------------

    def _fall_back(self, session: Session) -> None:
        """Put the session's search back as it was after its last answer: its last serialized
        state, and the events applied since (answered without their state) applied again."""
        search = self.factory.restore(session.base)
        for event in session.since:
            search.apply(event)
        session.search = search

    def _snapshot(self, search: Search, seq: int) -> Snapshot:
        return Snapshot(
            seq=seq, state=search.to_bytes(), method=search.method_name, version=self.factory.snapshot_version
        )

    def _find(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(
                f"search session '{session_id}' not found (restore it from its latest snapshot)"
            )
        return session
