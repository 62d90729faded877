"""What an HTTP request carries into gRPC metadata, and the session cookie.

- `Authorization` goes through as metadata `authorization`; without it, the `auth` cookie the
  WebUI holds becomes `authorization: Bearer <cookie>` (Determined's gateway does the same).
- Every `Grpc-Metadata-<Key>` header becomes metadata `<key>`, lowercased (Determined's harness
  sends its allocation token as `Grpc-Metadata-x-allocation-token: Bearer <token>`).
- `X-Forwarded-For` / `X-Forwarded-Host` tell the servicers who asked, as grpc-gateway does.
"""

from __future__ import annotations

import re
from email.message import Message as HeaderMessage
from http.cookies import CookieError, SimpleCookie

from services.common.request_decoding import REFUSED_REQUEST_KEY
from services.master.gateway.errors import bad_request

AUTH_COOKIE = "auth"
_GRPC_METADATA_PREFIX = "grpc-metadata-"
# gRPC metadata keys: lowercase letters, digits, '-', '_', '.'; values printable ASCII.
_METADATA_KEY = re.compile(r"[0-9a-z_.\-]+")
_METADATA_VALUE = re.compile(r"[\x20-\x7e]*")
# Keys gRPC itself owns, and the gateway's own mark of a request it refused
# (services/common/request_decoding.py); a client must not set them through headers.
_RESERVED_KEYS = frozenset(
    {"content-type", "te", "user-agent", "grpc-timeout", "grpc-encoding", REFUSED_REQUEST_KEY}
)


def auth_cookie(headers: HeaderMessage) -> str | None:
    raw = headers.get_all("Cookie") or []
    for header in raw:
        cookie = SimpleCookie()
        try:
            cookie.load(header)
        except CookieError:
            continue
        if AUTH_COOKIE in cookie and cookie[AUTH_COOKIE].value:
            return cookie[AUTH_COOKIE].value
    return None


def _checked(name: str, key: str, value: str) -> tuple[str, str]:
    if not _METADATA_KEY.fullmatch(key) or key.startswith("grpc-") or key in _RESERVED_KEYS:
        raise bad_request(f"header {name}: {key!r} cannot be sent as gRPC metadata")
    if key.endswith("-bin") or not _METADATA_VALUE.fullmatch(value):
        raise bad_request(f"header {name}: the value must be printable ASCII")
    return key, value


def forwarded_metadata(headers: HeaderMessage, client_host: str) -> list[tuple[str, str]]:
    """The gRPC metadata for a request with these headers; GatewayError on unusable headers."""
    metadata: list[tuple[str, str]] = []
    authorization = headers.get("Authorization")
    if authorization:
        metadata.append(_checked("Authorization", "authorization", authorization.strip()))
    else:
        cookie = auth_cookie(headers)
        if cookie:
            metadata.append(_checked(f"Cookie {AUTH_COOKIE}", "authorization", f"Bearer {cookie}"))
    for name, value in headers.items():
        lowered = name.lower()
        if lowered.startswith(_GRPC_METADATA_PREFIX) and len(lowered) > len(_GRPC_METADATA_PREFIX):
            metadata.append(_checked(name, lowered[len(_GRPC_METADATA_PREFIX) :], value.strip()))
    host = headers.get("Host")
    if host and _METADATA_VALUE.fullmatch(host):
        metadata.append(("x-forwarded-host", host))
    if client_host:
        forwarded = headers.get("X-Forwarded-For")
        chain = f"{forwarded}, {client_host}" if forwarded else client_host
        if _METADATA_VALUE.fullmatch(chain):
            metadata.append(("x-forwarded-for", chain))
    return metadata


def login_cookie(token: str) -> str:
    return f"{AUTH_COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax"


def logout_cookie() -> str:
    return f"{AUTH_COOKIE}=; Path=/; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; HttpOnly; SameSite=Lax"
