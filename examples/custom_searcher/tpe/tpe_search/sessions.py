"""The table of live search sessions, one per experiment, held in memory.

Every event names the sequence number of the snapshot it follows; a session applies it only at that
number and then counts one up. A master that missed an answer, or a searcher that restarted empty,
is told so (FAILED_PRECONDITION, NOT_FOUND) and the master restores the session from its snapshot,
instead of the two silently drifting apart.

Locking: one lock per session serializes its events; the table's lock is only held to find, add or
remove a session, never while a search runs.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from .actions import Action
from .errors import InvalidArgument, SeqMismatch, SessionExists, SessionNotFound
from .events import Event
from .search import TPESearch
from .snapshot import Snapshot, decode, encode
from .spec import SearchSpec

log = logging.getLogger(__name__)

# A session replaced or closed while an event waited for its lock is looked up again this often.
_LOOKUP_ATTEMPTS = 3


@dataclass(frozen=True)
class Answer:
    actions: list[Action]
    snapshot: Snapshot
    progress: float


@dataclass
class Session:
    session_id: str
    search: TPESearch
    # The last snapshot handed out; its seq is the session's.
    snapshot: Snapshot
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set once the session left the table (closed, or replaced by a restore).
    retired: bool = False


def _check_id(session_id: str) -> None:
    if not session_id:
        raise InvalidArgument("session_id: required")


class SessionTable:
    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def start(self, session_id: str, spec: SearchSpec) -> Answer:
        """Open a session and answer its first trials. A retried start (same spec, no event applied
        yet) gets the same answer, since the search is deterministic in its spec; anything else on an
        existing id is refused."""
        _check_id(session_id)
        search = TPESearch(spec)
        actions = search.initial_trials()
        answer = Answer(actions, encode(search, 0), search.progress())
        with self._lock:
            existing = self._sessions.get(session_id)
            if existing is None:
                self._sessions[session_id] = Session(session_id, search, answer.snapshot)
                log.info("search session started session_id=%s trials=%d", session_id, len(actions))
                return answer
        with existing.lock:
            same = existing.search.spec.canonical() == spec.canonical()
            if not existing.retired and existing.snapshot.seq == 0 and same:
                log.info("search session start retried session_id=%s", session_id)
                return answer
            raise SessionExists(
                f"search session '{session_id}' already exists (at seq {existing.snapshot.seq}); a start can "
                "only be retried with the same spec before any event"
            )

    def handle(self, session_id: str, after_seq: int, event: Event) -> Answer:
        _check_id(session_id)
        for _ in range(_LOOKUP_ATTEMPTS):
            session = self._find(session_id)
            with session.lock:
                if session.retired:
                    continue
                if after_seq != session.snapshot.seq:
                    raise SeqMismatch(
                        f"search session '{session_id}' is at seq {session.snapshot.seq}, but the event "
                        f"follows seq {after_seq}; restore the session from the snapshot at seq {after_seq}"
                    )
                return self._apply(session, event)
        raise SessionNotFound(f"search session '{session_id}' was closed or replaced while the event waited")

    def _apply(self, session: Session, event: Event) -> Answer:
        try:
            actions = session.search.apply(event)
        except Exception:
            # A refused event changed nothing, but anything else may have left the study halfway.
            session.search = decode(session.snapshot)
            raise
        session.snapshot = encode(session.search, session.snapshot.seq + 1)
        log.debug(
            "event applied session_id=%s seq=%d event=%s actions=%d",
            session.session_id,
            session.snapshot.seq,
            type(event).__name__,
            len(actions),
        )
        return Answer(actions, session.snapshot, session.search.progress())

    def restore(self, session_id: str, spec: SearchSpec, snapshot: Snapshot) -> float:
        """Replace any session under this id with the one `snapshot` holds; returns its progress."""
        _check_id(session_id)
        search = decode(snapshot)
        if search.spec.canonical() != spec.canonical():
            # The state only makes sense with the spec it was taken under, which it carries.
            log.warning("restoring with the spec stored in the snapshot session_id=%s", session_id)
        session = Session(session_id, search, snapshot)
        with self._lock:
            replaced = self._sessions.get(session_id)
            self._sessions[session_id] = session
        if replaced is not None:
            with replaced.lock:
                replaced.retired = True
        log.info(
            "search session restored session_id=%s seq=%d trials=%d",
            session_id,
            snapshot.seq,
            len(search.trials),
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

    def _find(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(
                f"search session '{session_id}' not found (restore it from its latest snapshot)"
            )
        return session
