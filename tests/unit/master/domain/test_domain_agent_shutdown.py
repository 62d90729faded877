"""An agent that is shutting down refuses new containers (CommandAck.agent_stopping): the
allocation ends as the infrastructure's failure, the trial spends no restart, and it is placed on an
agent that still takes work, never again on the stopping one."""

from __future__ import annotations

from services.master.domain.allocations import containers
from tests.unit.master.domain.harness import Master


def test_a_refusal_by_a_stopping_agent_replaces_the_trial_without_counting_it(master: Master) -> None:
    master.add_agent("a1")
    experiment_id = master.create(max_restarts=0)
    (trial,) = master.trials(experiment_id)
    first = master.live(trial.id)
    ((agent, start),) = master.hub.commands("start")
    assert agent == "a1"
    master.hub.acknowledged(start.command_id)

    master.hub.mark_stopping("a1")
    with master.ctx.unit_of_work() as w:
        containers.start_refused(
            master.ctx,
            w,
            start.container_id,
            "agent a1 takes no new work: shutting down",
            agent_stopping=True,
        )
    master.settle()

    ended = next(a for a in master.allocations(trial.id) if a.id == first.id)
    assert ended.state == "TERMINATED" and ended.failure_type == "aborted"
    (trial,) = master.trials(experiment_id)
    assert trial.state == "ACTIVE" and trial.restarts == 0
    # Waiting, not placed on the stopping agent again.
    assert master.live(trial.id).state == "PENDING"
    assert len(master.hub.commands("start")) == 1

    master.add_agent("a2")
    master.settle()
    assert master.live(trial.id).state == "ASSIGNED"
    assert [agent for agent, _ in master.hub.commands("start")] == ["a1", "a2"]
