"""The master's wake-ups (services/master/domain/kernel/topics.py) with many waiters: per-key conditions
against one condition for every key (the design before), side by side.

W threads wait as the master's long-lived calls do (a running trial's signal watch, a log
follower: each on a key of its own, waiting again after each wake-up or timeout); one thread
publishes, as intake, log storage and state changes do after each commit, at a steady rate, on
keys chosen at random among the W (so each publish concerns one waiter), for a fixed time.
Measured: the rate reached, the process's CPU (the publisher and every waiter it woke) per
publish and as a share of one core, and wake-ups per publish.

    .venv/bin/python -m bench.topic_wakeups [--waiters 10,100,1000] [--rate 500] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import threading
import time
from collections.abc import Callable
from typing import Protocol

from services.master.domain.kernel import topics
from services.master.domain.kernel.topics import Topics


class Hub(Protocol):
    def publish(self, key: str) -> None: ...
    def version(self, key: str) -> int: ...
    def wait(self, key: str, seen: int, timeout: float) -> int: ...
    def close(self) -> None: ...


class SharedConditionTopics:
    """The reference: the design before (one condition; every publish wakes every waiter)."""

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
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._versions.get(key, 0) == seen and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return self._versions.get(key, 0)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class _CountingCondition(threading.Condition):
    wake_ups = 0

    def wait(self, timeout: float | None = None) -> bool:
        woken = super().wait(timeout)
        _CountingCondition.wake_ups += 1  # under the condition's lock
        return woken


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(make: Callable[[], Hub], waiters: int, rate: float, seconds: float) -> dict[str, float]:
    hub = make()
    stop = threading.Event()
    ready = threading.Barrier(waiters + 1)

    def watch(key: str) -> None:
        ready.wait()
        while not stop.is_set():
            seen = hub.version(key)
            hub.wait(key, seen, timeout=5.0)

    threads = [threading.Thread(target=watch, args=(f"alloc:{i}",), daemon=True) for i in range(waiters)]
    for thread in threads:
        thread.start()
    ready.wait()
    time.sleep(0.2)  # every waiter in its wait
    keys = [f"alloc:{i}" for i in range(waiters)]
    rng = random.Random(0)
    _CountingCondition.wake_ups = 0
    published = 0
    cpu0, start = _cpu_s(), time.monotonic()
    deadline = start + seconds
    while (now := time.monotonic()) < deadline:
        due = start + published / rate
        if due > now:
            time.sleep(due - now)
        hub.publish(rng.choice(keys))
        published += 1
    wall, cpu = time.monotonic() - start, _cpu_s() - cpu0
    wake_ups = _CountingCondition.wake_ups
    stop.set()
    hub.close()
    for thread in threads:
        thread.join(10.0)
    return {
        "publishes_per_s": round(published / wall),
        "cpu_ms_per_publish": round(cpu / published * 1000, 3),
        "cpu_share_of_a_core": round(cpu / wall, 3),
        "wake_ups_per_publish": round(wake_ups / published, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--waiters", default="10,100,1000")
    parser.add_argument("--rate", type=float, default=500.0, help="publishes per second")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    # Both count their waiters' wake-ups through the same condition class.
    topics._condition = _CountingCondition  # type: ignore[misc]
    designs: dict[str, Callable[[], Hub]] = {
        "one condition (before)": _shared_counting,
        "per-key conditions": Topics,
    }
    for waiters in (int(w) for w in args.waiters.split(",")):
        for name, make in designs.items():
            result = measure(make, waiters, args.rate, args.seconds)
            print(json.dumps({"waiters": waiters, "design": name, **result}), flush=True)


def _shared_counting() -> SharedConditionTopics:
    hub = SharedConditionTopics()
    hub._cond = _CountingCondition()
    return hub


if __name__ == "__main__":
    main()
