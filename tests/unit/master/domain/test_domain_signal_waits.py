"""Calls that wait for an allocation's signals take a bounded slot only while they wait
(servicers/thread_slots.py): past the last slot a watch still gets the state as it is, then
ResourceExhausted; a long poll that would wait is refused at once; one that need not wait needs no
slot. A slot comes back when its wait ends. A waiting call reads the state again when its topic is
published, not at each of its wake-ups."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import delete, event

from cairn.searcher.v1 import searcher_pb2 as spb
from services.master.domain.allocations import stops
from services.master.domain.experiments import searcher_actions
from services.master.domain.kernel.errors import ResourceExhausted
from services.master.domain.metrics import signals
from services.master.servicers.thread_slots import SignalWaitSlots, VerdictWaitSlots
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
        stops.request_preempt(master.ctx, w, alloc, "paused")


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


def test_a_new_searcher_target_reaches_a_waiting_watch_at_once(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The searcher's new target is published on the trial's topic: the watch does not wait for a
    wake-up of its own to read it."""
    monkeypatch.setattr(signals, "WATCH_WAKE_S", 60.0)
    allocation_id = _running_allocation(master)
    watch = signals.watch(master.ctx, master.admin, allocation_id, lambda: True)
    first = next(watch)
    seen: list[signals.SignalState] = []
    waiting = threading.Thread(target=lambda: seen.append(next(watch)), daemon=True)
    waiting.start()
    time.sleep(0.2)  # in its wait
    with master.ctx.unit_of_work() as w:
        alloc = w.session.get_one(models.Allocation, allocation_id)
        trial = w.session.get_one(models.Trial, alloc.trial_id)
        exp = w.session.get_one(models.Experiment, trial.experiment_id)
        target = int(trial.searcher_target) * 3 + 7
        searcher_actions._set_target(
            master.ctx, w, exp, spb.SetTrialTarget(request_id=trial.request_id, target_length=target)
        )
    waiting.join(5.0)
    assert [s.searcher_target for s in seen] == [target] and first.searcher_target != target
    watch.close()


def test_an_idle_watch_reads_nothing_until_something_is_published(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocation_id = _running_allocation(master)
    reads: list[float] = []
    real = signals.signal_state

    def counted(ctx: object, alloc: str) -> tuple[signals.SignalState, str]:
        reads.append(time.monotonic())
        return real(ctx, alloc)  # type: ignore[arg-type]

    monkeypatch.setattr(signals, "signal_state", counted)
    monkeypatch.setattr(signals, "WATCH_WAKE_S", 0.02)  # many wake-ups
    watch = signals.watch(master.ctx, master.admin, allocation_id, lambda: True)
    next(watch)
    seen: list[signals.SignalState] = []
    waiting = threading.Thread(target=lambda: seen.append(next(watch)), daemon=True)
    waiting.start()
    time.sleep(0.5)  # ~25 wake-ups
    assert len(reads) == 2  # the first state, and once more as its wait began
    _preempt(master, allocation_id)
    waiting.join(5.0)
    assert [s.preempt for s in seen] == [True] and len(reads) == 3
    watch.close()


def test_a_trial_awaiting_its_verdict_without_room_to_wait_is_told_its_operation_at_once(
    master: Master,
) -> None:
    """GetCurrentTrialSearcherOperation waits for the searcher's verdict on a result at the target
    under a slot; with none free it answers at once, as it does when its wait ends."""
    allocation_id = _running_allocation(master)
    target = 4
    with master.ctx.unit_of_work() as w:  # the searcher sets the trial a target of its own
        alloc = w.session.get_one(models.Allocation, allocation_id)
        trial = w.session.get_one(models.Trial, alloc.trial_id)
        exp = w.session.get_one(models.Experiment, trial.experiment_id)
        searcher_actions._set_target(
            master.ctx, w, exp, spb.SetTrialTarget(request_id=trial.request_id, target_length=target)
        )
        trial_id = trial.id
    signals.complete_operation(master.ctx, master.admin, trial_id, target, 0.5)  # the searcher decides
    slots = VerdictWaitSlots(1)
    with slots.hold():  # every slot taken
        started = time.monotonic()
        operation = signals.current_operation(master.ctx, master.admin, trial_id, wait_s=30, hold=slots.hold)
        # Answered without waiting its 30 s for the verdict (no slot to wait in).
        assert time.monotonic() - started < 30 and operation.verdict_pending and operation.completed
    started = time.monotonic()
    operation = signals.current_operation(master.ctx, master.admin, trial_id, wait_s=0.5, hold=slots.hold)
    assert time.monotonic() - started >= 0.5 and operation.verdict_pending  # waited (no pump runs here)


def _set_target(master: Master, trial_id: int, target: int) -> None:
    with master.ctx.unit_of_work() as w:
        trial = w.session.get_one(models.Trial, trial_id)
        exp = w.session.get_one(models.Experiment, trial.experiment_id)
        searcher_actions._set_target(
            master.ctx, w, exp, spb.SetTrialTarget(request_id=trial.request_id, target_length=target)
        )


@pytest.mark.parametrize("writer", ["the searcher's answer", "the trial's completion"])
def test_a_commit_while_the_operation_is_read_is_never_read_half(
    master_on_each_database: Master, writer: str
) -> None:
    """The searcher pump removes the answered events and applies the answer (here a new target) in
    one transaction; a trial's completion stores its result's event with its completed length in
    one. Whichever statement of the operation's read such a commit falls after, the trial is never
    told "done" at its old target with no verdict pending (it would exit, and be started again for
    the new target): the read is one snapshot."""
    master = master_on_each_database
    allocation_id = _running_allocation(master)
    with master.ctx.db.read() as s:
        trial_id = s.get_one(models.Allocation, allocation_id).trial_id
        assert trial_id is not None
        experiment_id = s.get_one(models.Trial, trial_id).experiment_id
    read_engine = master.ctx.db._read_engine or master.ctx.db.engine
    statements = 0
    for commit_after in range(1, 6):
        target = 4 * commit_after
        _set_target(master, trial_id, target)
        if writer == "the searcher's answer":
            # The trial completed its operation at the target: its result waits for the searcher.
            signals.complete_operation(master.ctx, master.admin, trial_id, target, 0.5)

        def commit(*_: object, after: int = commit_after, target: int = target) -> None:
            nonlocal statements
            statements += 1
            if statements != after:
                return
            if writer == "the trial's completion":
                signals.complete_operation(master.ctx, master.admin, trial_id, target, 0.5)
                return
            with master.ctx.unit_of_work() as w:
                w.session.execute(delete(models.SearcherEvent))
                trial = w.session.get_one(models.Trial, trial_id)
                exp = w.session.get_one(models.Experiment, trial.experiment_id)
                searcher_actions._set_target(
                    master.ctx,
                    w,
                    exp,
                    spb.SetTrialTarget(request_id=trial.request_id, target_length=target + 1),
                )

        statements = 0
        event.listen(read_engine, "after_cursor_execute", commit)
        try:
            with master.ctx.db.snapshot_read() as s:
                operation, _ = signals._read_operation(s, trial_id, experiment_id, None)
        finally:
            event.remove(read_engine, "after_cursor_execute", commit)
        assert statements >= commit_after
        assert not (operation.completed and not operation.verdict_pending), (commit_after, operation)
        with master.ctx.unit_of_work() as w:  # the next round starts with no result waiting
            w.session.execute(delete(models.SearcherEvent))
