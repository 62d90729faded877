"""Every --system-metrics-interval, one sample per running container: the difference of two
readings of its processes (proc.py) as rates, with its GPUs' state (gpus.py), sent to the master
as one SystemMetrics batch.

A container's first reading only starts its counters: its first sample comes one interval later.
Samples are not kept for a master that is away (a gap in the series, as in any scraper); a batch
holds at most MAX_SAMPLES_PER_BATCH containers' samples (the master refuses larger ones).
With the interval at 0 no collector exists at all: a disabled collector costs nothing.
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
        self._previous: dict[str, _Previous] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="system-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                samples = self.sample()
            except Exception:
                log.exception("sampling the containers' system metrics failed; trying again next interval")
                continue
            for start in range(0, len(samples), MAX_SAMPLES_PER_BATCH):
                chunk = samples[start : start + MAX_SAMPLES_PER_BATCH]
                self._send(apb.AgentMessage(system_metrics=apb.SystemMetrics(samples=chunk)))

    def sample(self) -> list[apb.SystemSample]:
        """One reading of every running container; a sample for each read one interval before."""
        targets = {t.container_id: t for t in self._targets()}
        now = time.time()
        readings = read_groups({t.selector for t in targets.values()})
        samples = []
        # A namespace's counters are the container's own only when it has the namespace to itself:
        # in the agent's (every container of the process runtime, Docker's with host networking)
        # they are the whole machine's traffic, not the container's, and are not reported.
        own = network_namespace_of(os.getpid())
        for container_id, target in targets.items():
            reading = readings[target.selector]
            network = None
            if reading.any_pid is not None:
                namespace = network_namespace_of(reading.any_pid)
                if namespace is not None and namespace != own:
                    network = network_bytes(reading.any_pid)
            before = self._previous.get(container_id)
            self._previous[container_id] = _Previous(now, reading, network)
            if before is None or now <= before.at:
                continue
            samples.append(self._sample(target, now, before, reading, network))
        # Containers that ended are forgotten with their counters.
        for gone in set(self._previous) - set(targets):
            del self._previous[gone]
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
