"""Where the task proxy takes a caller, or why it refuses: `Resolve(service_id, session_token)`
(a service id is a task's id, or `<task id>:<port>` for a trial's port).

The master's own process resolves in place (LocalTargets: the session checked, then
proxy_access.proxy_target read from the database); a worker process asks the master the same over
its internal gRPC service (master_link.MasterLink.resolve_proxy, answered by internal_service.py
with LocalTargets), so a refusal reads the same whichever process took the connection. Both are
synchronous (they read the database or call gRPC): the proxy runs them in a thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from cairn.gateway.v1 import gateway_pb2
from services.common.principal import Principal
from services.master.domain.allocations import proxy_access
from services.master.domain.allocations.proxy_access import ProxyTarget
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import DomainError, NotFound, PermissionDenied, Unauthenticated

# Each refusal's HTTP status (and the JSON body names the reason).
REFUSAL_STATUS: dict[int, int] = {
    gateway_pb2.REFUSAL_UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
    gateway_pb2.REFUSAL_PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
    gateway_pb2.REFUSAL_NOT_FOUND: HTTPStatus.NOT_FOUND,
    gateway_pb2.REFUSAL_TASK_ENDED: HTTPStatus.NOT_FOUND,
    gateway_pb2.REFUSAL_NOT_READY: HTTPStatus.SERVICE_UNAVAILABLE,
    gateway_pb2.REFUSAL_OTHER: HTTPStatus.BAD_REQUEST,
}


@dataclass(frozen=True)
class Refused:
    refusal: gateway_pb2.Refusal.ValueType
    message: str

    @property
    def status(self) -> int:
        return REFUSAL_STATUS.get(self.refusal, HTTPStatus.BAD_REQUEST)

    @property
    def headers(self) -> dict[str, str]:
        # A service that is starting answers soon: the client may try again at once.
        return {"Retry-After": "1"} if self.status == HTTPStatus.SERVICE_UNAVAILABLE else {}

    @property
    def body(self) -> bytes:
        return json.dumps({"error": self.message}).encode()


Resolution = ProxyTarget | Refused
# (service id, the caller's session token or None) → where to go, or why not.
Resolve = Callable[[str, str | None], Resolution]
# A session token to the principal it stands for (AuthService.authenticate_user_token).
Authenticate = Callable[[str], Principal]


def refusal_of(exc: DomainError) -> gateway_pb2.Refusal.ValueType:
    # TaskEnded and NotReady are FailedPreconditions: the specific kinds are tested first.
    if isinstance(exc, Unauthenticated):
        return gateway_pb2.REFUSAL_UNAUTHENTICATED
    if isinstance(exc, PermissionDenied):
        return gateway_pb2.REFUSAL_PERMISSION_DENIED
    if isinstance(exc, proxy_access.TaskEnded):
        return gateway_pb2.REFUSAL_TASK_ENDED
    if isinstance(exc, NotFound):
        return gateway_pb2.REFUSAL_NOT_FOUND
    if isinstance(exc, proxy_access.NotReady):
        return gateway_pb2.REFUSAL_NOT_READY
    return gateway_pb2.REFUSAL_OTHER


class LocalTargets:
    """Resolution in the master's process: the caller's session, then proxy_access."""

    def __init__(self, ctx: MasterContext, authenticate: Authenticate) -> None:
        self._ctx = ctx
        self._authenticate = authenticate

    def __call__(self, service_id: str, session_token: str | None) -> Resolution:
        try:
            principal = self._authenticate(session_token) if session_token is not None else None
            with self._ctx.db.read() as s:
                return proxy_access.proxy_target(s, principal, service_id)
        except DomainError as exc:
            return Refused(refusal_of(exc), str(exc))
