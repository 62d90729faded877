"""The Cairn public service, assembled from its areas."""

from __future__ import annotations

from cairn.api.v1 import api_pb2_grpc
from services.master.servicers.api.agent_credentials import AgentCredentialsApi
from services.master.servicers.api.agents import AgentsApi
from services.master.servicers.api.audit import AuditApi
from services.master.servicers.api.auth import AuthApi
from services.master.servicers.api.checkpoints import CheckpointsApi
from services.master.servicers.api.cluster_message import ClusterMessageApi
from services.master.servicers.api.continuation import ContinuationApi
from services.master.servicers.api.experiments import ExperimentsApi
from services.master.servicers.api.generic_tasks import GenericTasksApi
from services.master.servicers.api.groups import GroupsApi
from services.master.servicers.api.jobs import JobsApi
from services.master.servicers.api.master import MasterApi
from services.master.servicers.api.master_info import MasterInfoApi
from services.master.servicers.api.metrics import CompareApi, MetricsApi, SamplesApi, WorkloadsApi
from services.master.servicers.api.models import ModelsApi
from services.master.servicers.api.pool_bindings import PoolBindingsApi
from services.master.servicers.api.pool_shares import PoolSharesApi
from services.master.servicers.api.resources import ResourcesApi
from services.master.servicers.api.roles import RolesApi
from services.master.servicers.api.runs import RunsApi
from services.master.servicers.api.system_metrics import SystemMetricsApi
from services.master.servicers.api.task_kinds import TaskKindsApi
from services.master.servicers.api.tasks import SignalsApi, TasksApi
from services.master.servicers.api.templates import TemplatesApi
from services.master.servicers.api.tokens import TokensApi
from services.master.servicers.api.trials import TrialsApi
from services.master.servicers.api.unmanaged import UnmanagedApi
from services.master.servicers.api.users import UsersApi
from services.master.servicers.api.webhooks import WebhooksApi
from services.master.servicers.api.workspaces import WorkspacesApi


class CairnServicer(
    AuthApi,
    UsersApi,
    TokensApi,
    GroupsApi,
    RolesApi,
    MasterApi,
    MasterInfoApi,
    ClusterMessageApi,
    ExperimentsApi,
    ContinuationApi,
    SystemMetricsApi,
    TrialsApi,
    RunsApi,
    UnmanagedApi,
    MetricsApi,
    SamplesApi,
    CompareApi,
    WorkloadsApi,
    CheckpointsApi,
    ModelsApi,
    AgentsApi,
    AgentCredentialsApi,
    PoolBindingsApi,
    PoolSharesApi,
    JobsApi,
    ResourcesApi,
    TasksApi,
    TaskKindsApi,
    GenericTasksApi,
    TemplatesApi,
    WorkspacesApi,
    WebhooksApi,
    SignalsApi,
    AuditApi,
    api_pb2_grpc.CairnServicer,
):
    """Every RPC of cairn.api.v1.Cairn; the bases each serve one area."""
