"""The master's proxy to tasks' services: `/proxy/{task_id}/...` reaches the task's own port (a
notebook's JupyterLab, later a TensorBoard) through the master only, HTTP and websockets alike.

Every request is authenticated with the user's session, the same credentials the REST gateway
takes (an `Authorization: Bearer` header, or the WebUI's `auth` cookie), and authorised per task
by proxy_access (its owner or an admin, while it runs). Refusals are JSON with the reason: 401
without a session, 403 for another user's task, 404 for no such task or one that has ended, 503
while its service does not answer yet. Where the service listens is read from the allocation's
row, so open notebooks keep working across a master restart.

A shell's port is a TCP stream, tunnelled over a websocket (tcp_tunnel.py), and reachable without
a session as in Determined: its SSH server's per-shell key is the credential (proxy_access.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.allocations import proxy_access
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import DomainError, NotFound, PermissionDenied, Unauthenticated
from services.master.gateway import proxy_forwarding, tcp_tunnel
from services.master.gateway.credentials import auth_cookie
from services.master.gateway.http_server import Answered, RequestHandler, Response, Route

log = get_logger(__name__)

PROXY_PREFIX = "/proxy/"

# A session token to the principal it stands for (AuthService.authenticate_user_token).
Authenticate = Callable[[str], Principal]


def _refusal(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(status, json.dumps({"error": message}).encode(), headers=headers)


def session_token(req: RequestHandler) -> str | None:
    """The caller's session token: a Bearer Authorization header, else the `auth` cookie."""
    authorization = (req.headers.get("Authorization") or "").strip()
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return auth_cookie(req.headers)


def split_proxy_path(path: str) -> tuple[str, str] | None:
    """(task id, the path the service gets) of a proxy path; None for any other path. The service
    gets the whole path: it serves under /proxy/{task_id}/ (a notebook's base_url)."""
    if not path.startswith(PROXY_PREFIX):
        return None
    task_id = path[len(PROXY_PREFIX) :].split("/", 1)[0].split("?", 1)[0]
    return (task_id, path) if task_id else None


def _status_of(exc: DomainError) -> int:
    if isinstance(exc, Unauthenticated):
        return HTTPStatus.UNAUTHORIZED
    if isinstance(exc, PermissionDenied):
        return HTTPStatus.FORBIDDEN
    if isinstance(exc, NotFound | proxy_access.TaskEnded):
        return HTTPStatus.NOT_FOUND
    if isinstance(exc, proxy_access.NotReady):
        return HTTPStatus.SERVICE_UNAVAILABLE
    return HTTPStatus.BAD_REQUEST


def proxy_routes(ctx: MasterContext, authenticate: Authenticate) -> list[Route]:
    def proxy(req: RequestHandler) -> Response | Answered | None:
        parts = split_proxy_path(req.path)
        if parts is None:
            return None
        task_id, path = parts
        token = session_token(req)
        try:
            principal = authenticate(token) if token is not None else None
            with ctx.db.read() as s:
                target = proxy_access.proxy_target(s, principal, task_id)
        except DomainError as exc:
            status = _status_of(exc)
            retry = {"Retry-After": "1"} if status == HTTPStatus.SERVICE_UNAVAILABLE else None
            return _refusal(status, str(exc), retry)
        address = target.address
        host, _, port = address.rpartition(":")
        try:
            if target.tcp:
                refused = tcp_tunnel.handshake_error(req)
                if refused is not None:
                    return _refusal(HTTPStatus.BAD_REQUEST, f"task {task_id} is a TCP service: {refused}")
                return tcp_tunnel.tunnel_tcp(req, task_id, host, int(port))
            credential = target.service_credential
            if proxy_forwarding.is_upgrade(req):
                return proxy_forwarding.tunnel(req, host, int(port), path, credential)
            return proxy_forwarding.relay_http(req, host, int(port), path, credential)
        except tcp_tunnel.TooManyTunnels as exc:
            return _refusal(HTTPStatus.TOO_MANY_REQUESTS, str(exc), {"Retry-After": "5"})
        except (proxy_forwarding.UpstreamError, tcp_tunnel.UpstreamError) as exc:
            log.info("proxy upstream unreachable", task_id=task_id, address=address)
            return _refusal(HTTPStatus.BAD_GATEWAY, str(exc))

    return [proxy]
