"""GPU health and topology against NVML's own structures: the watcher is fed c_nvmlEventData_t
events (an Xid cannot be caused on purpose), NVML's error classes and ECC counts; the topology
reader gets NVLink and PCI answers shaped as NVML gives them. What a failed container's end makes
of a fault (blame_device) and what the agent tells the master (the slot message) follow."""

from __future__ import annotations

import ctypes
from collections import deque
from pathlib import Path
from typing import Any

import pynvml
import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.agent.containers.container import blame_device
from services.agent.containers.record import ContainerRecord
from services.agent.containers.states import FailureType
from services.agent.gpu_health import MEMORY_READ_EVERY_S, SETTLE_LIMIT_S, GpuHealth, SlotFault
from services.agent.gpu_topology import pci_address, read_topology
from services.agent.session import convert
from services.agent.slots import DeviceKind, SlotInfo, cpu_slots

UUIDS = ["GPU-aaaa", "GPU-bbbb"]
XID_79 = "Xid 79 (GPU has fallen off the bus)"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class FakeNvml:
    """NVML's calls the watcher makes, answering with NVML's own ctypes structures and errors."""

    def __init__(self, uuids: list[str]) -> None:
        self.devices = {u: ctypes.pointer(pynvml.struct_c_nvmlDevice_t()) for u in uuids}
        self.events: deque[pynvml.c_nvmlEventData_t | Exception] = deque()
        self.registered: dict[str, int] = {}
        self.ecc: dict[str, int] = dict.fromkeys(uuids, 0)
        # (corrected, uncorrected, pending, failure) rows per GPU; absent: no row remapper.
        self.remapped: dict[str, tuple[int, int, int, int]] = {}
        self.supported = pynvml.nvmlEventTypeAll
        self.unopenable: set[str] = set()  # NVML cannot open them
        self.gone: set[str] = set()  # fell off the bus: NVML cannot reach them

    def _uuid(self, handle: Any) -> str:
        address = ctypes.addressof(handle.contents)
        return next(u for u, h in self.devices.items() if ctypes.addressof(h.contents) == address)

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        if uuid in self.unopenable:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self.devices[uuid]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        uuid = self._uuid(handle)
        if uuid in self.gone:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return uuid

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        uuid = self._uuid(handle)
        if uuid not in self.remapped:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.remapped[uuid]

    def nvmlEventSetCreate(self) -> Any:
        return pynvml.c_nvmlEventSet_t()

    def nvmlEventSetFree(self, event_set: Any) -> None:
        pass

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        return self.supported

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: Any) -> None:
        self.registered[self._uuid(handle)] = types

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> pynvml.c_nvmlEventData_t:
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        item = self.events.popleft()
        if isinstance(item, Exception):
            raise item
        return item

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        assert (error_type, counter_type) == (
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        return self.ecc[self._uuid(handle)]

    def post(self, uuid: str, event_type: int, data: int = 0, instance: int = 0xFFFFFFFF) -> None:
        event = pynvml.c_nvmlEventData_t()
        event.device = self.devices[uuid]
        event.eventType = event_type
        event.eventData = data
        event.gpuInstanceId = instance
        event.computeInstanceId = 0xFFFFFFFF
        self.events.append(event)


def gpu_slots() -> list[SlotInfo]:
    return [SlotInfo(str(i), DeviceKind.CUDA, "NVIDIA H200", u, 141 << 30, i) for i, u in enumerate(UUIDS)]


def watcher(nvml: FakeNvml, clock: Clock) -> tuple[GpuHealth, list[str]]:
    told: list[str] = []
    health = GpuHealth(gpu_slots(), on_fault=told.append, nvml=nvml, clock=clock)
    assert health.open()
    return health, told


def test_a_critical_xid_marks_its_gpu_and_application_xids_do_not() -> None:
    nvml, clock = FakeNvml(UUIDS), Clock()
    health, told = watcher(nvml, clock)
    # Registered for critical Xids and double-bit ECC errors only (single-bit ones are corrected).
    assert nvml.registered == dict.fromkeys(
        UUIDS, pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
    )
    for xid in (13, 31, 43, 45, 68, 109):  # the code's own faults, not the device's
        nvml.post(UUIDS[1], pynvml.nvmlEventTypeXidCriticalError, xid)
    nvml.post(UUIDS[0], pynvml.nvmlEventTypeSingleBitEccError)  # not asked for: ignored if it comes
    for _ in range(7):
        health.poll_once()
    assert health.faults() == {} and told == []

    clock.now += 5
    nvml.post(UUIDS[1], pynvml.nvmlEventTypeXidCriticalError, 79)
    health.poll_once()
    assert health.faults() == {"1": SlotFault(XID_79, clock.now)}
    assert told == ["1"]
    # One MIG instance's fault is named as such.
    nvml.post(UUIDS[0], pynvml.nvmlEventTypeDoubleBitEccError, instance=3)
    health.poll_once()
    assert health.faults()["0"].reason == "double-bit ECC error on GPU instance 3"


def test_memory_counters_mark_the_gpu_from_the_start_and_as_they_grow() -> None:
    nvml, clock = FakeNvml(UUIDS), Clock()
    nvml.ecc[UUIDS[0]] = 4  # uncorrected errors since the GPU's last reset, before the agent started
    nvml.remapped[UUIDS[1]] = (0, 0, 0, 0)
    health, told = watcher(nvml, clock)
    assert told == ["0"]
    assert health.faults()["0"].reason == "uncorrected ECC errors since the GPU's last reset: 4"
    nvml.ecc[UUIDS[0]] = 6
    clock.now += MEMORY_READ_EVERY_S / 2
    health.poll_once()
    assert told == ["0"]  # read only every MEMORY_READ_EVERY_S
    clock.now += MEMORY_READ_EVERY_S
    health.poll_once()
    assert told == ["0", "0"]
    assert health.faults()["0"].reason == "uncorrected ECC errors: 2 more (6 since the last reset)"
    # The GPU was reset (its count starts again): the next error is seen, not hidden by the old count.
    nvml.ecc[UUIDS[0]] = 0
    clock.now += MEMORY_READ_EVERY_S
    health.poll_once()
    nvml.ecc[UUIDS[0]] = 1
    nvml.remapped[UUIDS[1]] = (0, 1, 1, 0)
    clock.now += MEMORY_READ_EVERY_S
    health.poll_once()
    assert told == ["0", "0", "0", "1"]
    assert health.faults()["1"].reason == "row remapping pending: the GPU needs a reset"


def test_a_lost_or_unreachable_gpu_is_marked_once_and_an_unnamed_xid_marks_every_gpu() -> None:
    nvml, clock = FakeNvml(UUIDS), Clock()
    health, told = watcher(nvml, clock)
    health._stop.set()  # the watcher's pause after an error returns at once
    # NVML's unknown error after a GPU fell off the bus: the GPU that no longer answers, once.
    nvml.gone.add(UUIDS[1])
    nvml.events.extend([pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)] * 2)
    health.poll_once()
    health.poll_once()
    assert told == ["1"] and health.faults()["1"].reason == "NVML cannot reach the GPU: GPU is lost"
    # An Xid for it is still its own: the event's handle names the GPU without asking it.
    nvml.post(UUIDS[1], pynvml.nvmlEventTypeXidCriticalError, 79)
    health.poll_once()
    assert told == ["1", "1"] and health.faults()["1"].reason == XID_79
    # An Xid on a handle NVML made anew, for a device that does not answer: every GPU is suspect.
    stray = pynvml.c_nvmlEventData_t()
    stray.device = ctypes.pointer(pynvml.struct_c_nvmlDevice_t())
    stray.eventType, stray.eventData, stray.gpuInstanceId = (
        pynvml.nvmlEventTypeXidCriticalError,
        79,
        0xFFFFFFFF,
    )
    nvml.devices["GPU-unknown"] = stray.device
    nvml.gone.add("GPU-unknown")
    nvml.events.append(stray)
    health.poll_once()
    assert (
        sorted(told[2:]) == ["0", "1"]
        and health.faults()["0"].reason == f"{XID_79} on a GPU NVML cannot name"
    )
    # NVML says a GPU is lost but every GPU answers: all of them, once.
    nvml.gone.clear()
    fresh, told_fresh = watcher(nvml, clock)
    fresh._stop.set()
    nvml.events.extend([pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)] * 2)
    fresh.poll_once()
    fresh.poll_once()
    assert sorted(told_fresh) == ["0", "1"]
    assert {f.reason for f in fresh.faults().values()} == {"NVML reports a GPU lost: GPU is lost"}


def test_a_gpu_that_cannot_be_opened_or_watched_is_at_fault_and_the_others_are_watched() -> None:
    nvml, clock = FakeNvml(UUIDS), Clock()
    nvml.unopenable.add(UUIDS[0])
    health, told = watcher(nvml, clock)
    assert told == ["0"] and health.faults()["0"].reason == "NVML cannot open the GPU: GPU is lost"
    assert list(nvml.registered) == [UUIDS[1]]

    class NoRegistration(FakeNvml):
        def nvmlDeviceRegisterEvents(self, handle: Any, types: int, event_set: Any) -> None:
            if self._uuid(handle) == UUIDS[1]:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
            super().nvmlDeviceRegisterEvents(handle, types, event_set)

    unwatched, told_unwatched = watcher(NoRegistration(UUIDS), clock)
    assert told_unwatched == ["1"]
    assert unwatched.faults()["1"].reason.startswith("NVML cannot watch the GPU's health events:")
    # A GPU that posts no events at all (NOT_SUPPORTED) is no fault: its counters are still read.
    quiet = FakeNvml(UUIDS)
    quiet.supported = 0
    _, told_quiet = watcher(quiet, clock)
    assert told_quiet == []


def test_nothing_is_watched_without_gpus_or_nvml_and_the_reason_is_kept() -> None:
    cpu = GpuHealth(cpu_slots("a1", 2, brand="cpu"), on_fault=print)
    assert not cpu.open() and cpu.skipped == "no GPU slots on this agent"

    class Broken(FakeNvml):
        def nvmlInit(self) -> None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    broken = GpuHealth(gpu_slots(), on_fault=print, nvml=Broken(UUIDS))
    assert not broken.open() and broken.skipped.startswith("NVML unavailable:")
    assert broken.settled_since(0.0)  # not watching: a failed container never waits for it


def test_a_failed_containers_end_waits_for_the_watcher_then_blames_the_device() -> None:
    nvml, clock = FakeNvml(UUIDS), Clock()
    health, _ = watcher(nvml, clock)

    class Running:
        def is_alive(self) -> bool:
            return True

    health._thread = Running()  # type: ignore[assignment]  # as if started; the test drives the polls
    record = ContainerRecord("c1", "a1", ["1"], created_at=clock.now, started_at=clock.now + 1)
    failed = (FailureType.CONTAINER_FAILED, "command exited with code 1")
    clock.now += 10
    ended = clock.now
    nvml.post(UUIDS[1], pynvml.nvmlEventTypeXidCriticalError, 79)  # posted just before the end
    assert blame_device(record, ended, *failed, health) is None  # not yet seen: wait
    clock.now += 0.1
    health.poll_once()  # sees the Xid
    assert blame_device(record, ended, *failed, health) is None  # ...but has not waited out the queue
    health.poll_once()  # a wait that began after the end timed out: everything before it was seen
    failure, message = blame_device(record, ended, *failed, health) or (None, "")
    assert failure == FailureType.DEVICE_FAILED
    assert message == f"slot 1's GPU failed while it ran: {XID_79} (command exited with code 1)"
    # A container on the other GPU, a kill, and a fault from before the container started: its own.
    other = ContainerRecord("c2", "a1", ["0"], created_at=ended)
    assert blame_device(other, ended, *failed, health) == failed
    later = ContainerRecord("c3", "a1", ["1"], created_at=ended + 1)
    clock.now = ended + 3
    health.poll_once()  # every event seen; the memory counters were read before this end, though
    assert blame_device(later, ended + 2, *failed, health) is None  # ...so a read is asked for now
    health.poll_once()
    assert blame_device(later, ended + 2, *failed, health) == failed
    killed = (FailureType.KILLED, "killed on the master's request")
    assert blame_device(record, ended, *killed, health) == killed
    # A watcher that never catches up (an event storm) holds an end back SETTLE_LIMIT_S at most.
    stuck = ContainerRecord("c4", "a1", ["0"], created_at=ended)
    clock.now = ended + 100
    assert blame_device(stuck, ended + 100, *failed, health) is None
    clock.now += SETTLE_LIMIT_S + 0.1
    assert blame_device(stuck, ended + 100, *failed, health) == failed


def test_the_slot_message_carries_the_fault_and_where_the_gpu_sits() -> None:
    slot = SlotInfo("1", DeviceKind.CUDA, "NVIDIA H200", UUIDS[1], 1, 1, numa_node=1, nvlink_domain=0)
    message = convert.slot_message(slot, SlotFault("Xid 79 (GPU has fallen off the bus)", 1_700_000_000.5))
    assert message.fault.reason == "Xid 79 (GPU has fallen off the bus)"
    assert message.fault.at.ToMilliseconds() == 1_700_000_000_500
    assert (message.topology.numa_node, message.topology.nvlink_domain) == (1, 0)
    assert not convert.slot_message(slot).HasField("fault")
    assert convert._FAILURES[FailureType.DEVICE_FAILED.value] == apb.FAILURE_TYPE_DEVICE_FAILED


class TopologyNvml:
    """Four GPUs: 0 and 1 joined by NVLink directly, 2 and 3 through an NVSwitch, on two sockets."""

    BUS = ["00000000:1A:00.0", "00000000:1B:00.0", "00000000:9A:00.0", "00000000:9B:00.0"]
    SWITCH = "00000000:C0:00.0"

    def __init__(self, numa_from_nvml: bool) -> None:
        self.numa_from_nvml = numa_from_nvml

    def nvmlDeviceGetPciInfo(self, handle: int) -> pynvml.nvmlPciInfo_t:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self.BUS[handle].encode()
        return info

    def nvmlDeviceGetNumaNodeId(self, handle: int) -> int:
        if not self.numa_from_nvml:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return 0 if handle < 2 else 1

    def _links(self, handle: int) -> list[str]:
        return {0: [self.BUS[1]] * 4, 1: [self.BUS[0]] * 4, 2: [self.SWITCH] * 2, 3: [self.SWITCH] * 2}[
            handle
        ]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        if link >= len(self._links(handle)):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> pynvml.nvmlPciInfo_t:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._links(handle)[link].encode()
        return info


@pytest.mark.parametrize("numa_from_nvml", [True, False])
def test_topology_groups_gpus_by_nvlink_domain_and_numa_node(numa_from_nvml: bool, tmp_path: Path) -> None:
    for i, bus in enumerate(TopologyNvml.BUS):  # what sysfs says, for drivers without the NVML call
        (tmp_path / pci_address(bus)).mkdir()
        (tmp_path / pci_address(bus) / "numa_node").write_text("0\n" if i < 2 else "1\n")
    found = read_topology(TopologyNvml(numa_from_nvml), [0, 1, 2, 3], sysfs=tmp_path)
    assert [(t.numa_node, t.nvlink_domain) for t in found] == [(0, 0), (0, 0), (1, 2), (1, 2)]
    assert pci_address("00000000:1A:00.0") == "0000:1a:00.0"


def test_gpus_without_nvlink_are_domains_of_their_own_and_an_unknown_node_stays_unknown(
    tmp_path: Path,
) -> None:
    class PcieOnly(TopologyNvml):
        def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    found = read_topology(PcieOnly(False), [0, 1], sysfs=tmp_path)  # sysfs has no entry either
    assert [(t.numa_node, t.nvlink_domain) for t in found] == [(-1, 0), (-1, 1)]


NOWHERE = "00000000:00:00.0"


def test_only_links_to_gpus_and_switches_join_gpus(tmp_path: Path) -> None:
    class WithNpu(TopologyNvml):
        """GPUs 0 and 2 each also reach one IBM NPU, GPUs 1 and 3 an unconnected (all-zero) address."""

        NPU = "00000000:E0:00.0"

        def _links(self, handle: int) -> list[str]:
            extra = {0: [self.NPU], 1: [NOWHERE], 2: [self.NPU], 3: [NOWHERE]}[handle]
            return super()._links(handle) + extra

        def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
            peer = self._links(handle)[link]
            if peer == self.NPU:
                return pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU
            return (
                pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
                if peer == self.SWITCH
                else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
            )

    found = read_topology(WithNpu(True), [0, 1, 2, 3], sysfs=tmp_path)
    assert [t.nvlink_domain for t in found] == [0, 0, 2, 2]


def test_the_nvml_codes_the_agent_acts_on_are_nvmls_own() -> None:
    from services.agent import nvml_values

    for name in (
        "NVML_ERROR_INVALID_ARGUMENT",
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_TIMEOUT",
        "NVML_ERROR_GPU_IS_LOST",
    ):
        assert getattr(nvml_values, name) == getattr(pynvml, name), name
    assert nvml_values.error_code(pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)) == pynvml.NVML_ERROR_TIMEOUT
    assert nvml_values.error_code(ValueError("not NVML's")) is None
    assert nvml_values.text(b"GPU-1") == nvml_values.text("GPU-1") == "GPU-1"
