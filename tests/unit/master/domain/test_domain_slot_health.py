"""Slot health as the master keeps it: a fault an agent reports takes the slot out of service and
stops its work as the machine's failure (the trial restarts elsewhere without counting), a
container the agent blames on its GPU does not count either, an admin's enable puts the slot back
and the same fault reported again after a reconnect is not acted on twice; where GPUs sit is kept
with the slots."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.reads.cluster import cluster_counts
from services.master.domain.scheduling import agents
from services.master.store import models
from tests.support.gpu_slots import ECC, XID_79, gpu_slots
from tests.unit.master.domain.harness import Master


def register(master: Master, agent_id: str, fault: tuple[str, float] | None = None) -> None:
    hello = apb.Hello(
        agent_id=agent_id,
        resource_pool="default",
        hostname=agent_id,
        slots=gpu_slots(agent_id, fault, numa_per_gpu=True),
    )
    agents.register(master.ctx, hello)
    master.hub.connected.add(agent_id)


def report(master: Master, agent_id: str, fault: tuple[str, float]) -> None:
    agents.update_slots(
        master.ctx, agent_id, apb.SlotReport(slots=gpu_slots(agent_id, fault, numa_per_gpu=True))
    )
    master.settle()


def slot(master: Master, agent_id: str, slot_id: str) -> models.AgentSlot:
    with master.db.read() as s:
        return s.get_one(models.AgentSlot, (agent_id, slot_id))


def test_a_faulted_slot_stops_its_work_without_counting_and_waits_for_an_admin(master: Master) -> None:
    register(master, "g1")
    experiment_id = master.create(resources={"slots_per_trial": 1}, max_restarts=0)
    (trial,) = master.trials(experiment_id)
    alloc = master.live(trial.id)
    (container,) = master.run_containers(alloc.id)
    used = master.containers(alloc.id)[0].slot_ids[0]

    report(master, "g1", (XID_79, 1_800_000_000))
    faulted = slot(master, "g1", used)
    assert (faulted.unhealthy, faulted.enabled) == (XID_79, False)
    assert faulted.fault_at == datetime.fromtimestamp(1_800_000_000, UTC)
    assert (faulted.numa_node, faulted.nvlink_domain) == (int(used), 0)
    # Stopped as the machine's failure, not killed (a kill is the user's, and ends a task for good).
    stopped = master.live(trial.id)
    assert (stopped.state, stopped.kill_requested, stopped.failure_type) == (
        "TERMINATING",
        False,
        "device_failed",
    )
    assert stopped.exit_reason == f"slot {used} of agent g1 is unhealthy: {XID_79}"
    assert master.hub.commands("kill")[-1][1].container_id == container
    with master.db.read() as s:
        assert cluster_counts(s).slots_unhealthy == 1

    # The code dies with its GPU; the trial (max_restarts 0) is placed again, on the other slot.
    master.exit(container, 137, apb.FAILURE_TYPE_KILLED)
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts) == ("ACTIVE", 0)
    again = master.live(trial.id)
    assert master.containers(again.id)[0].slot_ids != [used]

    # The agent reconnects and reports the same fault in its Hello; an admin enabled the slot in
    # between: it stays in service. A new fault takes it out again.
    agents.set_slot_enabled(master.ctx, "g1", used, True)
    register(master, "g1", (XID_79, 1_800_000_000))
    assert (slot(master, "g1", used).unhealthy, slot(master, "g1", used).enabled) == ("", True)
    report(master, "g1", (ECC, 1_800_000_100))
    assert slot(master, "g1", used).unhealthy == ECC
    with master.db.read() as s:
        assert cluster_counts(s).slots_unhealthy == 1


def test_a_container_its_agent_blames_on_the_gpu_does_not_count(master: Master) -> None:
    register(master, "g1")
    experiment_id = master.create(max_restarts=0)
    (trial,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(trial.id).id)
    # The container's end reached the master before the slot's fault (or instead of it).
    master.container_state(
        container,
        apb.CONTAINER_STATE_TERMINATED,
        exit_code=1,
        failure=apb.FAILURE_TYPE_DEVICE_FAILED,
        message=f"slot 0's GPU failed while it ran: {XID_79} (command exited with code 1)",
    )
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts) == ("ACTIVE", 0)
    ended = [a for a in master.allocations(trial.id) if a.state == "TERMINATED"]
    assert [a.failure_type for a in ended] == ["device_failed"]
    master.live(trial.id)  # placed again


def test_a_rank_that_failed_first_does_not_make_its_gpus_failure_count(master: Master) -> None:
    register(master, "g1")
    register(master, "g2")
    experiment_id = master.create(resources={"slots_per_trial": 4}, max_restarts=0)
    (trial,) = master.trials(experiment_id)
    rank0, rank1 = master.run_containers(master.live(trial.id).id)
    # Rank 1's NCCL call fails as rank 0's GPU goes; rank 0's end says why, a moment later.
    master.exit(rank1, 1)
    master.container_state(
        rank0, apb.CONTAINER_STATE_TERMINATED, exit_code=1, failure=apb.FAILURE_TYPE_DEVICE_FAILED
    )
    (trial,) = master.trials(experiment_id)
    assert (trial.state, trial.restarts) == ("ACTIVE", 0)
    (ended,) = [a for a in master.allocations(trial.id) if a.state == "TERMINATED"]
    assert ended.failure_type == "device_failed"


def test_a_fault_is_acted_on_by_its_time_and_a_changed_device_stays_out(master: Master) -> None:
    register(master, "g1", (XID_79, 1_800_000_000))
    agents.set_slot_enabled(master.ctx, "g1", "0", True)
    # The host came back from its crash with its clock behind: a new fault all the same.
    register(master, "g1", (XID_79, 1_700_000_000))
    assert slot(master, "g1", "0").unhealthy == XID_79
    # The agent restarted without the faulty GPU: slot 0 is now the device that was slot 1.
    hello = apb.Hello(
        agent_id="g1", resource_pool="default", hostname="g1", slots=gpu_slots("g1", numa_per_gpu=True)[1:]
    )
    hello.slots[0].id, hello.slots[0].index = "0", 0
    agents.register(master.ctx, hello)
    changed = slot(master, "g1", "0")
    assert changed.unhealthy == f"the device changed (was GPU-g1-0, unhealthy: {XID_79})"
    assert (changed.enabled, changed.uuid) == (False, "GPU-g1-1")


def test_an_overlong_reason_is_cut_and_a_slot_without_topology_is_unknown(master: Master) -> None:
    hello = apb.Hello(
        agent_id="c1",
        resource_pool="default",
        hostname="c1",
        slots=[apb.Slot(id="0", type=apb.DEVICE_TYPE_CPU, uuid="cpu-0")],
    )
    agents.register(master.ctx, hello)
    assert (slot(master, "c1", "0").numa_node, slot(master, "c1", "0").nvlink_domain) == (-1, -1)
    hello.slots[0].fault.reason = "x" * 5000
    hello.slots[0].fault.at.CopyFrom(Timestamp(seconds=1_800_000_000))
    agents.register(master.ctx, hello)
    assert len(slot(master, "c1", "0").unhealthy) == agents.MAX_FAULT_REASON


def test_multi_gpu_work_lands_on_one_nvlink_domain(master: Master) -> None:
    # GPUs 0-1 and 2-3 are NVLink pairs; a one-GPU trial takes GPU 0, then a two-GPU trial comes.
    hello = apb.Hello(
        agent_id="g4",
        resource_pool="default",
        hostname="g4",
        slots=[
            apb.Slot(
                id=str(i),
                type=apb.DEVICE_TYPE_CUDA,
                uuid=f"GPU-g4-{i}",
                index=i,
                topology=apb.DeviceTopology(numa_node=i // 2, nvlink_domain=i // 2 * 2),
            )
            for i in range(4)
        ],
    )
    agents.register(master.ctx, hello)
    master.hub.connected.add("g4")
    (one,) = master.trials(master.create(resources={"slots_per_trial": 1}))
    assert master.containers(master.live(one.id).id)[0].slot_ids == ["0"]
    (two,) = master.trials(master.create(resources={"slots_per_trial": 2}))
    assert master.containers(master.live(two.id).id)[0].slot_ids == ["2", "3"]
