"""Versioned wake-ups keyed by name ("alloc:<id>", "trial-logs:<id>", ...).

Writers `publish` after they commit; readers remember the version they saw and `wait` for a newer
one, so a wake-up between a read and a wait is never missed.
"""

from __future__ import annotations

import threading
import time


class Topics:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._versions: dict[str, int] = {}
        self._closed = False

    def publish(self, key: str) -> None:
        with self._cond:
            self._versions[key] = self._versions.get(key, 0) + 1
            self._cond.notify_all()

    def version(self, key: str) -> int:
        with self._cond:
            return self._versions.get(key, 0)

    def wait(self, key: str, seen: int, timeout: float) -> int:
        """Block until `key` moves past `seen` or `timeout` passes; returns the version now."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._versions.get(key, 0) == seen and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return self._versions.get(key, 0)

    def close(self) -> None:
        """Wake every waiter for good (master shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed


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
