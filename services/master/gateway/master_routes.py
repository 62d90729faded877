"""/info, /healthz and /metrics: the routes every process of the public port answers. /info is
the same everywhere (master_info, computed once); /healthz and /metrics read the master's state,
in its own process directly (ContextHealth) and from a worker process over the master's internal
gRPC service (master_link.MasterLink), so both kinds of process answer them the same."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any, Protocol

from cairn import DETERMINED_API_VERSION, __version__
from services.master.configuration.oidc import sso_providers
from services.master.domain.kernel.context import MasterContext
from services.master.gateway import prometheus
from services.master.gateway.http_answers import PlainRoute, Response
from services.master.gateway.http_request import HttpRequest

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4"
_HEALTHY = b'{"status": "ok"}'
_DATABASE_DOWN = b'{"status": "database unreachable"}'


class HealthSource(Protocol):
    """What /healthz and /metrics read. Either may raise MasterUnreachable (a worker whose master
    did not answer)."""

    def database_ok(self) -> bool: ...

    def metrics_text(self) -> str: ...


class MasterUnreachable(Exception):
    """A worker process could not ask the master (it is stopping, or overloaded)."""


class ContextHealth:
    """The master's own process: its database and gauges, read directly."""

    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx

    def database_ok(self) -> bool:
        return bool(self._ctx.db.ping())

    def metrics_text(self) -> str:
        return prometheus.render(self._ctx)


def master_info(ctx: MasterContext) -> dict[str, Any]:
    """What /info answers: the same in every process that serves the public port."""
    return {
        # The Determined API level (what its clients compare themselves with), and Cairn's own.
        "version": DETERMINED_API_VERSION,
        "cairn_version": __version__,
        "master_id": ctx.master_id,
        "cluster_id": ctx.cluster_id,
        "cluster_name": ctx.settings.cluster_name,
        "telemetry": {"enabled": False},
        # As GetMaster says: roles decide every call (domain/identity/access.py).
        "rbacEnabled": True,
        "product": "cairn",
        # Single sign-on (the config file's oidc block), as Determined lists it: `det auth sso`
        # and the WebUI's login page read it.
        "sso_providers": sso_providers(ctx.settings.oidc),
    }


def info_route(info: dict[str, Any]) -> PlainRoute:
    body = json.dumps(info).encode()

    def info_answer(req: HttpRequest) -> Response | None:
        # Determined's clients ask /info (outside the API) for the master's version before anything.
        if req.path.split("?")[0] != "/info":
            return None
        return Response(HTTPStatus.OK, body)

    return info_answer


def health_routes(source: HealthSource) -> list[PlainRoute]:
    def healthz(req: HttpRequest) -> Response | None:
        if req.path.split("?")[0] not in ("/healthz", "/health"):
            return None
        try:
            healthy = source.database_ok()
        except MasterUnreachable as exc:
            return _unreachable(exc)
        if healthy:
            return Response(HTTPStatus.OK, _HEALTHY)
        return Response(HTTPStatus.SERVICE_UNAVAILABLE, _DATABASE_DOWN)

    def metrics(req: HttpRequest) -> Response | None:
        if req.path.split("?")[0] != "/metrics":
            return None
        try:
            text = source.metrics_text()
        except MasterUnreachable as exc:
            return _unreachable(exc)
        return Response(HTTPStatus.OK, text.encode(), METRICS_CONTENT_TYPE)

    return [healthz, metrics]


def _unreachable(exc: MasterUnreachable) -> Response:
    body = json.dumps({"status": f"the master did not answer: {exc}"}).encode()
    return Response(HTTPStatus.SERVICE_UNAVAILABLE, body, headers={"Retry-After": "1"})
