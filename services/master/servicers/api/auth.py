"""Login, logout and the current user."""

from __future__ import annotations

import grpc

from cairn.api.v1 import auth_pb2
from services.common.metadata import user_token
from services.master.domain.identity.login_limiter import login_address
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc


def _login_address(context: grpc.ServicerContext) -> str:
    forwarded = [v for k, v in context.invocation_metadata() if k == "x-forwarded-for" and isinstance(v, str)]
    return login_address(context.peer() or "", forwarded)


class AuthApi(ServicerBase):
    @rpc
    def Login(self, request: auth_pb2.LoginRequest, context: grpc.ServicerContext) -> auth_pb2.LoginResponse:
        # The REST gateway calls in with the HTTP client's address as the peer ("http:IP").
        address = _login_address(context)
        token, info = self.deps.auth.login(request.username, request.password, request.is_hashed, address)
        return auth_pb2.LoginResponse(token=token, user=convert.user(info))

    @rpc
    def Logout(
        self, request: auth_pb2.LogoutRequest, context: grpc.ServicerContext
    ) -> auth_pb2.LogoutResponse:
        token = user_token(context.invocation_metadata())
        if token:
            self.deps.auth.logout(token)
        return auth_pb2.LogoutResponse()

    @rpc
    def GetMe(self, request: auth_pb2.GetMeRequest, context: grpc.ServicerContext) -> auth_pb2.GetMeResponse:
        principal = self.user(context)
        assert principal.user_id is not None
        return auth_pb2.GetMeResponse(user=convert.user(self.deps.auth.user(principal.user_id)))

    @rpc
    def CurrentUser(
        self, request: auth_pb2.CurrentUserRequest, context: grpc.ServicerContext
    ) -> auth_pb2.CurrentUserResponse:
        principal = self.user(context)
        assert principal.user_id is not None
        return auth_pb2.CurrentUserResponse(user=convert.user(self.deps.auth.user(principal.user_id)))
