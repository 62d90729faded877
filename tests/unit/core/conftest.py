"""Core API tests: the real contexts against a test double of the master on a free port, with a
shared_fs checkpoint storage in a temporary directory."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.unit.core.core_master_double import TOKEN, MasterDouble, RunningDouble, start_master_double

CAIRN_VARIABLES = (
    "CAIRN_MASTER_ADDR",
    "CAIRN_ALLOCATION_ID",
    "CAIRN_ALLOCATION_TOKEN",
    "CAIRN_TASK_ID",
    "CAIRN_TRIAL_ID",
    "CAIRN_EXPERIMENT_ID",
    "CAIRN_TRIAL_RUN_ID",
    "CAIRN_TRIAL_SEED",
    "CAIRN_HPARAMS",
    "CAIRN_EXPERIMENT_CONFIG",
    "CAIRN_LATEST_CHECKPOINT",
    "CAIRN_STEPS_COMPLETED",
    "CAIRN_SEARCHER_TARGET",
    "CAIRN_AGENT_ID",
    "CAIRN_CONTAINER_ID",
    "CAIRN_SLOT_IDS",
    "CAIRN_SEARCHER_LENGTH",
    "CAIRN_LOCAL_CHECKPOINT_DIR",
)


@dataclass
class ClusterEnv:
    master: MasterDouble
    allocation_id: str
    checkpoint_dir: Path
    config: dict[str, Any]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the environment of the process that runs pytest (or of a trial)."""
    for name in CAIRN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))


@pytest.fixture
def master() -> Iterator[RunningDouble]:
    running = start_master_double()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def cluster_env(master: RunningDouble, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ClusterEnv:
    """The environment the master and agent give a trial process, pointing at the double."""
    checkpoint_dir = tmp_path / "checkpoints"
    config: dict[str, Any] = {
        "name": "core-test",
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(checkpoint_dir)},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
        "data": {"url": "https://example.invalid/data"},
    }
    # Sequence numbers are per allocation and per process: every test gets its own allocation.
    allocation_id = f"7.3.{uuid.uuid4().hex[:8]}"
    env = {
        "CAIRN_MASTER_ADDR": master.address,
        "CAIRN_ALLOCATION_ID": allocation_id,
        "CAIRN_ALLOCATION_TOKEN": TOKEN,
        "CAIRN_TASK_ID": "7.3",
        "CAIRN_TRIAL_ID": "3",
        "CAIRN_EXPERIMENT_ID": "7",
        "CAIRN_TRIAL_RUN_ID": "2",
        "CAIRN_TRIAL_SEED": "1234",
        "CAIRN_HPARAMS": json.dumps({"lr": 0.1, "layers": 2}),
        "CAIRN_EXPERIMENT_CONFIG": json.dumps(config),
        "CAIRN_STEPS_COMPLETED": "40",
        "CAIRN_SEARCHER_TARGET": "0",
        "CAIRN_AGENT_ID": "agent-1",
        "CAIRN_CONTAINER_ID": f"{allocation_id}.0",
        "CAIRN_SLOT_IDS": "[0]",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return ClusterEnv(
        master=master.master, allocation_id=allocation_id, checkpoint_dir=checkpoint_dir, config=config
    )
