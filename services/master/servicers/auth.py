"""Who may call what on the master.

- The public API needs a user's session token, except Login and GetMaster. Once a user is known,
  their grants are attached for the call (identity/grants.py) and the call passes the access
  gate (identity/access.check_call, over the decisions of identity/rpc_decisions.py).
- Trial code holds only its allocation token, which opens the calls trial code makes (reporting,
  checkpoints, signals, reading its own trial) and nothing else.
- Agents present credentials of their own on their stream (agent_auth.py; the cluster token only on
  a master in compatibility mode, `--agent-auth cluster_token`).
- The cluster token opens, on the public API, only CLUSTER_TOKEN_METHODS: the local cluster makes a
  join token for each agent it starts.
- The worker processes of the master's HTTP port present the per-boot gateway key, which opens
  the internal gateway service (proto/cairn/gateway/v1/gateway.proto) and nothing else; the
  service is closed to everyone else, the cluster token's holders included.
"""

from __future__ import annotations

import hmac

import grpc

from services.common.interceptors import Authenticate, AuthError
from services.common.metadata import (
    CLUSTER_TOKEN_KEY,
    GATEWAY_KEY_KEY,
    Metadata,
    allocation_token,
    metadata_value,
    user_token,
)
from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.auth import AuthService
from services.master.domain.identity.grants import GrantCache
from services.master.domain.kernel.errors import DatabaseUnavailable, PermissionDenied, Unauthenticated
from services.master.domain.kernel.outage import ride_out
from services.master.servicers.agent_auth import AgentAuthenticate

API = "/cairn.api.v1.Cairn/"
AGENT_SERVICE = "/cairn.agent.v1.AgentService/"
GATEWAY_SERVICE = "/cairn.gateway.v1.GatewayService/"

PUBLIC_METHODS = frozenset({API + "Login", API + "GetMaster"})

ALLOCATION_METHODS = frozenset(
    API + name
    for name in (
        "GetTrial",
        "ReportTrialMetrics",
        "ReportTrialMetricsBatch",
        "ReportTrialTrainingMetrics",
        "ReportTrialValidationMetrics",
        "ReportTrialProgress",
        "PostTrialRunnerMetadata",
        "ReportTrialSearcherEarlyExit",
        "GetCurrentTrialSearcherOperation",
        "CompleteTrialSearcherValidation",
        "GetBestSearcherValidationMetric",
        "ReportCheckpoint",
        "GetCheckpoint",
        "PatchCheckpoints",
        "AllocationPreemptionSignal",
        "AckAllocationPreemptionSignal",
        "NotifyAllocationExiting",
        "WatchAllocationSignals",
        "GetMaster",
        "RunPrepareForReporting",
        # core.train.set_metadata / get_metadata: its own run only (allocation_access.check_trial).
        "GetRunMetadata",
        "PostRunMetadata",
        # A serving task's launcher (cairn.notebook_server): its service answers, it is idle.
        "AllocationReady",
        "IdleNotebook",
        # Core API's context.alert: its own experiment's CUSTOM webhooks (webhooks/triggers.py).
        "PostWebhookEventData",
    )
)


# Public methods the control plane's own tools call with the cluster token (no user session).
CLUSTER_TOKEN_METHODS = frozenset({API + "CreateAgentJoinToken"})


def master_authenticator(
    auth: AuthService,
    cluster_token: str | None,
    gateway_key: str,
    agents: AgentAuthenticate | None = None,
    *,
    grants: GrantCache,
) -> Authenticate:
    """`agents`: who is calling the agent service (agent_auth.py); None takes the cluster token
    (or nothing, without one) from any agent, as before agents had credentials of their own.
    `grants`: each user's grants, attached to their call's principal before the access gate."""

    def authenticate(method: str, metadata: Metadata) -> Principal:
        principal = _authenticate(method, metadata)
        if not method.startswith(API):
            return principal
        principal = grants.attach(principal)
        try:
            access.check_call(principal, method.removeprefix(API))
        except PermissionDenied as exc:
            raise AuthError(str(exc), code=grpc.StatusCode.PERMISSION_DENIED) from None
        return principal

    def _authenticate(method: str, metadata: Metadata) -> Principal:
        if method.startswith(GATEWAY_SERVICE):
            # Its answers carry tasks' service credentials: without the key nobody gets in, even
            # on a master that runs without a cluster token.
            presented = metadata_value(metadata, GATEWAY_KEY_KEY) or ""
            if not gateway_key or not hmac.compare_digest(presented.encode(), gateway_key.encode()):
                raise AuthError(
                    "the gateway service is internal to the master's HTTP port",
                    code=grpc.StatusCode.PERMISSION_DENIED,
                )
            return Principal(internal=True, username="http-worker")
        if method.startswith(AGENT_SERVICE):
            if agents is not None:
                return agents(method, metadata)
            if not cluster_token:
                return Principal(internal=True, username="agent")
            presented = metadata_value(metadata, CLUSTER_TOKEN_KEY) or ""
            if not hmac.compare_digest(presented.encode(), cluster_token.encode()):
                raise AuthError(f"agents must present the cluster token ({CLUSTER_TOKEN_KEY})")
            return Principal(internal=True, username="agent")
        try:
            user = user_token(metadata)
            alloc = allocation_token(metadata)
            # Checking a token reads the database: an outage is ridden out like any call's.
            user_principal = (
                ride_out(lambda: auth.authenticate_user_token(user), what="checking a session token")
                if user
                else None
            )
            alloc_principal = (
                ride_out(
                    lambda: auth.authenticate_allocation_token(alloc), what="checking an allocation token"
                )
                if alloc
                else None
            )
        except Unauthenticated as exc:
            raise AuthError(str(exc)) from None
        except PermissionDenied as exc:
            raise AuthError(str(exc), code=grpc.StatusCode.PERMISSION_DENIED) from None
        except DatabaseUnavailable as exc:
            raise AuthError(str(exc), code=grpc.StatusCode.UNAVAILABLE) from None
        if user_principal is not None:
            if alloc_principal is not None:
                return Principal(
                    user_id=user_principal.user_id,
                    username=user_principal.username,
                    admin=user_principal.admin,
                    allocation_id=alloc_principal.allocation_id,
                )
            return user_principal
        if alloc_principal is not None:
            if method not in ALLOCATION_METHODS:
                raise AuthError(
                    f"{method.rsplit('/', 1)[-1]} needs a user's session token; trial code's allocation "
                    "token does not open it",
                    code=grpc.StatusCode.PERMISSION_DENIED,
                )
            return alloc_principal
        if method in CLUSTER_TOKEN_METHODS and cluster_token:
            presented = metadata_value(metadata, CLUSTER_TOKEN_KEY) or ""
            if hmac.compare_digest(presented.encode(), cluster_token.encode()):
                return Principal(internal=True, username="the cluster")
        raise AuthError(
            "missing credentials: log in (`cairn user login`) and send `authorization: Bearer <token>`"
        )

    return authenticate
