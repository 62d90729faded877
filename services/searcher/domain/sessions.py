"""The table of live search sessions, one per experiment, held in memory.

Every event names the sequence number of the snapshot it follows; a session applies it only at
that number and then counts one up, so a caller that missed an answer (or a session that restarted
empty) is told instead of silently diverging: NOT_FOUND sends the caller to RestoreSession, and
FAILED_PRECONDITION names both numbers.

Locking: one lock per session serializes its events; the table's lock is only held to find, add or
remove a session, never while an event is applied.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from services.common.logging import get_logger
from services.searcher.domain.actions import Action
from services.searcher.domain.errors import InvalidRequest, SeqMismatch, SessionExists, SessionNotFound
from services.searcher.domain.events import Event
from services.searcher.domain.registry import MethodRegistry
from services.searcher.domain.searcher import Searcher
from services.searcher.domain.snapshot import Snapshot, decode, encode
from services.searcher.domain.spec import SearchSpec

log = get_logger(__name__)

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
    searcher: Searcher
    seq: int
    # The last snapshot handed out: the state to fall back to if applying an event fails midway.
    snapshot: Snapshot
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set once the session left the table (closed or replaced by a restore).
    retired: bool = False


def _check_id(session_id: str) -> None:
    if not session_id:
        raise InvalidRequest("session_id: required")


class SessionManager:
    def __init__(self, registry: MethodRegistry) -> None:
        self._registry = registry
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
        """Open a session and answer its first trials. Starting again with the same spec before any
        event answers the same (the search is deterministic in its spec); anything else is refused."""
        _check_id(session_id)
        searcher = Searcher.new(spec, self._registry)
        actions = searcher.initial_trials()
        snapshot = encode(searcher, 0)
        answer = Answer(actions, snapshot, searcher.progress())
        with self._lock:
            existing = self._sessions.get(session_id)
            if existing is None:
                self._sessions[session_id] = Session(session_id, searcher, 0, snapshot)
                log.info(
                    "search session started",
                    session_id=session_id,
                    method=searcher.method_name,
                    trials=len(searcher.requested),
                )
                return answer
        with existing.lock:
            if (
                not existing.retired
                and existing.seq == 0
                and existing.searcher.spec.canonical() == spec.canonical()
            ):
                log.info("search session start retried", session_id=session_id)
                return answer
            raise SessionExists(
                f"search session '{session_id}' already exists (at seq {existing.seq}); a start can only be "
                "retried with the same spec before any event"
            )

    def handle(self, session_id: str, after_seq: int, event: Event) -> Answer:
        _check_id(session_id)
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
                return self._apply(session, event)
        raise SessionNotFound(f"search session '{session_id}' was closed or replaced while the event waited")

    def _apply(self, session: Session, event: Event) -> Answer:
        try:
            actions = session.searcher.apply(event)
        except Exception:
            # Refused events leave the searcher untouched; anything else may have changed it halfway.
            session.searcher = decode(session.snapshot, self._registry)
            raise
        session.seq += 1
        session.snapshot = encode(session.searcher, session.seq)
        log.debug(
            "search event applied",
            session_id=session.session_id,
            seq=session.seq,
            event_kind=type(event).__name__,
            actions=len(actions),
        )
        return Answer(actions, session.snapshot, session.searcher.progress())

    def restore(self, session_id: str, spec: SearchSpec, snapshot: Snapshot) -> float:
        """Replace any session under this id with one rebuilt from `snapshot`; returns its progress."""
        _check_id(session_id)
        searcher = decode(snapshot, self._registry)
        if searcher.spec.canonical() != spec.canonical():
            # The state only makes sense with the spec it was taken under, which it carries.
            log.warning(
                "restoring with the spec stored in the snapshot, not the one sent", session_id=session_id
            )
        session = Session(session_id, searcher, snapshot.seq, encode(searcher, snapshot.seq))
        with self._lock:
            replaced = self._sessions.get(session_id)
            self._sessions[session_id] = session
        if replaced is not None:
            with replaced.lock:
                replaced.retired = True
        log.info(
            "search session restored",
            session_id=session_id,
            method=searcher.method_name,
            seq=snapshot.seq,
            replaced=replaced is not None,
        )
        return searcher.progress()

    def close(self, session_id: str) -> None:
        _check_id(session_id)
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            return
        with session.lock:
            session.retired = True
        log.info("search session closed", session_id=session_id)

    def _find(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(
                f"search session '{session_id}' not found (restore it from its latest snapshot)"
            )
        return session
