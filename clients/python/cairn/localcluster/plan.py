"""The command line of each service of a local cluster (`python -m services.<name> ...`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.record import ProcessRecord
from cairn.localcluster.task_isolation import TaskIsolation

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
class Provisioning:
    min_agents: int = 0
    max_agents: int = 3
    # Determined's max_idle_agent_period / max_agent_starting_period (durations: "5m", "90s").
    max_idle_agent_period: str = "5m"
    max_agent_starting_period: str = "2m"
    # local: agents as processes of this machine; docker: containers of the service image
    # (agent_image, `make images`) running their trials as containers (the cluster's runtime must
    # be docker).
    provider: str = "local"
    agent_image: str = "cairn-service:latest"


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
    # Start the watchdog that restarts crashed services (watchdog.py).
    supervise: bool = True
    # Standby masters to start beside the master (PostgreSQL only): each waits on the leader lease
    # with its ports closed and takes over when the active master dies.
    standby_masters: int = 0
    # gRPC addresses of standby masters (started beside the cluster on the same PostgreSQL): the
    # agents get them after the master's, and follow a failover to whichever leads.
    standby_master_addresses: tuple[str, ...] = ()
    # Where the agents run trials: "process" (on this machine, in task_env) or "docker" (Docker
    # containers of the task image, or of default_image when given).
    runtime: str = "process"
    default_image: str | None = None
    # TLS on the master's ports with a self-signed certificate kept in the state dir
    # (certificate.py); agents, and through them trials, verify the master with it.
    tls: bool = False
    # The user trials run as (process runtime): None picks task_isolation.TASK_USER when run as
    # root; "" runs them as the cluster's own user. `isolation` is what start_cluster decided.
    task_user: str | None = None
    isolation: TaskIsolation | None = None
    # Dynamic agents (`cluster up --provision`): the master launches and retires the default pool's
    # agents itself (its local provider) instead of the cluster starting a fixed number.
    provision: Provisioning | None = None

    @property
    def task_interpreter(self) -> str:
        """The interpreter trials run on: the task environment's, else the agents' own."""
        return str(self.task_env / "bin" / "python3") if self.task_env is not None else self.python


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
    if options.isolation is not None:
        # Trials write the default checkpoints: outside the owner-only state dir.
        command += ["--checkpoint-dir", str(options.isolation.checkpoint_dir)]
    if options.tls:
        command += ["--tls-cert", str(paths.tls_cert_file), "--tls-key", str(paths.tls_key_file)]
    if options.provision is not None:
        command += ["--config-file", str(paths.master_config_file)]
    return LaunchPlan(
        name="master",
        role="master",
        command=command,
        log_path=paths.log_file("master"),
        ready_file=paths.ready_file("master"),
        ready_keys=("grpc_port", "http_port"),
    )


STANDBY_MASTER_PREFIX = "master-standby-"


def is_standby_master(name: str) -> bool:
    return name.startswith(STANDBY_MASTER_PREFIX)


def standby_master(
    paths: ClusterPaths, index: int, master: LaunchPlan, grpc_port: int, http_port: int
) -> LaunchPlan:
    """A second master with the first one's command (same database, services, state dir: so the
    same defaults, such as where checkpoints go) on its own ports. It writes its ready file only
    once it leads, so nothing waits for it: it is up once it runs."""
    name = f"{STANDBY_MASTER_PREFIX}{index}"
    command = list(master.command)
    for option, value in (
        ("--port", grpc_port),
        ("--http-port", http_port),
        ("--ready-file", paths.ready_file(name)),
    ):
        command[command.index(option) + 1] = str(value)
    return LaunchPlan(
        name=name,
        role="master",
        command=command,
        log_path=paths.log_file(name),
        ready_file=paths.ready_file(name),
        ready_keys=(),
    )


def agent_runtime_flags(options: ClusterOptions, task_root: str | None) -> list[str]:
    """What every agent of the cluster is told about where and as whom it runs tasks, whether the
    cluster starts it or the master's provisioner does (`task_root`: its --task-root)."""
    flags: list[str] = []
    if options.runtime == "docker":
        flags += ["--runtime", "docker"]
        if options.default_image:
            flags += ["--default-image", options.default_image]
    elif options.task_env is not None:
        flags += ["--task-env", f"{TASK_ENV_NAME}={options.task_env}"]
    if options.runtime != "docker" and options.isolation is not None:
        flags += ["--task-user", options.isolation.user]
        if task_root is not None:
            flags += ["--task-root", task_root]
    return flags


def agent(options: ClusterOptions, paths: ClusterPaths, index: int, master_address: str) -> LaunchPlan:
    agent_id = f"agent-{index}"
    work_dir = paths.agent_work_dir(agent_id)
    command = _common(options, paths, agent_id, "agent", 0)
    command += [
        "--master",
        ",".join([master_address, *options.standby_master_addresses]),
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
    if options.tls:
        command += ["--master-cert", str(paths.tls_cert_file)]
    # Made by the supervisor just before the agent starts (join_tokens.py): the agent enrols with
    # it and holds a credential of its own from then on.
    command += ["--join-token-file", str(paths.join_token_file(agent_id))]
    tasks_root = options.isolation.tasks_root / agent_id if options.isolation is not None else None
    command += agent_runtime_flags(options, str(tasks_root) if tasks_root is not None else None)
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


def watchdog(options: ClusterOptions, paths: ClusterPaths) -> LaunchPlan:
    return LaunchPlan(
        name="watchdog",
        role="watchdog",
        command=[options.python, "-m", "cairn.localcluster.watchdog", "--state-dir", str(paths.state_dir)],
        log_path=paths.log_file("watchdog"),
        # It serves nothing: it is ready once it runs.
        ready_file=paths.ready_file("watchdog"),
        ready_keys=(),
    )


def recorded_plan(process: ProcessRecord) -> LaunchPlan:
    """The plan of a process the record holds (to wait for it again after a restart)."""
    ready_keys = {"master": ("grpc_port", "http_port"), "agent": ("grpc_port", "agent_id")}
    return LaunchPlan(
        name=process.name,
        role=process.role,
        command=list(process.command),
        log_path=Path(process.log_path),
        ready_file=Path(process.ready_file),
        ready_keys=ready_keys.get(process.role, ("grpc_port",)),
        agent_id=process.agent_id,
        work_dir=Path(process.work_dir) if process.work_dir else None,
    )
