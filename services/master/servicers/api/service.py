"""The Cairn public service, assembled from its areas."""

from __future__ import annotations

from cairn.api.v1 import api_pb2_grpc
from services.master.servicers.api.agents import AgentsApi
from services.master.servicers.api.auth import AuthApi
from services.master.servicers.api.checkpoints import CheckpointsApi
from services.master.servicers.api.experiments import ExperimentsApi
from services.master.servicers.api.master import MasterApi
from services.master.servicers.api.metrics import MetricsApi, SamplesApi, WorkloadsApi
from services.master.servicers.api.tasks import SignalsApi, TasksApi
from services.master.servicers.api.trials import TrialsApi


class CairnServicer(
    AuthApi,
    MasterApi,
    ExperimentsApi,
    TrialsApi,
    MetricsApi,
    SamplesApi,
    WorkloadsApi,
    CheckpointsApi,
    AgentsApi,
    TasksApi,
    SignalsApi,
    api_pb2_grpc.CairnServicer,
):
    """Every RPC of cairn.api.v1.Cairn; the bases each serve one area."""
