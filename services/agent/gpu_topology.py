"""Where each GPU sits: its NUMA node and its NVLink domain, from NVML (and sysfs for the NUMA
node where the driver's NVML is older than nvmlDeviceGetNumaNodeId).

The master packs a multi-GPU allocation onto GPUs of one NVLink domain, then of one NUMA node,
where it can (scheduling's slot choice): NCCL's all-reduce over NVLink is many times faster than
over PCIe between sockets. Anything NVML cannot answer is -1 (unknown), never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.agent.nvml_values import NVML_ERROR_INVALID_ARGUMENT, error_code, text
from services.common.logging import get_logger

log = get_logger(__name__)

# Links per GPU NVML may name (pynvml's NVML_NVLINK_MAX_LINKS where the object has it).
NVLINK_MAX_LINKS = 18
NVML_FEATURE_ENABLED = 1
# What is at a link's other end: another GPU and an NVSwitch join GPUs; an IBM NPU does not.
NVLINK_DEVICE_TYPE_GPU = 0x00
NVLINK_DEVICE_TYPE_SWITCH = 0x02
NO_ADDRESS = "0000:00:00.0"
UNKNOWN = -1
SYSFS_PCI = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class Topology:
    numa_node: int = UNKNOWN
    nvlink_domain: int = UNKNOWN


def pci_address(bus_id: str | bytes) -> str:
    """NVML's "00000000:3B:00.0" as sysfs names it, "0000:3b:00.0"."""
    domain, _, rest = text(bus_id).strip().partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}"
    except ValueError:
        return text(bus_id).lower()


def _numa_node(nvml: Any, handle: Any, address: str, sysfs: Path) -> int:
    try:
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
        return node if node >= 0 else UNKNOWN
    except Exception:
        pass  # older drivers: sysfs knows it too
    try:
        node = int((sysfs / address / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return UNKNOWN
    return node if node >= 0 else UNKNOWN


def _joins_gpus(nvml: Any, handle: Any, link: int) -> bool:
    """Whether the link's other end is a GPU or an NVSwitch (drivers too old to say: assumed)."""
    try:
        kind = int(nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
    except Exception:
        return True
    return kind in (NVLINK_DEVICE_TYPE_GPU, NVLINK_DEVICE_TYPE_SWITCH)


def _nvlink_peers(nvml: Any, handle: Any) -> list[str]:
    """The PCI addresses of the GPUs and NVSwitches at the other end of the GPU's active NVLinks;
    none for a PCIe card."""
    peers: list[str] = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS))):
        try:
            if int(nvml.nvmlDeviceGetNvLinkState(handle, link)) != NVML_FEATURE_ENABLED:
                continue
            if not _joins_gpus(nvml, handle, link):
                continue
            peer = pci_address(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        except Exception as exc:
            if error_code(exc) == NVML_ERROR_INVALID_ARGUMENT:
                break  # past the GPU's last link
            continue  # this link is not supported, or not up: the next may be
        if peer != NO_ADDRESS:
            peers.append(peer)
    return peers


def read_topology(nvml: Any, handles: Sequence[Any], sysfs: Path = SYSFS_PCI) -> list[Topology]:
    """Each GPU's topology (by position in `handles`, which are in device-index order)."""
    addresses: list[str] = []
    for handle in handles:
        try:
            addresses.append(pci_address(nvml.nvmlDeviceGetPciInfo(handle).busId))
        except Exception:
            addresses.append("")
    index_of = {a: i for i, a in enumerate(addresses) if a}
    # Union-find over GPUs: joined by a direct link, or by links to the same other device (an
    # NVSwitch: every GPU on the switch fabric is one domain).
    parent = list(range(len(handles)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a: int, b: int) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    linked: set[int] = set()
    through_switch: dict[str, int] = {}
    for i, handle in enumerate(handles):
        peers = _nvlink_peers(nvml, handle)
        if not peers:
            continue
        linked.add(i)
        for peer in peers:
            if peer in index_of:
                join(i, index_of[peer])
            elif peer in through_switch:
                join(i, through_switch[peer])
            else:
                through_switch[peer] = i
    found = []
    for i, handle in enumerate(handles):
        numa = _numa_node(nvml, handle, addresses[i], sysfs) if addresses[i] else UNKNOWN
        # A GPU without NVLink is a domain of its own (its index), so no two such GPUs look linked.
        domain = root(i) if i in linked else i
        found.append(Topology(numa_node=numa, nvlink_domain=domain))
    return found
