"""The command line of each service of a local cluster (`python -m services.<name> ...`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from cairn.localcluster.paths import ClusterPaths

INTERNAL_ROLES = ("scheduler", "searcher", "checkpoint")
DEFAULT_SERVICE_MODULES: Mapping[str, str] = MappingProxyType(
    {
        "scheduler": "services.scheduler",
        "searcher": "services.searcher",
        "checkpoint": "services.checkpoint",
        "master": "services.master",
        "agent": "services.agent",
    }
)


# The name the agents give the task environment, for configs that choose it by environment.image.
TASK_ENV_NAME = "cairn-task"


def default_task_env() -> Path | None:
    """The Python environment trials run in: $CAIRN_TASK_ENV, else the `.venv-task` that
    `make install` builds beside the virtualenv Cairn runs from (Cairn's client, Determined's
    package, PyTorch, scikit-learn); None when there is neither (trials then run on the agent's own
    interpreter)."""
    configured = os.environ.get("CAIRN_TASK_ENV", "").strip()
    candidates = [Path(configured).expanduser()] if configured else [Path(sys.prefix).parent / ".venv-task"]
    for candidate in candidates:
        if (candidate / "bin" / "python3").exists():
            return candidate.resolve()
    return None


@dataclass(frozen=True)
class ClusterOptions:
    state_dir: Path
    agents: int = 1
    slots_per_agent: int = 1
    db_url: str | None = None
    master_port: int = 8090
    http_port: int = 8080
    log_format: str = "console"
    log_level: str = "INFO"
    timeout_s: float = 60.0
    host: str = "127.0.0.1"
    cluster_name: str = "cairn"
    python: str = sys.executable
    # The Python environment the agents run trials in (see default_task_env); None: the agents' own.
    task_env: Path | None = field(default_factory=default_task_env)
    # Which module runs each role; tests swap in stand-ins.
    service_modules: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_SERVICE_MODULES))
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchPlan:
    name: str
    role: str
    command: list[str]
    log_path: Path
    ready_file: Path
    # Keys the ready file must hold before the process counts as ready.
    ready_keys: tuple[str, ...] = ("grpc_port",)
    agent_id: str | None = None
    work_dir: Path | None = None


def _common(options: ClusterOptions, paths: ClusterPaths, name: str, role: str, port: int) -> list[str]:
    return [
        options.python,
        "-m",
        options.service_modules[role],
        "--host",
        options.host,
        "--port",
        str(port),
        "--log-format",
        options.log_format,
        "--log-level",
        options.log_level,
        "--ready-file",
        str(paths.ready_file(name)),
    ]


def internal_service(options: ClusterOptions, paths: ClusterPaths, role: str) -> LaunchPlan:
    return LaunchPlan(
        name=role,
        role=role,
        command=_common(options, paths, role, role, 0),
        log_path=paths.log_file(role),
        ready_file=paths.ready_file(role),
    )


def master(
    options: ClusterOptions, paths: ClusterPaths, *, scheduler: str, searcher: str, checkpoint: str
) -> LaunchPlan:
    command = _common(options, paths, "master", "master", options.master_port)
    command += [
        "--http-port",
        str(options.http_port),
        "--state-dir",
        str(paths.master_dir),
        "--scheduler-addr",
        scheduler,
        "--searcher-addr",
        searcher,
        "--checkpoint-addr",
        checkpoint,
        "--cluster-name",
        options.cluster_name,
    ]
    if options.db_url:
        command += ["--db-url", options.db_url]
    return LaunchPlan(
        name="master",
        role="master",
        command=command,
        log_path=paths.log_file("master"),
        ready_file=paths.ready_file("master"),
        ready_keys=("grpc_port", "http_port"),
    )


def agent(options: ClusterOptions, paths: ClusterPaths, index: int, master_address: str) -> LaunchPlan:
    agent_id = f"agent-{index}"
    work_dir = paths.agent_work_dir(agent_id)
    command = _common(options, paths, agent_id, "agent", 0)
    command += [
        "--master",
        master_address,
        "--agent-id",
        agent_id,
        "--slots",
        str(options.slots_per_agent),
        "--work-dir",
        str(work_dir),
        "--kill-containers-on-exit",
        # Every agent of a local cluster is on this machine.
        "--advertise-address",
        options.host,
    ]
    if options.task_env is not None:
        command += ["--task-env", f"{TASK_ENV_NAME}={options.task_env}"]
    return LaunchPlan(
        name=agent_id,
        role="agent",
        command=command,
        log_path=paths.log_file(agent_id),
        ready_file=paths.ready_file(agent_id),
        # The agent adds its id once the master has welcomed it: only then can it take work.
        ready_keys=("grpc_port", "agent_id"),
        agent_id=agent_id,
        work_dir=work_dir,
    )
