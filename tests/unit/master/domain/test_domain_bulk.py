"""Bulk paths at experiment scale: a searcher's run of creations made set-based (trials, tasks,
events and allocations in a few statements, queued in the searcher's order, a retried answer
making nothing twice), the backlog of searcher events delivered in batches (and one by one to a
searcher without them), and a cancel or kill that stops the first trials at once and the rest in
the deferred-work loop, placing nothing more meanwhile."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, func, select

from cairn.searcher.v1 import searcher_pb2 as spb
from services.master.domain.experiments import creation, experiments, searcher_actions, searcher_pump
from services.master.domain.experiments.creation import search_spec
from services.master.domain.experiments.searcher_actions import apply_response
from services.master.domain.kernel.clock import utcnow
from services.master.domain.scheduling import scheduling
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text

# On each database (marked), the tests of set-based inserts, the ids and the order their rows come
# back in; the pump's batching, the loop's skipped passes and a kill's chunks are the domain's own.
each_database = pytest.mark.on_each_database

# The domain's limits, a tenth of their size here, so a test makes 60 trials instead of 600 and
# stands to each limit as 600 trials stand to the real ones (over INLINE_CREATES, _IN_LIST_MAX and
# INLINE_STOPS, under the rest): how a big experiment is cut into calls, transactions and chunks is
# the same code at either scale.
SCALE = 10
LIMITS = [
    (searcher_actions, "INLINE_CREATES"),  # 500: trials made in the searcher's call
    (searcher_actions, "STORED_CHUNK_CREATES"),  # 1,000: the rest, a transaction each
    (searcher_actions, "_IN_LIST_MAX"),  # 500: request ids asked for in one IN list
    (experiments, "INLINE_STOPS"),  # 200: trials a kill stops in its call
    (experiments, "STOP_BATCH"),  # 1,000: the rest, a transaction each
    (experiments, "_READ_CHUNK"),  # 900: ids read in one IN list
    (searcher_pump, "MAX_EVENTS_PER_CALL"),  # 1,000: events in one searcher call
]
TRIALS = 600 // SCALE


@pytest.fixture(autouse=True)
def _limits_scaled_down(monkeypatch: pytest.MonkeyPatch) -> None:
    for module, name in LIMITS:
        monkeypatch.setattr(module, name, getattr(module, name) // SCALE)


def grid(trials: int = TRIALS, **overrides: Any) -> str:
    return config_text(
        searcher={"name": "grid", "metric": "loss", "max_length": 1, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "int", "minval": 0, "maxval": trials - 1, "count": trials}},
        **overrides,
    )


def count(master: Master, model: Any, **where: Any) -> int:
    with master.db.read() as s:
        query = select(func.count()).select_from(model)
        for name, value in where.items():
            query = query.where(getattr(model, name) == value)
        return int(s.scalar(query) or 0)


@each_database
def test_a_run_of_creations_makes_every_trial_task_and_allocation_in_the_searchers_order(
    master: Master,
) -> None:
    experiment_id = master.create(grid())
    trials = master.trials(experiment_id)
    assert len(trials) == TRIALS
    assert count(master, models.Task, experiment_id=experiment_id) == TRIALS
    with master.db.read() as s:
        allocs = list(
            s.scalars(
                select(models.Allocation).order_by(models.Allocation.requested_at, models.Allocation.id)
            )
        )
        snapshot = s.get_one(models.SearcherSnapshot, experiment_id)
    assert [a.trial_id for a in allocs] == [t.id for t in trials]  # queued as the searcher made them
    assert {a.state for a in allocs} == {"PENDING"}
    assert sorted(t.hparams["x"] for t in trials) == list(range(TRIALS))
    # Every creation was heard, in batches of at most the pump's limit: seq counts one per event.
    assert count(master, models.SearcherEvent) == 0 and snapshot.seq == TRIALS
    assert master.searchers.searcher.calls == [TRIALS]


@each_database
def test_a_big_answer_makes_its_first_trials_in_the_call_and_the_rest_after_it(master: Master) -> None:
    request = creation.CreateRequest(config_text=grid(), files=[], activate=True, validate_only=False)
    experiment_id = creation.create(master.ctx, master.admin, request).experiment_id
    assert experiment_id is not None
    assert len(master.trials(experiment_id)) == searcher_actions.INLINE_CREATES
    assert count(master, models.SearcherAnswer, experiment_id=experiment_id) == 1
    master.settle()
    assert len(master.trials(experiment_id)) == TRIALS
    assert count(master, models.SearcherAnswer) == 0
    # The stored rest came before the creations' events: the searcher heard of every trial.
    with master.db.read() as s:
        assert s.get_one(models.SearcherSnapshot, experiment_id).seq == TRIALS


@each_database
def test_a_retried_answer_makes_no_trial_twice(master: Master) -> None:
    experiment_id = master.create(grid(trials=20))
    with master.ctx.unit_of_work() as w:
        exp = w.session.get_one(models.Experiment, experiment_id)
        response = master.searchers.searcher.start("replay", search_spec(exp.config))
        # The same request ids, as a retried answer carries them.
        for action, trial in zip(response.actions, master.trials(experiment_id), strict=True):
            action.create.request_id = trial.request_id
        apply_response(master.ctx, w, exp, response)
    assert len(master.trials(experiment_id)) == 20
    assert count(master, models.Allocation) == 20


def test_events_go_one_by_one_to_a_searcher_without_batches(master: Master) -> None:
    master.searchers.searcher.batches = False
    experiment_id = master.create(grid(trials=30))
    master.settle(passes=40)
    with master.db.read() as s:
        snapshot = s.get_one(models.SearcherSnapshot, experiment_id)
    assert snapshot.seq == 30 and count(master, models.SearcherEvent) == 0
    assert set(master.searchers.searcher.calls) == {1}


def test_the_pump_sends_a_backlog_in_calls_of_at_most_its_limit(master: Master, monkeypatch: Any) -> None:
    monkeypatch.setattr(searcher_pump, "MAX_EVENTS_PER_CALL", 25)
    experiment_id = master.create(grid())
    with master.db.read() as s:
        assert s.get_one(models.SearcherSnapshot, experiment_id).seq == TRIALS
    assert master.searchers.searcher.calls == [25, 25, 10]


def test_the_rest_of_an_answer_stored_in_a_delivery_comes_before_the_next_events_answer(
    master: Master, monkeypatch: Any
) -> None:
    """The searcher made the rest's trials before it heard of anything later: a delivery that
    stores an answer's rest applies it before it sends the next events (and a delivery with none
    stored looks for none)."""
    master.searchers.searcher.batches = False  # the creations' events go one a call
    real_apply = searcher_pump.apply_response_in_part
    stored_first = []

    def stores_a_rest_once(*args: Any, **kwargs: Any) -> bool:
        real_apply(*args, **kwargs)
        if stored_first:
            return False
        w = args[1]
        rest = spb.SearcherResponse()  # nothing left to do, but stored as a rest is
        w.session.add(
            models.SearcherAnswer(
                experiment_id=args[2].id, payload=rest.SerializeToString(), created_at=utcnow()
            )
        )
        stored_first.append(True)
        return True

    seen_stored: list[int] = []
    real_handle_many = master.searchers.searcher.handle_many

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen_stored.append(count(master, models.SearcherAnswer))
        return real_handle_many(*args, **kwargs)

    monkeypatch.setattr(searcher_pump, "apply_response_in_part", stores_a_rest_once)
    monkeypatch.setattr(master.searchers.searcher, "handle_many", counting)
    master.create(grid(trials=4))
    assert stored_first and len(seen_stored) == 4
    assert set(seen_stored) == {0}  # no call found the rest still waiting
    assert count(master, models.SearcherAnswer) == 0


def test_a_kill_stops_the_first_trials_now_and_the_rest_in_the_deferred_loop(master: Master) -> None:
    master.add_agent("a1", slots=2)
    experiment_id = master.create(grid())
    running = [a.id for a in _allocations(master) if a.state == "ASSIGNED"]
    assert len(running) == 2
    with master.ctx.unit_of_work() as w:
        experiments.kill(master.ctx, w, experiments.load(w, experiment_id))
    # The two holding slots are told at once, with the first INLINE_STOPS trials.
    assert sum(t.state != "ACTIVE" for t in master.trials(experiment_id)) == experiments.INLINE_STOPS
    assert {a.state for a in _allocations(master) if a.id in running} == {"TERMINATING"}
    # Nothing more of a killed experiment is placed, even on a new agent.
    master.add_agent("a2", slots=4)
    master.scheduling.run_pass()
    assert sum(a.state == "ASSIGNED" for a in _allocations(master)) <= 2
    # The deferred-work loop stops the rest.
    assert master.run_deferred() >= 1
    trials = master.trials(experiment_id)
    assert sum(t.state == "CANCELED" for t in trials) == TRIALS - 2
    assert {t.state for t in trials if t.state != "CANCELED"} == {"STOPPING_KILLED"}


def test_a_kill_reads_the_containers_of_the_trials_it_stops_once_and_tells_every_agent(
    master: Master,
) -> None:
    for agent in ("a1", "a2"):
        master.add_agent(agent, slots=15)
    experiment_id = master.create(grid())
    placed = [a.id for a in _allocations(master) if a.state == "ASSIGNED"]
    assert len(placed) == 30
    reads: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM containers" in statement:
            reads.append(statement)

    event.listen(master.db.engine, "before_cursor_execute", seen)
    try:
        with master.ctx.unit_of_work() as w:
            experiments.kill(master.ctx, w, experiments.load(w, experiment_id))
    finally:
        event.remove(master.db.engine, "before_cursor_execute", seen)
    # One read for the 30 (the scheduling view's own reads come at the next pass), where each
    # stopped allocation used to read its containers alone.
    assert len(reads) == 1
    with master.db.read() as s:
        containers = {c.id: c.agent_id for c in s.scalars(select(models.Container))}
    killed = {kill.container_id: agent for agent, kill in master.hub.commands("kill")}
    assert killed == containers and set(killed.values()) == {"a1", "a2"}
    assert {a.state for a in _allocations(master) if a.id in placed} == {"TERMINATING"}


def _allocations(master: Master) -> list[models.Allocation]:
    with master.db.read() as s:
        return list(s.scalars(select(models.Allocation)))


def test_the_loop_skips_passes_that_could_only_repeat_the_last(master: Master, monkeypatch: Any) -> None:
    master.add_agent("a1", slots=1)
    master.create(grid(trials=5))
    passes: list[int] = []
    loop = master.scheduling
    assert loop.view is not None
    real = loop.view.next_pass
    monkeypatch.setattr(loop.view, "next_pass", lambda: passes.append(1) or real())
    loop._step()
    loop._step()
    assert len(passes) == 1  # nothing changed and the first pass was quiet (the one slot is busy)
    master.add_agent("a2", slots=1)  # a change that asks for a pass
    loop._step()
    assert len(passes) == 2
    assert sum(a.state == "ASSIGNED" for a in _allocations(master)) == 2
    loop._step()
    loop._step()
    assert len(passes) == 3
    # However quiet, a pass runs every QUIET_RECHECK_S.
    monkeypatch.setattr(scheduling, "QUIET_RECHECK_S", 0.0)
    loop._step()
    assert len(passes) == 4


@each_database
def test_pause_and_activate_of_a_big_experiment_end_and_remake_its_requests(master: Master) -> None:
    experiment_id = master.create(grid())
    with master.ctx.unit_of_work() as w:
        experiments.pause(master.ctx, w, experiments.load(w, experiment_id))
    assert {t.state for t in master.trials(experiment_id)} == {"PAUSED"}
    assert {a.state for a in _allocations(master)} == {"TERMINATED"}
    with master.ctx.unit_of_work() as w:
        experiments.activate(master.ctx, w, experiments.load(w, experiment_id))
    trials = master.trials(experiment_id)
    assert {t.state for t in trials} == {"ACTIVE"} and {t.run_id for t in trials} == {2}
    assert sum(a.state == "PENDING" for a in _allocations(master)) == TRIALS
