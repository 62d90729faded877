"""Which streamed rows (projects, models, model versions) each unit of work changed, learned from
the unit's database session itself, as scheduling_view.ChangeTracker learns its rows: every state
change goes through a unit of work, so every change of these rows is seen here, whichever
transition function made it, and nothing polls a table.

- A flush numbers each inserted or changed row (`seq`, one counter for the three tables, from the
  highest stored at start), the number Determined's clients send back as `since`.
- A row deleted (the ORM's delete, or a bulk DELETE, whose rows are read just before it runs) is
  remembered with the fields its subscribers filter on, as the row is about to go.
- A bulk UPDATE of these tables is numbered too: its rows are read before it runs, renumbered after.
- Just before the unit commits, while someone subscribes in this process, the changed rows are read
  once and turned into events (their messages encoded once for every subscriber); once it commits,
  they go to the publisher. A unit that rolls back hands over nothing (its numbers are skipped).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, func, inspect, select, update
from sqlalchemy.orm import ORMExecuteState, Session

from services.common.logging import get_logger
from services.master.domain.streams.entities import BY_TABLE, KINDS, MODEL_VERSIONS, Event, Kind
from services.master.domain.streams.publisher import Publisher
from services.master.store import models
from services.master.store.db import Database

log = get_logger(__name__)

_PENDING = "cairn.stream_changes"
_EVENTS = "cairn.stream_events"
# Our own statements (renumbering after a bulk UPDATE) are not changes to capture again.
_OWN = "cairn_stream_own"
# Ids per IN (...) when the changed rows are read (SQLite's bound on a statement's variables).
_CHUNK = 500


class SeqCounter:
    """The next `seq`; one master writes at a time (the leader), so a counter in memory, started
    from the highest stored, numbers every change in commit order (units of work commit under the
    master's lock)."""

    def __init__(self, start: int) -> None:
        self._lock = threading.Lock()
        self._last = start

    def next(self) -> int:
        with self._lock:
            self._last += 1
            return self._last

    @property
    def last(self) -> int:
        return self._last


def highest_seq(db: Database) -> int:
    with db.read() as s:
        return max(s.scalar(select(func.coalesce(func.max(k.row_type.seq), 0))) or 0 for k in KINDS)


@dataclass
class _Deleted:
    kind: Kind
    id: int
    seq: int
    fields: dict[str, int | None]
    workspace_id: int | None  # None: a model version's, found through its model


@dataclass
class _Pending:
    changed: dict[str, set[int]] = field(default_factory=dict)  # kind name -> ids
    new: list[Any] = field(default_factory=list)  # inserted rows (ids known after the flush)
    deleted: dict[tuple[str, int], _Deleted] = field(default_factory=dict)
    # (kind name, id) -> (filter fields, workspace) before the unit first changed the row.
    previous: dict[tuple[str, int], tuple[dict[str, int | None], int | None]] = field(default_factory=dict)


class StreamChanges:
    """Listens to every write session of `db` and feeds `publisher`; `stop` to let go."""

    def __init__(self, db: Database, publisher: Publisher, counter: SeqCounter | None = None) -> None:
        self._db = db
        self.publisher = publisher
        self.counter = counter or SeqCounter(highest_seq(db))
        self._stopped = False
        for name, listener in self._listeners():
            db.listen_to_writes(name, listener)

    def _listeners(self) -> list[tuple[str, Any]]:
        return [
            ("before_flush", self._before_flush),
            ("do_orm_execute", self._statement),
            ("before_commit", self._before_commit),
            ("after_commit", self._after_commit),
            ("after_rollback", self._after_rollback),
        ]

    def stop(self) -> None:
        self._stopped = True
        for name, listener in self._listeners():
            self._db.stop_listening_to_writes(name, listener)

    @staticmethod
    def _pending(session: Session) -> _Pending:
        pending = session.info.get(_PENDING)
        if pending is None:
            pending = session.info[_PENDING] = _Pending()
        return pending

    # --- during the unit of work ------------------------------------------------------------

    def _before_flush(self, session: Session, _context: Any, _instances: Any) -> None:
        streamed = (models.Project, models.RegisteredModel, models.ModelVersion)
        pending: _Pending | None = None
        for obj in session.new:
            if isinstance(obj, streamed):
                pending = pending or self._pending(session)
                obj.seq = self.counter.next()
                pending.new.append(obj)
        for obj in session.dirty:
            if isinstance(obj, streamed) and session.is_modified(obj, include_collections=False):
                pending = pending or self._pending(session)
                obj.seq = self.counter.next()
                kind = BY_TABLE[obj.__tablename__]
                pending.changed.setdefault(kind.name, set()).add(obj.id)
                pending.previous.setdefault((kind.name, obj.id), _before(kind, obj))
        for obj in session.deleted:
            if isinstance(obj, streamed):
                pending = pending or self._pending(session)
                kind = BY_TABLE[obj.__tablename__]
                fields = {name: getattr(obj, name) for name in kind.filters.values()}
                workspace = None if kind is MODEL_VERSIONS else obj.workspace_id  # type: ignore[union-attr]
                pending.deleted[(kind.name, obj.id)] = _Deleted(
                    kind, obj.id, self.counter.next(), fields, workspace
                )

    def _statement(self, state: ORMExecuteState) -> Any:
        if not (state.is_delete or state.is_update or state.is_insert) or state.execution_options.get(_OWN):
            return None
        kind = BY_TABLE.get(getattr(getattr(state.statement, "table", None), "name", ""))
        if kind is None:
            return None
        if state.is_insert:
            # None exists: rows of these tables are made through the ORM (numbered at the flush).
            log.warning("a bulk INSERT into a streamed table is not streamed", table=kind.table)
            return None
        where = getattr(state.statement, "whereclause", None)
        rows = self._rows_matching(state.session, kind, where)
        pending = self._pending(state.session)
        if state.is_delete:
            for row_id, fields, workspace in rows:
                pending.deleted[(kind.name, row_id)] = _Deleted(
                    kind, row_id, self.counter.next(), fields, workspace
                )
            return None
        result = state.invoke_statement()
        for row_id, fields, workspace in rows:
            pending.previous.setdefault((kind.name, row_id), (fields, workspace))
            state.session.execute(
                update(kind.row_type)
                .where(kind.row_type.id == row_id)
                .values(seq=self.counter.next())
                .execution_options(**{_OWN: True, "synchronize_session": False})
            )
            pending.changed.setdefault(kind.name, set()).add(row_id)
        return result

    def _rows_matching(
        self, session: Session, kind: Kind, where: ColumnElement[bool] | None
    ) -> list[tuple[int, dict[str, int | None], int | None]]:
        """(id, filter fields, workspace) of the rows a bulk statement is about to touch."""
        row = kind.row_type
        columns = [row.id, *(getattr(row, f) for f in kind.filters.values())]
        if kind is MODEL_VERSIONS:
            query = select(*columns, models.RegisteredModel.workspace_id).join(
                models.RegisteredModel, models.RegisteredModel.id == models.ModelVersion.model_id
            )
        else:
            query = select(*columns, row.workspace_id)  # type: ignore[union-attr]
        if where is not None:
            query = query.where(where)
        names = list(kind.filters.values())
        found = []
        with session.no_autoflush:
            for values in session.execute(query.execution_options(**{_OWN: True})):
                fields = dict(zip(names, values[1:-1], strict=True))
                found.append((values[0], fields, values[-1]))
        return found

    # --- at the commit ------------------------------------------------------------------------

    def _before_commit(self, session: Session) -> None:
        pending: _Pending | None = session.info.pop(_PENDING, None)
        if pending is None or self._stopped or not self.publisher.active():
            return  # numbered all the same: a later subscriber's `since` stays true
        for obj in pending.new:
            kind = BY_TABLE[obj.__tablename__]
            pending.changed.setdefault(kind.name, set()).add(obj.id)
        events: list[Event] = []
        with session.no_autoflush:
            for kind in KINDS:
                ids = pending.changed.get(kind.name, set()) - {
                    i for (name, i) in pending.deleted if name == kind.name
                }
                events.extend(_read_events(session, kind, sorted(ids), pending.previous))
            events.extend(_deletion_events(session, pending.deleted.values()))
        events.sort(key=lambda e: e.seq)
        session.info[_EVENTS] = events

    def _after_commit(self, session: Session) -> None:
        events = session.info.pop(_EVENTS, None)
        if events and not self._stopped:
            self.publisher.broadcast(events)

    def _after_rollback(self, session: Session) -> None:
        session.info.pop(_PENDING, None)
        session.info.pop(_EVENTS, None)


def _chunks(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    it = iter(ids)
    while chunk := list(itertools.islice(it, _CHUNK)):
        yield chunk


def _before(kind: Kind, obj: Any) -> tuple[dict[str, int | None], int | None]:
    """The row's filter fields and workspace as they were before this unit changed them."""
    attrs = inspect(obj).attrs

    def old(name: str) -> Any:
        history = attrs[name].history
        return history.deleted[0] if history.deleted else getattr(obj, name)

    workspace = None if kind is MODEL_VERSIONS else old("workspace_id")
    return {name: old(name) for name in kind.filters.values()}, workspace


def _read_events(
    session: Session,
    kind: Kind,
    ids: Sequence[int],
    previous: dict[tuple[str, int], tuple[dict[str, int | None], int | None]],
) -> list[Event]:
    events: list[Event] = []
    row_type = kind.row_type
    for chunk in _chunks(ids):
        rows: list[Any] = list(
            session.scalars(
                select(row_type).where(row_type.id.in_(chunk)).execution_options(populate_existing=True)
            )
        )
        workspaces = _model_workspaces(session, {r.model_id for r in rows}) if kind is MODEL_VERSIONS else {}
        for row in rows:
            workspace = workspaces.get(row.model_id) if kind is MODEL_VERSIONS else row.workspace_id
            if workspace is None:
                continue
            before = previous.get((kind.name, row.id))
            if before is not None and kind is MODEL_VERSIONS:
                before = (before[0], workspace)  # a version never leaves its model's workspace
            events.append(Event.upsert(kind, row, workspace, before))
    return events


def _model_workspaces(session: Session, model_ids: Iterable[int]) -> dict[int, int]:
    found: dict[int, int] = {}
    for chunk in _chunks(sorted(model_ids)):
        query = select(models.RegisteredModel.id, models.RegisteredModel.workspace_id).where(
            models.RegisteredModel.id.in_(chunk)
        )
        found.update((model_id, workspace) for model_id, workspace in session.execute(query))
    return found


def _deletion_events(session: Session, deleted: Iterable[_Deleted]) -> list[Event]:
    deleted = list(deleted)
    # A model version deleted with its model: the model's workspace, remembered as it went.
    gone_models = {
        d.id: d.workspace_id for d in deleted if d.kind is not MODEL_VERSIONS and d.kind.name == "models"
    }
    lookup = {
        d.fields.get("model_id")
        for d in deleted
        if d.workspace_id is None and d.fields.get("model_id") not in gone_models
    }
    workspaces = {**_model_workspaces(session, {m for m in lookup if m is not None}), **gone_models}
    events = []
    for d in deleted:
        workspace = d.workspace_id
        if workspace is None:
            workspace = workspaces.get(d.fields.get("model_id") or 0)
        if workspace is not None:
            events.append(Event.deletion(d.kind, d.id, d.seq, workspace, d.fields))
    return events
