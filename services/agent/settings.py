"""The agent's flags (with environment fallbacks) as typed settings."""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cairn.tls import MASTER_CERT_ENV, TlsConfigError, read_ca_bundle
from services.agent.containers.manager import HANDOVER_WAIT_SECONDS
from services.agent.containers.python_envs import PythonEnv, PythonEnvError, PythonEnvs, parse_task_env
from services.agent.containers.task_env import split_host_port
from services.agent.runtime.docker_spec import default_task_image
from services.agent.slots import SlotType
from services.agent.system_metrics.collector import DEFAULT_INTERVAL_S as SYSTEM_METRICS_INTERVAL_S
from services.agent.system_metrics.collector import MAX_INTERVAL_S as MAX_SYSTEM_METRICS_INTERVAL_S
from services.agent.system_metrics.collector import MIN_INTERVAL_S as MIN_SYSTEM_METRICS_INTERVAL_S
from services.agent.task_user import is_inside
from services.common.args import add_common_flags
from services.common.cluster_token import add_secret_file_flag

DEFAULT_MASTER = "127.0.0.1:8090"
JOIN_TOKEN_ENV = "CAIRN_AGENT_JOIN_TOKEN"
ENROLMENT_SECRET_ENV = "CAIRN_AGENT_ENROLMENT_SECRET"
# Outside any home folder: the task user must be able to reach its working folder.
DEFAULT_TASK_ROOT = "/var/lib/cairn/tasks"
RUNTIMES = ("process", "docker")
_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


@dataclass(frozen=True)
class AgentSettings:
    master: str
    agent_id: str
    resource_pool: str
    slots: int | None
    slot_type: SlotType
    work_dir: Path
    kill_containers_on_exit: bool
    reconnect_timeout: float
    cluster_token: str | None
    host: str
    port: int
    log_format: str
    log_level: str
    ready_file: str | None
    # Where the containers of a multi-agent allocation reach this agent's containers; "" = guess.
    advertise_address: str = ""
    task_envs: tuple[PythonEnv, ...] = ()
    default_task_env: str | None = None
    # "process" or "docker": where this agent runs every container.
    runtime: str = "process"
    # Docker runtime: the image of tasks whose config names none, and cores per CPU slot (0: no limit).
    default_image: str = ""
    cpus_per_slot: float = 0.0
    # Process runtime: the unprivileged user tasks run as, and where their working folders live.
    task_user: str = ""
    task_root: Path | None = None
    # --master-cert: the CA (PEM text) the master's TLS certificate is verified with; "" = plaintext.
    master_ca_pem: str = ""
    # Process runtime: keep standby interpreters for experiments that declare preload_modules.
    warm_starts: bool = True
    # How long a start handed over early waits for the slot's exiting container (manager.py).
    handover_wait_s: float = HANDOVER_WAIT_SECONDS
    # Seconds between two samples of every container's system metrics (system_metrics/); 0: off.
    system_metrics_interval_s: float = SYSTEM_METRICS_INTERVAL_S
    # To enrol with (session/enrolment.py), when the work dir holds no credential yet: a one-time
    # join token, or the cluster's enrolment secret.
    join_token: str | None = None
    enrolment_secret: str | None = None

    def python_envs(self) -> PythonEnvs:
        return PythonEnvs(self.task_envs, self.default_task_env)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairn-agent",
        description="Cairn agent: offers this machine's slots to the master and runs its containers.",
    )
    add_common_flags(parser, default_port=0)
    parser.add_argument(
        "--master",
        default=os.environ.get("CAIRN_MASTER_ADDR", DEFAULT_MASTER),
        help="the master's gRPC address HOST:PORT, or several comma-separated (an active master and its "
        f"standbys: the agent connects to whichever leads) (env CAIRN_MASTER_ADDR; default {DEFAULT_MASTER})",
    )
    parser.add_argument("--agent-id", default=None, help="this agent's id (default: the hostname)")
    parser.add_argument("--resource-pool", default="default", help="the pool to join (default 'default')")
    parser.add_argument(
        "--slots", type=int, default=None, help="CPU slots to declare (default 1 when there is no GPU)"
    )
    parser.add_argument(
        "--slot-type",
        choices=[t.value for t in SlotType],
        default=SlotType.AUTO.value,
        help="auto: GPUs when an NVIDIA driver answers, else CPU slots (default auto)",
    )
    parser.add_argument(
        "--work-dir",
        default=None,
        help="containers' folders and state (default ~/.local/share/cairn/agent/<agent-id>)",
    )
    parser.add_argument(
        "--kill-containers-on-exit",
        action="store_true",
        help="on SIGTERM kill the running containers before exiting (local clusters); "
        "without it they keep running for a restarted agent to reattach",
    )
    parser.add_argument(
        "--no-warm-starts",
        action="store_true",
        help="process runtime: keep no standby interpreters (each holds its experiment's "
        "preload_modules in memory); every container starts cold",
    )
    parser.add_argument(
        "--system-metrics-interval",
        type=float,
        default=os.environ.get("CAIRN_AGENT_SYSTEM_METRICS_INTERVAL", str(SYSTEM_METRICS_INTERVAL_S)),
        metavar="SECONDS",
        help="how often every container's CPU, memory, disk, network and GPU use is sampled and "
        f"sent to the master (default {SYSTEM_METRICS_INTERVAL_S:g}; 0: not collected; env "
        "CAIRN_AGENT_SYSTEM_METRICS_INTERVAL)",
    )
    parser.add_argument(
        "--handover-wait",
        type=float,
        default=HANDOVER_WAIT_SECONDS,
        metavar="SECONDS",
        help="how long a container the master handed a slot early (its previous container said it "
        "was exiting) waits for that container to end before starting beside it "
        f"(default {HANDOVER_WAIT_SECONDS:g})",
    )
    parser.add_argument(
        "--advertise-address",
        default=os.environ.get("CAIRN_AGENT_ADVERTISE_ADDRESS", ""),
        help="the address the containers of a multi-agent trial reach this machine's containers at "
        "(env CAIRN_AGENT_ADVERTISE_ADDRESS; default: its first non-loopback IPv4 address)",
    )
    parser.add_argument(
        "--task-env",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="a Python environment (virtualenv folder) the process runtime runs tasks in, chosen by a "
        "config's environment.image NAME; repeatable; the first is the default",
    )
    parser.add_argument(
        "--default-task-env",
        default=None,
        metavar="NAME",
        help="the task environment of tasks whose image names none (default: the first --task-env, "
        "else 'agent': the agent's own interpreter)",
    )
    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default=os.environ.get("CAIRN_AGENT_RUNTIME", "process"),
        help="process: each container is a process tree on this machine; docker: a Docker container "
        "(dockerd must run here) (env CAIRN_AGENT_RUNTIME; default process)",
    )
    parser.add_argument(
        "--default-image",
        default=os.environ.get("CAIRN_DEFAULT_IMAGE", ""),
        help="docker runtime: the image of tasks whose config names no environment.image "
        f"(env CAIRN_DEFAULT_IMAGE; default {default_task_image()})",
    )
    parser.add_argument(
        "--cpus-per-slot",
        type=float,
        default=0.0,
        help="docker runtime: the most cores a container may use per CPU slot it holds (0 = no limit, "
        "the default: containers only share the cores in proportion to their slots)",
    )
    parser.add_argument(
        "--task-user",
        default=os.environ.get("CAIRN_AGENT_TASK_USER", ""),
        metavar="NAME",
        help="process runtime: run tasks as this unprivileged user, in folders of their own under "
        "--task-root, so trial code cannot read the agent's or the cluster's secrets and state; needs "
        "the agent to run as root (env CAIRN_AGENT_TASK_USER; default: tasks run as the agent's user)",
    )
    parser.add_argument(
        "--task-root",
        default=None,
        metavar="DIR",
        help="with --task-user: where the tasks' working folders go; must be outside --work-dir "
        f"(default {DEFAULT_TASK_ROOT}/<agent-id>)",
    )
    parser.add_argument(
        "--reconnect-timeout",
        type=float,
        default=0.0,
        help="exit non-zero after this many seconds without the master; 0 = retry forever (default)",
    )
    parser.add_argument(
        "--master-cert",
        default=os.environ.get(MASTER_CERT_ENV),
        metavar="FILE",
        help="connect to the master over TLS, verifying it with the CA certificates in FILE; tasks "
        f"get them too (env {MASTER_CERT_ENV}; default plaintext)",
    )
    add_secret_file_flag(
        parser,
        "--join-token-file",
        "join_token",
        JOIN_TOKEN_ENV,
        "a one-time join token to enrol with (an admin makes one: `cairn agent join-token create`), "
        "used when the work dir holds no credential of this agent yet",
        os.environ,
    )
    add_secret_file_flag(
        parser,
        "--enrolment-secret-file",
        "enrolment_secret",
        ENROLMENT_SECRET_ENV,
        "the cluster's enrolment secret to enrol with (`cairn agent enrolment-secret rotate`), used "
        "when the work dir holds no credential of this agent yet",
        os.environ,
    )
    return parser


def parse_settings(argv: Sequence[str] | None = None) -> AgentSettings:
    parser = build_parser()
    args = parser.parse_args(argv)
    for address in args.master.split(","):
        _host, port, error = split_host_port(address)
        if error or port is None:
            parser.error(f"--master: {error or f'{address!r}: expected HOST:PORT'}")
    agent_id = args.agent_id or socket.gethostname()
    if not _AGENT_ID.match(agent_id):
        parser.error(f"--agent-id: {agent_id!r}: letters, digits, '.', '_' and '-' only")
    if not args.resource_pool:
        parser.error("--resource-pool: must not be empty")
    if args.slots is not None and args.slots < 0:
        parser.error("--slots: must be >= 0")
    if args.reconnect_timeout < 0:
        parser.error("--reconnect-timeout: must be >= 0")
    if args.runtime not in RUNTIMES:
        parser.error(f"--runtime: {args.runtime!r} is not one of {', '.join(RUNTIMES)}")
    if args.cpus_per_slot < 0:
        parser.error("--cpus-per-slot: must be >= 0")
    if any(ch.isspace() for ch in args.default_image):
        parser.error(f"--default-image: {args.default_image!r} must not contain spaces")
    try:
        task_envs = tuple(parse_task_env(text) for text in args.task_env)
        PythonEnvs(task_envs, args.default_task_env)
    except PythonEnvError as exc:
        parser.error(f"--task-env: {exc}")
    work_dir = (
        Path(args.work_dir).expanduser()
        if args.work_dir
        else (Path.home() / ".local" / "share" / "cairn" / "agent" / agent_id)
    )
    task_root = None
    if not math.isfinite(args.handover_wait) or args.handover_wait < 0:
        parser.error("--handover-wait: must be a number of seconds, 0 or more")
    interval = args.system_metrics_interval
    if not math.isfinite(interval) or not (
        interval == 0 or MIN_SYSTEM_METRICS_INTERVAL_S <= interval <= MAX_SYSTEM_METRICS_INTERVAL_S
    ):
        parser.error(
            f"--system-metrics-interval: must be 0 (off) or {MIN_SYSTEM_METRICS_INTERVAL_S:g} to "
            f"{MAX_SYSTEM_METRICS_INTERVAL_S:g} seconds"
        )
    if args.task_user:
        if args.runtime != "process":
            parser.error("--task-user: only for --runtime process (docker isolates tasks by container)")
        # "{agent_id}" in --task-root is this agent's id: agents started from one template (a
        # provisioner's) each get their own root.
        root_template = args.task_root or f"{DEFAULT_TASK_ROOT}/{{agent_id}}"
        task_root = Path(root_template.replace("{agent_id}", agent_id)).expanduser().resolve()
        if is_inside(task_root, work_dir.resolve()) or is_inside(work_dir.resolve(), task_root):
            parser.error(f"--task-root: {task_root} must be outside --work-dir {work_dir.resolve()}")
    elif args.task_root:
        parser.error("--task-root: only with --task-user")
    return AgentSettings(
        master=args.master,
        agent_id=agent_id,
        resource_pool=args.resource_pool,
        slots=args.slots,
        slot_type=SlotType(args.slot_type),
        work_dir=work_dir.resolve(),
        kill_containers_on_exit=args.kill_containers_on_exit,
        reconnect_timeout=args.reconnect_timeout,
        cluster_token=args.cluster_token,
        host=args.host,
        port=args.port,
        log_format=args.log_format,
        log_level=args.log_level,
        ready_file=args.ready_file,
        advertise_address=args.advertise_address.strip(),
        task_envs=task_envs,
        default_task_env=args.default_task_env,
        runtime=args.runtime,
        default_image=args.default_image or default_task_image(),
        cpus_per_slot=args.cpus_per_slot,
        task_user=args.task_user,
        task_root=task_root,
        master_ca_pem=_master_ca(args.master_cert, parser),
        warm_starts=not args.no_warm_starts,
        handover_wait_s=args.handover_wait,
        system_metrics_interval_s=args.system_metrics_interval,
        join_token=args.join_token,
        enrolment_secret=args.enrolment_secret,
    )


def _master_ca(path: str | None, parser: argparse.ArgumentParser) -> str:
    if not path:
        return ""
    try:
        return read_ca_bundle(path, "--master-cert").decode()
    except (TlsConfigError, UnicodeDecodeError) as exc:
        parser.error(str(exc))
