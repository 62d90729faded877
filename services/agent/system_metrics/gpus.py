"""Each GPU slot's utilisation, memory used and power, from NVML.

Only an agent with GPU slots asks NVML; an agent with CPU slots has nothing to ask, and says so
once (the reason stands in its log, never a made-up zero). A GPU NVML stops answering for is left
out of the sample it failed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from services.agent.slots import DeviceKind, SlotInfo
from services.common.logging import get_logger

log = get_logger(__name__)


class GpuNvml(Protocol):
    """The part of pynvml used here."""

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...


class GpuReadings:
    """NVML, opened once, for the agent's GPU slots by uuid."""

    def __init__(self, slots: Sequence[SlotInfo], nvml: GpuNvml | None = None) -> None:
        self._handles: dict[str, Any] = {}
        self._nvml: GpuNvml | None = None
        self.skipped = ""
        gpu_uuids = [s.uuid for s in slots if s.kind == DeviceKind.CUDA]
        if not gpu_uuids:
            self.skipped = "no GPU slots on this agent"
        else:
            self._open(gpu_uuids, nvml)
        if self.skipped:
            log.info("GPU metrics not collected", reason=self.skipped)

    def _open(self, uuids: list[str], nvml: GpuNvml | None) -> None:
        try:
            if nvml is None:
                import pynvml

                nvml = pynvml
            nvml.nvmlInit()
            self._handles = {u: nvml.nvmlDeviceGetHandleByUUID(u) for u in uuids}
            self._nvml = nvml
        except Exception as exc:  # ImportError, NVMLError and its many subclasses
            self.skipped = f"NVML unavailable: {exc}"

    def read(self, uuid: str) -> tuple[float, int, float] | None:
        """(utilisation %, memory used in bytes, power in watts) of the GPU, or None."""
        handle = self._handles.get(uuid)
        if handle is None or self._nvml is None:
            return None
        try:
            util = float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            used = int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used)
            power = self._nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
        except Exception as exc:
            log.warning("NVML did not answer for a GPU", uuid=uuid, error=str(exc))
            return None
        return util, used, power
