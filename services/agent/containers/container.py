"""One container as the agent tracks it, and how its end is classified."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from services.agent.containers.record import ContainerRecord
from services.agent.containers.states import FailureType
from services.agent.gpu_health import SlotFault
from services.agent.runtime.events import EventTailer, EventWriter
from services.agent.runtime.process_runtime import ShimHandle
from services.agent.runtime.protocol import ContainerPaths, ExitReport


@dataclass
class Container:
    paths: ContainerPaths
    record: ContainerRecord
    tailer: EventTailer
    # The agent's writer of the event file while it is its writer (before the shim starts).
    writer: EventWriter | None = None
    shim: ShimHandle | None = None
    # How the command ended, once known.
    exit: ExitReport | None = None
    # Set when the supervisor vanished without a report (or never started because the agent died).
    lost: str = ""
    # This tick's read of the event file reached its end (every complete line consumed).
    caught_up: bool = False
    # Record changes not yet written to state.json (acknowledgements are saved at most once a second).
    dirty: bool = False
    saved_at: float = 0.0
    # Escalation steps the agent itself took for an overdue kill (0: none yet).
    forced_steps: int = 0

    @property
    def id(self) -> str:
        return self.record.container_id


def classify_exit(
    record: ContainerRecord, report: ExitReport, lost: str
) -> tuple[FailureType, int | None, str]:
    """(failure type, exit code, message) for a container whose command ended as `report` says."""
    killed = record.kill_requested_at is not None
    if report.aborted or (lost and record.abort_requested and record.shim_pid is None):
        return FailureType.CONTAINER_ABORTED, None, "stopped before its command started"
    if lost:
        return (
            (FailureType.KILLED if killed and not record.kill_by_agent else FailureType.AGENT_FAILED),
            None,
            lost,
        )
    if report.error:
        return FailureType.TASK_ERROR, None, report.error
    code = report.exit_code
    if killed and record.kill_by_agent:
        # Whatever the code did about it (exit 0 included), the agent's shutdown ended it.
        return FailureType.AGENT_FAILED, code, record.kill_reason
    if killed:
        reason = record.kill_reason or "killed on the master's request"
        return FailureType.KILLED, code, reason
    if code == 0:
        return FailureType.NONE, 0, ""
    if report.reason:
        return FailureType.CONTAINER_FAILED, code, report.reason
    if report.signal is not None:
        try:
            name = signal.Signals(report.signal).name
        except ValueError:
            name = f"signal {report.signal}"
        return FailureType.CONTAINER_FAILED, code, f"command killed by {name} (exit code {code})"
    return FailureType.CONTAINER_FAILED, code, f"command exited with code {code}"


class DeviceWatch(Protocol):
    """What the end of a container asks of the GPU health watcher (gpu_health.GpuHealth)."""

    def fault_between(self, slot_ids: Sequence[str], since: float) -> tuple[str, SlotFault] | None: ...
    def settled_since(self, moment: float) -> bool: ...


def blame_device(
    record: ContainerRecord, ended_at: float, failure: FailureType, message: str, devices: DeviceWatch | None
) -> tuple[FailureType, str] | None:
    """A container that failed while one of its GPUs faulted failed because of the device: its end
    is the machine's (DEVICE_FAILED, not counted against the trial). None while the watcher may not
    yet have seen an event posted before the end: the end waits for it (a tick or a few)."""
    if failure != FailureType.CONTAINER_FAILED or devices is None or not record.slot_ids:
        return failure, message
    if not devices.settled_since(ended_at):
        return None
    found = devices.fault_between(record.slot_ids, record.started_at or record.created_at)
    if found is None:
        return failure, message
    slot, fault = found
    return FailureType.DEVICE_FAILED, f"slot {slot}'s GPU failed while it ran: {fault.reason} ({message})"
