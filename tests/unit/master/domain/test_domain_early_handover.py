"""Early hand-over of slots: a trial that says it is exiting (NotifyAllocationExiting, sent by the
Core API as the process exits) has its slots offered to the next allocation at once; the start
command names the container still on them, which the agent waits for. (Every pass also compares
the master's scheduling view with a whole read: tests/conftest.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.common.principal import Principal
from services.master.domain.kernel.errors import PermissionDenied
from services.master.domain.metrics import signals
from services.master.domain.reads.jobs import queued_jobs
from tests.unit.master.domain.harness import Master, config_text


def grid(trials: int, **overrides: Any) -> str:
    return config_text(
        searcher={"name": "grid", "metric": "loss", "max_length": 1, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "int", "minval": 0, "maxval": trials - 1, "count": trials}},
        **overrides,
    )


def starts(master: Master) -> list[apb.StartContainer]:
    return [command for _, command in master.hub.commands("start")]


def exiting(master: Master, allocation_id: str) -> bool:
    return signals.notify_exiting(master.ctx, Principal(allocation_id=allocation_id), allocation_id)


def test_an_exiting_trial_hands_its_slot_to_the_next_before_its_container_ends(master: Master) -> None:
    master.add_agent("a1", slots=1)
    experiment_id = master.create(grid(3))
    master.settle()
    first, second, third = master.trials(experiment_id)
    alloc = master.live(first.id)
    [container_id] = master.run_containers(alloc.id)
    assert len(starts(master)) == 1

    assert exiting(master, alloc.id)
    master.settle()
    # The second trial is placed on the slot the first still runs on, and its start names it.
    placed = master.live(second.id)
    assert placed.state == "ASSIGNED"
    assert [p["slot_ids"] for p in placed.placements] == [p["slot_ids"] for p in alloc.placements]
    start = starts(master)[-1]
    assert start.allocation_id == placed.id
    assert list(start.after_container_ids) == [container_id]
    # The first is still running (its process is ending): nothing else is placed meanwhile.
    assert master.live(first.id).state == "RUNNING"
    assert master.live(third.id).state == "PENDING"

    # Its container's end changes nothing more about the slot: the second already has it.
    master.exit(container_id, 0)
    ended = master.allocations(first.id)[-1]
    assert ended.state == "TERMINATED" and not ended.releasing
    assert master.live(third.id).state == "PENDING"
    assert len(starts(master)) == 2


def test_the_job_list_counts_a_handed_over_slot_once(master: Master) -> None:
    master.add_agent("a1", slots=1)
    experiment_id = master.create(grid(3))
    master.settle()
    first, second, _ = master.trials(experiment_id)
    alloc = master.live(first.id)
    master.run_containers(alloc.id)
    assert exiting(master, alloc.id)
    master.settle()
    assert master.live(second.id).state == "ASSIGNED"  # on the slot the first still runs on
    with master.ctx.db.read() as s:
        [job] = queued_jobs(s)
    assert (job.allocated_slots, job.requested_slots, job.scheduled) == (1, 3, True)


def test_a_second_notice_changes_nothing(master: Master) -> None:
    master.add_agent("a1", slots=1)
    experiment_id = master.create(grid(3))
    master.settle()
    alloc = master.live(master.trials(experiment_id)[0].id)
    master.run_containers(alloc.id)
    assert exiting(master, alloc.id)
    master.settle()
    assert exiting(master, alloc.id)
    master.settle()
    assert len(starts(master)) == 2


def test_a_start_without_an_exiting_predecessor_waits_for_nothing(master: Master) -> None:
    master.add_agent("a1", slots=2)
    experiment_id = master.create(grid(3))
    master.settle()
    first = master.live(master.trials(experiment_id)[0].id)
    master.run_containers(first.id)
    assert all(not s.after_container_ids for s in starts(master))
    assert exiting(master, first.id)
    master.settle()
    # The third trial took the released slot; only its start waits (for the first's container).
    waiting = [s for s in starts(master) if s.after_container_ids]
    assert len(starts(master)) == 3 and len(waiting) == 1


def test_only_the_allocations_own_task_can_release_it(master: Master) -> None:
    master.add_agent("a1", slots=1)
    experiment_id = master.create(grid(2))
    master.settle()
    first = master.live(master.trials(experiment_id)[0].id)
    master.run_containers(first.id)
    with pytest.raises(PermissionDenied, match="allocation token"):
        signals.notify_exiting(master.ctx, master.admin, first.id)
    second = master.live(master.trials(experiment_id)[1].id)
    with pytest.raises(PermissionDenied, match="belongs to allocation"):
        signals.notify_exiting(master.ctx, Principal(allocation_id=first.id), second.id)
    assert not master.live(master.trials(experiment_id)[0].id).releasing
    assert len(starts(master)) == 1


def test_an_allocation_not_running_does_not_release(master: Master) -> None:
    master.add_agent("a1", slots=1)
    experiment_id = master.create(grid(2))
    master.settle()
    alloc = master.live(master.trials(experiment_id)[0].id)
    assert alloc.state == "ASSIGNED"
    assert not exiting(master, alloc.id)
    master.settle()
    assert len(starts(master)) == 1


def test_a_multi_container_allocation_does_not_release(master: Master) -> None:
    master.add_agent("a1", slots=1)
    master.add_agent("a2", slots=1)
    experiment_id = master.create(grid(2, resources={"slots_per_trial": 2}))
    master.settle()
    alloc = master.live(master.trials(experiment_id)[0].id)
    master.run_containers(alloc.id)
    assert len(alloc.placements) == 2
    assert not exiting(master, alloc.id)
    master.settle()
    assert len(starts(master)) == 2  # the two containers of the first trial only
