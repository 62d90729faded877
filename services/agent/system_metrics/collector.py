"""Every --system-metrics-interval, one sample per running container: the difference of two
readings of its processes (proc.py) as rates, with its GPUs' state (gpus.py), sent to the master
as one SystemMetrics batch.

A container's first reading only starts its counters. That reading is taken as soon as the
container runs (the manager wakes the collector: `wake`), and its first sample FIRST_SAMPLE_AFTER_S
later, so a new task's page shows figures within seconds, not one or two intervals later; from
then on it is sampled with the others, every interval. Samples are not kept for a master that is
away (a gap in the series, as in any scraper); a batch holds at most MAX_SAMPLES_PER_BATCH
containers' samples (the master refuses larger ones). With the interval at 0 no collector exists
at all: a disabled collector costs nothing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from cairn.agent.v1 import agent_pb2 as apb
from services.agent.system_metrics.gpus import GpuReadings
from services.agent.system_metrics.proc import (
    CLOCK_TICKS,
    GroupReading,
    Selector,
    network_bytes,
    network_namespace_of,
    read_groups,
)
from services.common.logging import get_logger

log = get_logger(__name__)

DEFAULT_INTERVAL_S = 10.0
# Below this a sample's /proc pass would be a visible share of the agent's time on a busy machine.
MIN_INTERVAL_S = 0.5
MAX_INTERVAL_S = 3600.0
# The master's bound on one batch (services/master/domain/metrics/system_metrics.py says the same).
MAX_SAMPLES_PER_BATCH = 512
# A new container's first sample: this long after the reading that starts its counters (or one
# interval, when that is shorter). Long enough for its rates to mean something.
FIRST_SAMPLE_AFTER_S = 2.0


@dataclass(frozen=True)
class Target:
    """A running container to sample: how its processes are found, and the GPUs it holds."""

    container_id: str
    selector: Selector
    gpu_uuids: tuple[str, ...] = ()


@dataclass
class _Previous:
    at: float
    reading: GroupReading
    network: tuple[int, int] | None
    # No sample made from it yet: the container is new (its first sample is due soon).
    fresh: bool = False


class SystemMetricsCollector:
    def __init__(
        self,
        *,
        interval_s: float,
        targets: Callable[[], Sequence[Target]],
        send: Callable[[apb.AgentMessage], None],
        gpus: GpuReadings,
    ) -> None:
        self._interval_s = interval_s
        self._targets = targets
        self._send = send
        self._gpus = gpus
        self._first_after_s = min(FIRST_SAMPLE_AFTER_S, interval_s)
        self._previous: dict[str, _Previous] = {}
        self._stop = threading.Event()
        self._woken = threading.Event()
        self._thread = threading.Thread(target=self._run, name="system-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._woken.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def wake(self) -> None:
        """A container started running: read it now (its first sample follows shortly)."""
        self._woken.set()

    def _run(self) -> None:
        next_pass = time.monotonic() + self._interval_s
        while not self._stop.is_set():
            wall = time.time()
            first_in = min(
                (p.at + self._first_after_s - wall for p in self._previous.values() if p.fresh),
                default=self._interval_s,
            )
            timeout = min(next_pass - time.monotonic(), first_in, self._interval_s)
            if timeout > 0 and self._woken.wait(timeout):
                self._woken.clear()
            if self._stop.is_set():
                return
            whole = time.monotonic() >= next_pass
            if whole:
                next_pass = time.monotonic() + self._interval_s
            try:
                samples = self.sample(new_only=not whole)
            except Exception:
                log.exception("sampling the containers' system metrics failed; trying again next interval")
                continue
            for start in range(0, len(samples), MAX_SAMPLES_PER_BATCH):
                chunk = samples[start : start + MAX_SAMPLES_PER_BATCH]
                self._send(apb.AgentMessage(system_metrics=apb.SystemMetrics(samples=chunk)))

    def sample(self, new_only: bool = False) -> list[apb.SystemSample]:
        """One reading of every running container; a sample for each read before (one interval
        before, or FIRST_SAMPLE_AFTER_S before for a new one). `new_only`: only the containers
        not read yet (their first reading) and those whose first sample is due."""
        targets = {t.container_id: t for t in self._targets()}
        # Containers that ended are forgotten with their counters.
        for gone in set(self._previous) - set(targets):
            del self._previous[gone]
        now = time.time()
        if new_only:
            targets = {
                container_id: target
                for container_id, target in targets.items()
                if (before := self._previous.get(container_id)) is None
                or (before.fresh and now - before.at >= self._first_after_s * 0.9)
            }
            if not targets:
                return []
        readings = read_groups({t.selector for t in targets.values()})
        samples = []
        # A namespace's counters are the container's own only when it has the namespace to itself:
        # in the agent's (every container of the process runtime, Docker's with host networking)
        # they are the whole machine's traffic, not the container's, and are not reported.
        own = network_namespace_of(os.getpid())
        for container_id, target in targets.items():
            before = self._previous.get(container_id)
            if before is not None and before.fresh and now - before.at < self._first_after_s * 0.9:
                continue  # its first sample is not due yet: its counters keep their start
            reading = readings[target.selector]
            if reading.processes == 0:
                # Not started yet, or every process has exited while the container's end is not
                # known yet: nothing of it to measure (a zero would read as a real figure). Its
                # counters start again with its next process.
                self._previous.pop(container_id, None)
                continue
            network = None
            if reading.any_pid is not None:
                namespace = network_namespace_of(reading.any_pid)
                if namespace is not None and namespace != own:
                    network = network_bytes(reading.any_pid)
            self._previous[container_id] = _Previous(now, reading, network, fresh=before is None)
            if before is None or now <= before.at:
                continue
            samples.append(self._sample(target, now, before, reading, network))
        return samples

    def _sample(
        self,
        target: Target,
        now: float,
        before: _Previous,
        reading: GroupReading,
        network: tuple[int, int] | None,
    ) -> apb.SystemSample:
        seconds = now - before.at
        ticks = _counted(reading.cpu_ticks, before.reading.cpu_ticks)
        sample = apb.SystemSample(
            container_id=target.container_id,
            time=_timestamp(now),
            cpu_util=100.0 * ticks / CLOCK_TICKS / seconds,
            memory_bytes=reading.rss_bytes,
            processes=reading.processes,
        )
        if reading.io_bytes is not None and before.reading.io_bytes is not None:
            read, written = _io_counted(reading.io_bytes, before.reading.io_bytes)
            sample.disk_read_bytes_per_s = read / seconds
            sample.disk_write_bytes_per_s = written / seconds
        if network is not None and before.network is not None:
            # Counters of a namespace that was replaced (a new first process) may go backwards.
            sample.net_recv_bytes_per_s = max(0, network[0] - before.network[0]) / seconds
            sample.net_sent_bytes_per_s = max(0, network[1] - before.network[1]) / seconds
        for uuid in target.gpu_uuids:
            gpu = self._gpus.read(uuid)
            if gpu is not None:
                util, used, power = gpu
                sample.gpus.append(
                    apb.GpuSample(uuid=uuid, util=util, memory_used_bytes=used, power_watts=power)
                )
        return sample


def _counted(now: dict[int, tuple[int, int]], before: dict[int, tuple[int, int]]) -> int:
    """CPU ticks the processes spent between two readings: a process seen before counts its
    difference; a new one (or a reused pid) all of its time, since it started in between."""
    total = 0
    for pid, (start, ticks) in now.items():
        seen = before.get(pid)
        total += ticks - seen[1] if seen is not None and seen[0] == start else ticks
    return max(0, total)


def _io_counted(
    now: dict[int, tuple[int, int, int]], before: dict[int, tuple[int, int, int]]
) -> tuple[int, int]:
    read = written = 0
    for pid, (start, r, w) in now.items():
        seen = before.get(pid)
        if seen is not None and seen[0] == start:
            read += r - seen[1]
            written += w - seen[2]
        else:
            read += r
            written += w
    return max(0, read), max(0, written)


def _timestamp(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp
