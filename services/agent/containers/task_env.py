"""The environment a container's command gets.

Three layers, later ones winning: the basics of the agent's own environment (not all of it: the
agent's credentials and settings are not the task's business), the task's own variables from the
master (TaskSpec.environment), and what only the agent knows (its id, the container, the slots,
the master as it reaches it), under Cairn names and Determined's (reference §3.8), so both
Cairn's Core API and Determined's harness find them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import cairn.task_environment as tenv
from cairn.tls import MASTER_CERT_PEM_ENV
from services.agent.containers.python_envs import PythonEnv
from services.agent.requests import RendezvousInfo
from services.agent.slots import DeviceKind, SlotInfo

# Taken from the agent's environment; LC_* variables too.
BASIC_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM")

# The master's REST port when the Welcome did not say (the master's own default).
DEFAULT_MASTER_HTTP_PORT = 8080


@dataclass(frozen=True)
class MasterFacts:
    """What the agent learned about the master: from its flags and the Welcome."""

    grpc_address: str  # --master: HOST:PORT, or several comma-separated (an active master, standbys)
    cluster_id: str = ""
    master_id: str = ""
    http_port: int = 0
    # The CA the agent verifies the master's TLS certificate with (--master-cert); "" = plaintext.
    ca_pem: str = ""

    @property
    def host(self) -> str:
        """The first master's host: Determined's variables name one master."""
        host, _, _ = split_host_port(self.grpc_address.split(",")[0])
        return host

    @property
    def rest_port(self) -> int:
        return self.http_port or DEFAULT_MASTER_HTTP_PORT

    @property
    def rest_url(self) -> str:
        host = self.host
        shown = f"[{host}]" if ":" in host else host
        scheme = "https" if self.ca_pem else "http"
        return f"{scheme}://{shown}:{self.rest_port}"


def split_host_port(address: str) -> tuple[str, int | None, str]:
    """("host", port or None, error) for "host:port", "[v6]:port" or "host"."""
    text = address.strip()
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            return text, None, f"{address!r}: unclosed '['"
        host, rest = text[1:close], text[close + 1 :]
        if not rest:
            return host, None, ""
        if not rest.startswith(":"):
            return host, None, f"{address!r}: expected ':' after ']'"
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            return text, None, ""
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return host, None, f"{address!r}: port must be a number from 1 to 65535"
    return host, int(port_text), ""


def basic_environment(source: Mapping[str, str], python_env: PythonEnv | None) -> dict[str, str]:
    env = {k: v for k, v in source.items() if k in BASIC_VARIABLES or k.startswith("LC_")}
    path = env.get("PATH", os.defpath)
    # `python3 train.py` should find the task environment's interpreter (and the packages it has),
    # as a Docker image's python would be found in the docker runtime: as an activated virtualenv.
    if python_env is not None:
        bin_dir = str(python_env.bin_dir)
        path = os.pathsep.join([bin_dir, *(p for p in path.split(os.pathsep) if p != bin_dir)])
        env["VIRTUAL_ENV"] = str(python_env.prefix)
    env["PATH"] = path
    return env


def rendezvous_environment(rendezvous: RendezvousInfo | None, container_id: str) -> dict[str, str]:
    """Where this container stands among the allocation's containers, and the ports their processes
    meet on, under Cairn's names and the variables Determined's launchers and DistributedContext
    read (C10D_PORT, INTER_TRAIN_PROCESS_COMM_PORT_1/_2, DET_CHIEF_IP)."""
    if rendezvous is None:
        return {"CAIRN_CONTAINER_RANK": "0", "DET_RESOURCES_ID": container_id}
    env = {
        tenv.CONTAINER_RANK: str(rendezvous.container_rank),
        tenv.CONTAINER_ADDRS: json.dumps(list(rendezvous.container_addrs), separators=(",", ":")),
        tenv.CONTAINER_SLOT_COUNTS: json.dumps(list(rendezvous.container_slot_counts), separators=(",", ":")),
        tenv.CHIEF_IP: rendezvous.chief_ip,
        "DET_CHIEF_IP": rendezvous.chief_ip,
        "DET_RESOURCES_ID": container_id,
    }
    ports = {
        tenv.C10D_PORT: rendezvous.c10d_port,
        "C10D_PORT": rendezvous.c10d_port,
        tenv.COLLECTIVES_PORT: rendezvous.collectives_port,
        "INTER_TRAIN_PROCESS_COMM_PORT_1": rendezvous.det_pub_port,
        "INTER_TRAIN_PROCESS_COMM_PORT_2": rendezvous.det_pull_port,
    }
    env.update({name: str(port) for name, port in ports.items() if port})
    return env


def task_environment(
    *,
    base: Mapping[str, str],
    spec_environment: Mapping[str, str],
    agent_id: str,
    container_id: str,
    slots: Sequence[SlotInfo],
    workdir: Path,
    master: MasterFacts,
    python_env: PythonEnv | None,
    rendezvous: RendezvousInfo | None = None,
) -> dict[str, str]:
    env = basic_environment(base, python_env)
    env.update(spec_environment)
    slot_ids = json.dumps([int(s.id) if s.id.isdigit() else s.index for s in slots], separators=(",", ":"))
    gpus = [str(s.index) for s in slots if s.kind == DeviceKind.CUDA]
    gpu_uuids = [s.uuid for s in slots if s.kind == DeviceKind.CUDA and s.uuid]
    facts = {
        tenv.AGENT_ID: agent_id,
        tenv.CONTAINER_ID: container_id,
        tenv.SLOT_IDS: slot_ids,
        tenv.WORKDIR: str(workdir),
        tenv.MASTER_ADDR: master.grpc_address,
        "DET_AGENT_ID": agent_id,
        "DET_CONTAINER_ID": container_id,
        "DET_SLOT_IDS": slot_ids,
        "DET_WORKDIR": str(workdir),
        "DET_CLUSTER_ID": master.cluster_id,
        "DET_MASTER": master.rest_url,
        "DET_MASTER_HOST": master.host,
        "DET_MASTER_ADDR": master.host,
        "DET_MASTER_PORT": str(master.rest_port),
        # CPU-only allocations must not see (and grab) the machine's GPUs.
        "CUDA_VISIBLE_DEVICES": ",".join(gpus),
        tenv.GPU_UUIDS: ",".join(gpu_uuids),
    }
    if master.master_id:
        facts["DET_MASTER_ID"] = master.master_id
    if master.ca_pem:
        # The text, not the agent's file: a task under another user or in a container cannot read
        # that (cairn/tls.py reads it from here).
        facts[MASTER_CERT_PEM_ENV] = master.ca_pem
    facts.update(rendezvous_environment(rendezvous, container_id))
    env.update(facts)
    return env
