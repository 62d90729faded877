"""Finding the agent's slots: one per NVIDIA GPU (through NVML), or N declared CPU slots.

GPU discovery takes an NVML-like object (the `pynvml` module by default) so that it can be
exercised without a driver.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

from services.agent.gpu_topology import Topology, read_topology
from services.agent.host import cpu_model_name
from services.agent.nvml_values import text
from services.common.logging import get_logger

log = get_logger(__name__)

# Namespace of the synthetic CPU slot uuids: uuid5(namespace, "<agent id>/cpu/<index>").
CPU_SLOT_NAMESPACE = uuid.UUID("6f1d4a52-3c1e-5b8e-9a57-2c4d8e0f7b11")


class DeviceKind(StrEnum):
    CPU = "cpu"
    CUDA = "cuda"


class SlotType(StrEnum):
    AUTO = "auto"
    GPU = "gpu"
    CPU = "cpu"


@dataclass(frozen=True)
class SlotInfo:
    id: str
    kind: DeviceKind
    brand: str
    uuid: str
    memory_bytes: int
    index: int
    # Where the device sits (gpu_topology.py); -1: unknown (always, for CPU slots).
    numa_node: int = -1
    nvlink_domain: int = -1


class SlotDiscoveryError(RuntimeError):
    """No slots of the kind asked for can be found; the message says why."""


class Nvml(Protocol):
    """The part of pynvml used here."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...


def _load_pynvml() -> Nvml:
    try:
        import pynvml
    except ImportError as exc:
        raise SlotDiscoveryError("NVML is not available: the nvidia-ml-py package is not installed") from exc
    return pynvml


def gpu_slots(nvml: Nvml) -> list[SlotInfo]:
    """Every GPU NVML reports, as CUDA slots. Raises SlotDiscoveryError when NVML cannot answer
    (no library, no driver, a device error)."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError and its many subclasses; the library raises nothing else
        raise SlotDiscoveryError(f"NVML did not start (no NVIDIA driver?): {exc}") from exc
    try:
        count = nvml.nvmlDeviceGetCount()
    except Exception as exc:
        _shutdown(nvml)
        raise SlotDiscoveryError(f"NVML failed while listing GPUs: {exc}") from exc
    try:
        handles, slots = [], []
        problem: Exception | None = None
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                slot = SlotInfo(
                    id=str(index),
                    kind=DeviceKind.CUDA,
                    brand=text(nvml.nvmlDeviceGetName(handle)),
                    uuid=text(nvml.nvmlDeviceGetUUID(handle)),
                    memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                    index=index,
                )
            except Exception as exc:
                # A GPU that has fallen off the bus: the others still work, and are offered.
                log.error("a GPU NVML cannot read is left out", index=index, error=str(exc))
                problem = exc
                continue
            handles.append(handle)
            slots.append(slot)
        if count and not slots:
            raise SlotDiscoveryError(f"NVML cannot read any of the {count} GPUs it lists: {problem}")
        try:
            topologies = read_topology(nvml, handles)
        except Exception as exc:  # where the GPUs sit only helps packing: never a reason to fail
            log.warning("GPU topology unknown", error=str(exc))
            topologies = [Topology() for _ in handles]
        # Domains are named by position in `handles`: by device index here (a GPU may be left out).
        return [
            replace(
                slot,
                numa_node=t.numa_node,
                nvlink_domain=slots[t.nvlink_domain].index if t.nvlink_domain >= 0 else -1,
            )
            for slot, t in zip(slots, topologies, strict=True)
        ]
    finally:
        _shutdown(nvml)


def _shutdown(nvml: Nvml) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


def cpu_slots(agent_id: str, count: int, brand: str | None = None) -> list[SlotInfo]:
    """`count` CPU slots whose uuids depend only on the agent id and index (stable across restarts)."""
    name = brand if brand is not None else cpu_model_name()
    return [
        SlotInfo(
            id=str(index),
            kind=DeviceKind.CPU,
            brand=name,
            uuid=str(uuid.uuid5(CPU_SLOT_NAMESPACE, f"{agent_id}/cpu/{index}")),
            memory_bytes=0,
            index=index,
        )
        for index in range(count)
    ]


def discover_slots(
    agent_id: str, slot_type: SlotType, cpu_count: int | None, nvml: Nvml | None = None
) -> list[SlotInfo]:
    """The agent's slots. `auto`: GPUs when NVML finds any, else CPU slots; `gpu`: GPUs or a
    SlotDiscoveryError; `cpu`: CPU slots. `cpu_count` defaults to 1."""
    count = 1 if cpu_count is None else cpu_count
    if slot_type == SlotType.CPU:
        return cpu_slots(agent_id, count)
    try:
        gpus = gpu_slots(nvml if nvml is not None else _load_pynvml())
    except SlotDiscoveryError as exc:
        if slot_type == SlotType.GPU:
            raise SlotDiscoveryError(f"--slot-type gpu: {exc}") from exc
        log.info("no GPUs found; using CPU slots", reason=str(exc), cpu_slots=count)
        return cpu_slots(agent_id, count)
    if not gpus:
        if slot_type == SlotType.GPU:
            raise SlotDiscoveryError("--slot-type gpu: NVML reports no GPUs")
        log.info("no GPUs found; using CPU slots", cpu_slots=count)
        return cpu_slots(agent_id, count)
    if cpu_count is not None:
        log.warning("GPUs found: --slots applies to CPU slots only and is ignored", gpus=len(gpus))
    return gpus
