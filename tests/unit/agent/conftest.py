"""Fixtures for the agent's tests: a master double on a real port, and real agent processes
(`python -m services.agent`) pointed at it, each with its own work dir under tmp_path."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.agent.runtime import private_mounts
from tests.unit.agent.agent_master_double import MasterServer, MasterStore
from tests.unit.agent.agent_processes import REPO_ROOT, AgentProcess, kill_leftovers


@pytest.fixture
def needs_private_mounts() -> None:
    """Skips the test (`@pytest.mark.usefixtures("needs_private_mounts")`) where this process
    cannot make private mount namespaces: the bind-mount and /dev/shm tests that mount for real."""
    if not private_mounts.supported():
        pytest.skip("needs root, unshare and mount")


@pytest.fixture
def store() -> MasterStore:
    return MasterStore()


@pytest.fixture
def master(store: MasterStore) -> Iterator[MasterServer]:
    server = MasterServer(store)
    yield server
    server.stop()


@pytest.fixture
def launch_agent(tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    started: list[AgentProcess] = []

    def launch(
        master_address: str,
        *extra: str,
        agent_id: str = "agent-1",
        slots: int = 2,
        env: dict[str, str] | None = None,
        wait: bool = True,
    ) -> AgentProcess:
        work_dir = tmp_path / f"work-{agent_id}"
        index = len(started)
        ready_file = tmp_path / f"ready-{agent_id}-{index}.json"
        log_path = tmp_path / f"agent-{agent_id}-{index}.log"
        argv = [
            sys.executable,
            "-m",
            "services.agent",
            "--master",
            master_address,
            "--agent-id",
            agent_id,
            "--slots",
            str(slots),
            "--slot-type",
            "cpu",
            "--work-dir",
            str(work_dir),
            "--ready-file",
            str(ready_file),
            "--log-level",
            "DEBUG",
            *extra,
        ]
        # The repository's own stubs first: a worktree's regenerated ones, not an install's.
        code_path = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "clients" / "python")])
        full_env = {**os.environ, "PYTHONPATH": code_path, **(env or {})}
        full_env.pop("CAIRN_CLUSTER_TOKEN", None)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=full_env, stdout=log, stderr=log)
        agent = AgentProcess(proc, agent_id, work_dir, ready_file, log_path)
        started.append(agent)
        if wait:
            agent.wait_ready()
        return agent

    yield launch
    for agent in started:
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait(10)
    for agent in started:
        kill_leftovers(agent.work_dir)
