"""The master's proxy to tasks' services: `/proxy/{task_id}/...` reaches the task's own port (a
notebook's JupyterLab, a TensorBoard), and `/proxy/{task_id}:{port}/...` a port a trial's
experiment lists in `environment.proxy_ports`, through the master only, HTTP and websockets alike,
served by the public port's ASGI application (asgi_app.py) in whichever process took the
connection.

Every request is authenticated with the user's session, the same credentials the REST gateway
takes (an `Authorization: Bearer` header, or the WebUI's `auth` cookie), and authorised per task
by proxy_access (its owner or an admin, while it runs), through a Resolve (proxy_targets.py: in
place in the master's process, over its internal gRPC service from a worker). Refusals are JSON
with the reason: 401 without a session, 403 for another user's task, 404 for no such task or one
that has ended, 503 while its service does not answer yet. Where the service listens is read from
the allocation's row, so open notebooks keep working across a master restart.

Then: an HTTP exchange (proxy_http.py), a websocket (proxy_websocket.py), or, for a shell and a
trial's `proxy_tcp` port, the TCP port tunnelled over a websocket (tcp_tunnel.py). A shell's is
reachable without a session as in Determined (its SSH server's per-shell key is the credential),
and so is a trial's port marked `unauthenticated` (proxy_access.py).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from urllib.parse import unquote

import httpx

from services.common.logging import get_logger
from services.master.domain.allocations.proxy_access import ProxyTarget
from services.master.gateway import proxy_http, proxy_websocket, tcp_tunnel
from services.master.gateway.asgi_websocket import Receive, Scope, Send, refuse_json
from services.master.gateway.master_routes import MasterUnreachable
from services.master.gateway.proxy_headers import header_message, session_token
from services.master.gateway.proxy_targets import Refused, Resolution, Resolve

log = get_logger(__name__)

PROXY_PREFIX = "/proxy/"
# Resolutions at once in this process (each a session check and a read, or a call to the master);
# more wait their turn. The exchanges themselves run on the event loop and take none.
RESOLVE_THREADS = 16


def split_proxy_path(path: str) -> tuple[str, str] | None:
    """(service id, the path the service gets) of a proxy path; None for any other path. The
    service id is a task's id, or `<task id>:<port>` for a trial's port (a client may send the
    colon as %3A). The service gets the whole path: it serves under /proxy/{service id}/ (a
    notebook's base_url)."""
    if not path.startswith(PROXY_PREFIX):
        return None
    service_id = unquote(path[len(PROXY_PREFIX) :].split("/", 1)[0].split("?", 1)[0])
    return (service_id, path) if service_id else None


class _Refusal(Exception):
    """An answer instead of a proxied exchange."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


class TaskProxy:
    """`http` and `websocket` answer an ASGI scope under PROXY_PREFIX."""

    def __init__(self, resolve: Resolve, tunnels_per_task: int = tcp_tunnel.MAX_TUNNELS_PER_TASK) -> None:
        self._resolve = resolve
        self._threads = ThreadPoolExecutor(max_workers=RESOLVE_THREADS, thread_name_prefix="proxy-resolve")
        self.tunnels = tcp_tunnel.OpenTunnels(tunnels_per_task)
        # Made on first use, on the serving event loop (httpx's pool belongs to one loop).
        self._client: httpx.AsyncClient | None = None

    async def aclose(self) -> None:
        """On the serving loop, as it stops: pooled connections to tasks close."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _target(self, scope: Scope) -> tuple[str, ProxyTarget]:
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        parts = split_proxy_path(raw_path)
        if parts is None:
            raise _Refusal(HTTPStatus.NOT_FOUND, "not found")
        service_id = parts[0]
        token = session_token(header_message(scope["headers"]))
        loop = asyncio.get_running_loop()
        try:
            found: Resolution = await loop.run_in_executor(self._threads, self._resolve, service_id, token)
        except MasterUnreachable as exc:
            raise _Refusal(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"the master did not answer ({exc}); retry shortly",
                {"Retry-After": "1"},
            ) from None
        except Exception:
            log.exception("proxy resolution failed", service_id=service_id)
            raise _Refusal(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error") from None
        if isinstance(found, Refused):
            raise _Refusal(found.status, found.message, found.headers)
        return service_id, found

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            service_id, target = await self._target(scope)
            host, port = _split_address(target.address)
            if target.tcp:
                why = "Upgrade: the proxy tunnels a task's TCP port over a websocket (Upgrade: websocket)"
                raise _Refusal(HTTPStatus.BAD_REQUEST, f"service {service_id} is a TCP service: {why}")
            if self._client is None:
                self._client = proxy_http.new_client()
            await proxy_http.exchange(
                self._client, scope, receive, send, host, port, target.service_credential
            )
        except _Refusal as refused:
            await _respond(send, refused)
        except proxy_http.UpstreamError as exc:
            log.info("proxy upstream unreachable", path=scope["path"], error=str(exc))
            await _respond(send, _Refusal(HTTPStatus.BAD_GATEWAY, str(exc)))

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        try:
            service_id, target = await self._target(scope)
            host, port = _split_address(target.address)
            if target.tcp:
                try:
                    with self.tunnels.held(service_id):
                        await tcp_tunnel.tunnel(receive, send, host, port)
                except tcp_tunnel.TooManyTunnels as exc:
                    raise _Refusal(HTTPStatus.TOO_MANY_REQUESTS, str(exc), {"Retry-After": "5"}) from None
            else:
                await proxy_websocket.relay(scope, receive, send, host, port, target.service_credential)
        except _Refusal as refused:
            await refuse_json(scope, send, refused.status, refused.message, refused.headers)
        except (proxy_websocket.UpstreamError, tcp_tunnel.UpstreamError) as exc:
            log.info("proxy upstream unreachable", path=scope["path"], error=str(exc))
            await refuse_json(scope, send, HTTPStatus.BAD_GATEWAY, str(exc), {})


async def _respond(send: Send, refused: _Refusal) -> None:
    body = json.dumps({"error": refused.message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in refused.headers.items()]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
