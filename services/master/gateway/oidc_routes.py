"""Single sign-on's two routes on the public port (oidc_flow.py holds the protocol):

  GET /oidc/sso        starts a login: redirects to the provider's authorization endpoint (code
                       flow, PKCE S256, state and nonce), with a short-lived cookie binding the
                       login to this browser. `?relayState=cli` is Determined's `det auth sso`:
                       its session goes to the CLI's local listener instead of the WebUI.
  GET /oidc/callback   the provider's answer: the state taken once, the code exchanged with its
                       verifier, the ID token verified; the user signed in (domain/identity/
                       sso_users.py), the session handed over as the WebUI's `auth` cookie (the
                       cookie a password login sets), then to the WebUI.

Every refusal is a 4xx whose body says why, and changes nothing. Both logins and refusals are
recorded in the audit trail as `OidcLogin`, as a password login is as `Login`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs

from services.common.logging import get_logger
from services.master.domain.audit import events
from services.master.domain.audit.events import AuditRecord, bounded
from services.master.domain.identity import sso_users
from services.master.domain.identity.auth import AuthService
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import DomainError, InvalidArgument, NotFound
from services.master.gateway.credentials import login_cookie
from services.master.gateway.http_answers import PlainRoute, Response
from services.master.gateway.http_request import HttpRequest
from services.master.gateway.oidc_flow import OidcClient, OidcError

log = get_logger(__name__)

SSO_PATH = "/oidc/sso"
CALLBACK_PATH = "/oidc/callback"
BROWSER_COOKIE = "cairn_oidc"
# Determined's `det auth sso` listens here for `?token=` (its cli/sso.py).
CLI_REDIRECT = "http://localhost:49176/"
AUDIT_METHOD = "OidcLogin"
MAX_QUERY = 8192
MAX_QUERY_FIELDS = 32

Record = Callable[[AuditRecord], None]
# A refusal's outcome in the audit trail, named as the gRPC calls' are.
_OUTCOMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    414: "INVALID_ARGUMENT",
}


def _query(req: HttpRequest) -> dict[str, str]:
    raw = req.path.partition("?")[2]
    if len(raw) > MAX_QUERY:
        raise OidcError(HTTPStatus.REQUEST_URI_TOO_LONG, f"the query is over {MAX_QUERY} characters")
    try:
        fields = parse_qs(raw, max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:
        raise OidcError(HTTPStatus.BAD_REQUEST, f"the query has over {MAX_QUERY_FIELDS} fields") from None
    return {k: v[0] for k, v in fields.items()}


def _browser_cookie(req: HttpRequest) -> str | None:
    for header in req.headers.get_all("Cookie") or []:
        cookie = SimpleCookie()
        try:
            cookie.load(header)
        except CookieError:
            continue
        if BROWSER_COOKIE in cookie:
            return cookie[BROWSER_COOKIE].value
    return None


def _safe_redirect(value: str) -> str:
    """Only a path on this site (as the WebUI's login page follows)."""
    if not value.startswith("/") or value.startswith("//") or "\\" in value or len(value) > 1024:
        return "/"
    return value


def _refusal(exc: OidcError) -> Response:
    return Response(exc.status, json.dumps({"error": exc.message}).encode())


def _redirect(location: str, cookie: str | None = None) -> Response:
    headers = {"Location": location, "Cache-Control": "no-store"}
    if cookie:
        headers["Set-Cookie"] = cookie
    return Response(HTTPStatus.FOUND, b"", "text/plain", headers)


def oidc_routes(
    client: OidcClient, ctx: MasterContext, auth: AuthService, record: Record | None = None
) -> list[PlainRoute]:
    settings = client.settings

    def audit(
        req: HttpRequest, started: float, outcome: str, error: str, user_id: int | None, name: str
    ) -> None:
        if record is None:
            return
        record(
            AuditRecord(
                at=time.time(),
                method=AUDIT_METHOD,
                outcome=outcome,
                actor=events.USER if user_id is not None else events.ANONYMOUS,
                user_id=user_id,
                username=bounded(name, events.MAX_USERNAME),
                targets=(("user", bounded(name, 255)),) if name else (),
                error=bounded(error, events.MAX_ERROR),
                address=bounded(str(req.client_address[0]), events.MAX_ADDRESS),
                transport="rest",
                duration_ms=(time.perf_counter() - started) * 1000,
            )
        )

    def sso(req: HttpRequest) -> Response | None:
        if req.path.partition("?")[0] != SSO_PATH or req.command not in ("GET", "HEAD"):
            return None
        try:
            query = _query(req)
            relay = "cli" if query.get("relayState") == "cli" else ""
            started = client.start(relay, _safe_redirect(query.get("redirect", "/")))
        except OidcError as exc:
            return _refusal(exc)
        cookie = (
            f"{BROWSER_COOKIE}={started.browser_cookie}; Path=/oidc/; Max-Age=600; HttpOnly; SameSite=Lax"
        )
        return _redirect(started.authorization_url, cookie)

    def callback(req: HttpRequest) -> Response | None:
        if req.path.partition("?")[0] != CALLBACK_PATH or req.command not in ("GET", "HEAD"):
            return None
        began = time.perf_counter()
        name = ""
        try:
            query = _query(req)
            if "error" in query:
                # The provider's own refusal (the user declined, a misregistered client): said as is.
                raise OidcError(
                    HTTPStatus.BAD_REQUEST,
                    f"the identity provider refused the login: {query['error'][:128]} "
                    f"{query.get('error_description', '')[:256]}".strip(),
                )
            pending = client.take(query.get("state", ""), _browser_cookie(req))
            claims = client.exchange(query.get("code", ""), pending)
            who = client.identity(claims)
            name = who.username
            login = sso_users.sign_in(ctx, auth, who, auto_provision=settings.auto_provision_users)
        except OidcError as exc:
            audit(req, began, _OUTCOMES.get(exc.status, "UNAVAILABLE"), exc.message, None, name)
            return _refusal(exc)
        except (NotFound, InvalidArgument) as exc:
            audit(req, began, "PERMISSION_DENIED", str(exc), None, name)
            return _refusal(OidcError(HTTPStatus.FORBIDDEN, str(exc)))
        except DomainError as exc:
            audit(req, began, type(exc).__name__, str(exc), None, name)
            return _refusal(OidcError(HTTPStatus.FORBIDDEN, str(exc)))
        audit(req, began, events.OK, "", login.user.id, login.user.username)
        log.info("single sign-on", user=login.user.username, created=login.created, groups=list(login.groups))
        if pending.relay == "cli":
            return _redirect(f"{CLI_REDIRECT}?token={login.token}")
        return _redirect(pending.redirect, login_cookie(login.token))

    return [sso, callback]
