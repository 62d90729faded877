"""Slot discovery: CPU slots with stable uuids, GPUs through an NVML-like object, and failures."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.agent.host import cpu_model_name
from services.agent.slots import DeviceKind, SlotDiscoveryError, SlotType, cpu_slots, discover_slots


class NVMLError(Exception):
    pass


@dataclass
class Memory:
    total: int


class FakeNvml:
    """Answers like pynvml does on a two-GPU machine (names as bytes, as older versions return)."""

    def __init__(self, *, fail_init: bool = False, fail_on: str = "", count: int = 2) -> None:
        self.fail_init = fail_init
        self.fail_on = fail_on
        self.count = count
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if self.fail_on in ("handle", f"handle-{index}"):
            raise NVMLError("GPU is lost")
        return f"handle-{index}"

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:
        return b"NVIDIA H100 80GB HBM3" if handle == "handle-0" else "NVIDIA A100-SXM4-40GB"

    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes:
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return Memory(total=80 * 2**30 if handle == "handle-0" else 40 * 2**30)


def test_cpu_slots_are_numbered_with_uuids_stable_per_agent() -> None:
    slots = cpu_slots("agent-a", 3, brand="Test CPU")
    assert [s.id for s in slots] == ["0", "1", "2"]
    assert [s.index for s in slots] == [0, 1, 2]
    assert {s.kind for s in slots} == {DeviceKind.CPU}
    assert {s.brand for s in slots} == {"Test CPU"}
    assert [s.uuid for s in slots] == [s.uuid for s in cpu_slots("agent-a", 3, brand="Other")]
    assert len({s.uuid for s in slots}) == 3
    assert not {s.uuid for s in slots} & {s.uuid for s in cpu_slots("agent-b", 3, brand="Test CPU")}


def test_gpus_become_cuda_slots() -> None:
    nvml = FakeNvml()
    slots = discover_slots("agent-a", SlotType.AUTO, None, nvml=nvml)
    assert [(s.id, s.kind, s.brand, s.uuid, s.memory_bytes, s.index) for s in slots] == [
        ("0", DeviceKind.CUDA, "NVIDIA H100 80GB HBM3", "GPU-handle-0", 80 * 2**30, 0),
        ("1", DeviceKind.CUDA, "NVIDIA A100-SXM4-40GB", "GPU-handle-1", 40 * 2**30, 1),
    ]
    assert nvml.shut_down


def test_auto_falls_back_to_cpu_slots_without_a_driver() -> None:
    slots = discover_slots("agent-a", SlotType.AUTO, 2, nvml=FakeNvml(fail_init=True))
    assert [(s.id, s.kind) for s in slots] == [("0", DeviceKind.CPU), ("1", DeviceKind.CPU)]
    assert len(discover_slots("agent-a", SlotType.AUTO, None, nvml=FakeNvml(count=0))) == 1


def test_gpu_slot_type_fails_clearly_without_gpus() -> None:
    with pytest.raises(SlotDiscoveryError, match=r"--slot-type gpu: NVML did not start.*Driver Not Loaded"):
        discover_slots("agent-a", SlotType.GPU, None, nvml=FakeNvml(fail_init=True))
    with pytest.raises(SlotDiscoveryError, match="no GPUs"):
        discover_slots("agent-a", SlotType.GPU, None, nvml=FakeNvml(count=0))
    nvml = FakeNvml(fail_on="handle")
    with pytest.raises(SlotDiscoveryError, match="GPU is lost"):
        discover_slots("agent-a", SlotType.GPU, None, nvml=nvml)
    assert nvml.shut_down


def test_a_gpu_nvml_cannot_read_is_left_out_and_the_others_are_offered() -> None:
    slots = discover_slots("agent-a", SlotType.GPU, None, nvml=FakeNvml(fail_on="handle-0"))
    assert [(s.id, s.uuid, s.index) for s in slots] == [("1", "GPU-handle-1", 1)]


def test_a_missing_nvml_library_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(SlotDiscoveryError, match="nvidia-ml-py"):
        discover_slots("agent-a", SlotType.GPU, None)
    assert [s.kind for s in discover_slots("agent-a", SlotType.AUTO, 1)] == [DeviceKind.CPU]


def test_cpu_slot_type_never_asks_nvml() -> None:
    slots = discover_slots("agent-a", SlotType.CPU, 4, nvml=FakeNvml())
    assert [s.kind for s in slots] == [DeviceKind.CPU] * 4


def test_the_cpu_brand_comes_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6338\n"
    )
    assert cpu_model_name(cpuinfo) == "Intel(R) Xeon(R) Gold 6338"
    assert cpu_model_name(tmp_path / "absent")
