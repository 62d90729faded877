"""Multi-container allocations, pure parts: how an allocation's end is classified when one rank
failed and its siblings were stopped, and the rendezvous info and meeting ports each container gets."""

from __future__ import annotations

import random
import uuid

import pytest

from services.master.domain.allocations.allocations import Outcome, classify
from services.master.domain.allocations.placement import PortOffsets
from services.master.domain.allocations.rendezvous import (
    PORT_BLOCKS,
    cluster_port_shift,
    free_port_offset,
    ports_for,
    rendezvous_for,
)
from services.master.domain.allocations.task_spec import entrypoint_of
from services.master.store import models


def allocation(**fields: object) -> models.Allocation:
    base: dict[str, object] = {
        "kill_requested": False,
        "failure_type": "",
        "failed_rank": None,
        "exit_code": 0,
        "preempt_requested": False,
        "preempt_acked": False,
    }
    base.update(fields)
    return models.Allocation(**base)


@pytest.mark.parametrize(
    ("fields", "outcome"),
    [
        # rank 1 exited 3; rank 0 was stopped because of it: one failure, never "killed"
        ({"failed_rank": 1, "exit_code": 3, "failure_type": "failed"}, Outcome.ERROR),
        # the first failure was an agent lost: an infrastructure failure, not counted
        ({"failed_rank": 0, "exit_code": None, "failure_type": "agent_failed"}, Outcome.TRANSIENT),
        # a user kill wins over whatever the containers did as they died
        (
            {"kill_requested": True, "failed_rank": 1, "exit_code": 137, "failure_type": "killed"},
            Outcome.KILLED,
        ),
        ({"exit_code": 0, "preempt_requested": True, "preempt_acked": True}, Outcome.PREEMPTED),
        ({"exit_code": 0}, Outcome.CLEAN),
        ({"exit_code": 1, "failure_type": "failed"}, Outcome.ERROR),
    ],
)
def test_exit_classification(fields: dict[str, object], outcome: Outcome) -> None:
    assert classify(allocation(**fields)) == outcome


def test_port_offsets_are_unique_among_live_allocations() -> None:
    def offset(in_use: list[tuple[int | None, int]]) -> int:
        return PortOffsets(in_use).take()

    assert offset([]) == 0
    assert offset([(0, 1), (1, 1), (3, 1), (None, 4)]) == 2
    assert offset([(b, 1) for b in range(PORT_BLOCKS)]) == 0  # all taken: the least shared
    assert offset([(0, 2), (PORT_BLOCKS + 1, 1), *((b, 1) for b in range(2, PORT_BLOCKS))]) == 1
    offsets = PortOffsets([(0, 1)])
    assert [offsets.take(), offsets.take()] == [1, 2]  # each taken one counts at once
    assert free_port_offset([2, 1, 1]) == 1
    ports = [ports_for(offset) for offset in range(PORT_BLOCKS)]
    used = [p for block in ports for p in (block.c10d, block.collectives, block.det_pub, block.det_pull)]
    assert len(used) == len(set(used)), "two blocks share a port"
    assert max(used) < 32768, "below Linux's ephemeral ports"
    assert (ports[0].c10d, ports[0].det_pub, ports[0].det_pull) == (29400, 12360, 12361)


def test_many_takes_choose_as_the_lowest_least_held_block_would() -> None:
    """A pass takes many blocks from one PortOffsets: each is free_port_offset's choice over the
    counts as the takes before it left them."""
    rng = random.Random(7)
    in_use = [(rng.randrange(PORT_BLOCKS), rng.randrange(1, 4)) for _ in range(800)]
    offsets = PortOffsets(in_use)
    counts = list(offsets.counts)
    for _ in range(3 * PORT_BLOCKS):
        expected = free_port_offset(counts)
        counts[expected] += 1
        assert offsets.take() == expected
    assert offsets.counts == counts


def test_each_cluster_turns_its_port_blocks_by_a_shift_of_its_own() -> None:
    """Two clusters on one machine do not both start at the first block; within one cluster the
    turned blocks stay distinct, and the shift is the same on every master of the cluster."""
    shifts = {cluster_port_shift(str(uuid.UUID(int=n))) for n in range(50)}
    assert len(shifts) > 40 and all(0 <= s < PORT_BLOCKS for s in shifts)
    assert cluster_port_shift("a-cluster") == cluster_port_shift("a-cluster")
    shift = cluster_port_shift("a-cluster")
    blocks = [ports_for(offset, shift).c10d for offset in range(PORT_BLOCKS)]
    assert len(set(blocks)) == PORT_BLOCKS and min(blocks) == 29400 and max(blocks) == 29400 + PORT_BLOCKS - 1
    assert rendezvous_for(["h"], [2], 0, 3, shift).c10d_port == ports_for(3, shift).c10d


def test_rendezvous_by_rank_and_loopback_on_one_machine() -> None:
    two_hosts = rendezvous_for(["10.0.0.1", "10.0.0.2"], [2, 2], 1, 7)
    assert list(two_hosts.container_addrs) == ["10.0.0.1", "10.0.0.2"]
    assert (two_hosts.container_rank, list(two_hosts.container_slot_counts)) == (1, [2, 2])
    assert two_hosts.c10d_port == 29407
    one_host = rendezvous_for(["10.0.0.1", "10.0.0.1"], [1, 1], 0, 0)
    assert list(one_host.container_addrs) == ["127.0.0.1", "127.0.0.1"]


def test_a_legacy_trial_class_entrypoint_runs_through_determineds_launcher() -> None:
    assert entrypoint_of({"entrypoint": "model_def:MyTrial"}) == (
        ["python3", "-m", "determined.launch.torch_distributed", "--", "--trial", "model_def:MyTrial"],
        False,
    )
    assert entrypoint_of({"entrypoint": "python3 train.py"}) == (["python3 train.py"], True)
    assert entrypoint_of({"entrypoint": ["python3", "a:b"]}) == (["python3", "a:b"], False)
