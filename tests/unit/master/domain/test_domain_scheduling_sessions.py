"""Scheduling passes over a scheduler session: the master sends what changed, recovers with a
snapshot whenever the scheduler lost the session or a call failed, falls back to whole-state passes
for a scheduler without sessions, and shows the same reasons and queue positions a whole-state pass
gives. (Every pass of every test also compares the master's view with a whole read of the
database: tests/conftest.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import delete, event, func, insert, select

from cairn.agent.v1 import agent_pb2 as apb
from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.master.domain.config.view import config_view
from services.master.domain.experiments import creation, experiment_edits, experiments
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.errors import Unavailable
from services.master.domain.scheduling import scheduling, scheduling_rows, scheduling_view
from services.master.domain.scheduling.scheduling_view import ChangeTracker
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.workspaces import pool_shares
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text


def grid(trials: int, **overrides: Any) -> str:
    return config_text(
        searcher={"name": "grid", "metric": "loss", "max_length": 1, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "int", "minval": 0, "maxval": trials - 1, "count": trials}},
        **overrides,
    )


def assigned(master: Master) -> int:
    with master.db.read() as s:
        return sum(1 for state in s.scalars(select(models.Allocation.state)) if state == "ASSIGNED")


class Recording:
    """The scheduler port, recording what each pass sent."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: list[pb.ScheduleChangesRequest] = []

    def schedule(self, request: pb.ScheduleRequest) -> pb.ScheduleResponse:
        return self.inner.schedule(request)  # type: ignore[no-any-return]

    def schedule_changes(self, request: pb.ScheduleChangesRequest) -> pb.ScheduleChangesResponse:
        self.sent.append(request)
        return self.inner.schedule_changes(request)  # type: ignore[no-any-return]


def test_a_pass_sends_only_what_changed(master: Master) -> None:
    recording = Recording(master.ctx.scheduler)
    master.ctx.scheduler = recording  # type: ignore[assignment]
    master.add_agent("a1", slots=2)
    master.create(grid(50))
    master.settle()
    assert assigned(master) == 2
    recording.sent.clear()
    master.add_agent("a2", slots=1)
    master.scheduling.run_pass()
    first = recording.sent[0]
    assert not first.snapshot
    assert [a.id for a in first.agents] == ["a2"]
    assert not first.requests  # nothing about the 48 waiting trials changed
    assert assigned(master) == 3
    master.scheduling.run_pass()
    # The scheduler kept the trial the last pass placed: the next pass sends nothing of it.
    assert recording.sent[0].keep_assignments
    assert not recording.sent[1].requests


def test_a_restarted_scheduler_gets_a_snapshot_and_placing_goes_on(master: Master) -> None:
    master.add_agent("a1", slots=1)
    master.create(grid(5))
    master.settle()
    master.ctx.scheduler.restart()  # type: ignore[attr-defined]
    master.add_agent("a2", slots=1)
    master.scheduling.run_pass()
    assert assigned(master) == 2


def test_a_failed_call_means_a_snapshot_next(master: Master, monkeypatch: Any) -> None:
    master.add_agent("a1", slots=1)
    master.create(grid(5))
    master.settle()
    real = master.ctx.scheduler.schedule_changes
    sent: list[pb.ScheduleChangesRequest] = []

    def unavailable(request: pb.ScheduleChangesRequest) -> pb.ScheduleChangesResponse:
        sent.append(request)
        raise Unavailable("scheduler down")

    monkeypatch.setattr(master.ctx.scheduler, "schedule_changes", unavailable)
    master.add_agent("a2", slots=1)
    assert master.scheduling.run_pass() is False
    monkeypatch.setattr(
        master.ctx.scheduler, "schedule_changes", lambda request: sent.append(request) or real(request)
    )
    master.scheduling.run_pass()
    assert sent[-1].snapshot
    assert assigned(master) == 2


def test_a_scheduler_without_sessions_gets_the_whole_state(master: Master, monkeypatch: Any) -> None:
    def unimplemented(request: pb.ScheduleChangesRequest) -> pb.ScheduleChangesResponse:
        raise NotImplementedError("old scheduler")

    monkeypatch.setattr(master.ctx.scheduler, "schedule_changes", unimplemented)
    master.add_agent("a1", slots=2)
    master.create(grid(5))
    master.settle()
    assert master.scheduling.view is None
    assert assigned(master) == 2


def test_waiting_reasons_and_positions_match_a_whole_state_pass(master: Master) -> None:
    master.add_agent("a1", slots=2)
    first = master.create(grid(6))
    second = master.create(grid(4, resources={"priority": 10}))
    master.settle()
    session = master.scheduling.waiting.reasons
    view = master.scheduling.view
    master.scheduling.view = None  # the same cluster, decided whole
    master.scheduling.run_pass()
    whole = master.scheduling.waiting.reasons
    master.scheduling.view = view
    assert session == whole
    assert len(session) == 8
    # An edit of priority or max_slots shows at the next pass.
    with master.ctx.unit_of_work() as w:
        experiment_edits.apply(
            master.ctx, w, experiments.load(w, first), experiment_edits.ExperimentEdit(max_slots=1)
        )
    master.scheduling.run_pass()
    held = [
        why
        for alloc_id, (why, _) in master.scheduling.waiting.reasons.items()
        if alloc_id.startswith(f"{first}.")
    ]
    assert held and all("max_slots" in why for why in held)
    assert second


@pytest.mark.parametrize("trials", [30])
def test_a_canceled_experiments_pending_trials_leave_the_session(master: Master, trials: int) -> None:
    master.add_agent("a1", slots=1)
    experiment_id = master.create(grid(trials))
    master.settle()
    with master.ctx.unit_of_work() as w:
        experiments.cancel(master.ctx, w, experiments.load(w, experiment_id))
    master.scheduling.run_pass()
    assert master.scheduling.view is not None
    assert master.scheduling.view.pending == 0


def test_a_pass_that_places_many_starts_them_a_chunk_per_transaction(
    master: Master, monkeypatch: Any
) -> None:
    monkeypatch.setattr(scheduling, "APPLY_CHUNK", 40)  # of 100 placed: 40, 40 and 20
    for i in range(100):
        master.add_agent(f"a{i:03d}", slots=1)
    units: list[int] = []
    real_assign = master.scheduling._assign
    monkeypatch.setattr(
        master.scheduling,
        "_assign",
        lambda w, chunk, offsets: units.append(len(chunk)) or real_assign(w, chunk, offsets),
    )
    master.create(grid(150))
    master.settle()
    assert assigned(master) == 100
    assert units[:3] == [40, 40, 20]
    with master.db.read() as s:
        offsets = [o for o in s.scalars(select(models.Allocation.port_offset)) if o is not None]
    assert sorted(offsets) == list(range(100))  # one port block each, across the chunks
    assert master.ctx.telemetry.scheduling_start.snapshot().count >= 1
    assert master.ctx.telemetry.scheduling_pass_cpu.snapshot().count >= 1


class CountingTracker(ChangeTracker):
    """A tracker that counts the flushes it was told of."""

    flushes = 0

    def _flushed(self, session: Any, context: Any) -> None:
        self.flushes += 1
        super()._flushed(session, context)


def test_a_stopped_tracker_and_a_closed_masters_view_are_told_of_no_more_writes(master: Master) -> None:
    """A tracker that stops (its view no longer used, or its master stopping) leaves the database's
    sessions: a master started again on the same Database must not find the last one's listeners."""
    tracker = CountingTracker(master.db)
    master.add_agent("a1")
    told = tracker.flushes
    assert told > 0 and tracker.take()
    tracker.stop()
    tracker.stop()  # idempotent
    master.add_agent("a2")
    assert tracker.flushes == told and not tracker.take()

    view = master.scheduling.view
    assert view is not None and view.tracker is not None
    master.close()
    view.tracker.take()
    with master.db.transaction() as s:
        now = utcnow()
        s.add(models.Agent(id="a3", resource_pool="default", registered_time=now, last_seen=now))
    assert not view.tracker.take()
    assert not any(
        event.contains(master.db._sessions, name, listener) for name, listener in view.tracker._listeners()
    )


def test_a_jobs_limits_are_read_from_its_config_as_the_config_view_reads_them(
    master_on_each_database: Master,
) -> None:
    """The scheduling view reads max_slots and weight out of the stored configs in SQL (JSON
    paths differ between the databases); a config stored without them (before they existed) reads
    as the schema's defaults."""
    master = master_on_each_database
    limited = master.create(grid(2, resources={"max_slots": 3, "weight": 2.5}))
    whole_weight = master.create(grid(2, resources={"weight": 4}))
    plain = master.create(grid(2))
    bare = master.create(grid(2))
    with master.ctx.unit_of_work() as w:
        exp = w.session.get_one(models.Experiment, bare)
        resources = {k: v for k, v in exp.config["resources"].items() if k not in ("max_slots", "weight")}
        exp.config = {**exp.config, "resources": resources}
    ids = {limited, whole_weight, plain, bare}
    with master.db.read() as s:
        limits = scheduling_rows.limits_of(s, ids)
        configs = {
            e.id: e.config for e in s.scalars(select(models.Experiment).where(models.Experiment.id.in_(ids)))
        }
    for experiment_id in ids:
        view = config_view(configs[experiment_id])
        assert limits[experiment_id] == scheduling_rows.JobLimits(view.max_slots, view.weight)
    assert limits[limited] == scheduling_rows.JobLimits(3, 2.5)
    assert limits[whole_weight] == scheduling_rows.JobLimits(None, 4.0)
    assert limits[plain] == limits[bare] == scheduling_rows.JobLimits(None, 1.0)


class OwnTracker(ChangeTracker):
    """A second tracker on the same database, keeping its unit's changes apart from the view's."""

    _KEY = "tests.own_scheduling_changes"


@pytest.mark.on_each_database
def test_a_workspace_deleted_by_a_statement_sends_the_pools_again(master: Master) -> None:
    """A workspace's pool shares go with it by the database's cascade, which no statement of the
    unit names: the tracker takes the workspace's DELETE as a change of the pools' quotas."""
    with master.db.transaction() as s:
        s.add(models.Workspace(id=901, name="gone", user_id=master.admin.user_id, created_at=utcnow()))
        s.flush()
        s.add(models.PoolShare(pool_name="default", workspace_id=901, user_id=0, max_slots=1))
    tracker = OwnTracker(master.db)
    tracker.take()
    with master.db.transaction() as s:
        s.execute(delete(models.Workspace).where(models.Workspace.id == 901))
    changed = tracker.take()
    assert changed.pools and not changed.everything
    with master.db.read() as s:
        assert s.scalar(select(func.count()).select_from(models.PoolShare)) == 0  # gone with it
    tracker.stop()


@pytest.mark.on_each_database
def test_new_trials_allocations_inserted_in_one_statement_are_known_by_id(master: Master) -> None:
    """A search's trials, tasks and allocation requests are INSERT statements, not flushes of
    objects (searcher_actions._create_trials): the tracker learns the new allocations' ids from
    the statement, as from a flush, instead of asking the next pass for a whole read."""
    master.add_agent("a1", slots=1)
    master.settle()
    # A tracker of the test's own beside the view's (whose changes the next pass must still get).
    tracker = OwnTracker(master.db)
    tracker.take()
    request = creation.CreateRequest(
        config_text=grid(30),
        files=[ContextFile(path="train.py", type=ord("0"), content=b"x\n", mtime=0, mode=0o644)],
        activate=True,
        validate_only=False,
        project_id=None,
    )
    created = creation.create(master.ctx, master.admin, request)
    changed = tracker.take()
    with master.db.read() as s:
        made = set(
            s.scalars(
                select(models.Allocation.id)
                .join(models.Trial, models.Trial.id == models.Allocation.trial_id)
                .where(models.Trial.experiment_id == created.experiment_id)
            )
        )
    assert len(made) == 30 and made <= changed.allocations
    assert not changed.everything
    assert changed.experiments == changed.new_experiments == {created.experiment_id}
    # The pass that follows places from that alone, and its comparison with a whole read holds.
    master.settle()
    assert assigned(master) == 1

    # An INSERT statement that names no ids still means a whole read.
    with master.db.transaction() as s:
        s.execute(
            insert(models.Task).from_select(
                [c.name for c in models.Task.__table__.columns],
                select(*models.Task.__table__.columns).where(models.Task.id == "none"),
            )
        )
    assert tracker.take().everything
    tracker.stop()


def test_a_new_experiments_allocations_are_read_once_and_an_edited_ones_by_experiment(
    master: Master, monkeypatch: Any
) -> None:
    """A new experiment's allocations are all new rows, which the pass reads by id with every
    other new row: it does not read them a second time by experiment. An experiment edited later
    (its max_slots bears on every allocation it has) is read by experiment."""
    master.add_agent("a1", slots=1)
    master.settle()
    by_experiment: list[set[int]] = []
    real = scheduling_view.live_allocation_rows_of

    def recorded(s: Any, experiment_ids: Any) -> list[Any]:
        by_experiment.append(set(experiment_ids))
        return real(s, experiment_ids)

    monkeypatch.setattr(scheduling_view, "live_allocation_rows_of", recorded)
    first = master.create(grid(6))
    master.settle()  # every pass compared with a whole read (tests/conftest.py)
    assert assigned(master) == 1
    assert all(first not in ids for ids in by_experiment)
    with master.ctx.unit_of_work() as w:
        experiment_edits.apply(
            master.ctx, w, experiments.load(w, first), experiment_edits.ExperimentEdit(max_slots=1)
        )
    master.scheduling.run_pass()
    assert {first} in by_experiment


@pytest.mark.on_each_database
def test_an_agents_slots_come_in_one_order_from_a_whole_read_and_a_read_by_agent(master: Master) -> None:
    master.add_agent("a1", slots=4)
    master.add_agent("a2", slots=4)
    # An update moves the row to the end of PostgreSQL's heap: a read ordered by agent alone then
    # lists slot 0 last, where a read of the agent by its key lists it first.
    for enabled in (False, True):
        with master.ctx.unit_of_work() as w:
            w.session.get_one(models.AgentSlot, ("a1", "0")).enabled = enabled
    placeable = frozenset({"a1", "a2"})
    with master.db.read() as s:
        whole = scheduling_rows.agent_messages(s, placeable, None)
        by_agent = scheduling_rows.agent_messages(s, placeable, None, ["a1"])
    assert [slot.id for slot in whole[0].slots] == ["0", "1", "2", "3"]
    assert whole[0] == by_agent[0]


@pytest.mark.on_each_database
def test_a_containers_progress_is_read_by_a_pass_only_where_it_changes_what_the_scheduler_is_told(
    master: Master,
) -> None:
    """PULLING and STARTING move an allocation among the states that hold slots: nothing a pass
    sends changes, and the tracker records nothing. RUNNING sets its start (the scheduler's
    `started_at`): recorded as started, which only pools that read it (fair share, quotas) read and
    send; the default pool does not. Its end is recorded as ended, which a pass drops without
    reading it. (Every settle compares the view with a whole read of the database.)"""
    master.add_agent("a1", slots=1)
    master.create(grid(2))
    master.settle()
    with master.db.read() as s:
        allocation_id = s.scalars(
            select(models.Allocation.id).where(models.Allocation.state == "ASSIGNED")
        ).one()
    (container_id,) = [c.id for c in master.containers(allocation_id)]
    tracker = OwnTracker(master.db)
    tracker.take()
    recording = Recording(master.ctx.scheduler)
    master.ctx.scheduler = recording  # type: ignore[assignment]
    assert master.scheduling.view is not None and not master.scheduling.view.reads_started_at
    for state in (apb.CONTAINER_STATE_PULLING, apb.CONTAINER_STATE_STARTING):
        master.container_state(container_id, state)
        assert allocation_id not in tracker.take().allocations
    master.container_state(container_id, apb.CONTAINER_STATE_RUNNING)
    changed = tracker.take()
    assert allocation_id in changed.started and allocation_id not in changed.allocations | changed.ended
    # The default pool reads no start: nothing of it was sent (the report settled the master).
    assert not any(r.allocation_id == allocation_id for sent in recording.sent for r in sent.requests)
    master.exit(container_id, 0)
    changed = tracker.take()
    assert allocation_id in changed.ended
    assert assigned(master) == 1  # the next trial took the freed slot
    tracker.stop()


@pytest.mark.on_each_database
def test_what_a_pass_placed_the_scheduler_kept_and_the_next_pass_neither_reads_nor_sends_it(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass that places trials knows how their rows now read (ASSIGNED, their port block,
    their placements), and the scheduler kept its assignments as placed (keep_assignments): the
    next pass reads none of them and sends none of them. (Every pass is still compared with a whole
    read of the database, and a settled master's view with the scheduler's session.)"""
    recording = Recording(master.ctx.scheduler)
    master.ctx.scheduler = recording  # type: ignore[assignment]
    master.add_agent("a1", slots=1)
    master.create(grid(6))
    master.settle()
    read: list[str] = []
    by_id = scheduling_view.allocation_rows_by_id

    def counted(s: Any, ids: Any) -> list[Any]:
        read.extend(ids)
        return by_id(s, ids)

    monkeypatch.setattr(scheduling_view, "allocation_rows_by_id", counted)
    recording.sent.clear()
    master.add_agent("a2", slots=3)
    master.scheduling.run_pass()  # places three
    assert assigned(master) == 4
    master.scheduling.run_pass()
    assert not recording.sent[1].requests
    assert not read
    master.settle()  # and the view agrees with a whole read and with the scheduler's session


class Answering(Recording):
    """A recording scheduler port that runs `meanwhile` once after the first answer that assigns
    anything (before the master applies it), and answers as a scheduler that keeps nothing when
    `old`."""

    def __init__(self, inner: Any, meanwhile: Any = None, old: bool = False) -> None:
        super().__init__(inner)
        self.meanwhile = meanwhile
        self.old = old

    def schedule_changes(self, request: pb.ScheduleChangesRequest) -> pb.ScheduleChangesResponse:
        self.sent.append(request)
        if self.old:
            request = pb.ScheduleChangesRequest()
            request.CopyFrom(self.sent[-1])
            request.keep_assignments = False  # a scheduler that predates it reads no such field
        answer = self.inner.schedule_changes(request)
        if answer.decision.assignments and self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            meanwhile()
        return answer  # type: ignore[no-any-return]


def test_an_assignment_the_master_did_not_apply_is_sent_back_waiting_and_placed_later(master: Master) -> None:
    """The agent left while the scheduler decided: the master applies nothing there, and the
    next pass sends the request back as it stands (waiting), so the scheduler, which kept the
    assignment, places it again once an agent is back."""
    master.add_agent("a1", slots=1)
    master.create(grid(3))
    master.settle()
    assert assigned(master) == 1
    answering = Answering(master.ctx.scheduler, meanwhile=lambda: master.hub.connected.discard("a2"))
    master.ctx.scheduler = answering  # type: ignore[assignment]
    master.add_agent("a2", slots=1)
    master.scheduling.run_pass()
    assert answering.sent[-1].keep_assignments
    assert assigned(master) == 1  # the assignment on a2 was not applied
    master.scheduling.run_pass()
    back = [r for r in answering.sent[-1].requests if not r.placements]
    assert len(back) == 1  # sent back waiting
    master.settle()  # the scheduler's session holds it waiting, as the view does
    master.hub.connected.add("a2")
    master.settle()
    assert assigned(master) == 2


def test_a_scheduler_that_keeps_no_assignments_is_sent_them_back_placed(master: Master) -> None:
    answering = Answering(master.ctx.scheduler, old=True)
    master.ctx.scheduler = answering  # type: ignore[assignment]
    master.add_agent("a1", slots=1)
    master.create(grid(5))
    assert assigned(master) == 1
    master.add_agent("a2", slots=1)
    master.scheduling.run_pass()
    assert assigned(master) == 2
    master.scheduling.run_pass()
    told = [r for r in answering.sent[-1].requests if r.placements]
    assert [p.agent_id for r in told for p in r.placements] == ["a2"]
    master.settle()


def test_a_pass_whose_placing_failed_sends_a_snapshot_next(master: Master, monkeypatch: Any) -> None:
    """Which kept assignments were applied is in doubt after a failure: the scheduler is told the
    whole state again."""
    recording = Recording(master.ctx.scheduler)
    master.ctx.scheduler = recording  # type: ignore[assignment]
    master.add_agent("a1", slots=1)
    master.create(grid(3))
    master.settle()
    real = scheduling.placement.assign

    def failing(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(scheduling.placement, "assign", failing)
    master.add_agent("a2", slots=1)
    with pytest.raises(RuntimeError):
        master.scheduling.run_pass()
    monkeypatch.setattr(scheduling.placement, "assign", real)
    master.scheduling.run_pass()
    assert recording.sent[-1].snapshot
    assert assigned(master) == 2
    master.settle()


@pytest.mark.on_each_database
def test_a_quota_makes_passes_send_when_placed_work_began_to_run(master: Master) -> None:
    """Only pools with quotas or fair share read when work began to run: setting a quota starts
    the session again with every start as it is, and a later start is sent; clearing it stops that.
    (Every pass is compared with a whole read of the database.)"""
    recording = Recording(master.ctx.scheduler)
    master.ctx.scheduler = recording  # type: ignore[assignment]
    master.add_agent("a1", slots=2)
    team, project = master.add_workspace("Capped")
    master.create(grid(4), project_id=project)
    view = master.scheduling.view
    assert view is not None and not view.reads_started_at
    recording.sent.clear()
    pool_shares.set_share(master.ctx, master.admin, team, "default", max_slots=2)
    master.settle()
    assert view.reads_started_at and recording.sent[0].snapshot
    with master.db.read() as s:
        allocation_id = s.scalars(
            select(models.Allocation.id).where(models.Allocation.state == "ASSIGNED").limit(1)
        ).one()
    (container_id,) = [c.id for c in master.containers(allocation_id)]
    recording.sent.clear()
    master.container_state(container_id, apb.CONTAINER_STATE_RUNNING)  # and settles
    (told,) = [r for r in recording.sent[0].requests if r.allocation_id == allocation_id]
    assert told.started_at != told.requested_at  # when it began to run
    pool_shares.clear_share(master.ctx, master.admin, team, "default")
    master.settle()
    assert not view.reads_started_at


def test_a_pass_that_fails_after_its_answer_or_before_its_request_is_followed_by_a_snapshot(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a failed pass took with it (the tracker's changes, assignments the scheduler kept and
    the master did not apply) is not lost: the next pass sends the whole state again, and the
    waiting trial is placed once its agent is back."""
    master.add_agent("a1", slots=1)
    master.create(grid(4))
    master.settle()
    answering = Answering(master.ctx.scheduler, meanwhile=lambda: master.hub.connected.discard("a2"))
    master.ctx.scheduler = answering  # type: ignore[assignment]
    master.add_agent("a2", slots=1)
    master.scheduling.run_pass()  # assigned on a2, not applied: to be sent back next pass
    assert assigned(master) == 1
    by_id = scheduling_view.allocation_rows_by_id
    failing = [True]

    def fails_once(s: Any, ids: Any) -> list[Any]:
        if failing:
            failing.clear()
            raise RuntimeError("the database went away")
        return by_id(s, ids)

    monkeypatch.setattr(scheduling_view, "allocation_rows_by_id", fails_once)
    with pytest.raises(RuntimeError):
        master.scheduling.run_pass()
    master.hub.connected.add("a2")
    master.scheduling.run_pass()
    assert answering.sent[-1].snapshot
    master.settle()
    assert assigned(master) == 2
    # And a failure between the answer and the placing (here: publishing the waiting reasons).
    real_take = scheduling.SchedulingLoop._take_reasons
    once = [True]

    def take_fails_once(self: Any, step: Any, decision: Any) -> None:
        if once and decision.assignments:
            once.clear()
            raise RuntimeError("boom")
        real_take(self, step, decision)

    monkeypatch.setattr(scheduling.SchedulingLoop, "_take_reasons", take_fails_once)
    master.add_agent("a3", slots=1)
    with pytest.raises(RuntimeError):
        master.scheduling.run_pass()
    master.settle()
    assert assigned(master) == 3
