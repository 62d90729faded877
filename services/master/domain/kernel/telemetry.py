"""The master's own measurements, kept in memory and read by the /metrics scrape: how long
scheduling passes take, how many metric rows come in and how long a report takes to become
readable. Counts and gauges the database already holds (trials by state, the queue) are read from
it at scrape time instead (gateway/prometheus.py).

Prometheus' histogram semantics: cumulative buckets by upper bound, a sum and a count; counters only
grow. Every update is a few additions under a lock, cheap next to what it measures.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass

# Seconds: from a millisecond (a scheduling pass on a small cluster) to a minute.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# A unit of work's wait for the master's lock, and its hold: most take well under a millisecond.
LOCK_BUCKETS = (0.0001, 0.00025, 0.0005, *DURATION_BUCKETS)


@dataclass(frozen=True)
class HistogramSnapshot:
    bounds: tuple[float, ...]
    # Cumulative counts, one per bound, then +Inf (== count).
    cumulative: tuple[int, ...]
    total: float
    count: int


class Histogram:
    def __init__(self, bounds: Sequence[float] = DURATION_BUCKETS) -> None:
        self._bounds = tuple(sorted(bounds))
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float, times: int = 1) -> None:
        """`times` observations of `value` (a batch of reports that became readable together)."""
        index = bisect.bisect_left(self._bounds, value)
        with self._lock:
            self._counts[index] += times
            self._sum += value * times

    def observe_many(self, values: Sequence[float]) -> None:
        """Each of `values` once, as `observe` would count them: sorted, then counted per bucket by
        bisection (a batch of reports' latencies: thousands, where a call each cost more than the
        rest of their bookkeeping)."""
        if not values:
            return
        ordered = sorted(values)
        # Values up to each bound (`observe` puts a value equal to a bound in that bound's bucket).
        upto = [bisect.bisect_right(ordered, bound) for bound in self._bounds]
        upto.append(len(ordered))
        added = [upto[0]] + [upto[i] - upto[i - 1] for i in range(1, len(upto))]
        total = sum(ordered)
        with self._lock:
            for index, count in enumerate(added):
                self._counts[index] += count
            self._sum += total

    def snapshot(self) -> HistogramSnapshot:
        with self._lock:
            counts = list(self._counts)
            total = self._sum
        cumulative, running = [], 0
        for count in counts:
            running += count
            cumulative.append(running)
        return HistogramSnapshot(self._bounds, tuple(cumulative), total, running)


class Counter:
    def __init__(self) -> None:
        self._value = 0
        self._lock = threading.Lock()

    def add(self, amount: int = 1) -> None:
        with self._lock:
            self._value += amount

    @property
    def value(self) -> int:
        return self._value


class SecondsByLabel:
    """Seconds, CPU seconds and occurrences summed per label, for counters with one label (the
    master's lock held, by what held it). The labels are few and fixed (the modules whose code
    opens units of work, and constant purposes)."""

    def __init__(self) -> None:
        self._sums: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def add(self, label: str, seconds: float, cpu_seconds: float = 0.0) -> None:
        with self._lock:
            sums = self._sums.get(label)
            if sums is None:
                sums = self._sums[label] = [0.0, 0.0, 0]
            sums[0] += seconds
            sums[1] += cpu_seconds
            sums[2] += 1

    def snapshot(self) -> dict[str, tuple[float, float, int]]:
        """Each label's (seconds, CPU seconds, occurrences), in descending order of seconds."""
        with self._lock:
            pairs = [(label, (sums[0], sums[1], int(sums[2]))) for label, sums in self._sums.items()]
        return dict(sorted(pairs, key=lambda pair: -pair[1][0]))


@dataclass
class Telemetry:
    """One per master (MasterContext.telemetry)."""

    # A scheduling pass's decision (changes read, sent, decided on), in wall time and in the
    # scheduling thread's CPU time: on a busy master the two differ by the waits for the GIL.
    scheduling_pass: Histogram
    scheduling_pass_cpu: Histogram
    # Starting what a pass placed (containers recorded, start commands sent).
    scheduling_start: Histogram
    metric_rows: Counter
    metric_batches: Counter
    # From a report's time (the trial's clock) to the commit that stored it.
    metric_intake_latency: Histogram
    # Every unit of work under the master's process-wide lock: its wait for the lock and its hold.
    # The rate of the holds' sum is the share of the time the lock is held: at 1 the master is at
    # its capacity, whatever its CPU shows (bench/README.md, "The master's lock, held all the time").
    master_lock_wait: Histogram
    master_lock_held: Histogram
    # The same holds summed by what held the lock (the module that opened the unit of work, or
    # the purpose it named): which work the master's capacity goes to; with the holding thread's
    # own CPU time, so that a hold's time off the CPU (waits for a core, the GIL, the database)
    # shows as the rest (bench/README.md, "Who holds the master's lock").
    master_lock_held_by: SecondsByLabel
    # The audit trail (domain/audit/recorder.py): records stored, and records dropped because
    # the writer's queue was full (a gap in the trail, never silent).
    audit_events_written: Counter
    audit_events_dropped: Counter

    @classmethod
    def new(cls) -> Telemetry:
        return cls(
            scheduling_pass=Histogram(),
            scheduling_pass_cpu=Histogram(),
            scheduling_start=Histogram(),
            metric_rows=Counter(),
            metric_batches=Counter(),
            metric_intake_latency=Histogram(),
            master_lock_wait=Histogram(LOCK_BUCKETS),
            master_lock_held=Histogram(LOCK_BUCKETS),
            master_lock_held_by=SecondsByLabel(),
            audit_events_written=Counter(),
            audit_events_dropped=Counter(),
        )
