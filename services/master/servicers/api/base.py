"""What every part of the public servicer needs: the master's services and the caller."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc
from sqlalchemy.orm import Session

from cairn.api.v1 import experiment_pb2
from services.common.interceptors import current_principal
from services.common.principal import Principal
from services.master.domain.identity import access, scopes
from services.master.domain.identity.auth import AuthService
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import NotFound
from services.master.domain.metrics.logs import LogStore
from services.master.domain.metrics.samples import SampleCache
from services.master.domain.operations.master_log import MasterLogRing
from services.master.domain.scheduling.scheduling import WaitingInfo
from services.master.domain.scheduling.start_forecast import StartForecasts
from services.master.domain.webhooks.sender import WebhookSender
from services.master.remotes.checkpoint import CheckpointClient
from services.master.servicers.read_cache import ReadCache, RowCache
from services.master.servicers.thread_slots import FollowSlots, SignalWaitSlots, VerdictWaitSlots


@dataclass
class ApiDeps:
    ctx: MasterContext
    auth: AuthService
    logs: LogStore
    waiting: WaitingInfo
    checkpoints: CheckpointClient
    samples: SampleCache
    read_cache: ReadCache
    version: str
    database: str
    # Experiments-list rows by (experiment id, with config); see GetExperiments.
    experiment_rows: RowCache[tuple[int, bool], experiment_pb2.Experiment]
    # The master's own recent log records (MasterLogs).
    master_log: MasterLogRing
    # Followed log streams, each holding a server thread of its own (thread_slots.py).
    follow_slots: FollowSlots
    # Signal watches and preemption long polls while they wait, each holding a thread (the same).
    signal_wait_slots: SignalWaitSlots
    # Trials waiting for the searcher's verdict on their result (the same, a pool of their own).
    verdict_wait_slots: VerdictWaitSlots
    # Posts webhooks' test events (TestWebhook) with the sender's client and signing key.
    webhooks: WebhookSender
    # Waiting jobs' forecast starts (the job listing's predicted_start).
    forecasts: StartForecasts


class ServicerBase:
    def __init__(self, deps: ApiDeps) -> None:
        self.deps = deps
        self.ctx = deps.ctx
        self.cache = deps.read_cache

    @staticmethod
    def caller(context: grpc.ServicerContext) -> Principal:
        principal = current_principal()
        if principal is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing credentials")
        return principal

    def readable(self, context: grpc.ServicerContext, permission: Permission) -> frozenset[int] | None:
        """The workspaces whose objects the caller may read under `permission` (None: all of
        them), for the read model to filter by (identity/access.py, reads/visibility.py)."""
        principal = self.caller(context)
        if principal.grants is None and principal.user_id is not None and not principal.admin:
            with self.ctx.db.read() as s:
                return access.readable_workspaces(principal, permission, s)
        return access.readable_workspaces(principal, permission)

    def check_readable(
        self,
        context: grpc.ServicerContext,
        permission: Permission,
        what: str,
        workspace_of: Callable[[Session], int | None],
    ) -> None:
        """NotFound naming `what` unless the caller may read it; its workspace is looked up only
        when the caller may not read every workspace (the common case costs no query)."""
        if self.readable(context, permission) is None:
            return
        principal = self.caller(context)
        with self.ctx.db.read() as s:
            workspace_id = workspace_of(s)
            if workspace_id is None:
                return  # not there: the read itself says so
            access.check_readable(principal, permission, workspace_id, what, s)

    def check_experiment_readable(
        self,
        context: grpc.ServicerContext,
        experiment_id: int,
        permission: Permission = Permission.VIEW_EXPERIMENT_METADATA,
    ) -> None:
        self.check_readable(
            context,
            permission,
            f"experiment {experiment_id}",
            lambda s: scopes.of_experiment_id(s, experiment_id),
        )

    def check_trials_readable(
        self,
        context: grpc.ServicerContext,
        trial_ids: Iterable[int],
        permission: Permission = Permission.VIEW_EXPERIMENT_METADATA,
    ) -> None:
        """NotFound for the first of the trials the caller may not read."""
        ids = list(trial_ids)
        visible = self.readable(context, permission)
        if visible is None or not ids:
            return
        with self.ctx.db.read() as s:
            for trial_id, workspace_id in scopes.of_trials(s, ids).items():
                if workspace_id not in visible:
                    raise NotFound(f"trial {trial_id} not found")

    @staticmethod
    def user(context: grpc.ServicerContext) -> Principal:
        """The calling user; trial code's allocation token alone is not enough here."""
        principal = current_principal()
        if principal is None or principal.user_id is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "this call needs a user's session token")
        return principal
