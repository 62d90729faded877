"""What Determined's harness needs from a task's surroundings, for Determined scripts run by Cairn.

Determined's `det.get_cluster_info()` reads /run/determined/info/{cluster,trial,rendezvous,
resources}.json — a fixed path that Determined's containers each have privately. The process
runtime gives each allocation the same privacy with a mount namespace (private_mounts.py): the
agent writes the files into the container's own folder, bound on /run/determined for that process
tree only. Without the privilege to do
so (the agent is not root), Determined scripts still run but see no cluster info, and the
container's log says so.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import cairn.task_environment as tenv
from services.agent.requests import RendezvousInfo

RUN_DIR = "/run/determined"
# The master's CA under RUN_DIR, where Determined's task containers have it (DET_MASTER_CERT_FILE).
MASTER_CERT_PATH = "etc/ssl/master.crt"


def is_determined_task(env: Mapping[str, str]) -> bool:
    return "DET_TASK_ID" in env and "DET_ALLOCATION_ID" in env


def rendezvous_file(rendezvous: RendezvousInfo | None, slot_count: int) -> dict[str, object]:
    """rendezvous.json: every container's address and slot count by rank, and this one's rank."""
    if rendezvous is None:
        # From a master that sent none: one container, reachable on loopback.
        return {"container_addrs": ["127.0.0.1"], "container_rank": 0, "container_slot_counts": [slot_count]}
    return {
        "container_addrs": list(rendezvous.container_addrs),
        "container_rank": rendezvous.container_rank,
        "container_slot_counts": list(rendezvous.container_slot_counts),
    }


def write_info_files(
    env: Mapping[str, str], directory: Path, rendezvous: RendezvousInfo | None = None
) -> None:
    """The files Determined's prep step would write, from the DET_* environment of the task and the
    allocation's rendezvous info."""
    info = directory / "info"
    info.mkdir(parents=True, exist_ok=True)
    slot_ids = json.loads(env.get("DET_SLOT_IDS", "[]"))
    cluster = {
        "master_url": env.get("DET_MASTER", ""),
        "cluster_id": env.get("DET_CLUSTER_ID", ""),
        "agent_id": env.get("DET_AGENT_ID", ""),
        "slot_ids": slot_ids,
        "task_id": env["DET_TASK_ID"],
        "allocation_id": env["DET_ALLOCATION_ID"],
        "session_token": env.get("DET_SESSION_TOKEN", ""),
        "task_type": env.get("DET_TASK_TYPE", "TRIAL"),
        "master_cert_name": env.get("DET_MASTER_CERT_NAME"),
        "master_cert_file": env.get("DET_MASTER_CERT_FILE"),
        "latest_checkpoint": env.get("DET_LATEST_CHECKPOINT"),
    }
    files: dict[str, object] = {
        "cluster.json": cluster,
        "rendezvous.json": rendezvous_file(rendezvous, len(slot_ids)),
        "resources.json": {"gpu_uuids": [u for u in env.get(tenv.GPU_UUIDS, "").split(",") if u]},
    }
    if "DET_TRIAL_ID" in env:
        config = json.loads(env.get("DET_EXPERIMENT_CONFIG", "{}"))
        files["trial.json"] = {
            "trial_id": int(env["DET_TRIAL_ID"]),
            "experiment_id": int(env.get("DET_EXPERIMENT_ID", "0")),
            "trial_seed": int(env.get("DET_TRIAL_SEED", "0")),
            "hparams": json.loads(env.get("DET_HPARAMS", "{}")),
            "config": config,
            "steps_completed": int(env.get("DET_STEPS_COMPLETED", "0")),
            "trial_run_id": int(env.get("DET_TRIAL_RUN_ID", "1")),
            "debug": bool(config.get("debug", False)),
            "inter_node_network_interface": env.get("DET_INTER_NODE_NETWORK_INTERFACE"),
        }
    for name, content in files.items():
        (info / name).write_text(json.dumps(content))


def copy_model_definition(workdir: Path, run_dir: Path, skip: str) -> None:
    """/run/determined/train/model: the pristine copy of the model definition that Determined's
    harness copies into each checkpoint (its MANAGED_TRAINING_MODEL_COPY). Taken right after the
    unpack, before the task runs, without the agent's bookkeeping folder `skip`."""
    target = run_dir / "train" / "model"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(
        workdir, target, symlinks=True, ignore=lambda folder, names: [skip] if Path(folder) == workdir else []
    )
