"""Delivers queued searcher events (the outbox in `searcher_events`) to each experiment's search
session, in order, and applies each answer with the session's new seq in one transaction.

The built-in searcher's state is asked for and stored with an answer only every
STATE_EVERY_EVENTS events (its other answers carry none: a grid of 10,000 trials is ~1.2 MB of
state, 16 ms to serialize); the events applied since are kept (SearcherReplay) in the same
transaction. Its sessions are deterministic in their state and events (the random stream is part
of the state), so a session restored from the stored state and sent those events again stands
where it stood, and the answers to them, applied when first given, are dropped. A custom searcher
promises no such thing: its state is stored with every answer, as before. Every delivery used to
write the state under the master's lock (bench.sim_agents).

A searcher that restarted answers NOT_FOUND, one that is out of step FAILED_PRECONDITION: either
way the session is restored (state, then replays) and the events are sent again. An unreachable
searcher leaves the events queued; they are delivered when it is back.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Select, bindparam, delete, func, literal, select, union_all

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.master.domain.experiments.creation import search_spec
from services.master.domain.experiments.search_snapshots import advance_seq, advance_snapshot
from services.master.domain.experiments.searcher_actions import apply_response_in_part, apply_stored_chunk
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from services.master.domain.kernel.loops import BackgroundLoop
from services.master.domain.kernel.ports import Searcher
from services.master.domain.kernel.states import is_terminal
from services.master.domain.kernel.topics import searcher_answers_topic
from services.master.store import models

log = get_logger(__name__)

IDLE_POLL_S = 1.0
# After a failure, an experiment's events wait this long before the next try.
RETRY_BACKOFF_S = 2.0
MAX_RESTORES_PER_EVENT = 3
# Events sent in one call (HandleEvents): a backlog (an experiment of 10,000 trials hears of each
# creation) goes in a few calls, each answered with one snapshot.
MAX_EVENTS_PER_CALL = 1000
# The built-in searcher's state is stored once this many events were applied since the last
# stored state: a restore replays at most about this many events (and one call's worth more).
STATE_EVERY_EVENTS = 1000


def _owed() -> Select[int, int]:
    """The experiments owed a delivery, in one statement (the pump asks every IDLE_POLL_S): those
    with a stored answer to finish first (their events follow it), then those with events, oldest
    first."""
    answers = select(
        models.SearcherAnswer.experiment_id.label("experiment_id"),
        literal(0).label("kind"),
        func.min(models.SearcherAnswer.id).label("first"),
    ).group_by(models.SearcherAnswer.experiment_id)
    events = select(
        models.SearcherEvent.experiment_id, literal(1), func.min(models.SearcherEvent.id)
    ).group_by(models.SearcherEvent.experiment_id)
    owed = union_all(answers, events).subquery()
    return select(owed.c.experiment_id, owed.c.kind).order_by(owed.c.kind, owed.c.first)


_OWED = _owed()
# An experiment's next events, and the removal of those its searcher answered: built once, as
# every delivery runs them.
_EVENTS = (
    select(models.SearcherEvent.id, models.SearcherEvent.payload)
    .where(models.SearcherEvent.experiment_id == bindparam("experiment_id"))
    .order_by(models.SearcherEvent.id)
    .limit(bindparam("limit"))
)
# What a delivery reads of the experiment and its searcher's snapshot (no snapshot: seq is None).
# Not the snapshot's state: only a restore sends it (_STORED), and a search of 10,000 trials
# carries megabytes of it.
_SEARCH = (
    select(
        models.Experiment.state,
        models.Experiment.searcher_session_id,
        models.Experiment.config,
        models.SearcherSnapshot.seq,
        models.SearcherSnapshot.state_seq,
    )
    .outerjoin(models.SearcherSnapshot, models.SearcherSnapshot.experiment_id == models.Experiment.id)
    .where(models.Experiment.id == bindparam("experiment_id"))
)
_STORED = select(
    models.SearcherSnapshot.seq,
    models.SearcherSnapshot.state_seq,
    models.SearcherSnapshot.state,
    models.SearcherSnapshot.method,
    models.SearcherSnapshot.version,
).where(models.SearcherSnapshot.experiment_id == bindparam("experiment_id"))
_REPLAYS = (
    select(models.SearcherReplay.payload)
    .where(models.SearcherReplay.experiment_id == bindparam("experiment_id"))
    .order_by(models.SearcherReplay.id)
)


_DELETE_EVENTS = (
    delete(models.SearcherEvent)
    .where(models.SearcherEvent.id.in_(bindparam("ids", expanding=True)))
    .execution_options(synchronize_session=False)
)


class SearcherPump:
    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self._retry_after: dict[int, float] = {}
        self._loop = BackgroundLoop(
            ctx, "searcher-pump", self.deliver_all, period_s=IDLE_POLL_S, wakeup=ctx.pump_wakeup
        )

    def start(self) -> None:
        self._loop.start()

    def join(self, timeout: float) -> None:
        self._loop.join(timeout)

    def deliver_all(self) -> int:
        """Deliver what every experiment owes its searcher; how many experiments were served."""
        with self._ctx.db.read() as s:
            owed = s.execute(_OWED).all()
        # In order, each once; whether it has a stored answer to finish first.
        answer_stored: dict[int, bool] = {}
        for experiment_id, kind in owed:
            answer_stored[experiment_id] = answer_stored.get(experiment_id, False) or kind == 0
        now = time.monotonic()
        served = 0
        for experiment_id, stored in answer_stored.items():
            if self._ctx.stopping.is_set():
                break
            if self._retry_after.get(experiment_id, 0.0) > now:
                continue
            try:
                self._deliver(experiment_id, stored)
                self._retry_after.pop(experiment_id, None)
                served += 1
            except Unavailable as exc:
                log.warning(
                    "searcher unavailable; events stay queued", experiment_id=experiment_id, error=str(exc)
                )
                self._retry_after[experiment_id] = time.monotonic() + RETRY_BACKOFF_S
        return served

    def _deliver(self, experiment_id: int, answer_stored: bool = True) -> None:
        restores = 0
        batch_limit = MAX_EVENTS_PER_CALL
        while not self._ctx.stopping.is_set():
            # The rest of an answer too big for the call that got it comes before any later event's
            # answer: the searcher made those trials first. Looked for only where one was stored (a
            # unit of work under the master's lock each delivery, to find none, otherwise).
            while answer_stored and not self._ctx.stopping.is_set():
                with self._ctx.unit_of_work() as w:
                    answer_stored = apply_stored_chunk(self._ctx, w, experiment_id)
                    if answer_stored:
                        self._announce(w, experiment_id)
            with self._ctx.db.read() as s:
                event_rows = s.execute(_EVENTS, {"experiment_id": experiment_id, "limit": batch_limit}).all()
                if not event_rows:
                    return
                search = s.execute(_SEARCH, {"experiment_id": experiment_id}).one()
                if is_terminal(search.state) or search.seq is None:
                    self._drop_events(experiment_id)
                    return
                session_id, config, seq = search.searcher_session_id, search.config, search.seq
                unsaved = seq - search.state_seq  # events applied since the stored state
            client = self._ctx.searchers.for_config(config)
            events = [spb.SearcherEvent.FromString(payload) for _, payload in event_rows]
            # The state is asked for when it is to be stored: always from a searcher that may not
            # replay exactly, else once STATE_EVERY_EVENTS events went unsaved.
            state_needed = not client.replays_exactly or unsaved + len(events) >= STATE_EVERY_EVENTS
            try:
                response = client.handle_many(session_id, seq, events, state_needed)
            except (NotFound, FailedPrecondition) as exc:
                restores += 1
                if restores > MAX_RESTORES_PER_EVENT:
                    raise Unavailable(f"search session {session_id} cannot be restored: {exc}") from None
                log.info("restoring search session", experiment_id=experiment_id, reason=str(exc))
                self._restore(experiment_id, client, session_id, config)
                continue
            except InvalidArgument as exc:
                if len(events) > 1:
                    # One of them is refused: find it by sending them one at a time.
                    batch_limit = 1
                    continue
                # The searcher refuses this event for good; keeping it would block the search forever.
                log.error(
                    "searcher rejected an event; dropping it", experiment_id=experiment_id, error=str(exc)
                )
                with self._ctx.unit_of_work() as w:
                    row = w.session.get(models.SearcherEvent, event_rows[0].id)
                    if row is not None:
                        w.session.delete(row)
                    self._announce(w, experiment_id)
                continue
            # The answer's seq says how many of the events it covers (one, from a searcher that
            # takes them singly).
            applied = response.snapshot.seq - seq
            if not 1 <= applied <= len(events):
                raise Unavailable(
                    f"searcher answered seq {response.snapshot.seq} to {len(events)} event(s) after seq {seq}"
                )
            applied_ids = [row.id for row in event_rows[:applied]]
            with self._ctx.unit_of_work() as w:
                # Whatever state comes is stored (a searcher without batches took fewer events
                # than asked, with the state asked for them).
                if response.snapshot.state or not client.replays_exactly:
                    advanced = advance_snapshot(w, experiment_id, seq, response.snapshot)
                else:
                    payloads = [payload for _, payload in event_rows[:applied]]
                    advanced = advance_seq(w, experiment_id, seq, response.snapshot.seq, payloads)
                if not advanced:
                    continue  # the experiment ended or moved on meanwhile; re-read and retry
                removed = w.session.execute(_DELETE_EVENTS, {"ids": applied_ids})
                if removed.rowcount != len(applied_ids):  # type: ignore[attr-defined]
                    w.session.rollback()
                    continue  # dropped meanwhile (the experiment ended); re-read
                exp_now = w.session.get_one(models.Experiment, experiment_id)
                answer_stored = apply_response_in_part(self._ctx, w, exp_now, response, snapshot_stored=True)
                self._announce(w, experiment_id)
            restores = 0

    def _restore(self, experiment_id: int, client: Searcher, session_id: str, config: dict[str, Any]) -> None:
        """Rebuild the session from the stored state, then send it the events applied since, in
        order, dropping their answers (applied when first given). Unavailable when the session
        does not come back to the stored seq."""
        with self._ctx.db.read() as s:
            stored = s.execute(_STORED, {"experiment_id": experiment_id}).one_or_none()
            replays = (
                list(s.scalars(_REPLAYS, {"experiment_id": experiment_id})) if stored is not None else []
            )
        if stored is None:
            return  # the experiment ended meanwhile: the next read finds nothing to deliver
        snapshot = spb.Snapshot(
            seq=stored.state_seq, state=stored.state, method=stored.method, version=stored.version
        )
        client.restore(session_id, search_spec(config), snapshot)
        at, sent = stored.state_seq, 0
        while sent < len(replays):
            events = [spb.SearcherEvent.FromString(p) for p in replays[sent : sent + MAX_EVENTS_PER_CALL]]
            answer = client.handle_many(session_id, at, events, state_needed=False)
            took = answer.snapshot.seq - at  # all of them, or one from a searcher without batches
            if not 1 <= took <= len(events):
                raise Unavailable(
                    f"search session {session_id}: replaying {len(events)} event(s) after seq {at} "
                    f"was answered with seq {answer.snapshot.seq}"
                )
            at, sent = at + took, sent + took
        if at != stored.seq:
            raise Unavailable(
                f"search session {session_id}: its stored state and replays reach seq {at}, not {stored.seq}"
            )
        if replays:
            log.info("search session replayed", experiment_id=experiment_id, events=len(replays), seq=at)

    def _announce(self, w: Work, experiment_id: int) -> None:
        topic = searcher_answers_topic(experiment_id)
        w.later(lambda: self._ctx.topics.publish(topic))

    def _drop_events(self, experiment_id: int) -> None:
        with self._ctx.unit_of_work() as w:
            for row in w.session.scalars(
                select(models.SearcherEvent).where(models.SearcherEvent.experiment_id == experiment_id)
            ):
                w.session.delete(row)
            self._announce(w, experiment_id)
