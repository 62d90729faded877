"""Calls that wait for an allocation's signals take a bounded slot only while they wait
(servicers/thread_slots.py): past the last slot a watch still gets the state as it is, then
ResourceExhausted; a long poll that would wait is refused at once; one that need not wait needs no
slot. A slot comes back when its wait ends."""

from __future__ import annotations

import threading

import pytest

from services.master.domain import allocations, signals
from services.master.domain.errors import ResourceExhausted
from services.master.servicers.thread_slots import SignalWaitSlots
from services.master.store import models
from tests.unit.master.domain.harness import Master


def _running_allocation(master: Master) -> str:
    master.add_agent("a1", slots=1)
    (trial,) = master.trials(master.create())
    allocation_id = master.live(trial.id).id
    master.run_containers(allocation_id)
    return allocation_id


def _preempt(master: Master, allocation_id: str) -> None:
    with master.ctx.unit_of_work() as w:
        alloc = w.session.get(models.Allocation, allocation_id)
        assert alloc is not None
        allocations.request_preempt(master.ctx, w, alloc, "paused")


def test_a_watch_past_the_last_slot_gets_the_state_then_is_told_to_ask_again(master: Master) -> None:
    allocation_id = _running_allocation(master)
    slots = SignalWaitSlots(1)
    first = signals.watch(master.ctx, master.admin, allocation_id, lambda: True, slots.hold)
    assert next(first).preempt is False
    seen: list[signals.SignalState] = []
    waiting = threading.Thread(target=lambda: seen.append(next(first)), daemon=True)
    waiting.start()  # it holds the one slot while it waits for a change

    second = signals.watch(master.ctx, master.admin, allocation_id, lambda: True, slots.hold)
    assert next(second).preempt is False  # the state as it is, without a slot
    with pytest.raises(
        ResourceExhausted, match=r"1 calls waiting for allocation signals .*--max-signal-waiters"
    ):
        next(second)

    _preempt(master, allocation_id)
    waiting.join(10.0)
    assert [state.preempt for state in seen] == [True]
    first.close()  # the caller left: its slot comes back
    third = signals.watch(master.ctx, master.admin, allocation_id, lambda: True, slots.hold)
    assert next(third).preempt is True
    third.close()


def test_a_long_poll_that_would_wait_without_a_slot_is_refused_and_one_that_need_not_is_answered(
    master: Master,
) -> None:
    allocation_id = _running_allocation(master)
    slots = SignalWaitSlots(1)
    with slots.hold():  # every slot taken
        # Determined's first poll asks with no wait: answered, no slot needed.
        assert signals.wait_preemption(master.ctx, master.admin, allocation_id, 0, slots.hold) is False
        with pytest.raises(ResourceExhausted, match="--max-signal-waiters"):
            signals.wait_preemption(master.ctx, master.admin, allocation_id, 60, slots.hold)
        _preempt(master, allocation_id)
        # Preempted already: answered at once, no slot needed.
        assert signals.wait_preemption(master.ctx, master.admin, allocation_id, 60, slots.hold) is True
    # The slot is free again: a wait is allowed (and ends at once: the preemption is there).
    assert signals.wait_preemption(master.ctx, master.admin, allocation_id, 60, slots.hold) is True
