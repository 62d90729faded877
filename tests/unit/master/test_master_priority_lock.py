"""The master's process-wide lock handed on by lane (kernel/priority_lock.py): the order waiters get
it in, reentrancy, the bound on a low lane's wait, and acquire's non-blocking and timed forms."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from services.master.domain.kernel.loops import BackgroundLoop
from services.master.domain.kernel.priority_lock import (
    Lane,
    PriorityLock,
    SlicedHold,
    set_thread_lane,
    thread_lane,
)

WAIT_S = 5.0


def _queue(lock: PriorityLock, lane: Lane, order: list[str], name: str) -> threading.Thread:
    """A thread that waits for `lock` in `lane` and notes `name` once it holds it; returned once
    it is queued, so that the next one queues after it."""
    queued = lock.waiting + 1

    def take() -> None:
        with lock.held(lane):
            order.append(name)

    thread = threading.Thread(target=take, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while lock.waiting < queued:
        assert time.monotonic() < deadline, f"{name} never queued"
        time.sleep(0.001)
    return thread


def _join_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive(), f"{thread.name} never got the lock"


def test_waiters_get_the_lock_by_lane_then_in_the_order_they_came() -> None:
    lock = PriorityLock()
    order: list[str] = []
    lock.acquire()
    threads = [
        _queue(lock, Lane.BACKGROUND, order, "pump"),
        _queue(lock, Lane.REQUESTS, order, "create"),
        _queue(lock, Lane.AGENT_REPORTS, order, "reports"),
        _queue(lock, Lane.REQUESTS, order, "kill"),
        _queue(lock, Lane.PLACEMENT, order, "starts"),
        _queue(lock, Lane.AGENT_REPORTS, order, "more reports"),
    ]
    lock.release()
    _join_all(threads)
    assert order == ["starts", "reports", "more reports", "create", "kill", "pump"]
    assert lock.waiting == 0
    assert lock.acquire(blocking=False), "free once every waiter has had it"
    lock.release()


def test_a_waiter_past_the_longest_wait_goes_before_every_lane() -> None:
    lock = PriorityLock(max_wait_s=0.05)
    order: list[str] = []
    lock.acquire()
    threads = [_queue(lock, Lane.BACKGROUND, order, "retention")]
    time.sleep(0.1)
    threads.append(_queue(lock, Lane.AGENT_REPORTS, order, "reports"))
    lock.release()
    _join_all(threads)
    assert order == ["retention", "reports"]


def test_a_sliced_hold_lets_the_waiters_in_only_once_its_slice_is_up() -> None:
    lock = PriorityLock()
    order: list[str] = []
    with SlicedHold(lock, slice_s=0.2) as hold:
        order.append("chunk 1")
        threads = [_queue(lock, Lane.AGENT_REPORTS, order, "reports")]
        hold.turn()
        order.append("chunk 2")
        time.sleep(0.25)
        hold.turn()
        order.append("chunk 3")
        hold.turn()
        order.append("chunk 4")
    _join_all(threads)
    assert order == ["chunk 1", "chunk 2", "reports", "chunk 3", "chunk 4"]
    assert lock.acquire(blocking=False), "let go at the end of the hold"
    lock.release()


def test_the_lock_is_reentrant_and_free_only_after_its_last_release() -> None:
    lock = PriorityLock()
    lock.acquire()
    with lock, lock.held(Lane.BACKGROUND):
        pass
    taken = threading.Event()

    def take() -> None:
        with lock:
            taken.set()

    other = threading.Thread(target=take, daemon=True)
    other.start()
    assert not taken.wait(0.1), "another thread got the lock while it was held"
    lock.release()
    assert taken.wait(WAIT_S)
    other.join(WAIT_S)


def test_acquire_without_blocking_or_with_a_timeout_leaves_no_waiter_behind() -> None:
    lock = PriorityLock()
    held = threading.Event()
    done = threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            done.wait(WAIT_S)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(WAIT_S)
    assert not lock.acquire(blocking=False)
    started = time.monotonic()
    assert not lock.acquire(timeout=0.05)
    assert time.monotonic() - started >= 0.05
    assert lock.waiting == 0
    done.set()
    holder.join(WAIT_S)
    assert lock.acquire(timeout=WAIT_S), "free once its holder let go"
    lock.release()


def test_only_the_holder_may_release() -> None:
    lock = PriorityLock()
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()
    lock.acquire()
    failed: list[BaseException] = []

    def release_elsewhere() -> None:
        try:
            lock.release()
        except RuntimeError as exc:
            failed.append(exc)

    other = threading.Thread(target=release_elsewhere, daemon=True)
    other.start()
    other.join(WAIT_S)
    assert failed, "a thread that does not hold the lock released it"
    lock.release()


def test_a_thread_waits_in_its_own_lane_unless_the_unit_names_one() -> None:
    lock = PriorityLock()
    order: list[str] = []
    lock.acquire()

    def in_background() -> None:
        set_thread_lane(Lane.BACKGROUND)
        with lock:
            order.append("background")

    def foreground_by_default() -> None:
        assert thread_lane() is Lane.REQUESTS
        with lock:
            order.append("request")

    first = threading.Thread(target=in_background, daemon=True)
    first.start()
    while lock.waiting < 1:
        time.sleep(0.001)
    second = threading.Thread(target=foreground_by_default, daemon=True)
    second.start()
    while lock.waiting < 2:
        time.sleep(0.001)
    lock.release()
    _join_all([first, second])
    assert order == ["request", "background"]


def test_a_background_loop_runs_its_steps_in_its_lane() -> None:
    ctx: Any = SimpleNamespace(stopping=threading.Event())
    seen: list[Lane] = []
    stepped = threading.Event()

    def step() -> None:
        seen.append(thread_lane())
        stepped.set()

    loops = [
        BackgroundLoop(ctx, "pump", step, period_s=60),
        BackgroundLoop(ctx, "scheduling", step, period_s=60, lane=Lane.PLACEMENT),
    ]
    for loop in loops:
        stepped.clear()
        loop.start()
        assert stepped.wait(WAIT_S)
    ctx.stopping.set()
    for loop in loops:
        loop.join(WAIT_S)
    assert seen == [Lane.BACKGROUND, Lane.PLACEMENT]
