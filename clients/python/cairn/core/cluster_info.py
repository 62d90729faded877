"""What a trial process knows about itself on a cluster, read from the environment the master and
the agent set (CAIRN_*), in the shape of Determined's `det.get_cluster_info()`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cairn.task_environment as tenv
from cairn.core.errors import ClusterInfoError

ALLOCATION_ID_ENV = tenv.ALLOCATION_ID


@dataclass(frozen=True)
class TrialInfo:
    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    # The expanded experiment config (checkpoint_storage, searcher, data, ...).
    config: dict[str, Any]
    # Batches the trial had completed when this allocation started (from its latest checkpoint).
    steps_completed: int
    # Which run (allocation) of the trial this is: 1 for the first, +1 on every restart.
    trial_run_id: int
    # The length the searcher set for the trial in promotion mode; 0 when it set none.
    searcher_target: int = 0

    # Determined keeps these three private; its users' scripts read them under these names.
    @property
    def _config(self) -> dict[str, Any]:
        return self.config

    @property
    def _steps_completed(self) -> int:
        return self.steps_completed

    @property
    def _trial_run_id(self) -> int:
        return self.trial_run_id


@dataclass(frozen=True)
class ClusterInfo:
    master_address: str
    allocation_id: str
    allocation_token: str = field(repr=False)
    task_id: str
    agent_id: str
    container_id: str
    slot_ids: list[int]
    trial: TrialInfo
    # The uuid of the checkpoint to resume from; None for a fresh trial.
    latest_checkpoint: str | None
    # False for the stand-in `cairn.core.init()` builds off cluster.
    on_cluster: bool = True
    task_type: str = "TRIAL"
    # The allocation's containers (one per agent it runs on): their addresses and slot counts by
    # container rank, and this one's rank (Determined's rendezvous info).
    container_addrs: list[str] = field(default_factory=lambda: ["127.0.0.1"])
    container_slot_counts: list[int] = field(default_factory=list)
    container_rank: int = 0
    # The cluster's id; "" when the agent did not say (then no TensorBoard files are uploaded).
    cluster_id: str = ""

    @property
    def chief_ip(self) -> str:
        """Where the chief (rank 0) runs: the first container's address."""
        return self.container_addrs[0]

    @property
    def num_containers(self) -> int:
        return len(self.container_addrs)

    @property
    def user_data(self) -> dict[str, Any]:
        """The experiment config's `data` section."""
        data = self.trial.config.get("data")
        return dict(data) if isinstance(data, Mapping) else {}

    @property
    def master_url(self) -> str:
        return f"grpc://{self.master_address}" if self.master_address else ""


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ClusterInfoError(f"{name}: not set; the trial environment from the master is incomplete")
    return value


def _integer(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        if default is None:
            raise ClusterInfoError(f"{name}: not set; the trial environment from the master is incomplete")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ClusterInfoError(f"{name}: must be an integer, not {raw!r}") from None


def _json(env: Mapping[str, str], name: str, default: Any) -> Any:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ClusterInfoError(f"{name}: not valid JSON ({exc})") from None
    if not isinstance(value, type(default)):
        raise ClusterInfoError(f"{name}: must be a JSON {type(default).__name__}, not {type(value).__name__}")
    return value


def _master_address(env: Mapping[str, str]) -> str:
    address = _required(env, tenv.MASTER_ADDR)
    for scheme in ("grpc://", "http://", "https://"):
        if address.lower().startswith(scheme):
            address = address[len(scheme) :]
    return address.rstrip("/")


def cluster_info_from_env(env: Mapping[str, str]) -> ClusterInfo | None:
    """None when `env` is not a trial's environment (no allocation id)."""
    if not env.get(ALLOCATION_ID_ENV, "").strip():
        return None
    experiment_id = _integer(env, tenv.EXPERIMENT_ID)
    trial_id = _integer(env, tenv.TRIAL_ID)
    slot_ids = _json(env, tenv.SLOT_IDS, [])
    if not all(isinstance(slot, int) and not isinstance(slot, bool) for slot in slot_ids):
        raise ClusterInfoError(f"CAIRN_SLOT_IDS: must be a JSON list of integers, not {slot_ids!r}")
    trial = TrialInfo(
        trial_id=trial_id,
        experiment_id=experiment_id,
        trial_seed=_integer(env, tenv.TRIAL_SEED, 0),
        hparams=_json(env, tenv.HPARAMS, {}),
        config=_json(env, tenv.EXPERIMENT_CONFIG, {}),
        steps_completed=_integer(env, tenv.STEPS_COMPLETED, 0),
        trial_run_id=_integer(env, tenv.TRIAL_RUN_ID),
        searcher_target=_integer(env, tenv.SEARCHER_TARGET, 0),
    )
    addrs = _json(env, tenv.CONTAINER_ADDRS, ["127.0.0.1"])
    counts = _json(env, tenv.CONTAINER_SLOT_COUNTS, [len(slot_ids)])
    if not addrs or not all(isinstance(a, str) and a for a in addrs):
        raise ClusterInfoError(f"CAIRN_CONTAINER_ADDRS: must be a JSON list of addresses, not {addrs!r}")
    if len(counts) != len(addrs) or not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        raise ClusterInfoError(
            f"CAIRN_CONTAINER_SLOT_COUNTS: must be a JSON list of one integer per container, not {counts!r}"
        )
    container_rank = _integer(env, tenv.CONTAINER_RANK, 0)
    if not 0 <= container_rank < len(addrs):
        raise ClusterInfoError(f"CAIRN_CONTAINER_RANK: {container_rank} is not in [0, {len(addrs)})")
    return ClusterInfo(
        master_address=_master_address(env),
        allocation_id=_required(env, ALLOCATION_ID_ENV),
        allocation_token=_required(env, tenv.ALLOCATION_TOKEN),
        task_id=env.get(tenv.TASK_ID, "").strip() or f"{experiment_id}.{trial_id}",
        agent_id=env.get(tenv.AGENT_ID, "").strip(),
        container_id=env.get(tenv.CONTAINER_ID, "").strip(),
        slot_ids=list(slot_ids),
        trial=trial,
        latest_checkpoint=env.get(tenv.LATEST_CHECKPOINT, "").strip() or None,
        container_addrs=list(addrs),
        container_slot_counts=list(counts),
        container_rank=container_rank,
        cluster_id=env.get(tenv.CLUSTER_ID, "").strip(),
    )


def get_cluster_info() -> ClusterInfo | None:
    """This trial's facts on a cluster; None when the process does not run on one."""
    return cluster_info_from_env(os.environ)


def local_info(hparams: Mapping[str, Any] | None) -> ClusterInfo:
    """The stand-in off cluster: no master, trial 0, the hyperparameters the caller gave."""
    return ClusterInfo(
        master_address="",
        allocation_id="",
        allocation_token="",
        task_id="",
        agent_id="",
        container_id="",
        slot_ids=[],
        trial=TrialInfo(
            trial_id=0,
            experiment_id=0,
            trial_seed=0,
            hparams=dict(hparams or {}),
            config={},
            steps_completed=0,
            trial_run_id=0,
        ),
        latest_checkpoint=None,
        on_cluster=False,
        container_slot_counts=[1],
    )
