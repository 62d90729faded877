"""The headers of a proxied exchange (task_proxy.py), each way: what the task's service is sent
of the caller's request, what the caller is sent of the service's answer, and the caller's session
token. Headers travel as the ASGI server gives them: (name, value) byte pairs, names lower-case."""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from email.message import Message
from typing import Any

from services.master.gateway.credentials import AUTH_COOKIE, auth_cookie

RawHeaders = list[tuple[bytes, bytes]]

# Headers about one hop, not the exchange (RFC 9110 §7.6.1): never relayed either way. Each side's
# own connection writes its own (the body's framing included).
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
    }
)
# The master's session: the task never sees the user's token (a service that wants a credential
# gets its own, `Authorization: token ...`).
_CREDENTIALS = frozenset({b"authorization"})
# What the websocket client library writes itself for its own handshake with the service.
WEBSOCKET_OWN = frozenset(
    {
        b"host",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
    }
)
# The public server writes these on every answer: the service's copies would repeat them.
SET_BY_THE_SERVER = frozenset({b"date", b"server"})


def header_message(raw: Iterable[tuple[bytes, bytes]]) -> Message:
    """The headers as an email Message (case-insensitive get, get_all), as credentials.py reads them."""
    message = Message()
    for name, value in raw:
        message[name.decode("latin-1")] = value.decode("latin-1")
    return message


def session_token(headers: Message) -> str | None:
    """The caller's session token: a Bearer Authorization header, else the WebUI's `auth` cookie."""
    authorization = (headers.get("Authorization") or "").strip()
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return auth_cookie(headers)


def _without_session_cookie(header: bytes) -> bytes:
    kept = [part.strip() for part in header.split(b";") if part.strip()]
    kept = [part for part in kept if part.split(b"=", 1)[0].strip() != AUTH_COOKIE.encode()]
    return b"; ".join(kept)


def upstream_headers(
    scope: MutableMapping[str, Any], *, credential: str | None, also_drop: frozenset[bytes] = frozenset()
) -> RawHeaders:
    """The caller's headers as the task's service gets them: without hop-by-hop headers, without
    the master's credentials, with X-Forwarded-* saying who asked (the service sees the master as
    its peer), and with the service's own credential where it has one. The Host stays the
    caller's: Jupyter checks it against the page's origin."""
    headers: RawHeaders = []
    forwarded_for: bytes | None = None
    for name, raw in scope["headers"]:
        lowered = name.lower()
        if lowered in HOP_BY_HOP or lowered in _CREDENTIALS or lowered in also_drop:
            continue
        if lowered == b"x-forwarded-for":
            forwarded_for = raw
            continue
        value = _without_session_cookie(raw) if lowered == b"cookie" else raw
        if value:
            headers.append((name, value))
    client = (scope.get("client") or ("",))[0].encode("latin-1")
    headers.append((b"x-forwarded-for", forwarded_for + b", " + client if forwarded_for else client))
    headers.append((b"x-forwarded-proto", scope.get("scheme", "http").replace("ws", "http").encode()))
    if credential:
        headers.append((b"authorization", b"token " + credential.encode("latin-1")))
    return headers


def downstream_headers(raw: Iterable[tuple[bytes, bytes]]) -> RawHeaders:
    """The service's answer headers as the caller gets them (repeated ones, Set-Cookie, kept)."""
    return [
        (name.lower(), value)
        for name, value in raw
        if name.lower() not in HOP_BY_HOP and name.lower() not in SET_BY_THE_SERVER
    ]
