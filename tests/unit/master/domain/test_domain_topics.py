"""Versioned wake-ups (domain/kernel/topics.py): a publish wakes the waiters of its key, and only those."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from services.master.domain.kernel import topics
from services.master.domain.kernel.topics import Topics


class _CountingCondition(threading.Condition):
    """A condition that counts how often its waiters woke."""

    wake_ups = 0

    def wait(self, timeout: float | None = None) -> bool:
        woken = super().wait(timeout)
        _CountingCondition.wake_ups += 1
        return woken


def _waiter(hub: Topics, key: str, timeout: float, results: list[Any]) -> threading.Thread:
    seen = hub.version(key)
    thread = threading.Thread(target=lambda: results.append(hub.wait(key, seen, timeout)), daemon=True)
    thread.start()
    return thread


def _until(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return False


def test_a_publish_wakes_every_waiter_of_its_key_with_the_new_version() -> None:
    hub = Topics()
    results: list[int] = []
    threads = [_waiter(hub, "alloc:a", 10.0, results) for _ in range(3)]
    assert _until(lambda: hub.waiting_keys() == 1)
    hub.publish("alloc:a")
    for thread in threads:
        thread.join(5.0)
    assert results == [1, 1, 1]
    assert hub.waiting_keys() == 0


def test_publishes_of_other_keys_do_not_wake_a_waiter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics, "_condition", _CountingCondition)
    _CountingCondition.wake_ups = 0
    hub = Topics()
    results: list[int] = []
    quiet = [_waiter(hub, f"alloc:{i}", 10.0, results) for i in range(20)]
    assert _until(lambda: hub.waiting_keys() == 20)
    for _ in range(500):
        hub.publish("trial:busy")  # no one waits on it
    assert _CountingCondition.wake_ups == 0 and results == []
    hub.publish("alloc:7")
    assert _until(lambda: results == [1])
    assert _CountingCondition.wake_ups == 1  # that key's waiter alone
    hub.close()
    for thread in quiet:
        thread.join(5.0)


def test_a_wait_after_the_version_moved_returns_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics, "_condition", _CountingCondition)
    _CountingCondition.wake_ups = 0
    hub = Topics()
    seen = hub.version("k")
    hub.publish("k")
    assert hub.wait("k", seen, timeout=10.0) == 1
    assert _CountingCondition.wake_ups == 0  # answered without waiting on anything
    assert hub.waiting_keys() == 0


def test_a_wait_that_times_out_returns_the_same_version_and_leaves_nothing_behind() -> None:
    hub = Topics()
    hub.publish("k")
    assert hub.wait("k", 1, timeout=0.05) == 1
    assert hub.waiting_keys() == 0


def test_close_wakes_the_waiters_of_every_key_and_later_waits_return_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics, "_condition", _CountingCondition)
    hub = Topics()
    results: list[int] = []
    threads = [_waiter(hub, key, 30.0, results) for key in ("a", "b", "c")]
    assert _until(lambda: hub.waiting_keys() == 3)
    hub.close()
    for thread in threads:
        thread.join(5.0)
    assert results == [0, 0, 0] and hub.closed
    _CountingCondition.wake_ups = 0
    assert hub.wait("d", 0, timeout=10.0) == 0
    assert _CountingCondition.wake_ups == 0  # answered without waiting on anything
