"""Logging in and out, and opening a session with the right token.

Which token a session uses: $CAIRN_USER_TOKEN, else the cached token of the master's active user,
else (as Determined's clients do) a fresh login as $CAIRN_USER or "determined" with $CAIRN_PASSWORD
or the empty password, which works on a new cluster and is cached like any login.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import grpc

from cairn.api.v1 import auth_pb2
from cairn.client.address import MasterEndpoints
from cairn.client.errors import CairnError, from_rpc_error, one_line, rpc_status_code
from cairn.client.password import salt_and_hash
from cairn.client.session import Session
from cairn.client.token_store import TokenStore

DEFAULT_USER = "determined"
USER_TOKEN_ENV = "CAIRN_USER_TOKEN"
USER_ENV = "CAIRN_USER"
PASSWORD_ENV = "CAIRN_PASSWORD"

# Answers to a login attempt that mean "these credentials do not work", not "something is broken".
_REJECTED_LOGIN = (
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
)


class LoginFailed(CairnError):
    pass


def login(master: MasterEndpoints, username: str, password: str, store: TokenStore) -> auth_pb2.LoginResponse:
    """Log in with the client-side hashed password and cache the token as the active user."""
    request = auth_pb2.LoginRequest(username=username, password=salt_and_hash(password), is_hashed=True)
    with Session(master) as anonymous:
        try:
            response = anonymous.api.Login(request)
        except grpc.RpcError as exc:
            if rpc_status_code(exc) in _REJECTED_LOGIN:
                details = getattr(exc, "details", lambda: "")() or "invalid credentials"
                raise LoginFailed(f"login as {username!r} failed: {one_line(str(details))}")
            raise from_rpc_error(exc, master.target)
    store.save_login(master.target, response.user.username or username, response.token)
    return response


def logout(master: MasterEndpoints, store: TokenStore) -> str | None:
    """End the active user's session on the master (if it still answers) and forget the token.
    Returns the user logged out, or None when nobody was logged in."""
    active = store.active_token(master.target)
    if active is None:
        return None
    username, token = active
    with Session(master, token) as session:
        try:
            session.api.Logout(auth_pb2.LogoutRequest())
        except grpc.RpcError as exc:
            # An expired token or a stopped master must not keep the token in the cache.
            if rpc_status_code(exc) not in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE):
                raise from_rpc_error(exc, master.target)
    store.forget(master.target, username)
    return username


def _default_login(
    master: MasterEndpoints, store: TokenStore, env: Mapping[str, str]
) -> tuple[str, str] | None:
    username = env.get(USER_ENV) or DEFAULT_USER
    try:
        response = login(master, username, env.get(PASSWORD_ENV, ""), store)
    except LoginFailed:
        return None
    return response.user.username or username, response.token


def open_session(
    master: MasterEndpoints,
    store: TokenStore,
    env: Mapping[str, str] | None = None,
    *,
    auto_login: bool = True,
) -> Session:
    environ = os.environ if env is None else env
    env_token = environ.get(USER_TOKEN_ENV)
    if env_token:
        return Session(master, env_token)
    active = store.active_token(master.target)
    if active is None and auto_login:
        active = _default_login(master, store, environ)
    if active is None:
        return Session(master)
    username, token = active
    return Session(master, token, username=username)
