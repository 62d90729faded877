"""GPU health: the agent watches NVML for the faults that make a GPU unfit for work.

As NVIDIA's Kubernetes device plugin does, a thread waits on an NVML event set for critical Xid
events and double-bit ECC errors of the agent's GPUs. Xids that an application causes (13, 31, 43,
45, 68, 109: its own bad kernel, page fault, preemption or timeout) say nothing about the device
and are skipped; every other critical Xid is a fault of the GPU's. An event is matched to its GPU
by NVML's handle, without asking the device anything (a GPU that fell off the bus answers nothing);
one that matches no GPU, a GPU NVML reports lost, and a GPU that cannot be opened or watched are
faults too. Every 10 s it reads each GPU's memory counters (gpu_memory.py: uncorrected ECC errors,
row remapping), which also count what happened before the agent started.

A fault is kept per slot with its time (the latest one wins) and reported to the master with the
slots (session.py); the master takes the slot out of service until an admin enables it again.
A container that used the GPU and failed is reported as the device's failure, not its code's
(`fault_between`); its end waits, briefly, for the watcher to have seen every event posted before
it and to have read the counters since (`settled_since`), as the Xid usually reaches NVML just as
the code hits the CUDA error.

The NVML object is injectable (the `pynvml` module by default), so the watcher runs against NVML's
own event structures in tests; where no GPU exists it is never made (app.py says why in the log).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from services.agent.gpu_memory import MemoryWatch
from services.agent.nvml_values import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    error_code,
    text,
)
from services.agent.slots import DeviceKind, SlotInfo
from services.common.logging import get_logger

log = get_logger(__name__)

# NVML's event types (nvml.h) and its error codes, as numbers: the watcher also runs with a
# stand-in NVML in tests, which need not carry pynvml's constants.
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
WATCHED_EVENTS = EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC
# An event for every GPU instance of a device (not one MIG instance).
ALL_GPU_INSTANCES = 0xFFFFFFFF

# Xids an application causes, not the device (the device plugin's list, nvidia.com/xid-errors).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
XID_NAMES = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping",
    64: "ECC page retirement or row remapper failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}

# How long one wait on the event set blocks: bounds how late a stop is noticed, how long a failed
# container's end may wait for the watcher (SETTLE_LIMIT_S).
WAIT_MS = 500
MEMORY_READ_EVERY_S = 10.0
# The most a failed container's end waits for the watcher to catch up with NVML's events.
SETTLE_LIMIT_S = 2.0


@dataclass(frozen=True)
class SlotFault:
    reason: str
    at: float  # wall-clock seconds


def _address(handle: Any) -> int | None:
    """An NVML handle's pointer value: the same for the life of the process, and known without
    asking the device (whose own calls fail once it is lost)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def xid_reason(xid: int) -> str:
    name = XID_NAMES.get(xid)
    return f"Xid {xid} ({name})" if name else f"Xid {xid}"


class GpuHealth:
    """Watches the agent's GPU slots; `on_fault` is called (from the watcher's thread) with the
    slot id of every new fault."""

    def __init__(
        self,
        slots: Sequence[SlotInfo],
        on_fault: Callable[[str], None],
        nvml: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._gpus = {s.uuid: s.id for s in slots if s.kind == DeviceKind.CUDA}
        self._on_fault = on_fault
        self._nvml = nvml
        self._clock = clock
        self._lock = threading.Lock()
        self._faults: dict[str, SlotFault] = {}
        self._handles: dict[str, Any] = {}  # slot id → NVML handle
        self._by_address: dict[int, str] = {}  # a handle's pointer value → slot id
        self._memory: dict[str, MemoryWatch] = {}
        self._event_set: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The start time of the latest wait that timed out: every event posted before it was seen.
        self._seen_through = 0.0
        # The start time of the latest read of the memory counters, and a read asked for now.
        self._memory_read_through = 0.0
        self._read_memory_now = threading.Event()
        self._next_memory_read = 0.0
        # Lasting states (a GPU lost, unreachable) are faults once, not at every wait.
        self._lasting: set[str] = set()
        # Why nothing is watched (no GPU slots, no NVML), or "" while it watches.
        self.skipped = ""

    # -- setup -----------------------------------------------------------------------------------
    def open(self) -> bool:
        """Open NVML, register each GPU for events and read its memory counters; a GPU that cannot
        be opened or watched is a fault of its own. False (with `skipped` saying why) when there
        is nothing to watch at all."""
        if not self._gpus:
            self.skipped = "no GPU slots on this agent"
            return False
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            nvml = self._nvml
            nvml.nvmlInit()
            self._event_set = nvml.nvmlEventSetCreate()
        except Exception as exc:  # ImportError, NVMLError and its many subclasses
            self.skipped = f"NVML unavailable: {exc}"
            return False
        for uuid, slot in self._gpus.items():
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            except Exception as exc:
                self._record(slot, f"NVML cannot open the GPU: {exc}")
                continue
            self._handles[slot] = handle
            address = _address(handle)
            if address is not None:
                self._by_address[address] = slot
            self._register(slot, handle)
            memory = MemoryWatch(nvml, slot, handle)
            for problem in memory.first():
                self._record(slot, problem)
            if memory.readable:
                self._memory[slot] = memory
        self._next_memory_read = self._clock() + MEMORY_READ_EVERY_S
        log.info("watching GPU health", gpus=len(self._handles), with_memory_counters=len(self._memory))
        return True

    def _register(self, slot: str, handle: Any) -> None:
        nvml = self._nvml
        try:
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle)) & WATCHED_EVENTS
            if supported:
                nvml.nvmlDeviceRegisterEvents(handle, supported, self._event_set)
                return
        except Exception as exc:
            if error_code(exc) != NVML_ERROR_NOT_SUPPORTED:
                # As the device plugin does: a GPU whose health cannot be watched is not trusted.
                self._record(slot, f"NVML cannot watch the GPU's health events: {exc}")
                return
        log.warning("this GPU posts no health events: only its memory counters are read", slot_id=slot)

    def start(self) -> None:
        if self.open():
            self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)
            self._thread.start()
        else:
            log.info("GPU health not watched", reason=self.skipped)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_MS / 1000 + 2)
        if self._event_set is not None and self._nvml is not None:
            try:
                self._nvml.nvmlEventSetFree(self._event_set)
            except Exception:
                pass
            self._event_set = None

    # -- what the rest of the agent asks -----------------------------------------------------------
    def faults(self) -> dict[str, SlotFault]:
        with self._lock:
            return dict(self._faults)

    def fault_between(self, slot_ids: Sequence[str], since: float) -> tuple[str, SlotFault] | None:
        """The first fault, at or after `since`, of one of `slot_ids`: (slot id, fault)."""
        with self._lock:
            for slot in slot_ids:
                fault = self._faults.get(slot)
                if fault is not None and fault.at >= since:
                    return slot, fault
        return None

    def settled_since(self, moment: float) -> bool:
        """Whether every event NVML posted before `moment` has been seen and the memory counters
        read since (or the watcher is not running, or waiting longer is not worth it). A read of
        the counters that is not yet due is asked for now."""
        if self._thread is None or not self._thread.is_alive():
            return True
        if self._clock() - moment > SETTLE_LIMIT_S:
            return True
        with self._lock:
            events_seen = self._seen_through >= moment
            counters_read = not self._memory or self._memory_read_through >= moment
        if not counters_read:
            self._read_memory_now.set()
        return events_seen and counters_read

    # -- the watcher -------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:
                # A bug here must not end the watch (nor the agent); it is logged and retried.
                log.exception("GPU health watch failed")
                self._stop.wait(1.0)

    def poll_once(self) -> None:
        """One wait on the event set (up to WAIT_MS) and, when due, one read of the ECC counts."""
        began = self._clock()
        if self._wait_for_event():
            # The wait timed out: no event was left from before it began.
            with self._lock:
                self._seen_through = max(self._seen_through, began)
        if self._read_memory_now.is_set() or self._clock() >= self._next_memory_read:
            self._read_memory_now.clear()
            began = self._clock()
            self._next_memory_read = began + MEMORY_READ_EVERY_S
            for slot, memory in list(self._memory.items()):
                for problem in memory.problems():
                    self._record(slot, problem)
            with self._lock:
                self._memory_read_through = max(self._memory_read_through, began)

    def _wait_for_event(self) -> bool:
        """Wait for one event and handle it. True when the wait timed out with none pending."""
        nvml = self._nvml
        if self._event_set is None or nvml is None:
            self._stop.wait(WAIT_MS / 1000)
            return True
        try:
            event = nvml.nvmlEventSetWait_v2(self._event_set, WAIT_MS)
        except Exception as exc:
            if error_code(exc) == NVML_ERROR_TIMEOUT:
                return True
            self._after_wait_error(exc)
            self._stop.wait(WAIT_MS / 1000)
            return False
        self.handle_event(event)
        return False

    def _after_wait_error(self, exc: BaseException) -> None:
        """The wait failed (a GPU lost, NVML's unknown error after one fell off the bus): each GPU
        that no longer answers is at fault; when none can be told apart and NVML says a GPU is
        lost, every one is (as the device plugin does). Lasting states: recorded once each."""
        unreachable = []
        for slot, handle in self._handles.items():
            try:
                self._nvml.nvmlDeviceGetUUID(handle)
            except Exception as probe:
                unreachable.append((slot, f"NVML cannot reach the GPU: {probe}"))
        if not unreachable and error_code(exc) == NVML_ERROR_GPU_IS_LOST:
            unreachable = [(slot, f"NVML reports a GPU lost: {exc}") for slot in self._handles]
        if not unreachable:
            log.warning("waiting on NVML's events failed", error=str(exc))
        for slot, reason in unreachable:
            if slot not in self._lasting:
                self._lasting.add(slot)
                self._record(slot, reason)

    def handle_event(self, event: Any) -> None:
        """One of NVML's event structures (c_nvmlEventData_t)."""
        kind = int(event.eventType)
        if kind == EVENT_XID_CRITICAL:
            xid = int(event.eventData)
            if xid in APPLICATION_XIDS:
                log.info("an application Xid; the GPU is not at fault", xid=xid)
                return
            reason = xid_reason(xid)
        elif kind == EVENT_DOUBLE_BIT_ECC:
            reason = "double-bit ECC error"
        else:
            return
        instance = int(getattr(event, "gpuInstanceId", ALL_GPU_INSTANCES))
        if instance != ALL_GPU_INSTANCES:
            reason += f" on GPU instance {instance}"
        address = _address(event.device)
        slot = self._by_address.get(address) if address is not None else None
        if slot is None:  # a handle NVML made anew: its uuid, if the device still answers
            try:
                slot = self._gpus.get(text(self._nvml.nvmlDeviceGetUUID(event.device)))
            except Exception as exc:
                log.warning("a GPU fault on a device NVML cannot name", reason=reason, error=str(exc))
        if slot is None:
            # Which GPU cannot be told: every one is suspect (as the device plugin does).
            for each in self._handles:
                self._record(each, f"{reason} on a GPU NVML cannot name")
            return
        self._record(slot, reason)

    def _record(self, slot: str, reason: str) -> None:
        fault = SlotFault(reason=reason, at=self._clock())
        with self._lock:
            self._faults[slot] = fault
        log.error("GPU fault: the slot is unfit for work", slot_id=slot, reason=reason)
        self._on_fault(slot)
