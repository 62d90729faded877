"""Start, stop and inspect a local cluster: the scheduler, searcher and checkpoint services, then
the master wired to them, then the agents, each ready (ready file + gRPC health) before the next
stage needs it. Whatever goes wrong while starting, nothing is left running."""

from __future__ import annotations

import dataclasses
import errno
import logging
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cairn.client.errors import CairnError
from cairn.localcluster import plan as plans
from cairn.localcluster import task_isolation
from cairn.localcluster.certificate import CertificatePair, ensure_certificate
from cairn.localcluster.join_tokens import JoinTokenError, write_join_token
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.plan import ClusterOptions, LaunchPlan
from cairn.localcluster.processes import (
    exit_code,
    is_recorded_process_running,
    is_running,
    log_tail,
    spawn,
    stop_process_groups,
)
from cairn.localcluster.provisioning import (
    provisioned_agent_pids,
    provisioned_work_dirs,
    remove_provisioned_agent_containers,
    write_master_config,
)
from cairn.localcluster.readiness import SERVING, UNREACHABLE, health_status, read_ready_file
from cairn.localcluster.record import (
    ClusterRecord,
    ProcessRecord,
    load_record,
    record_lock,
    remove_record,
    save_record,
)
from cairn.localcluster.respawn import child_environment, respawn
from cairn.localcluster.sweep import SweptProcess, sweep_container_processes

log = logging.getLogger(__name__)

DEFAULT_STOP_GRACE_S = 15.0
# An agent's own shutdown: its containers' kill grace (the master's default is 10 s), then its
# backstops, then reporting the ends to the master.
AGENT_STOP_GRACE_S = 30.0
# Stopping what a failed start left behind: no work is running yet, so less patience is needed.
_ABORT_GRACE_S = 5.0
_READY_POLL_S = 0.1
# How long a standby master must keep running after its start to count as up (waiting).
_STANDBY_SETTLE_S = 2.0
# The health shown for a running master whose ports are closed while another one serves.
STANDBY = "STANDBY (waiting for the leader lease)"
LOG_TAIL_LINES = 20

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


class ClusterError(CairnError):
    pass


class ClusterAlreadyRunning(ClusterError):
    pass


class ClusterStartError(ClusterError):
    """A process failed to start; carries the end of its log for the user."""

    def __init__(self, process: str, reason: str, log_path: Path, tail: list[str]) -> None:
        super().__init__(f"{process} {reason}")
        self.process = process
        self.reason = reason
        self.log_path = log_path
        self.tail = tail


# ---- start ----


def _check_port_free(host: str, port: int, what: str, option: str) -> None:
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise ClusterError(
                f"{what} port {port} on {host} is already in use (another master?); "
                f"stop whatever holds it or choose another port with {option}"
            ) from None


class _Startup:
    def __init__(self, options: ClusterOptions, paths: ClusterPaths, progress: Progress) -> None:
        self.options = options
        self.paths = paths
        self.progress = progress
        token = secrets.token_urlsafe(32)
        self.env = child_environment(token, options.extra_env)
        self.record = ClusterRecord(
            state_dir=str(paths.state_dir),
            cluster_token=token,
            created_at=time.time(),
            extra_env=dict(options.extra_env),
        )
        self.records: dict[str, ProcessRecord] = {}
        self.deadline = time.monotonic() + options.timeout_s

    @classmethod
    def resuming(
        cls, options: ClusterOptions, paths: ClusterPaths, progress: Progress, record: ClusterRecord
    ) -> _Startup:
        """A startup that completes a recorded cluster: its token, environment and processes."""
        startup = cls(options, paths, progress)
        startup.record = record
        startup.env = child_environment(record.cluster_token, record.extra_env)
        startup.records = {p.name: p for p in record.processes}
        return startup

    def launch(self, launch: LaunchPlan) -> None:
        launch.ready_file.unlink(missing_ok=True)
        if launch.work_dir is not None:
            launch.work_dir.mkdir(parents=True, exist_ok=True)
        self.progress(f"starting {launch.name}")
        process = spawn(launch.command, launch.log_path, self.env)
        entry = ProcessRecord(
            name=launch.name,
            role=launch.role,
            pid=process.pid,
            command=launch.command,
            log_path=str(launch.log_path),
            ready_file=str(launch.ready_file),
            started_at=time.time(),
            host=self.options.host,
            agent_id=launch.agent_id,
            work_dir=str(launch.work_dir) if launch.work_dir else None,
        )
        self.records[launch.name] = entry
        self.record.processes.append(entry)
        # Recorded at once, so a `cairn cluster down` from elsewhere can find a half-started cluster.
        save_record(self.paths.record_file, self.record)

    def make_join_token(self, launch: LaunchPlan) -> None:
        """The one-time join token `launch`'s agent enrols with, made by the master for its id."""
        assert launch.agent_id is not None and self.record.master_grpc_address
        try:
            write_join_token(
                master_address=self.record.master_grpc_address,
                cluster_token=self.record.cluster_token,
                ca_file=self.record.master_ca_file,
                agent_id=launch.agent_id,
                path=self.paths.join_token_file(launch.agent_id),
            )
        except JoinTokenError as exc:
            master = self.records["master"]
            raise ClusterStartError(
                "master", str(exc), Path(master.log_path), log_tail(Path(master.log_path), LOG_TAIL_LINES)
            ) from None

    def _failure(self, launch: LaunchPlan, reason: str) -> ClusterStartError:
        return ClusterStartError(
            launch.name, reason, launch.log_path, log_tail(launch.log_path, LOG_TAIL_LINES)
        )

    def _not_ready_reason(self, launch: LaunchPlan, last_health: str | None) -> str:
        data = read_ready_file(launch.ready_file)
        waited = f"within {self.options.timeout_s:g} s"
        if data is None:
            return f"did not write its ready file {launch.ready_file} {waited}"
        missing = [key for key in launch.ready_keys if not data.get(key)]
        if missing:
            hint = " (has the master welcomed it?)" if "agent_id" in missing else ""
            return f"was not ready {waited}: its ready file lacks {', '.join(missing)}{hint}"
        return f"did not pass its gRPC health check {waited} (last answer: {last_health or UNREACHABLE})"

    def wait_ready(self, launches: Sequence[LaunchPlan]) -> None:
        pending = {launch.name: launch for launch in launches}
        last_health: dict[str, str] = {}
        while pending:
            for name, launch in list(pending.items()):
                entry = self.records[name]
                if not is_running(entry.pid):
                    code = exit_code(entry.pid)
                    raise self._failure(launch, f"exited early (exit code {code})")
                data = read_ready_file(launch.ready_file)
                if data is None or any(not data.get(key) for key in launch.ready_keys):
                    continue
                address = f"{self.options.host}:{int(data['grpc_port'])}"
                ca_file = self.record.master_ca_file if launch.role == "master" else None
                status = health_status(address, timeout_s=1.0, ca_file=ca_file)
                last_health[name] = status
                if status != SERVING:
                    continue
                entry.grpc_port = int(data["grpc_port"])
                entry.http_port = int(data["http_port"]) if data.get("http_port") else None
                entry.agent_id = str(data["agent_id"]) if data.get("agent_id") else entry.agent_id
                del pending[name]
                self.progress(f"{name} is ready at {address}")
            save_record(self.paths.record_file, self.record)
            if not pending:
                return
            if time.monotonic() >= self.deadline:
                launch = next(iter(pending.values()))
                raise self._failure(launch, self._not_ready_reason(launch, last_health.get(launch.name)))
            time.sleep(_READY_POLL_S)

    def repair(self, missing: Sequence[ProcessRecord]) -> None:
        """Start each missing service again as it ran, in the cluster's order, each ready before the
        next (the record lists them in start order: services, master, agents)."""
        several_masters = len(self.record.by_role("master")) > 1
        for process in missing:
            self.progress(f"starting {process.name} again")
            respawn(self.record, process)
            # `cluster up` is a fresh start for it: the crash-loop verdict and history go.
            process.gave_up, process.crashes = "", []
            save_record(self.paths.record_file, self.record)
            if process.role == "master" and several_masters:
                # Another master may lead by now: this one then waits as a standby, ports closed.
                self.wait_waiting([process])
            else:
                self.wait_ready([plans.recorded_plan(process)])

    def start_standby_masters(self, master: LaunchPlan) -> tuple[str, ...]:
        """Start the standby masters the options ask for; their gRPC addresses."""
        addresses = []
        for index in range(1, self.options.standby_masters + 1):
            grpc_port, http_port = _free_port(self.options.host), _free_port(self.options.host)
            launch = plans.standby_master(self.paths, index, master, grpc_port, http_port)
            self.launch(launch)
            entry = self.records[launch.name]
            entry.grpc_port, entry.http_port = grpc_port, http_port
            addresses.append(f"{self.options.host}:{grpc_port}")
        if addresses:
            self.wait_waiting([self.records[name] for name in self.records if plans.is_standby_master(name)])
        return tuple(addresses)

    def wait_waiting(self, entries: Sequence[ProcessRecord]) -> None:
        """Masters that may be standbys (which open no port): up once they still run a moment later
        (a master that cannot wait, e.g. on SQLite, exits at once with its reason)."""
        time.sleep(_STANDBY_SETTLE_S)
        for entry in entries:
            if not is_running(entry.pid):
                code = exit_code(entry.pid)
                launch = plans.recorded_plan(entry)
                raise self._failure(launch, f"exited early (exit code {code})")
            self.progress(f"{entry.name} is up (a standby until it leads)")

    def start_watchdog(self) -> None:
        self.record.processes = [p for p in self.record.processes if p.role != "watchdog"]
        self.launch(plans.watchdog(self.options, self.paths))

    def run(self) -> ClusterRecord:
        options, paths = self.options, self.paths
        internal = [plans.internal_service(options, paths, role) for role in plans.INTERNAL_ROLES]
        for launch in internal:
            self.launch(launch)
        self.wait_ready(internal)
        if options.tls:
            ensure_certificate(CertificatePair(paths.tls_cert_file, paths.tls_key_file), options.host)
            self.record.master_ca_file = str(paths.tls_cert_file)
        addresses = {role: self.records[role].grpc_address or "" for role in plans.INTERNAL_ROLES}
        if options.provision is not None:
            write_master_config(options, paths)
        master = plans.master(
            options,
            paths,
            scheduler=addresses["scheduler"],
            searcher=addresses["searcher"],
            checkpoint=addresses["checkpoint"],
        )
        self.launch(master)
        self.wait_ready([master])
        master_entry = self.records["master"]
        self.record.master_grpc_address = master_entry.grpc_address
        if master_entry.http_port:
            scheme = "https" if options.tls else "http"
            self.record.master_http_url = f"{scheme}://{options.host}:{master_entry.http_port}/"
        standbys = self.start_standby_masters(master)
        if standbys:
            options = dataclasses.replace(
                options, standby_master_addresses=(*options.standby_master_addresses, *standbys)
            )
        agents = [
            plans.agent(options, paths, index, master_entry.grpc_address or "")
            for index in range(1, options.agents + 1)
        ]
        for launch in agents:
            self.make_join_token(launch)
            self.launch(launch)
        self.wait_ready(agents)
        if options.supervise:
            # Last: it must find every service recorded, and a failed start has nothing to restart.
            self.start_watchdog()
        save_record(paths.record_file, self.record)
        return self.record


def _free_port(host: str) -> int:
    """A port nothing listens on now (the standby binds it only once it leads, so it is chosen here
    and handed to it and to the agents)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def start_cluster(options: ClusterOptions, progress: Progress = _quiet) -> ClusterRecord:
    """Start every service and return once all are ready; on any failure (or Ctrl-C) stop what
    was started and raise (ClusterStartError names the process and carries its log tail)."""
    if options.agents < 0:
        raise ClusterError(f"agents: must be >= 0, got {options.agents}")
    if options.slots_per_agent < 0:
        raise ClusterError(f"slots per agent: must be >= 0, got {options.slots_per_agent}")
    if options.standby_masters < 0:
        raise ClusterError(f"standby masters: must be >= 0, got {options.standby_masters}")
    if options.standby_masters and not (options.db_url or "").startswith(("postgresql", "postgres:")):
        raise ClusterError(
            "standby masters: need PostgreSQL (--db-url postgresql://...): the leader lease is a "
            "PostgreSQL advisory lock, and a SQLite file has one master"
        )
    paths = ClusterPaths(options.state_dir)
    paths.create()
    repaired = _repair(options, paths, progress)
    if repaired is not None:
        return repaired
    existing = load_record(paths.record_file)
    if existing is not None:
        # A cluster that died without `down`: its record is stale, its trials may not be.
        sweep_container_processes(_agent_work_dirs(paths, existing))
        remove_record(paths.record_file)
    _check_port_free(options.host, options.master_port, "the master's gRPC", "--master-port")
    _check_port_free(options.host, options.http_port, "the master's HTTP", "--http-port")
    try:
        isolation = task_isolation.decide(
            state_dir=paths.state_dir,
            runtime=options.runtime,
            interpreter=options.task_interpreter,
            requested_user=options.task_user,
            progress=progress,
        )
    except task_isolation.TaskIsolationError as exc:
        raise ClusterError(str(exc)) from exc
    options = dataclasses.replace(options, isolation=isolation)

    startup = _Startup(options, paths, progress)
    try:
        return startup.run()
    except BaseException:
        progress("start failed; stopping what was started")
        _stop_processes(startup.record, _ABORT_GRACE_S, progress)
        sweep_container_processes(_agent_work_dirs(paths, startup.record))
        remove_record(paths.record_file)
        raise


def _repair(options: ClusterOptions, paths: ClusterPaths, progress: Progress) -> ClusterRecord | None:
    """A recorded cluster that still partly runs gets only what is missing started again (as it
    ran: its own token, ports and environment; the options of this call other than `supervise`
    and `timeout_s` do not apply to it). None when no recorded service runs."""
    with record_lock(paths.record_file):
        record = load_record(paths.record_file)
        if record is None:
            return None
        running = {p.name for p in record.processes if is_recorded_process_running(p.pid, p.command)}
        services = [p for p in record.processes if p.role != "watchdog"]
        if not any(p.name in running for p in services):
            return None
        missing = [p for p in services if p.name not in running]
        watchdog_missing = options.supervise and not any(
            p.role == "watchdog" and p.name in running for p in record.processes
        )
        if not missing and not watchdog_missing:
            raise ClusterAlreadyRunning(
                f"the cluster from {paths.state_dir} is already running "
                "(stop it with `cairn cluster down`, or use another --state-dir)"
            )
        startup = _Startup.resuming(options, paths, progress, record)
        startup.repair(missing)
        if watchdog_missing:
            startup.start_watchdog()
        save_record(paths.record_file, record)
        return record


# ---- stop ----


@dataclass(frozen=True)
class StoppedProcess:
    name: str
    pid: int
    # "terminated", "killed" or "not running"
    how: str


@dataclass
class StopReport:
    had_record: bool
    processes: list[StoppedProcess] = field(default_factory=list)
    swept: list[SweptProcess] = field(default_factory=list)

    @property
    def stopped_anything(self) -> bool:
        return bool(self.swept) or any(p.how != "not running" for p in self.processes)


def _agent_work_dirs(paths: ClusterPaths, record: ClusterRecord | None) -> list[Path]:
    dirs = {Path(p.work_dir) for p in record.processes if p.work_dir} if record else set()
    if paths.agents_dir.is_dir():
        dirs.update(child for child in paths.agents_dir.iterdir() if child.is_dir())
    dirs.update(provisioned_work_dirs(paths))
    return sorted(dirs)


def _stop_stages(record: ClusterRecord) -> list[list[ProcessRecord]]:
    """Agents first (each stops taking work, stops its trials as the agent's shutdown, which the
    master does not count against them, and reports it while the master can still record it),
    then the master, then the services it uses. The watchdog is stopped before all of them."""
    agents = record.by_role("agent")
    masters = record.by_role("master")
    rest = [p for p in record.processes if p.role not in ("agent", "master", "watchdog")]
    return [stage for stage in (agents, masters, rest) if stage]


def _stop_stage(stage: list[ProcessRecord], grace_s: float, progress: Progress) -> list[StoppedProcess]:
    alive = [p for p in stage if is_recorded_process_running(p.pid, p.command)]
    if alive:
        progress("stopping " + ", ".join(p.name for p in alive))
    outcomes = stop_process_groups([p.pid for p in alive], grace_s)
    return [
        StoppedProcess(p.name, p.pid, outcome.how if (outcome := outcomes.get(p.pid)) else "not running")
        for p in stage
    ]


def _stop_processes(record: ClusterRecord, grace_s: float, progress: Progress) -> list[StoppedProcess]:
    stopped: list[StoppedProcess] = []
    for stage in _stop_stages(record):
        # Agents wait for their trials' graceful stop (the kill grace, then SIGKILL) before they exit.
        stage_grace = max(grace_s, AGENT_STOP_GRACE_S) if stage[0].role == "agent" else grace_s
        stopped += _stop_stage(stage, stage_grace, progress)
    return stopped


def stop_cluster(
    state_dir: Path, grace_s: float = DEFAULT_STOP_GRACE_S, progress: Progress = _quiet
) -> StopReport:
    paths = ClusterPaths(state_dir)
    record = load_record(paths.record_file)
    report = StopReport(had_record=record is not None)
    if record is not None:
        # The watchdog first, so that nothing stopped from here on is started again; then the record
        # once more, as the watchdog may have restarted a service just before it stopped.
        report.processes = _stop_stage(record.by_role("watchdog"), grace_s, progress)
        with record_lock(paths.record_file):
            record = load_record(paths.record_file) or record
            report.processes += _stop_processes(record, grace_s, progress)
    # Agents the master's provisioner started: after the master, so that none is launched anew.
    provisioned = provisioned_agent_pids(paths)
    if provisioned:
        progress(f"stopping {len(provisioned)} provisioned agent(s)")
        outcomes = stop_process_groups(provisioned, max(grace_s, AGENT_STOP_GRACE_S))
        report.processes += [
            StoppedProcess("provisioned agent", pid, outcome.how) for pid, outcome in outcomes.items()
        ]
    for container_id in remove_provisioned_agent_containers(paths):
        progress(f"removed provisioned agent container {container_id[:12]}")
    # What the agents could not stop (an agent killed earlier left its trials running).
    report.swept = sweep_container_processes(_agent_work_dirs(paths, record))
    if record is not None:
        for p in record.processes:
            Path(p.ready_file).unlink(missing_ok=True)
        remove_record(paths.record_file)
    return report


# ---- status ----


@dataclass(frozen=True)
class ProcessStatus:
    process: ProcessRecord
    running: bool
    # The gRPC health answer, UNREACHABLE, or "" when the process is not running or serves nothing
    # (the watchdog).
    health: str

    @property
    def healthy(self) -> bool:
        return self.running and (self.health in (SERVING, STANDBY) or not self.process.serves)


@dataclass
class ClusterStatus:
    record: ClusterRecord
    processes: list[ProcessStatus]

    @property
    def healthy(self) -> bool:
        return all(p.healthy for p in self.processes)


def cluster_status(state_dir: Path, health_timeout_s: float = 1.0) -> ClusterStatus | None:
    """None when no cluster is recorded in `state_dir`."""
    paths = ClusterPaths(state_dir)
    record = load_record(paths.record_file)
    if record is None:
        return None
    statuses = []
    for p in record.processes:
        running = is_recorded_process_running(p.pid, p.command)
        health = ""
        if running and p.serves:
            address = p.grpc_address
            ca_file = record.master_ca_file if p.role == "master" else None
            health = health_status(address, health_timeout_s, ca_file) if address else UNREACHABLE
        statuses.append(ProcessStatus(process=p, running=running, health=health))
    masters = [status for status in statuses if status.process.role == "master"]
    if any(status.health == SERVING for status in masters):
        # A running master whose ports are closed while another serves waits on the leader lease.
        statuses = [
            dataclasses.replace(status, health=STANDBY)
            if status in masters and status.running and status.health == UNREACHABLE
            else status
            for status in statuses
        ]
    return ClusterStatus(record=record, processes=statuses)
