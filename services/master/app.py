"""Assembles the master: database, domain services, loops, gRPC and HTTP servers; starts and stops
them in order."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
from sqlalchemy import select
from sqlalchemy.engine import make_url

from cairn import __version__
from cairn.agent.v1 import agent_pb2, agent_pb2_grpc
from cairn.api.v1 import api_pb2, api_pb2_grpc
from services.common.interceptors import AuthInterceptor
from services.common.local_calls import LocalCalls
from services.common.logging import add_log_sink, get_logger, remove_log_sink
from services.common.server import ServiceServer, start_server, with_request_checks, write_ready_file
from services.common.tls import ServerTls
from services.master.configuration.feature_switches import STREAMING_UPDATES
from services.master.configuration.settings import Settings
from services.master.domain import wiring
from services.master.domain.audit import retention as audit_retention
from services.master.domain.audit.recorder import AuditRecorder
from services.master.domain.checkpoints.checkpoints import CheckpointGc
from services.master.domain.deletion import deferred_loop
from services.master.domain.experiments import unmanaged
from services.master.domain.experiments.searcher_pump import SearcherPump
from services.master.domain.identity import agent_credentials
from services.master.domain.identity.auth import AuthService
from services.master.domain.identity.exposure import check_exposure, check_transport
from services.master.domain.identity.grants import GrantCache
from services.master.domain.identity.login_limiter import LoginLimiter, LoginLimits
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.loops import BackgroundLoop
from services.master.domain.metrics import system_metrics
from services.master.domain.metrics.logs import LogStore
from services.master.domain.metrics.samples import SampleCache
from services.master.domain.operations.master_log import MasterLogRing
from services.master.domain.provisioning import loop as provisioning_loop
from services.master.domain.scheduling import agents as agent_registry
from services.master.domain.scheduling.agent_hub import AgentHub
from services.master.domain.scheduling.liveness import LivenessLoop
from services.master.domain.scheduling.scheduling import SchedulingLoop
from services.master.domain.scheduling.start_forecast import StartForecasts
from services.master.domain.streams.changes import StreamChanges
from services.master.domain.streams.publisher import Publisher
from services.master.domain.tasks.tensorboard_files import TensorboardFiles
from services.master.domain.webhooks import sender as webhook_sender
from services.master.domain.webhooks.sender import WebhookSender
from services.master.domain.webhooks.signing_key import signing_key as webhook_signing_key
from services.master.domain.workspaces import workspaces
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.internal_service import GatewayServicer, register_gateway_service
from services.master.gateway.master_routes import ContextHealth, health_routes, info_route, master_info
from services.master.gateway.oidc_flow import OidcClient
from services.master.gateway.oidc_routes import oidc_routes
from services.master.gateway.proxy_targets import LocalTargets
from services.master.gateway.public_server import (
    PublicHttpServer,
    WorkerSpec,
    start_public_http,
    start_workers,
)
from services.master.gateway.rest_gateway import rest_routes
from services.master.gateway.stream_relay import StreamConversations
from services.master.gateway.stream_socket import StreamEndpoint, local_sessions
from services.master.gateway.task_proxy import TaskProxy
from services.master.gateway.tcp_tunnel import MAX_TUNNELS_PER_TASK
from services.master.gateway.webui import webui_routes
from services.master.leadership import LeaderLease, SqliteMasterLock, exit_at_once
from services.master.provisioners.factory import build_provisioners
from services.master.remotes.checkpoint import CheckpointClient
from services.master.remotes.scheduler import SchedulerClient
from services.master.remotes.searcher import SearcherDirectory
from services.master.servicers.agent_auth import agent_authenticator
from services.master.servicers.agent_stream import AgentStreamServicer
from services.master.servicers.api.base import ApiDeps
from services.master.servicers.api.service import CairnServicer
from services.master.servicers.audit_interceptor import AuditInterceptor
from services.master.servicers.auth import PUBLIC_METHODS, master_authenticator
from services.master.servicers.read_cache import ReadCache, RowCache
from services.master.servicers.thread_slots import (
    FollowSlots,
    SignalWaitSlots,
    VerdictWaitSlots,
    verdict_waiters,
)
from services.master.store import models
from services.master.store.db import Database

log = get_logger(__name__)


def _cluster_id(db: Database) -> str:
    with db.transaction() as s:
        row = s.scalar(select(models.ClusterInfo))
        if row is None:
            row = models.ClusterInfo(id=1, cluster_id=str(uuid.uuid4()), created_at=utcnow())
            s.add(row)
        return row.cluster_id


class Master:
    def __init__(self, settings: Settings, on_lease_lost: Callable[[str], None] = exit_at_once) -> None:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        # The database and its lock live here: nobody else's business (tasks included).
        settings.state_dir.chmod(0o700)
        self.db = Database(settings.database_url)
        self.settings = settings
        self._on_lease_lost = on_lease_lost
        self.lease: LeaderLease | None = None
        self._sqlite_lock: SqliteMasterLock | None = None
        self.grpc: ServiceServer | None = None
        # The public port: REST, WebUI, /info, /healthz, /metrics, the task proxy (public_server.py).
        self.http: PublicHttpServer | None = None
        self.provisioning: BackgroundLoop | None = None
        # The audit trail's writer and its pruning loop (domain/audit/).
        self.audit: AuditRecorder | None = None
        # Single sign-on's client (gateway/oidc_flow.py), with the config file's oidc block.
        self.oidc: OidcClient | None = None
        self.audit_retention: BackgroundLoop | None = None
        self.system_metrics_thinning: BackgroundLoop | None = None
        # Determined's streaming updates: rows are numbered always, streamed with the switch on.
        self.stream_publisher = Publisher()
        self.stream_changes: StreamChanges | None = None
        self.webhooks: WebhookSender | None = None
        self.webhook_sender: BackgroundLoop | None = None
        # The master's own recent log (`det master logs`), fed from start to stop.
        self.master_log = MasterLogRing()
        self._master_log_sink: logging.Handler | None = None

    def start(self, until: threading.Event | None = None) -> bool:
        """Serve. On PostgreSQL first lead: a master started beside an active one waits here, as a
        standby, until that one is gone. False when `until` was set before it led."""
        self._master_log_sink = add_log_sink(self.master_log.append)
        if not self._lead(until or threading.Event()):
            self._remove_log_sink()
            return False
        log.info("migrating database", dialect=self.db.dialect)
        self.db.migrate()
        settings = self.settings
        self.auth = AuthService(
            self.db,
            settings.session_ttl_seconds,
            LoginLimiter(
                LoginLimits(
                    failures_per_user=settings.login_failures_per_user,
                    failures_per_address=settings.login_failures_per_address,
                    window_s=settings.login_window_s,
                )
            ),
            initial_password=settings.initial_user_password,
        )
        self.auth.ensure_builtin_users()
        # Before anything listens: a master reachable beyond loopback needs passwords on its accounts.
        check_exposure(settings.host, self.auth.builtin_users_without_password())
        tls = (
            ServerTls.load(settings.tls_cert, settings.tls_key)
            if settings.tls_cert and settings.tls_key
            else None
        )
        check_transport(settings.host, tls is not None, settings.insecure_allow_plaintext)
        # HTTP first: with --http-port 0 the bound port must be known before anything reports it.
        limits = HttpLimits(workers=settings.http_workers, max_connections=settings.max_http_connections)
        self.http = start_public_http(
            settings.host,
            settings.http_port,
            limits.per_process(settings.http_processes),
            tls.ssl_context() if tls is not None else None,
        )
        settings = dataclasses.replace(settings, http_port=self.http.server_address[1])
        self.searchers = SearcherDirectory(
            settings.searcher_addr, settings.cluster_token, dict(settings.searcher_plugins)
        )
        self.scheduler = SchedulerClient(settings.scheduler_addr, settings.cluster_token)
        self.ctx = ctx = MasterContext(
            settings=settings,
            db=self.db,
            searchers=self.searchers,
            scheduler=self.scheduler,
            hub=AgentHub(),
            master_id=str(uuid.uuid4()),
            cluster_id=_cluster_id(self.db),
        )
        wiring.connect(ctx)
        # Before any unit of work: every change of a streamed row is numbered from the first.
        self.stream_changes = StreamChanges(self.db, self.stream_publisher)
        workspaces.ensure_builtin_owner(ctx)
        agent_registry.mark_all_disconnected_at_boot(ctx)
        if settings.agent_enrolment_secret and agent_credentials.seed_enrolment_secret(
            ctx, settings.agent_enrolment_secret
        ):
            log.info("the configured agent enrolment secret is the cluster's (it had none)")
        self.logs = LogStore(ctx)
        self.scheduling = SchedulingLoop(ctx)
        self.pump = SearcherPump(ctx)
        self.liveness = LivenessLoop(ctx)
        self.lost_unmanaged = unmanaged.lost_trials_loop(ctx)
        self.checkpoints = CheckpointClient(settings.checkpoint_addr, settings.cluster_token)
        self.gc = CheckpointGc(ctx, self.checkpoints)
        self.webhooks = WebhookSender(ctx, webhook_signing_key(settings))
        ctx.experiment_delete_hooks.append(self.gc.delete_experiment_files)
        ctx.experiment_delete_hooks.append(TensorboardFiles(ctx, self.checkpoints).delete_experiment_files)
        deps = ApiDeps(
            ctx=ctx,
            forecasts=StartForecasts(ctx),
            auth=self.auth,
            logs=self.logs,
            waiting=self.scheduling.waiting,
            checkpoints=self.checkpoints,
            samples=SampleCache(ctx),
            read_cache=ReadCache(ctx, settings.read_cache_entries),
            # A page holds many rows: room for the rows of twenty times as many pages.
            experiment_rows=RowCache(ctx, settings.read_cache_entries * 20),
            version=__version__,
            database=self.db.dialect,
            master_log=self.master_log,
            follow_slots=FollowSlots(settings.max_log_followers),
            signal_wait_slots=SignalWaitSlots(settings.max_signal_waiters),
            verdict_wait_slots=VerdictWaitSlots(verdict_waiters(settings.max_signal_waiters)),
            webhooks=self.webhooks,
        )
        api = CairnServicer(deps)
        agent_stream = AgentStreamServicer(ctx, self.logs, settings.max_agents)
        # The task proxy's targets and the health of this process, for its own HTTP port and, over
        # the internal gateway service, for the port's worker processes.
        # Each user's grants (identity/grants.py), kept while nothing of who may do what changes:
        # every caller the master establishes (API, task proxy, streams) carries them.
        self.grants = GrantCache(self.db, lambda: ctx.access_version)
        authenticate_user = self.grants.authenticating(self.auth.authenticate_user_token)
        proxy_targets = LocalTargets(ctx, authenticate_user)
        health = ContextHealth(ctx)
        # Determined's streaming updates, with the switch on: served here, and relayed here from the
        # port's worker processes (stream_relay.py).
        streaming = STREAMING_UPDATES in settings.feature_switches
        stream_sessions = local_sessions(
            self.db, self.stream_publisher, authenticate_user, self.grants.attach
        )
        relayed_streams = StreamConversations(stream_sessions) if streaming else None
        gateway_service = GatewayServicer(proxy_targets, health, relayed_streams)
        # Opens the internal gateway service to this boot's worker processes alone (their stdin).
        gateway_key = secrets.token_urlsafe(32)

        def register(server: grpc.Server) -> list[str]:
            api_pb2_grpc.add_CairnServicer_to_server(api, server)
            agent_pb2_grpc.add_AgentServiceServicer_to_server(agent_stream, server)
            return [
                api_pb2.DESCRIPTOR.services_by_name["Cairn"].full_name,
                agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
                register_gateway_service(server, gateway_service),
            ]

        self.audit = AuditRecorder(ctx.db, ctx.telemetry)
        interceptors = [
            # First, so that it records how every change ended, refusals by the others included.
            AuditInterceptor(self.audit.record, gateway_key),
            AuthInterceptor(
                master_authenticator(
                    self.auth,
                    settings.cluster_token,
                    gateway_key,
                    agents=agent_authenticator(self.db, settings.agent_auth, settings.cluster_token),
                    grants=self.grants,
                ),
                PUBLIC_METHODS,
            ),
        ]
        self.grpc = start_server(
            "master",
            register,
            host=settings.host,
            port=settings.grpc_port,
            interceptors=interceptors,
            # Agents' streams are coroutines on the asyncio server and take no thread of it
            # (agent_stream.py). Followers never take the ordinary calls' threads: they have their
            # own, and so do calls waiting for signals (thread_slots.py).
            asyncio_server=True,
            max_workers=settings.rpc_workers
            + deps.follow_slots.limit
            + deps.signal_wait_slots.limit
            + deps.verdict_wait_slots.limit
            + (relayed_streams.limit if relayed_streams is not None else 0),
            tls=tls,
            # The REST gateway's streams and worker processes dial back in; under TLS, on loopback.
            loopback_plaintext=tls is not None,
        )
        settings = dataclasses.replace(settings, grpc_port=self.grpc.port)
        ctx.settings = settings
        grpc_host, grpc_port = (
            ("127.0.0.1", self.grpc.loopback_port)
            if self.grpc.loopback_port
            else (settings.host, self.grpc.port)
        )
        info = master_info(ctx)
        self.http.routes.append(info_route(info))
        self.http.routes.extend(health_routes(health))
        self.http.routes.extend(
            rest_routes(
                self.http,
                api_pb2.DESCRIPTOR.services_by_name["Cairn"],
                grpc_host,
                grpc_port,
                # The same servicers behind the same interceptors, called in the HTTP thread.
                local=LocalCalls(register, with_request_checks(interceptors)),
            )
        )
        if settings.oidc is not None:
            self.oidc = OidcClient(settings.oidc)
            self.http.routes.extend(oidc_routes(self.oidc, ctx, self.auth, self.audit.record))
        self.http.routes.extend(webui_routes())  # last: it answers every other GET
        # Each process of the port holds its share of a task's tunnels.
        tunnels_per_task = max(1, MAX_TUNNELS_PER_TASK // settings.http_processes)
        self.http.serve_proxy(TaskProxy(proxy_targets, tunnels_per_task))
        if streaming:
            self.http.serve_stream(StreamEndpoint(stream_sessions))
        if settings.http_processes > 1:
            share = limits.per_process(settings.http_processes)
            start_workers(
                self.http,
                WorkerSpec(
                    fd=self.http.socket.fileno(),
                    grpc_host=grpc_host,
                    grpc_port=grpc_port,
                    gateway_key=gateway_key,
                    info=info,
                    workers=share.workers,
                    max_connections=share.max_connections,
                    queue_timeout_s=share.queue_timeout_s,
                    tunnels_per_task=tunnels_per_task,
                    streaming=streaming,
                    tls_cert=str(settings.tls_cert) if tls is not None else None,
                    tls_key=str(settings.tls_key) if tls is not None else None,
                    log_format=settings.log_format,
                    log_level=settings.log_level,
                ),
                settings.http_processes - 1,
            )
        self.audit.start()
        self.audit_retention = audit_retention.start(ctx)
        self.system_metrics_thinning = system_metrics.start_thinning(ctx)
        self.scheduling.start()
        self.pump.start()
        self.liveness.start()
        self.lost_unmanaged.start()
        self.deferred_work = deferred_loop.start(ctx, self.gc)  # GC, deletions: owed work, retried
        self.webhook_sender = webhook_sender.start(ctx, self.webhooks)  # owed posts, retried
        # Dynamic agents, for pools with a provider (a wrong provider setting stops the master here).
        self.provisioning = provisioning_loop.start(
            ctx, build_provisioners(ctx), settings.provisioner_period_s
        )
        write_ready_file(settings.ready_file, grpc_port=self.grpc.port, http_port=settings.http_port)
        log.info(
            "master ready",
            grpc_port=self.grpc.port,
            http_port=settings.http_port,
            database=self.db.dialect,
            cluster_id=ctx.cluster_id,
        )
        return True

    def _lead(self, until: threading.Event) -> bool:
        """Take the database for this master alone (services/master/leadership.py)."""
        if self.db.dialect == "sqlite":
            database = make_url(self.settings.database_url).database
            if database and database != ":memory:":
                self._sqlite_lock = SqliteMasterLock(Path(database))
                self._sqlite_lock.acquire()
            return True
        self.lease = LeaderLease(self.settings.database_url, self._on_lease_lost, self.settings.leader_lease)
        if not self.lease.wait_until_held(until):
            self._give_up_leadership()
            return False
        # Watched from now on: a master that loses the lease while it boots must not boot on.
        self.lease.start_watching()
        return True

    def _give_up_leadership(self) -> None:
        if self.lease is not None:
            self.lease.release()
        if self._sqlite_lock is not None:
            self._sqlite_lock.release()

    def _remove_log_sink(self) -> None:
        if self._master_log_sink is not None:
            remove_log_sink(self._master_log_sink)
            self._master_log_sink = None

    def stop(self) -> None:
        ctx = self.ctx
        ctx.stopping.set()
        ctx.topics.close()
        self.master_log.close()  # followers of `det master logs` end now, not at the grace timeout
        ctx.hub.close_all()
        ctx.scheduler_wakeup.set()
        ctx.pump_wakeup.set()
        ctx.webhook_wakeup.set()
        self.stream_publisher.close_all()  # streaming clients reconnect to whoever serves next
        if self.grpc is not None:
            self.grpc.stop(grace=3.0)
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        for loop in (
            self.scheduling,
            self.pump,
            self.liveness,
            self.lost_unmanaged,
            self.provisioning,
            self.webhook_sender,
            self.audit_retention,
            self.system_metrics_thinning,
        ):
            if loop is not None:
                loop.join(timeout=5.0)
        if self.webhooks is not None:
            self.webhooks.close()
        if self.audit is not None:
            self.audit.close()  # after the servers stopped: the last calls' records are stored too
        if self.oidc is not None:
            self.oidc.close()
        self.scheduling.close()
        self.searchers.shutdown()
        self.scheduler.shutdown()
        self.checkpoints.shutdown()
        if self.stream_changes is not None:
            self.stream_changes.stop()
        self.db.dispose()
        # Last: a standby takes over only once this master writes nothing more.
        self._give_up_leadership()
        self._remove_log_sink()
