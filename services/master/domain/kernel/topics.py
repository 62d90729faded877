"""Versioned wake-ups keyed by name ("alloc:<id>", "trial-logs:<id>", ...).

Writers `publish` after they commit; readers remember the version they saw and `wait` for a newer
one, so a wake-up between a read and a wait is never missed.

A publish wakes only the waiters of its key. Waiters are many on a busy cluster (every running
trial's signal watch, log and metric followers, trials waiting for the searcher's verdict) and
publishes come with every validation, log batch and state change: with one condition for every key,
each publish woke every waiter to find it was not for it, work that grew with their product.
"""

from __future__ import annotations

import threading
import time

# The condition a key's waiters wait on (a name of its own so that a test can count wake-ups).
_condition = threading.Condition


class Topics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[str, int] = {}
        # The keys someone waits on: their condition (on `_lock`) and how many wait. A key's entry
        # goes when its last waiter leaves, so the map holds only what is waited on now.
        self._waiting: dict[str, _Waiting] = {}
        self._closed = False

    def publish(self, key: str) -> None:
        with self._lock:
            self._versions[key] = self._versions.get(key, 0) + 1
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting.cond.notify_all()

    def version(self, key: str) -> int:
        with self._lock:
            return self._versions.get(key, 0)

    def wait(self, key: str, seen: int, timeout: float) -> int:
        """Block until `key` moves past `seen` or `timeout` passes; returns the version now."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._versions.get(key, 0) != seen or self._closed:
                return self._versions.get(key, 0)
            waiting = self._waiting.get(key)
            if waiting is None:
                waiting = self._waiting[key] = _Waiting(_condition(self._lock))
            waiting.count += 1
            try:
                while self._versions.get(key, 0) == seen and not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    waiting.cond.wait(remaining)
                return self._versions.get(key, 0)
            finally:
                waiting.count -= 1
                if not waiting.count:
                    del self._waiting[key]

    def waiting_keys(self) -> int:
        """How many keys someone waits on now."""
        with self._lock:
            return len(self._waiting)

    def close(self) -> None:
        """Wake every waiter for good (master shutdown)."""
        with self._lock:
            self._closed = True
            for waiting in self._waiting.values():
                waiting.cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed


class _Waiting:
    __slots__ = ("cond", "count")

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self.count = 0


def allocation_topic(allocation_id: str) -> str:
    return f"alloc:{allocation_id}"


def trial_logs_topic(trial_id: int) -> str:
    return f"trial-logs:{trial_id}"


def task_logs_topic(task_id: str) -> str:
    return f"task-logs:{task_id}"


def task_topic(task_id: str) -> str:
    """A task that is not a trial changed (its state, or one of its allocations')."""
    return f"task:{task_id}"


def trial_topic(trial_id: int) -> str:
    return f"trial:{trial_id}"


def experiment_topic(experiment_id: int) -> str:
    return f"experiment:{experiment_id}"


def searcher_answers_topic(experiment_id: int) -> str:
    """Published each time the master applied a searcher answer for the experiment (or dropped its
    queued events)."""
    return f"searcher-answers:{experiment_id}"
