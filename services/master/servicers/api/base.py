"""What every part of the public servicer needs: the master's services and the caller."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from cairn.api.v1 import experiment_pb2
from services.common.interceptors import current_principal
from services.common.principal import Principal
from services.master.domain.identity.auth import AuthService
from services.master.domain.kernel.context import MasterContext
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

    @staticmethod
    def user(context: grpc.ServicerContext) -> Principal:
        """The calling user; trial code's allocation token alone is not enough here."""
        principal = current_principal()
        if principal is None or principal.user_id is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "this call needs a user's session token")
        return principal
