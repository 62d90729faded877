"""Real agent processes for the tests, and helpers to look at their containers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from services.agent.runtime.jsonfile import read_json
from services.agent.runtime.processes import is_running, signal_group, signal_process
from services.agent.runtime.protocol import ContainerPaths
from tests.unit.agent.agent_master_double import MasterStore, wait_until

REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass
class AgentProcess:
    proc: subprocess.Popen[bytes]
    agent_id: str
    work_dir: Path
    ready_file: Path
    log_path: Path

    def wait_ready(self, timeout: float = 20.0) -> dict[str, object]:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited with {self.proc.returncode}:\n{self.log_text()}")
            return self.ready_file.exists()

        wait_until(ready, timeout, "the agent's ready file")
        data = json.loads(self.ready_file.read_text())
        assert isinstance(data, dict)
        return data

    def container(self, container_id: str) -> ContainerPaths:
        return ContainerPaths(self.work_dir / "containers" / container_id)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def command_pid(paths: ContainerPaths, timeout: float = 10.0) -> int:
    """The pid of a container's command, once its shim has started it."""
    wait_until(paths.child_info.exists, timeout, f"{paths.child_info}")
    info = read_json(paths.child_info)
    assert info is not None
    return int(info["pid"])


def shim_pid(paths: ContainerPaths) -> int:
    info = read_json(paths.shim_info)
    assert info is not None
    return int(info["pid"])


def python_command(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


def kill_leftovers(work_dir: Path) -> None:
    containers = work_dir / "containers"
    if not containers.is_dir():
        return
    for folder in containers.iterdir():
        paths = ContainerPaths(folder)
        child = read_json(paths.child_info)
        shim = read_json(paths.shim_info)
        if shim and is_running(int(shim["pid"]), shim.get("start_ticks")):
            if child:
                signal_group(int(child["pgid"]), signal.SIGKILL)
            signal_process(int(shim["pid"]), signal.SIGKILL)


def wait_terminated(store: MasterStore, container_id: str, timeout: float = 15.0) -> None:
    wait_until(lambda: store.final(container_id) is not None, timeout, f"{container_id} to terminate")


def elapsed_since(start: float) -> float:
    return time.monotonic() - start
