"""Pause, activate and kill in order; metric reports stored once and archived past a restart's
checkpoint; the searcher pump restoring a session after the searcher lost it; scheduling decisions
that the cluster overtook; the transition tables refusing forbidden moves; and more slots than the
pool has accepted with Determined's warning, waiting for agents."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from cairn.agent.v1 import agent_pb2 as apb
from cairn.scheduler.v1 import scheduler_pb2 as schpb
from services.master.domain.allocations import allocations, containers
from services.master.domain.experiments import creation, experiments
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument
from services.master.domain.kernel.states import AllocationState, InvalidTransition, RunState
from services.master.domain.metrics import progress
from services.master.domain.scheduling import agents
from services.master.domain.scheduling.liveness import LivenessLoop
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.trials import trials
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text


def test_pause_is_graceful_activate_resumes_and_kill_wins(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(trial.id).id)

    with master.ctx.unit_of_work() as w:
        experiments.pause(master.ctx, w, experiments.load(w, experiment_id))
    alloc = master.live(trial.id)
    assert alloc.preempt_requested and not alloc.kill_requested  # a preemption, not a kill
    assert master.trials(experiment_id)[0].state == "PAUSED"
    with master.ctx.unit_of_work() as w:  # the code hears it and acknowledges
        w.session.get_one(models.Allocation, alloc.id).preempt_acked = True
    master.exit(container, 0)
    trial = master.trials(experiment_id)[0]
    assert (trial.state, trial.restarts, trial.run_id) == ("PAUSED", 0, 1)

    with master.ctx.unit_of_work() as w:
        experiments.activate(master.ctx, w, experiments.load(w, experiment_id))
    master.settle()
    resumed = master.live(trial.id)
    assert resumed.run_id == 2
    (container,) = master.run_containers(resumed.id)

    with master.ctx.unit_of_work() as w:
        experiments.kill(master.ctx, w, experiments.load(w, experiment_id))
    killed = master.live(trial.id)
    assert killed.kill_requested and killed.state == "TERMINATING"
    assert master.hub.commands("kill")[-1][1].container_id == container
    master.exit(container, 137, apb.FAILURE_TYPE_KILLED)
    trial = master.trials(experiment_id)[0]
    assert (trial.state, trial.restarts) == ("CANCELED", 0)
    assert master.experiment(experiment_id).state == "CANCELED"


@pytest.mark.on_each_database  # metric intake, and the archiving UPDATE
def test_reports_are_stored_once_and_a_restart_archives_what_its_checkpoint_lost(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create(max_restarts=1)
    (trial,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(trial.id).id)
    for step in (1, 2, 3, 4):
        assert master.report(trial.id, 1, "training", step, step, loss=1.0 / step) == 1
    assert master.report(trial.id, 1, "training", 2, 2, loss=0.5) == 0  # a resend: stored once
    master.exit(container, 1)
    (container,) = master.run_containers(master.live(trial.id).id)
    # The second run resumed from a checkpoint at step 2 and reports step 3 again.
    master.report(trial.id, 2, "training", 3, 1, loss=0.3)
    assert master.stored_steps(trial.id) == [1, 2, 3]
    assert master.stored_steps(trial.id, archived=True) == [3, 4]


def test_the_pump_restores_a_session_the_searcher_lost(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create(
        searcher={
            "name": "random",
            "metric": "loss",
            "max_trials": 2,
            "max_concurrent_trials": 1,
            "max_length": {"batches": 10},
        },
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 1}},
    )
    first = master.trials(experiment_id)
    assert len(first) == 1  # one at a time
    master.searchers.searcher.restart()  # the searcher process restarted and lost the session
    session_id = master.experiment(experiment_id).searcher_session_id
    assert session_id not in master.searchers.searcher.sessions
    (container,) = master.run_containers(master.live(first[0].id).id)
    master.report(first[0].id, 1, "validation", 10, 1, loss=0.4)
    master.exit(container, 0)
    trials_now = master.trials(experiment_id)
    assert trials_now[0].state == "COMPLETED"
    assert len(trials_now) == 2  # the search went on from the stored snapshot
    assert session_id in master.searchers.searcher.sessions


def test_a_decision_the_cluster_overtook_is_not_applied(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    placed = master.live(trial.id)
    # A decision taken for this allocation before it was placed: it is no longer pending.
    stale = schpb.ScheduleResponse(
        assignments=[
            schpb.Assignment(
                allocation_id=placed.id, placements=[schpb.Placement(agent_id="a1", slot_ids=["0"])]
            )
        ]
    )
    starts = len(master.hub.commands("start"))
    master.scheduling._apply(stale)
    assert len(master.hub.commands("start")) == starts
    # And one for a slot another allocation holds is not applied either.
    other = master.create()
    (waiting_trial,) = master.trials(other)
    waiting = master.live(waiting_trial.id)
    assert waiting.state == "PENDING"
    master.scheduling._apply(
        schpb.ScheduleResponse(
            assignments=[
                schpb.Assignment(
                    allocation_id=waiting.id, placements=[schpb.Placement(agent_id="a1", slot_ids=["0"])]
                )
            ]
        )
    )
    assert master.live(waiting_trial.id).state == "PENDING"
    assert len(master.hub.commands("start")) == starts


def test_a_decision_for_an_agent_closed_meanwhile_or_a_preemption_for_work_gone_is_not_applied(
    master: Master,
) -> None:
    """The scheduler decides on what it read; a user may disable or drain the agent, or kill what a
    preemption made room for, before the decision comes back."""
    master.add_agent("a1")
    master.add_agent("a2")
    agents.set_enabled(master.ctx, "a2", False)
    first = master.create()
    (running_trial,) = master.trials(first)
    running = master.live(running_trial.id)
    assert running.state != "PENDING" and running.placements[0]["agent_id"] == "a1"
    waiting_experiment = master.create()
    (waiting_trial,) = master.trials(waiting_experiment)
    waiting = master.live(waiting_trial.id)
    assert waiting.state == "PENDING"
    starts = len(master.hub.commands("start"))
    # Closed to new work: the agent disabled, or draining, or (the agent enabled) the slot disabled.
    closings = [
        lambda: agents.set_enabled(master.ctx, "a2", False),
        lambda: agents.set_enabled(master.ctx, "a2", False, drain=True),
        lambda: (
            agents.set_enabled(master.ctx, "a2", True),
            agents.set_slot_enabled(master.ctx, "a2", "0", False),
        ),
    ]
    for close in closings:
        close()
        master.scheduling._apply(
            schpb.ScheduleResponse(
                assignments=[
                    schpb.Assignment(
                        allocation_id=waiting.id, placements=[schpb.Placement(agent_id="a2", slot_ids=["0"])]
                    )
                ]
            )
        )
        assert (
            master.live(waiting_trial.id).state == "PENDING" and len(master.hub.commands("start")) == starts
        )
    # A preemption for an allocation that no longer waits (its experiment was killed) is dropped.
    with master.ctx.unit_of_work() as w:
        experiments.kill(master.ctx, w, experiments.load(w, waiting_experiment))
    master.scheduling._apply(
        schpb.ScheduleResponse(
            preemptions=[schpb.Preemption(allocation_id=running.id, for_allocation_id=waiting.id)]
        )
    )
    assert not master.live(running_trial.id).preempt_requested


def test_the_tables_refuse_forbidden_moves(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(trial.id).id)
    master.exit(container, 0)
    with master.ctx.unit_of_work() as w:
        exp = w.session.get_one(models.Experiment, experiment_id)
        done = w.session.get_one(models.Trial, trial.id)
        with pytest.raises(InvalidTransition, match="experiment cannot go from COMPLETED to ACTIVE"):
            experiments.transition(master.ctx, w, exp, RunState.ACTIVE, "test")
        with pytest.raises(InvalidTransition, match="trial cannot go from COMPLETED to ACTIVE"):
            trials.transition(master.ctx, w, done, RunState.ACTIVE, "test")
        ended = w.session.scalars(
            select(models.Allocation).where(models.Allocation.trial_id == trial.id)
        ).one()
        # Allocations only move forward: a late report of an earlier state is refused.
        assert not allocations.transition(master.ctx, w, ended, AllocationState.RUNNING, "late report")
        assert ended.state == "TERMINATED"


def test_an_early_exit_reported_again_is_done_once_and_a_different_one_refused(master: Master) -> None:
    """A client retries a report whose answer a database outage lost: the same report is taken as
    done, with one searcher event; another reason after it is refused."""
    master.add_agent("a1")
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)

    def events() -> int:
        with master.db.read() as s:
            return len(s.scalars(select(models.SearcherEvent)).all())

    before = events()
    progress.report_early_exit(master.ctx, master.admin, trial.id, "USER_REQUESTED_STOP")
    progress.report_early_exit(master.ctx, master.admin, trial.id, "USER_REQUESTED_STOP")
    assert events() - before == 1
    with pytest.raises(FailedPrecondition, match="already reported an early exit"):
        progress.report_early_exit(master.ctx, master.admin, trial.id, "INVALID_HP")
    with master.db.read() as s:
        assert s.get_one(models.Trial, trial.id).early_exit_reason == "USER_REQUESTED_STOP"


def test_more_slots_than_the_pool_has_is_accepted_with_the_warning_and_waits_for_agents(
    master: Master,
) -> None:
    # Determined's behaviour: a launch warning (LAUNCH_WARNING_CURRENT_SLOTS_EXCEEDED), not a
    # refusal; the job waits until agents join.
    master.add_agent("a1", slots=1)
    created = creation.create(
        master.ctx,
        master.admin,
        creation.CreateRequest(
            config_text=config_text(resources={"slots_per_trial": 2}),
            files=[ContextFile(path="train.py", type=ord("0"), content=b"pass\n", mtime=0, mode=0o644)],
            activate=True,
            validate_only=False,
        ),
    )
    assert created.slots_exceeded and created.experiment_id is not None
    master.settle()
    (trial,) = master.trials(created.experiment_id)
    (waiting,) = master.allocations(trial.id)
    assert waiting.state == AllocationState.PENDING.value
    # A second agent of the same size joins: the gang of two fits across both, and starts.
    master.add_agent("a2", slots=1)
    master.settle()
    (placed,) = master.allocations(trial.id)
    assert placed.state != AllocationState.PENDING.value


def test_validating_only_checks_the_config_and_creates_nothing(master: Master) -> None:
    # `det experiment create --test` first sends the config with validate_only (Determined's
    # validateOnly), then creates its one-batch test experiment as any other.
    master.add_agent("a1")

    def validate(text: str) -> creation.Created:
        return creation.create(
            master.ctx,
            master.admin,
            creation.CreateRequest(
                config_text=text,
                files=[ContextFile(path="train.py", type=ord("0"), content=b"pass\n", mtime=0, mode=0o644)],
                activate=True,
                validate_only=True,
            ),
        )

    checked = validate(config_text(max_restarts=0))
    assert checked.experiment_id is None and checked.config["max_restarts"] == 0
    with pytest.raises(InvalidArgument, match="max_restarts"):
        validate(config_text(max_restarts=-1))
    with master.db.read() as s:
        assert list(s.scalars(select(models.Experiment.id))) == []
        assert list(s.scalars(select(models.Trial.id))) == []
    assert len(master.searchers.searcher.sessions) == 0


def test_a_paused_experiment_gets_its_trials_paused_and_activating_runs_them(master: Master) -> None:
    # Created paused (det experiment create --paused): the search's trials are made, paused, and
    # nothing is scheduled; activating it runs them.
    master.add_agent("a1")
    created = creation.create(
        master.ctx,
        master.admin,
        creation.CreateRequest(
            config_text=config_text(
                searcher={"name": "grid", "metric": "loss", "max_length": {"batches": 1}},
                hyperparameters={"x": {"type": "categorical", "vals": [1, 2]}},
            ),
            files=[ContextFile(path="train.py", type=ord("0"), content=b"pass\n", mtime=0, mode=0o644)],
            activate=False,
            validate_only=False,
        ),
    )
    assert created.experiment_id is not None
    experiment_id = created.experiment_id
    master.settle()
    assert master.experiment(experiment_id).state == "PAUSED"
    first, second = master.trials(experiment_id)
    assert (first.state, second.state) == ("PAUSED", "PAUSED")
    assert master.allocations(first.id) == [] and master.allocations(second.id) == []
    with master.ctx.unit_of_work() as w:
        experiments.activate(master.ctx, w, experiments.load(w, experiment_id))
    master.settle()
    assert [t.state for t in master.trials(experiment_id)] == ["ACTIVE", "ACTIVE"]
    for trial in master.trials(experiment_id):
        for container_id in master.run_containers(master.live(trial.id).id):
            master.exit(container_id, 0)
    assert master.experiment(experiment_id).state == "COMPLETED"


def test_pausing_before_the_searcher_answers_makes_its_next_trial_paused(master: Master) -> None:
    # Paused while the searcher has not yet answered the first trial's exit: the trial it then asks
    # for is made paused and waits, with nothing scheduled, until the experiment is activated.
    master.add_agent("a1")
    experiment_id = master.create(
        searcher={
            "name": "random",
            "metric": "loss",
            "max_length": {"batches": 1},
            "max_trials": 2,
            "max_concurrent_trials": 1,
        },
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 1}},
    )
    (first,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(first.id).id)
    with master.ctx.unit_of_work() as w:
        containers.on_container_state(
            master.ctx,
            w,
            apb.ContainerStateChanged(
                container_id=container, state=apb.CONTAINER_STATE_TERMINATED, exit_code=0
            ),
        )
        # The exit's searcher event is in the outbox, not yet delivered.
        experiments.pause(master.ctx, w, experiments.load(w, experiment_id))
    master.settle()
    exp = master.experiment(experiment_id)
    assert exp.state == "PAUSED"
    done, waiting = master.trials(experiment_id)
    assert (done.state, waiting.state) == ("COMPLETED", "PAUSED")
    assert master.allocations(waiting.id) == []
    with master.ctx.unit_of_work() as w:
        experiments.activate(master.ctx, w, experiments.load(w, experiment_id))
    master.settle()
    for container_id in master.run_containers(master.live(waiting.id).id):
        master.exit(container_id, 0)
    assert master.experiment(experiment_id).state == "COMPLETED"


def test_a_trial_ignoring_preemption_ends_on_kill_or_at_its_preemption_timeout(master: Master) -> None:
    # Determined's test_kill_experiment_ignoring_preemption: the cancel asks the code to stop and
    # waits; the code never does; a kill ends it at once (no grace), and the experiment is CANCELED.
    master.add_agent("a1")
    killed_id = master.create()
    (trial,) = master.trials(killed_id)
    alloc = master.live(trial.id)
    (container,) = master.run_containers(alloc.id)
    with master.ctx.unit_of_work() as w:
        experiments.cancel(master.ctx, w, experiments.load(w, killed_id))
    asked = master.live(trial.id)
    assert asked.preempt_requested and not asked.kill_requested and asked.kill_deadline is not None
    assert master.experiment(killed_id).state == "STOPPING_CANCELED"
    with master.ctx.unit_of_work() as w:
        experiments.kill(master.ctx, w, experiments.load(w, killed_id))
    assert master.live(trial.id).kill_requested
    (kill,) = [cmd for _agent, cmd in master.hub.commands("kill") if cmd.container_id == container]
    assert kill.grace_seconds == 0
    master.exit(container, 137)
    assert master.experiment(killed_id).state == "CANCELED"
    assert master.trials(killed_id)[0].state == "CANCELED"

    # Canceled only: once the preemption timeout has passed, the liveness loop kills it.
    timed_id = master.create(preemption_timeout=0)
    (trial,) = master.trials(timed_id)
    (container,) = master.run_containers(master.live(trial.id).id)
    with master.ctx.unit_of_work() as w:
        experiments.cancel(master.ctx, w, experiments.load(w, timed_id))
    assert not master.live(trial.id).kill_requested
    LivenessLoop(master.ctx).check()
    assert master.live(trial.id).kill_requested
    master.exit(container, 137)
    assert master.experiment(timed_id).state == "CANCELED"
