"""OpenID Connect's authorization-code flow with PKCE, the master as the client (oidc_routes.py
serves it): the provider's discovery document and keys, the logins under way, the code exchange
and the ID token's checks.

Libraries: authlib for the OAuth parts (PKCE's S256 challenge, the random state, nonce and
verifier, the authorization URL), joserfc (authlib's JOSE library) for the ID token: its signature
against the provider's JWKS and its claims (issuer, audience, expiry, nonce). The exchange is one
POST through httpx, whose answer is read up to a bound (a provider's answer is input too).

Logins under way are kept in this process (the master's: single sign-on needs one HTTP process,
configuration/settings.py refuses more), at most MAX_PENDING of them for at most PENDING_TTL_S
each; each is taken once (a second callback with the same state finds nothing) and is bound to the
browser that started it by a random cookie whose hash it holds, so a callback link sent to someone
else cannot log them in as another user.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from authlib.common.security import generate_token
from authlib.common.urls import add_params_to_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from services.master.configuration.oidc import OidcSettings
from services.master.domain.identity.sso_users import MAX_CLAIMED_GROUPS, MAX_GROUP_NAME, SsoIdentity

# Logins started and not finished: past this many the oldest is forgotten (its user starts again).
MAX_PENDING = 1024
PENDING_TTL_S = 600.0
# The provider's documents are read again after this (keys rotate).
PROVIDER_CACHE_S = 300.0
# The largest answer read from the provider (discovery, keys, the token endpoint's).
MAX_PROVIDER_ANSWER = 256 * 1024
PROVIDER_TIMEOUT_S = 10.0
# What a claim may hold before it is refused.
MAX_CLAIM_CHARS = 1024
# Signature algorithms taken for an ID token (never "none", never a symmetric one by default).
ID_TOKEN_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
CLOCK_LEEWAY_S = 60


class OidcError(Exception):
    """The login cannot go on; `status` is the HTTP answer, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Pending:
    nonce: str
    verifier: str
    browser_hash: str
    started: float
    # Where to hand the session over: "" the WebUI, "cli" Determined's `det auth sso`.
    relay: str
    redirect: str


@dataclass(frozen=True)
class Started:
    authorization_url: str
    browser_cookie: str


@dataclass
class _Provider:
    authorization_endpoint: str
    token_endpoint: str
    keys: KeySet
    fetched: float


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class OidcClient:
    def __init__(self, settings: OidcSettings, http: httpx.Client | None = None) -> None:
        self.settings = settings
        self._http = http or httpx.Client(timeout=PROVIDER_TIMEOUT_S, follow_redirects=False)
        self._pending: OrderedDict[str, Pending] = OrderedDict()
        self._lock = threading.Lock()
        self._provider: _Provider | None = None

    def close(self) -> None:
        self._http.close()

    # The provider's documents.

    def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            with self._http.stream("GET", url, headers={"Accept": "application/json"}) as answer:
                body = _read_bounded(answer, what)
                if answer.status_code != 200:
                    raise OidcError(502, f"the identity provider's {what} answered {answer.status_code}")
        except httpx.HTTPError as exc:
            raise OidcError(502, f"the identity provider's {what} is unreachable: {exc}") from None
        return _json_object(body, what)

    def provider(self, refresh: bool = False) -> _Provider:
        cached = self._provider
        if cached is not None and not refresh and time.monotonic() - cached.fetched < PROVIDER_CACHE_S:
            return cached
        issuer = self.settings.issuer
        meta = self._get_json(f"{issuer}/.well-known/openid-configuration", "discovery document")
        if meta.get("issuer") != issuer:
            raise OidcError(
                502, f"the discovery document names issuer {str(meta.get('issuer'))[:128]!r}, not {issuer!r}"
            )
        endpoints = {}
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            value = meta.get(key)
            if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https"):
                raise OidcError(502, f"the discovery document's {key} is missing or not an http(s) URL")
            endpoints[key] = value
        try:
            keys = KeySet.import_key_set(self._get_json(endpoints["jwks_uri"], "keys (jwks_uri)"))  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            raise OidcError(502, f"the identity provider's keys cannot be read: {exc}") from None
        self._provider = _Provider(
            endpoints["authorization_endpoint"], endpoints["token_endpoint"], keys, time.monotonic()
        )
        return self._provider

    # Starting a login.

    def start(self, relay: str, redirect: str) -> Started:
        provider = self.provider()
        state, nonce, verifier, browser = (generate_token(43) for _ in range(4))
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            while len(self._pending) >= MAX_PENDING:
                self._pending.popitem(last=False)
            self._pending[state] = Pending(nonce, verifier, _hash(browser), now, relay, redirect)
        scopes = ["openid", "profile", "email"]
        if not self.settings.exclude_groups_scope:
            scopes.append("groups")
        url = add_params_to_uri(
            provider.authorization_endpoint,
            [
                ("response_type", "code"),
                ("client_id", self.settings.client_id),
                ("redirect_uri", self.settings.redirect_uri),
                ("scope", " ".join(scopes)),
                ("state", state),
                ("nonce", nonce),
                ("code_challenge", create_s256_code_challenge(verifier)),
                ("code_challenge_method", "S256"),
            ],
        )
        return Started(url, browser)

    def _expire(self, now: float) -> None:
        while self._pending:
            state, oldest = next(iter(self._pending.items()))
            if now - oldest.started <= PENDING_TTL_S:
                return
            del self._pending[state]

    def take(self, state: str, browser_cookie: str | None) -> Pending:
        """The login `state` names, once; OidcError when unknown, expired or another browser's."""
        if not state or len(state) > 128:
            raise OidcError(400, "state: missing or not one this master issued")
        with self._lock:
            self._expire(time.monotonic())
            pending = self._pending.get(state)
            if pending is None:
                raise OidcError(
                    400, "state: unknown, already used or expired (logins must finish within 10 minutes)"
                )
            if browser_cookie is None or not hmac.compare_digest(_hash(browser_cookie), pending.browser_hash):
                raise OidcError(400, "state: this login was started in another browser")
            del self._pending[state]
        return pending

    # Finishing it.

    def exchange(self, code: str, pending: Pending) -> dict[str, Any]:
        """The verified ID token's claims for `code`."""
        return self.verify(self.redeem(code, pending), pending.nonce)

    def redeem(self, code: str, pending: Pending) -> str:
        """The ID token the provider gives for `code` and the login's verifier, not yet verified."""
        if not code or len(code) > 4096:
            raise OidcError(400, "code: missing or too long")
        provider = self.provider()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.settings.redirect_uri,
            "code_verifier": pending.verifier,
            "client_id": self.settings.client_id,
        }
        auth = (self.settings.client_id, self.settings.client_secret) if self.settings.client_secret else None
        try:
            with self._http.stream(
                "POST", provider.token_endpoint, data=form, auth=auth, headers={"Accept": "application/json"}
            ) as answer:
                body = _read_bounded(answer, "token endpoint")
                status = answer.status_code
        except httpx.HTTPError as exc:
            raise OidcError(502, f"the identity provider's token endpoint is unreachable: {exc}") from None
        token = _json_object(body, "token endpoint")
        if status != 200:
            error = str(token.get("error", ""))[:128]
            detail = str(token.get("error_description", ""))[:256]
            # invalid_grant: a code used twice, expired, or not issued for this verifier.
            raise OidcError(400, f"code: the identity provider refused it ({error}: {detail})")
        id_token = token.get("id_token")
        if not isinstance(id_token, str) or len(id_token) > 64 * 1024:
            raise OidcError(502, "the identity provider's answer has no ID token")
        return id_token

    def verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The ID token's claims once its signature, issuer, audience, expiry and nonce hold."""
        decoded = None
        for refresh in (False, True):  # a key not known yet: the provider may have rotated them
            try:
                decoded = jwt.decode(
                    id_token, self.provider(refresh).keys, algorithms=list(ID_TOKEN_ALGORITHMS)
                )
                break
            except JoseError as exc:
                if refresh:
                    raise OidcError(
                        401, f"id_token: refused ({exc.error}: {exc.description or ''})"
                    ) from None
            except ValueError as exc:
                raise OidcError(401, f"id_token: not a JWT ({exc})") from None
        assert decoded is not None
        registry = jwt.JWTClaimsRegistry(
            leeway=CLOCK_LEEWAY_S,
            iss={"essential": True, "value": self.settings.issuer},
            aud={"essential": True, "value": self.settings.client_id},
            exp={"essential": True},
            sub={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        try:
            registry.validate(decoded.claims)
        except JoseError as exc:
            raise OidcError(401, f"id_token: refused ({exc.error}: {exc.description or ''})") from None
        return dict(decoded.claims)

    def identity(self, claims: dict[str, Any]) -> SsoIdentity:
        """What the claims say of the user, each bounded; OidcError naming the claim otherwise."""
        s = self.settings
        username = claims.get(s.authentication_claim)
        if not isinstance(username, str) or not username:
            raise OidcError(403, f"id_token: no {s.authentication_claim!r} claim (oidc.authentication_claim)")
        if len(username) > MAX_CLAIM_CHARS:
            raise OidcError(
                403, f"id_token: the {s.authentication_claim!r} claim is over {MAX_CLAIM_CHARS} characters"
            )
        display = claims.get(s.display_name_claim, "") if s.display_name_claim else ""
        display = display[:255] if isinstance(display, str) else ""
        groups: tuple[str, ...] | None = None
        raw = claims.get(s.groups_claim_name)
        if raw is not None:
            if isinstance(raw, str):
                raw = [raw]
            if not isinstance(raw, list) or not all(isinstance(g, str) for g in raw):
                raise OidcError(403, f"id_token: the {s.groups_claim_name!r} claim is not a list of names")
            if len(raw) > MAX_CLAIMED_GROUPS:
                raise OidcError(
                    403,
                    f"id_token: the {s.groups_claim_name!r} claim lists {len(raw)} groups, "
                    f"over {MAX_CLAIMED_GROUPS}",
                )
            groups = tuple(g for g in raw if len(g) <= MAX_GROUP_NAME)
        return SsoIdentity(username=username, display_name=display, groups=groups)


def _read_bounded(answer: httpx.Response, what: str) -> bytes:
    parts: list[bytes] = []
    size = 0
    for chunk in answer.iter_bytes():
        size += len(chunk)
        if size > MAX_PROVIDER_ANSWER:
            raise OidcError(502, f"the identity provider's {what} answer is over {MAX_PROVIDER_ANSWER} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(body)
    except ValueError:
        raise OidcError(502, f"the identity provider's {what} answer is not JSON") from None
    if not isinstance(value, dict):
        raise OidcError(502, f"the identity provider's {what} answer is not a JSON object")
    return value
