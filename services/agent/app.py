"""Putting an agent together and taking it apart: work dir, slots, the agent's own small server
(health and reflection only), the container manager and its monitor thread, the session with the
master; and the order in which they stop."""

from __future__ import annotations

import os
import threading
import time
from importlib import metadata

from cairn.client.address import InvalidMasterAddress, parse_master_addresses
from cairn.termination_signals import route_termination_signals
from cairn.tls import channel_credentials
from services.agent import host
from services.agent.containers.context_cache import ContextCache
from services.agent.containers.manager import KILL_BACKSTOP_SECONDS, SHIM_BACKSTOP_SECONDS, ContainerManager
from services.agent.containers.outbox import Outbox
from services.agent.containers.preparation import Preparer
from services.agent.containers.task_env import MasterFacts
from services.agent.gpu_health import GpuHealth
from services.agent.runtime import private_mounts
from services.agent.runtime.docker_engine import DockerEngine, DockerUnavailable
from services.agent.runtime.docker_runtime import DockerRuntime
from services.agent.runtime.docker_spec import DockerDefaults
from services.agent.runtime.process_runtime import ProcessRuntime
from services.agent.session.context_download import ContextDownloader
from services.agent.session.enrolment import AgentAuth, CredentialStore
from services.agent.session.session import AgentIdentity, MasterSession
from services.agent.settings import AgentSettings
from services.agent.slots import DeviceKind, SlotDiscoveryError, SlotInfo, discover_slots
from services.agent.system_metrics.collector import SystemMetricsCollector, Target
from services.agent.system_metrics.gpus import GpuReadings
from services.agent.system_metrics.proc import Selector
from services.agent.task_user import TaskDirs, TaskUserError, isolation_warning, resolve_task_user
from services.agent.work_dir import WorkDir, WorkDirBusyError
from services.common.logging import get_logger
from services.common.server import ServiceServer, start_server, write_ready_file

log = get_logger(__name__)

# How often the monitor looks at the containers: event files, exits, overdue kills. It also bounds
# how long a log line waits before it is sent.
TICK_SECONDS = 0.02
# On shutdown with a live stream, how long to wait for the final events to be handed to it.
FLUSH_SECONDS = 5.0


def advertised_addresses(advertise: str) -> list[str]:
    """The machine's addresses, the one other agents' containers should use first."""
    found = host.ipv4_addresses()
    if advertise:
        return [advertise, *(a for a in found if a != advertise)]
    return found


def agent_version() -> str:
    try:
        return metadata.version("cairn-services")
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


class Agent:
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self._stop = threading.Event()
        self._stop_lock = threading.Lock()
        self._exit_code = 0
        self._reason = ""
        self._server: ServiceServer | None = None
        self._ready_written = False
        # The master shut this agent out (revoked): its containers' work was given up there, so
        # they are killed rather than left for a reattachment that will not come.
        self._was_shut_out = False

    def _task_dirs(self) -> TaskDirs | None:
        """Where and as whom the process runtime runs tasks (None: here, as the agent's user, with a
        warning saying what that exposes)."""
        s = self.settings
        if s.runtime != "process":
            return None  # the docker runtime isolates each task in its container
        user = resolve_task_user(s.task_user) if s.task_user else None
        warning = isolation_warning(user)
        if warning:
            log.warning("tasks are not isolated from the agent", detail=warning)
        if user is None or s.task_root is None:
            return None
        dirs = TaskDirs(s.task_root, user)
        dirs.prepare_root()
        log.info(
            "tasks run as an unprivileged user", task_user=user.name, uid=user.uid, task_root=str(s.task_root)
        )
        return dirs

    def _shut_out(self, reason: str) -> None:
        self._was_shut_out = True
        self.request_stop(reason, 1)

    def request_stop(self, reason: str, exit_code: int) -> None:
        # The first request's reason and exit code stand: a signal and a fatal error may race.
        with self._stop_lock:
            if not self._stop.is_set():
                self._reason, self._exit_code = reason, exit_code
                self._stop.set()

    def run(self) -> int:
        s = self.settings
        boot_time = time.time()
        # Not in the handler itself: it would run inside the main thread's poll of `_stop`
        # (cairn.termination_signals says why).
        route_termination_signals(lambda sig: self.request_stop(sig.name, 0))
        try:
            # Over every --master address: after a failover the reconnect finds the new leader.
            master_target = parse_master_addresses(s.master).dial_target
        except InvalidMasterAddress as exc:
            log.error("agent cannot start", error=str(exc))
            return 1
        work_dir = WorkDir(s.work_dir)
        try:
            work_dir.lock()
            slots = discover_slots(s.agent_id, s.slot_type, s.slots)
        except (WorkDirBusyError, SlotDiscoveryError) as exc:
            log.error("agent cannot start", error=str(exc))
            return 1
        log.info("slots", agent_id=s.agent_id, slots=[(x.id, x.kind.value, x.brand) for x in slots])
        try:
            task_dirs = self._task_dirs()
        except (TaskUserError, OSError) as exc:
            log.error("agent cannot start", error=str(exc))
            work_dir.unlock()
            return 1

        try:
            self._server = start_server("agent", lambda _server: [], host=s.host, port=s.port)
        except OSError as exc:
            log.error("agent cannot start", error=str(exc))
            work_dir.unlock()
            return 1
        try:
            runtime = self._runtime(slots, work_dir)
        except DockerUnavailable as exc:
            log.error("agent cannot start", error=str(exc))
            self._server.stop(1)
            work_dir.unlock()
            return 1
        credentials = channel_credentials(s.master_ca_pem.encode()) if s.master_ca_pem else None
        auth = AgentAuth(
            agent_id=s.agent_id,
            store=CredentialStore(work_dir.root),
            join_token=s.join_token,
            enrolment_secret=s.enrolment_secret,
            cluster_token=s.cluster_token,
        )
        log.info("joining the master", agent_id=s.agent_id, presenting=auth.describe())
        channel, _base_channel = auth.channel(master_target, credentials)
        outbox = Outbox()
        preparer = Preparer(
            agent_id=s.agent_id,
            slots=slots,
            fetch_context=ContextDownloader(channel).fetch,
            context_cache=ContextCache(work_dir.contexts),
            base_env=os.environ,
            python_envs=s.python_envs(),
            private_mounts=s.runtime == "process" and private_mounts.supported(),
            in_docker=s.runtime == "docker",
            task_dirs=task_dirs,
        )
        # GPU health (gpu_health.py): a faulted GPU's slot is reported to the master, which takes
        # it out of service; a container that failed with it is the device's failure.
        health = GpuHealth(slots, on_fault=lambda _slot: session.slots_changed())
        manager = ContainerManager(
            containers_dir=work_dir.containers,
            agent_id=s.agent_id,
            runtime=runtime,
            outbox=outbox,
            preparer=preparer,
            master=MasterFacts(grpc_address=s.master, ca_pem=s.master_ca_pem),
            handover_wait_s=s.handover_wait_s,
            devices=health if any(x.kind == DeviceKind.CUDA for x in slots) else None,
        )
        manager.restore()
        if isinstance(runtime, DockerRuntime):
            removed = runtime.remove_unclaimed(manager.live_container_ids())
            if removed:
                log.warning("removed Docker containers no container of this agent claims", containers=removed)
        session = MasterSession(
            channel=channel,
            master_address=s.master,
            master_ca_pem=s.master_ca_pem,
            identity=AgentIdentity(
                agent_id=s.agent_id,
                version=agent_version(),
                resource_pool=s.resource_pool,
                hostname=host.hostname(),
                addresses=tuple(advertised_addresses(s.advertise_address)),
                slots=tuple(slots),
                boot_time=boot_time,
                runtime=runtime.name,
            ),
            manager=manager,
            outbox=outbox,
            reconnect_timeout=s.reconnect_timeout,
            on_welcome=self._on_welcome,
            on_fatal=lambda reason: self.request_stop(reason, 1),
            auth=auth,
            on_shut_out=self._shut_out,
            slot_faults=health.faults,
        )
        health.start()
        collector = self._system_metrics(manager, runtime, slots, session)
        monitor_stop = threading.Event()
        monitor = threading.Thread(
            target=self._monitor, args=(manager, monitor_stop), name="monitor", daemon=True
        )
        session_thread = threading.Thread(target=session.run, name="session", daemon=True)
        monitor.start()
        session_thread.start()

        while not self._stop.wait(0.5):
            pass
        if self._exit_code:
            log.error("agent stopping", reason=self._reason)
        else:
            log.info("agent stopping", reason=self._reason)
        try:
            # Before anything stops: a start arriving from now on would only be killed again.
            manager.stop_taking_work(f"it is shutting down ({self._reason})")
            if s.kill_containers_on_exit or self._was_shut_out:
                self._kill_containers(manager, session)
            session.stop(thread=session_thread)
        finally:
            if collector is not None:
                collector.stop()
            health.stop()
            monitor_stop.set()
            monitor.join(5)
            runtime.close()
            manager.save_all()
            self._server.stop(1)
            channel.close()
            work_dir.unlock()
        log.info("agent stopped", exit_code=self._exit_code)
        return self._exit_code

    def _runtime(self, slots: list[SlotInfo], work_dir: WorkDir) -> ProcessRuntime:
        s = self.settings
        if s.runtime != "docker":
            # Standbys for warm starts live beside the containers: one per slot at most.
            standby_dir = work_dir.root / "standby" if s.warm_starts else None
            return ProcessRuntime(standby_dir=standby_dir, slots=len(slots))
        return DockerRuntime(
            engine=DockerEngine(),
            agent_id=s.agent_id,
            work_dir=s.work_dir,
            slots=slots,
            defaults=DockerDefaults(image=s.default_image, cpus_per_slot=s.cpus_per_slot),
        )

    def _system_metrics(
        self,
        manager: ContainerManager,
        runtime: ProcessRuntime,
        slots: list[SlotInfo],
        session: MasterSession,
    ) -> SystemMetricsCollector | None:
        """The collector of every container's system metrics, started; None when turned off."""
        interval = self.settings.system_metrics_interval_s
        if interval <= 0:
            log.info("system metrics not collected (--system-metrics-interval 0)")
            return None
        gpu_uuids = {s.id: s.uuid for s in slots if s.kind == DeviceKind.CUDA}
        # How each running container's processes are found, asked of the runtime once per container.
        selectors: dict[str, Selector | None] = {}

        def targets() -> list[Target]:
            running = manager.running()
            for gone in set(selectors) - {record.container_id for record, _ in running}:
                del selectors[gone]
            found = []
            for record, paths in running:
                selector = selectors.get(record.container_id)
                if selector is None:
                    selector = selectors[record.container_id] = runtime.processes_of(record, paths)
                if selector is not None:
                    uuids = tuple(gpu_uuids[s] for s in record.slot_ids if s in gpu_uuids)
                    found.append(Target(record.container_id, selector, uuids))
            return found

        collector = SystemMetricsCollector(
            interval_s=interval, targets=targets, send=session.send_report, gpus=GpuReadings(slots)
        )
        manager.on_running = collector.wake
        collector.start()
        return collector

    def _on_welcome(self) -> None:
        if not self._ready_written and self._server is not None:
            write_ready_file(
                self.settings.ready_file, grpc_port=self._server.port, agent_id=self.settings.agent_id
            )
            self._ready_written = True

    def _monitor(self, manager: ContainerManager, stop: threading.Event) -> None:
        while not stop.is_set():
            manager.activity.wait(TICK_SECONDS)
            manager.activity.clear()
            if stop.is_set():
                return
            try:
                manager.tick()
            except Exception:
                log.exception("container monitor failed; continuing")

    def _kill_containers(self, manager: ContainerManager, session: MasterSession) -> None:
        """Kill everything, wait for the ends, and give a live stream the chance to report them."""
        manager.kill_all()
        deadline = (
            time.monotonic()
            + manager.longest_kill_grace()
            + KILL_BACKSTOP_SECONDS
            + SHIM_BACKSTOP_SECONDS
            + 5
        )
        while not manager.all_terminated() and time.monotonic() < deadline:
            time.sleep(TICK_SECONDS)
        if not manager.all_terminated():
            log.error("some containers did not end before the agent exits")
        if not session.connected.is_set():
            return
        deadline = time.monotonic() + FLUSH_SECONDS
        while time.monotonic() < deadline and not manager.all_delivered():
            if manager.final_events_sent():
                break
            time.sleep(TICK_SECONDS)
