"""System metrics the agent collects for every container (issue 46): real processes read from
/proc, and the agent's stream carrying them to a master; GPUs are skipped here with the reason."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.agent.slots import DeviceKind, SlotInfo
from services.agent.system_metrics.collector import FIRST_SAMPLE_AFTER_S, SystemMetricsCollector, Target
from services.agent.system_metrics.gpus import GpuReadings
from services.agent.system_metrics.proc import Selector, read_groups
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, python_command, wait_terminated

# Busy on one core, with ~64 MiB resident, and a child process in its group that writes a file.
BUSY = """
import os, subprocess, sys, time
ballast = bytearray(64 * 1024 * 1024)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
print("ready", flush=True)
end = time.time() + 30
while time.time() < end:
    pass
"""


@pytest.fixture
def busy_group() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    try:
        yield proc.pid  # a session leader's group is its pid
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def no_gpus() -> GpuReadings:
    return GpuReadings([SlotInfo("0", DeviceKind.CPU, "cpu", "u-0", 0, 0)])


def test_a_process_group_is_read_as_one_container(busy_group: int) -> None:
    selector = Selector("pgid", busy_group)
    reading = read_groups({selector})[selector]
    assert reading.processes == 2  # the busy process and its sleeping child
    assert reading.rss_bytes > 64 * 1024 * 1024
    assert reading.any_pid in reading.cpu_ticks
    # Another group's processes are not counted.
    assert read_groups({Selector("pgid", 999_999_999)})[Selector("pgid", 999_999_999)].processes == 0


def test_two_readings_make_a_sample_of_rates(busy_group: int) -> None:
    sent: list[apb.AgentMessage] = []
    running = [Target("c1", Selector("pgid", busy_group))]
    collector = SystemMetricsCollector(
        interval_s=1.0, targets=lambda: list(running), send=sent.append, gpus=no_gpus()
    )
    assert collector.sample() == []  # the first reading starts the counters
    time.sleep(1.0)
    (sample,) = collector.sample()
    assert sample.container_id == "c1"
    # One busy core; on a shared 2-core machine it may get less than all of one.
    assert 30.0 < sample.cpu_util <= 110.0, sample.cpu_util
    assert sample.memory_bytes > 64 * 1024 * 1024
    assert sample.processes == 2
    assert abs(sample.time.ToNanoseconds() / 1e9 - time.time()) < 5
    assert not sample.gpus  # CPU slots: no GPU to ask
    # In this process's network namespace: its traffic is the machine's, not reported as the group's.
    assert not sample.HasField("net_recv_bytes_per_s") and not sample.HasField("net_sent_bytes_per_s")
    # Its own processes: their block I/O is readable, and measured.
    assert sample.HasField("disk_read_bytes_per_s") and sample.HasField("disk_write_bytes_per_s")
    # A container whose processes have all gone (its end not known yet) is not sampled as zeros.
    running.append(Target("c2", Selector("pgid", 999_999_999)))
    assert [s.container_id for s in collector.sample()] == ["c1"]
    running.pop()
    # A container that ended is forgotten with its counters: were it back, it would start again.
    gone = running.pop()
    assert collector.sample() == []
    running.append(gone)
    assert collector.sample() == []


def test_a_new_containers_first_sample_comes_seconds_after_its_start_not_an_interval(busy_group: int) -> None:
    running = [Target("c1", Selector("pgid", busy_group))]
    collector = SystemMetricsCollector(
        interval_s=30.0, targets=lambda: list(running), send=print, gpus=no_gpus()
    )
    # The pass the manager's wake-up makes: the new container's counters start.
    assert collector.sample(new_only=True) == []
    assert collector.sample(new_only=True) == []  # its first sample is not due yet
    assert collector.sample() == []  # nor in a whole pass: its counters keep their start
    time.sleep(FIRST_SAMPLE_AFTER_S)
    (first,) = collector.sample(new_only=True)
    assert 30.0 < first.cpu_util <= 110.0, first.cpu_util
    # From now on it is sampled with the others, every interval.
    assert collector.sample(new_only=True) == []


def test_gpu_readings_are_skipped_with_a_reason_where_no_gpu_is() -> None:
    assert no_gpus().skipped == "no GPU slots on this agent"
    gpu_slot = [SlotInfo("0", DeviceKind.CUDA, "H200", "GPU-abc", 1, 0)]

    class NoDriver:
        def nvmlInit(self) -> None:
            raise OSError("NVML Shared Library Not Found")

    readings = GpuReadings(gpu_slot, nvml=NoDriver())  # type: ignore[arg-type]
    assert readings.skipped.startswith("NVML unavailable: NVML Shared Library Not Found")
    assert readings.read("GPU-abc") is None


def test_gpu_readings_convert_nvml_answers() -> None:
    """NVML's own structures (utilisation in %, memory in bytes, power in milliwatts)."""

    class OneGpu:
        def nvmlInit(self) -> None: ...

        def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
            return uuid

        def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
            return SimpleNamespace(gpu=87, memory=40)

        def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
            return SimpleNamespace(total=80 << 30, used=12 << 30, free=68 << 30)

        def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
            return 312_500

    readings = GpuReadings([SlotInfo("0", DeviceKind.CUDA, "H200", "GPU-abc", 1, 0)], nvml=OneGpu())
    assert readings.skipped == ""
    assert readings.read("GPU-abc") == (87.0, 12 << 30, 312.5)
    assert readings.read("GPU-other") is None


# Busy for about 3 s in the agent's container.
SPIN = "import time\nend = time.time() + 3\nwhile time.time() < end:\n    pass\nprint('done')\n"


def test_the_agent_sends_each_running_containers_samples_on_its_stream(
    store: MasterStore, master: MasterServer, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address, "--system-metrics-interval", "0.5")
    stream = master.double.wait_connected()
    master.double.start("spin", python_command(SPIN))
    wait_terminated(store, "spin")
    batches = [m.system_metrics for m in stream.of_kind("system_metrics")]
    samples = [s for b in batches for s in b.samples if s.container_id == "spin"]
    assert len(samples) >= 3, batches
    assert max(s.cpu_util for s in samples) > 30.0
    assert all(s.memory_bytes > 1024 * 1024 and s.processes >= 1 for s in samples)
    times = [s.time.ToNanoseconds() for s in samples]
    assert times == sorted(times)
    # The container ended: its series stops.
    count = len(samples)
    time.sleep(1.5)
    later = [s for m in stream.of_kind("system_metrics") for s in m.system_metrics.samples]
    assert len([s for s in later if s.container_id == "spin"]) == count


def test_a_running_containers_first_sample_comes_before_the_first_interval(
    store: MasterStore, master: MasterServer, launch_agent: Callable[..., AgentProcess]
) -> None:
    # A 6 s command under a 60 s interval: sampled all the same, woken by its start.
    launch_agent(master.address, "--system-metrics-interval", "60")
    stream = master.double.wait_connected()
    master.double.start("spin", python_command(SPIN.replace("+ 3", "+ 6")))
    wait_terminated(store, "spin")
    samples = [s for m in stream.of_kind("system_metrics") for s in m.system_metrics.samples]
    assert [s.container_id for s in samples] == ["spin"], samples
    assert samples[0].cpu_util > 30.0


def test_a_disabled_collector_sends_nothing_and_runs_no_thread(
    store: MasterStore, master: MasterServer, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address, "--system-metrics-interval", "0")
    stream = master.double.wait_connected()
    master.double.start("spin", python_command(SPIN))
    wait_terminated(store, "spin")
    assert stream.of_kind("system_metrics") == []
    wait_until(lambda: "system metrics not collected" in agent.log_text(), 5, "the agent to say so")


AGENT = [sys.executable, "-m", "services.agent"]


def test_a_bad_interval_is_refused_naming_the_flag() -> None:
    for value in ("0.1", "-1", "nan", "soon"):
        done = subprocess.run(
            [*AGENT, "--master", "127.0.0.1:1", "--system-metrics-interval", value],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (value, done.stderr)
        assert "--system-metrics-interval" in done.stderr
