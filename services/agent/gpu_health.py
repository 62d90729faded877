"""GPU health: the agent watches NVML for the faults that make a GPU unfit for work.

As NVIDIA's Kubernetes device plugin does, a thread waits on an NVML event set for critical Xid
events and double-bit ECC errors of the agent's GPUs. Xids that an application causes (13, 31, 43,
45, 68, 109: its own bad kernel, page fault, preemption or timeout) say nothing about the device
and are skipped; every other critical Xid is a fault of the GPU's. Between events it reads each
GPU's volatile uncorrected ECC count, and an increase over what it was when the agent started is a
fault too (drivers that post no event for some of those still count them).

A fault is kept per slot with its time (the latest one wins) and reported to the master with the
slots (session.py); the master takes the slot out of service until an admin enables it again.
A container that used the GPU and failed is reported as the device's failure, not its code's
(`fault_between`); its end waits, briefly, for the watcher to have seen every event posted before
it (`settled_since`), as the Xid usually reaches NVML just as the code hits the CUDA error.

The NVML object is injectable (the `pynvml` module by default), so the watcher runs against NVML's
own event structures in tests; where no GPU exists it is never made (app.py says why in the log).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from services.agent.slots import DeviceKind, SlotInfo
from services.common.logging import get_logger

log = get_logger(__name__)

# NVML's event types (nvml.h) and its error codes, as numbers: the watcher also runs with a
# stand-in NVML in tests, which need not carry pynvml's constants.
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
WATCHED_EVENTS = EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
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
# container's end may wait for the watcher (SETTLE_LIMIT_S), and how often ECC counts are read.
WAIT_MS = 500
ECC_READ_EVERY_S = 10.0
# The most a failed container's end waits for the watcher to catch up with NVML's events.
SETTLE_LIMIT_S = 2.0


@dataclass(frozen=True)
class SlotFault:
    reason: str
    at: float  # wall-clock seconds


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


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
        self._ecc_baseline: dict[str, int] = {}
        self._event_set: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The start time of the latest wait that timed out: every event posted before it was seen.
        self._seen_through = 0.0
        self._next_ecc_read = 0.0
        self._lost_reported = False
        # Why nothing is watched (no GPU slots, no NVML), or "" while it watches.
        self.skipped = ""

    # -- setup -----------------------------------------------------------------------------------
    def open(self) -> bool:
        """Open NVML, register for events and read the ECC baselines. False (with `skipped` saying
        why) when there is nothing to watch."""
        if not self._gpus:
            self.skipped = "no GPU slots on this agent"
            return False
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            nvml = self._nvml
            nvml.nvmlInit()
            self._handles = {slot: nvml.nvmlDeviceGetHandleByUUID(u) for u, slot in self._gpus.items()}
            self._event_set = nvml.nvmlEventSetCreate()
        except Exception as exc:  # ImportError, NVMLError and its many subclasses
            self.skipped = f"NVML unavailable: {exc}"
            return False
        watched = 0
        for slot, handle in self._handles.items():
            try:
                supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle)) & WATCHED_EVENTS
                if supported:
                    nvml.nvmlDeviceRegisterEvents(handle, supported, self._event_set)
                    watched += 1
                else:
                    log.warning("this GPU posts no health events", slot_id=slot)
            except Exception as exc:
                log.warning("cannot watch this GPU's health events", slot_id=slot, error=str(exc))
            baseline = self._uncorrected_ecc(slot, handle)
            if baseline is not None:
                self._ecc_baseline[slot] = baseline
        log.info(
            "watching GPU health",
            gpus=len(self._handles),
            with_events=watched,
            with_ecc_counts=len(self._ecc_baseline),
        )
        return True

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
        """Whether every event NVML posted before `moment` has been seen (or the watcher is not
        running, or waiting longer is not worth it)."""
        if self._thread is None or not self._thread.is_alive():
            return True
        with self._lock:
            seen = self._seen_through
        return seen >= moment or self._clock() - moment > SETTLE_LIMIT_S

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
        if self._clock() >= self._next_ecc_read:
            self._next_ecc_read = self._clock() + ECC_READ_EVERY_S
            self._read_ecc_counts()

    def _wait_for_event(self) -> bool:
        """Wait for one event and handle it. True when the wait timed out with none pending."""
        nvml = self._nvml
        if self._event_set is None or nvml is None:
            self._stop.wait(WAIT_MS / 1000)
            return True
        try:
            event = nvml.nvmlEventSetWait_v2(self._event_set, WAIT_MS)
        except Exception as exc:
            code = _code(exc)
            if code == NVML_ERROR_TIMEOUT:
                return True
            if code == NVML_ERROR_GPU_IS_LOST:
                # NVML cannot say which: every GPU of the set is suspect (as the device plugin
                # does). A lasting state, not an event: recorded once.
                if not self._lost_reported:
                    self._lost_reported = True
                    for slot in self._handles:
                        self._record(slot, f"NVML reports a GPU lost: {exc}")
            else:
                log.warning("waiting on NVML's events failed", error=str(exc))
            self._stop.wait(WAIT_MS / 1000)
            return False
        self.handle_event(event)
        return False

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
        try:
            uuid = _text(self._nvml.nvmlDeviceGetUUID(event.device))
        except Exception as exc:
            log.warning("a GPU fault on a device NVML cannot name", reason=reason, error=str(exc))
            return
        slot = self._gpus.get(uuid)
        if slot is None:
            log.warning("a GPU fault on a device that is not one of this agent's", uuid=uuid, reason=reason)
            return
        self._record(slot, reason)

    def _uncorrected_ecc(self, slot: str, handle: Any) -> int | None:
        try:
            return int(
                self._nvml.nvmlDeviceGetTotalEccErrors(
                    handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC
                )
            )
        except Exception as exc:
            if _code(exc) != NVML_ERROR_NOT_SUPPORTED:  # ECC off, or a GPU without it: nothing to read
                log.warning("cannot read this GPU's ECC count", slot_id=slot, error=str(exc))
            return None

    def _read_ecc_counts(self) -> None:
        for slot, baseline in list(self._ecc_baseline.items()):
            count = self._uncorrected_ecc(slot, self._handles[slot])
            if count is not None and count > baseline:
                self._ecc_baseline[slot] = count
                self._record(slot, f"uncorrected ECC errors: {count - baseline} more ({count} in all)")

    def _record(self, slot: str, reason: str) -> None:
        fault = SlotFault(reason=reason, at=self._clock())
        with self._lock:
            self._faults[slot] = fault
        log.error("GPU fault: the slot is unfit for work", slot_id=slot, reason=reason)
        self._on_fault(slot)
