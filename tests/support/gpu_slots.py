"""Slots as an agent with NVIDIA GPUs reports them on its stream, for tests of slot health that run
where no GPU is: two H200s joined by NVLink, one of them (`faulty`) carrying a fault when given."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from cairn.agent.v1 import agent_pb2 as apb

XID_79 = "Xid 79 (GPU has fallen off the bus)"
ECC = "double-bit ECC error"


def gpu_slots(
    agent_id: str,
    fault: tuple[str, float] | None = None,
    *,
    faulty: str = "0",
    numa_per_gpu: bool = False,
) -> list[apb.Slot]:
    """Two GPU slots (ids "0" and "1", uuids naming the agent) in one NVLink domain, on NUMA node 0
    or, with numa_per_gpu, each on its own node; `fault` is (reason, seconds since the epoch)."""
    slots = []
    for i in range(2):
        slot = apb.Slot(
            id=str(i),
            type=apb.DEVICE_TYPE_CUDA,
            brand="NVIDIA H200",
            uuid=f"GPU-{agent_id}-{i}",
            memory_bytes=141 << 30,
            index=i,
            topology=apb.DeviceTopology(numa_node=i if numa_per_gpu else 0, nvlink_domain=0),
        )
        if fault is not None and slot.id == faulty:
            slot.fault.reason = fault[0]
            slot.fault.at.CopyFrom(Timestamp(seconds=int(fault[1])))
        slots.append(slot)
    return slots
