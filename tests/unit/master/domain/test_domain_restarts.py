"""How an allocation's end is read and what follows for its trial: failures count against
max_restarts once per allocation whatever its slots, infrastructure failures do not, and a trial
that always fails ends in ERROR after max_restarts + 1 runs (the multi-slot restart loop that once
burned a cluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.allocations import allocations, containers
from tests.unit.master.domain.harness import Master


def test_a_failing_single_slot_trial_errors_after_max_restarts_plus_one_runs(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create(max_restarts=2)
    (trial,) = master.trials(experiment_id)
    for run in (1, 2, 3):
        alloc = master.live(trial.id)
        assert alloc.run_id == run
        (container,) = master.run_containers(alloc.id)
        master.exit(container, 1)
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts, trial.run_id) == ("ERROR", 2, 3)
    assert master.experiment(experiment_id).state == "ERROR"
    assert [a.state for a in master.allocations(trial.id)] == ["TERMINATED"] * 3


def test_a_failing_rank_stops_its_siblings_and_counts_once(master: Master) -> None:
    master.add_agent("a1")
    master.add_agent("a2")
    experiment_id = master.create(max_restarts=1, resources={"slots_per_trial": 2})
    (trial,) = master.trials(experiment_id)
    for run in (1, 2):
        alloc = master.live(trial.id)
        rank0, rank1 = master.run_containers(alloc.id)
        kills_before = len(master.hub.commands("kill"))
        master.exit(rank1, 3)
        # The sibling is stopped, and the stop says why.
        kills = master.hub.commands("kill")[kills_before:]
        assert [(agent, k.container_id) for agent, k in kills] == [("a1", rank0)]
        assert "rank 1" in kills[0][1].reason
        stopping = master.allocations(trial.id)[run - 1]
        assert stopping.state == "TERMINATING" and stopping.failed_rank == 1 and not stopping.kill_requested
        # The sibling dies of the kill: still one failure, never "killed" (which would retry forever).
        master.exit(rank0, 137, apb.FAILURE_TYPE_KILLED)
        assert master.trials(experiment_id)[0].restarts == 1  # counted once per allocation, capped at 1
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts, trial.run_id) == ("ERROR", 1, 2)
    ended = master.allocations(trial.id)
    assert all(a.exit_reason and a.exit_reason.startswith("rank 1 (agent a2) failed") for a in ended)


def test_a_lost_agent_is_an_uncounted_infrastructure_failure(master: Master) -> None:
    master.add_agent("a1")
    master.add_agent("a2")
    experiment_id = master.create(max_restarts=0, resources={"slots_per_trial": 2})
    (trial,) = master.trials(experiment_id)
    rank0, rank1 = master.run_containers(master.live(trial.id).id)
    master.lose(rank1)
    master.exit(rank0, 137, apb.FAILURE_TYPE_KILLED)
    (trial,) = master.trials(experiment_id)
    # Restarted without counting, though max_restarts is 0.
    assert (trial.state, trial.restarts, trial.run_id) == ("ACTIVE", 0, 2)
    assert master.live(trial.id).run_id == 2


def test_a_clean_exit_completes_the_trial_and_the_experiment(master: Master) -> None:
    master.add_agent("a1", slots=2)
    experiment_id = master.create(resources={"slots_per_trial": 2})
    (trial,) = master.trials(experiment_id)
    alloc = master.live(trial.id)
    assert len(master.containers(alloc.id)) == 1  # both slots on one agent: one container
    (container,) = master.run_containers(alloc.id)
    master.report(trial.id, 1, "validation", 10, 1, loss=0.5)
    master.exit(container, 0)
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts, trial.progress) == ("COMPLETED", 0, 1.0)
    exp = master.experiment(experiment_id)
    assert exp.state == "COMPLETED" and exp.end_time is not None


def test_starts_the_agent_fails_again_and_again_count_as_failures_and_end_in_error(master: Master) -> None:
    """An agent whose every start dies before the code runs (a supervisor that cannot load its
    interpreter) once had a trial placed and failed thousands of times a minute: uncounted
    infrastructure failures, forever. Five such ends in a row count as one failure."""
    master.add_agent("a1")
    experiment_id = master.create(max_restarts=1)
    (trial,) = master.trials(experiment_id)
    in_a_row = allocations.MAX_START_FAILURES_IN_A_ROW
    for attempt in range(2 * in_a_row):
        alloc = master.live(trial.id)
        (container,) = [c.id for c in master.containers(alloc.id)]
        master.container_state(container, apb.CONTAINER_STATE_STARTING)
        master.container_state(
            container,
            apb.CONTAINER_STATE_TERMINATED,
            failure=apb.FAILURE_TYPE_AGENT_FAILED,
            message="the container's supervisor process died unexpectedly",
        )
        (trial,) = master.trials(experiment_id)
        assert trial.restarts == min((attempt + 1) // in_a_row, 1), attempt  # the 10th: ERROR
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts, trial.run_id) == ("ERROR", 1, 2 * in_a_row)
    last = master.allocations(trial.id)[-1]
    assert "5 starts in a row failed this way" in (last.exit_reason or "")


def test_a_start_that_ran_resets_the_count_of_failed_starts(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create(max_restarts=0)
    (trial,) = master.trials(experiment_id)
    for attempt in range(allocations.MAX_START_FAILURES_IN_A_ROW * 2 - 1):
        alloc = master.live(trial.id)
        if attempt == allocations.MAX_START_FAILURES_IN_A_ROW - 1:
            (container,) = master.run_containers(alloc.id)  # this one ran: lost later, uncounted
            master.lose(container)
            continue
        (container,) = [c.id for c in master.containers(alloc.id)]
        master.container_state(
            container, apb.CONTAINER_STATE_TERMINATED, failure=apb.FAILURE_TYPE_AGENT_FAILED
        )
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts) == ("ACTIVE", 0)


def _fails_after_running(master: Master, container: str) -> None:
    master.container_state(container, apb.CONTAINER_STATE_RUNNING)
    _report(master, container, apb.CONTAINER_STATE_TERMINATED, exit_code=1, message="exited 1 at once")


def _agent_refused_it(master: Master, container: str) -> None:
    with master.ctx.unit_of_work() as w:
        containers.start_refused(master.ctx, w, container, "start.spec.run_as: cannot switch users")


def _ended_before_it_ran(master: Master, container: str) -> None:
    # The agent could not set the container up (its ContainerSetupError): TERMINATED from STARTING.
    master.container_state(container, apb.CONTAINER_STATE_STARTING)
    _report(
        master,
        container,
        apb.CONTAINER_STATE_TERMINATED,
        failure=apb.FAILURE_TYPE_TASK_ERROR,
        message="cannot write /checkpoints: permission denied",
    )


def _exited_before_reporting_running(master: Master, container: str) -> None:
    _report(master, container, apb.CONTAINER_STATE_TERMINATED, exit_code=1, message="exited 1 at once")


def _report(master: Master, container: str, state: int, **fields: Any) -> None:
    """What the agent reports, applied without settling: the test delivers the searcher's events."""
    change = apb.ContainerStateChanged(container_id=container, state=state)
    if "exit_code" in fields:
        change.exit_code = fields.pop("exit_code")
    change.failure_type = fields.pop("failure", apb.FAILURE_TYPE_CONTAINER_FAILED)
    change.message = fields.pop("message", "")
    with master.ctx.unit_of_work() as w:
        containers.on_container_state(master.ctx, w, change)


@pytest.mark.parametrize(
    ("fail", "why"),
    [
        (_fails_after_running, "exited 1 at once"),
        (_agent_refused_it, "the agent refused it: start.spec.run_as"),
        (_ended_before_it_ran, "cannot write /checkpoints"),
        (_exited_before_reporting_running, "exited 1 at once"),
    ],
)
def test_a_single_trial_that_fails_at_start_ends_its_experiment_in_error_with_one_searcher_delivery(
    master: Master, fail: Callable[[Master, str], None], why: str
) -> None:
    """Once seen as an experiment left ACTIVE for about three minutes after its only trial failed at
    start (max_restarts 0). However the start fails, the trial is ERROR in the unit of work of the
    agent's report, and the experiment ERROR in the one delivery of the trial's exit to the
    searcher that follows: no timer, heartbeat or second round is on the way."""
    master.add_agent("a1")
    experiment_id = master.create(max_restarts=0)
    (trial,) = master.trials(experiment_id)
    (container,) = [c.id for c in master.containers(master.live(trial.id).id)]
    fail(master, container)
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts, trial.run_id) == ("ERROR", 0, 1)
    (ended,) = master.allocations(trial.id)
    assert ended.state == "TERMINATED" and why in (ended.exit_reason or ""), ended.exit_reason
    assert master.experiment(experiment_id).state == "ACTIVE"  # the searcher has not heard yet
    master.pump.deliver_all()
    exp = master.experiment(experiment_id)
    assert exp.state == "ERROR" and exp.end_time is not None
