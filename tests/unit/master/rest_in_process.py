"""The master's REST API over an in-process master (tests/unit/master/domain/harness.py), as the
real master assembles it (app.py): the gateway's router and request builders over the proto's
google.api.http rules, the servicers behind the master's interceptors (session tokens, grants,
the access gate), called in the test's thread. No sockets and no cluster: a route answers in
milliseconds, so a test can drive every route as several users."""

from __future__ import annotations

import json
from dataclasses import dataclass
from email.message import Message
from typing import Any, cast

from cairn import __version__
from cairn.api.v1 import api_pb2, api_pb2_grpc
from cairn.client.password import salt_and_hash
from services.common.interceptors import AuthInterceptor
from services.common.local_calls import LocalCalls
from services.master.domain.identity.auth import AuthService
from services.master.domain.identity.grants import GrantCache
from services.master.domain.metrics.logs import LogStore
from services.master.domain.metrics.samples import SampleCache
from services.master.domain.operations.master_log import MasterLogRing
from services.master.domain.scheduling.start_forecast import StartForecasts
from services.master.domain.webhooks.sender import WebhookSender
from services.master.gateway.http_answers import Response
from services.master.gateway.http_rules import http_bindings
from services.master.gateway.rest_gateway import RestGateway
from services.master.gateway.upstream import Upstream
from services.master.servicers.api.base import ApiDeps
from services.master.servicers.api.service import CairnServicer
from services.master.servicers.auth import PUBLIC_METHODS, master_authenticator
from services.master.servicers.read_cache import ReadCache, RowCache
from services.master.servicers.thread_slots import FollowSlots, SignalWaitSlots, VerdictWaitSlots
from tests.unit.master.domain.harness import Master

SERVICE = api_pb2.DESCRIPTOR.services_by_name["Cairn"]


class _Request:
    """What a route asks of an HTTP request (gateway/http_request.py)."""

    def __init__(self, method: str, path: str, body: bytes, token: str | None) -> None:
        self.command = method
        self.path = path
        self._body = body
        self.headers = Message()
        self.headers["Content-Type"] = "application/json"
        self.headers["Content-Length"] = str(len(body))
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.client_address = ("127.0.0.1", 4321)

    def read_body(self, limit: int = 0) -> bytes:
        return self._body

    def leave_turns(self) -> None:
        pass


@dataclass
class Answer:
    status: int
    body: Any

    @property
    def error(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else ""


class RestApi:
    def __init__(self, master: Master) -> None:
        ctx = master.ctx
        self.auth = AuthService(master.db, 3600)
        self.grants = GrantCache(master.db, lambda: ctx.access_version)
        deps = ApiDeps(
            ctx=ctx,
            auth=self.auth,
            logs=LogStore(ctx),
            waiting=master.scheduling.waiting,
            checkpoints=cast(Any, master.checkpoints),
            samples=SampleCache(ctx),
            read_cache=ReadCache(ctx),
            experiment_rows=RowCache(ctx, 1000),
            version=__version__,
            database=master.db.dialect,
            master_log=MasterLogRing(),
            follow_slots=FollowSlots(4),
            signal_wait_slots=SignalWaitSlots(4),
            verdict_wait_slots=VerdictWaitSlots(4),
            webhooks=WebhookSender(ctx, b"test-signing-key"),
            forecasts=StartForecasts(ctx),
        )
        servicer = CairnServicer(deps)

        def register(server: Any) -> list[str]:
            api_pb2_grpc.add_CairnServicer_to_server(servicer, server)
            return [SERVICE.full_name]

        interceptors = [
            AuthInterceptor(master_authenticator(self.auth, None, "", grants=self.grants), PUBLIC_METHODS)
        ]
        bindings = http_bindings(SERVICE)
        # Unary calls only: the address is never dialled.
        upstream = Upstream(
            "127.0.0.1:9", [b.rpc for b in bindings], local=LocalCalls(register, interceptors)
        )
        self.gateway = RestGateway(SERVICE, bindings, upstream)
        self.bindings = bindings

    def login(self, username: str, password: str = "") -> str:
        token, _ = self.auth.login(username, salt_and_hash(password), is_hashed=True)
        return token

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> Answer:
        raw = b"" if body is None else json.dumps(body).encode()
        answer = self.gateway.handle(_Request(method, path, raw, token))
        assert isinstance(answer, Response), f"{method} {path}: no unary answer"
        try:
            decoded = json.loads(answer.body) if answer.body else None
        except ValueError:
            decoded = answer.body
        return Answer(int(answer.status), decoded)
