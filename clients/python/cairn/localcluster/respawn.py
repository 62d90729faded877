"""Starting a recorded service again exactly as it ran: the same command with its ports pinned to
the ones it had (the master, agents and clients know it by its address), the same cluster token
and the same environment. Used by the watchdog after a crash and by `cairn cluster up` on a
cluster that is partly running."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from cairn.localcluster.processes import exit_code, spawn
from cairn.localcluster.record import ClusterRecord, ProcessRecord

CLUSTER_TOKEN_ENV = "CAIRN_CLUSTER_TOKEN"


def child_environment(token: str, extra_env: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    # The token goes in the environment, not on command lines everyone can read with `ps`.
    env[CLUSTER_TOKEN_ENV] = token
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra_env)
    return env


def _pin(command: list[str], option: str, port: int | None) -> None:
    if port and option in command[:-1]:
        command[command.index(option) + 1] = str(port)


def pinned_command(process: ProcessRecord) -> list[str]:
    """The recorded command with port 0 ("any free port") replaced by the port it got."""
    command = list(process.command)
    _pin(command, "--port", process.grpc_port)
    if process.role == "master":
        _pin(command, "--http-port", process.http_port)
    return command


def respawn(record: ClusterRecord, process: ProcessRecord) -> None:
    """Start `process` again and update its entry (pid, command, start time); the caller saves."""
    command = pinned_command(process)
    if process.ready_file:
        Path(process.ready_file).unlink(missing_ok=True)
    if process.work_dir:
        Path(process.work_dir).mkdir(parents=True, exist_ok=True)
    child = spawn(command, Path(process.log_path), child_environment(record.cluster_token, record.extra_env))
    process.pid = child.pid
    process.command = command
    process.started_at = time.time()


def describe_exit(pid: int) -> str:
    """How a process ended, as far as this process can know: only a parent learns the exit code."""
    code = exit_code(pid)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    if code is None:
        # Only the process that started it (the first `cluster up`) could have read its code.
        return f"exited at {stamp} (exit code unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} at {stamp}"
    return f"exit code {code} at {stamp}"
