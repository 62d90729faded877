"""Single sign-on with OpenID Connect (issue 44): a real provider (panva's oidc-provider, on node,
tests/support/oidc.py) on loopback and a cluster whose config file's `oidc:` block names it. A
browser's walk is plain HTTP requests: GET /oidc/sso, the provider's login and consent pages, the
callback. Checked by the state left behind: the user made on first login with the name from its
email claim, its membership of the Cairn group its groups claim names, the session working with
the stock `det`, the same user on a second login; and refusals (a wrong or replayed state, a
replayed code, another browser's callback, a tampered ID token, an unknown user without
auto-provisioning), each a 4xx that says why and creates nothing."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from cairn.client.password import salt_and_hash
from services.master.configuration.oidc import parse_oidc
from services.master.gateway.oidc_flow import OidcClient, OidcError
from tests.e2e.determined_client import DET, det_runner, determined_env
from tests.e2e.test_e2e_rest import TIMEOUT, rest_login
from tests.support.cluster import TestCluster, running_cluster
from tests.support.oidc import CLIENT_ID, CLIENT_SECRET, TestProvider, query_of, running_provider, walk_login
from tests.support.polling import wait_for
from tests.support.ports import free_port

ALICE = "alice@example.com"
ACCOUNTS: dict[str, dict[str, object]] = {
    "alice": {"email": ALICE, "name": "Alice Liddell", "groups": ["ml-team", "not-in-cairn"]},
    "bob": {"email": "bob@example.com", "name": "Bob", "groups": []},
}


@dataclass
class SsoCluster:
    cluster: TestCluster
    provider: TestProvider
    base: str

    @property
    def callback(self) -> str:
        return f"{self.base}/oidc/callback"


def _config(path: Path, issuer: str, base: str, auto_provision: bool) -> Path:
    path.write_text(
        "oidc:\n"
        "  enabled: true\n"
        "  provider: TestIdP\n"
        f"  idp_sso_url: {issuer}\n"
        f"  idp_recipient_url: {base}\n"
        f"  client_id: {CLIENT_ID}\n"
        f"  client_secret: {CLIENT_SECRET}\n"
        "  authentication_claim: email\n"
        f"  auto_provision_users: {'true' if auto_provision else 'false'}\n"
        "  groups_claim_name: groups\n"
        "  display_name_attribute_name: name\n"
        # Determined's SCIM key: accepted, and without effect on OIDC login.
        "  scim_authentication_attribute: userName\n"
    )
    return path


@contextmanager
def _sso_cluster(tmp_path: Path, db_url: str | None, auto_provision: bool) -> Iterator[SsoCluster]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running_provider([f"{base}/oidc/callback"], ACCOUNTS) as provider:
        config = _config(tmp_path / "master.yaml", provider.issuer, base, auto_provision)
        env = {"CAIRN_MASTER_CONFIG": str(config)}
        with running_cluster(
            tmp_path / "cluster", db_url, agents=0, extra_env=env, http_port=port
        ) as cluster:
            yield SsoCluster(cluster, provider, base)


@pytest.fixture
def sso(db_url: str | None, tmp_path: Path) -> Iterator[SsoCluster]:
    with _sso_cluster(tmp_path, db_url, auto_provision=True) as c:
        yield c


def _login(
    sso: SsoCluster, browser: requests.Session, account: str, start: str = "/oidc/sso"
) -> requests.Response:
    """A browser's whole walk: the answer of the master's callback (not followed)."""
    back = walk_login(browser, f"{sso.base}{start}", account, sso.callback)
    return browser.get(back.headers["Location"], allow_redirects=False, timeout=TIMEOUT)


def _users(admin: requests.Session, base: str) -> list[dict[str, Any]]:
    answer = admin.get(f"{base}/api/v1/users", params={"limit": 1000}, timeout=TIMEOUT)
    answer.raise_for_status()
    return list(answer.json()["users"])


def _admin(base: str) -> requests.Session:
    admin = requests.Session()
    token = rest_login(base, admin, "admin").json()["token"]
    admin.headers["Authorization"] = f"Bearer {token}"
    return admin


def _whoami(env: dict[str, str], token: str, home: Path) -> str:
    """`det user whoami` with the session as DET_USER_TOKEN (a home with no login of its own)."""
    result = subprocess.run(
        [str(DET), "user", "whoami"],
        env={**env, "DET_USER": ALICE, "DET_USER_TOKEN": token, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return result.stdout + result.stderr


def _refused(answer: requests.Response, status: int, says: str) -> None:
    assert answer.status_code == status, (answer.status_code, answer.text)
    assert says in answer.json()["error"], answer.text
    assert "auth=" not in answer.headers.get("Set-Cookie", "")


def test_first_login_makes_the_user_with_its_groups_and_a_session_det_takes(
    sso: SsoCluster, tmp_path: Path
) -> None:
    env = determined_env(sso.cluster, tmp_path / "home")
    det_admin = det_runner(env, "admin")
    det_admin("user-group", "create", "ml-team")
    # The stock client sees the provider, as Determined lists it.
    assert "TestIdP" in det_admin("auth", "list-providers")
    info = requests.get(f"{sso.base}/info", timeout=TIMEOUT).json()
    assert info["sso_providers"] == [
        {"name": "TestIdP", "sso_url": f"{sso.base}/oidc/sso", "type": "OIDC", "always_redirect": False}
    ]
    admin = _admin(sso.base)
    before = len(_users(admin, sso.base))

    browser = requests.Session()
    answer = _login(sso, browser, "alice", "/oidc/sso?redirect=/experiments")
    assert answer.status_code == 302, answer.text
    assert answer.headers["Location"] == "/experiments"
    token = browser.cookies.get("auth")
    assert token
    # The session is a Cairn session: the WebUI's cookie, the stock client's token.
    assert ALICE in _whoami(env, token, tmp_path / "sso-home")
    me = browser.get(f"{sso.base}/api/v1/me", timeout=TIMEOUT).json()["user"]
    assert me["username"] == ALICE and me["displayName"] == "Alice Liddell" and not me["admin"]
    group = json.loads(det_admin("user-group", "describe", "ml-team", "--json"))
    assert [u["username"] for u in group["users"]] == [ALICE]
    # Groups are never made from a claim.
    assert "not-in-cairn" not in det_admin("user-group", "list")
    users = _users(admin, sso.base)
    assert len(users) == before + 1

    # A second login, in another browser: the same user, a new session.
    again = requests.Session()
    assert _login(sso, again, "alice").status_code == 302
    second = again.cookies.get("auth")
    assert second and second != token
    assert again.get(f"{sso.base}/api/v1/me", timeout=TIMEOUT).json()["user"]["id"] == me["id"]
    assert len(_users(admin, sso.base)) == before + 1

    # A remote user has no password: password login refuses it.
    password_login = requests.post(
        f"{sso.base}/api/v1/auth/login",
        json={"username": ALICE, "password": salt_and_hash(""), "isHashed": True},
        timeout=TIMEOUT,
    )
    assert password_login.status_code == 401, password_login.text

    # Determined's `det auth login` (relayState=cli): the session goes to the CLI's listener.
    cli = requests.Session()
    relayed = _login(sso, cli, "alice", "/oidc/sso?relayState=cli")
    location = relayed.headers["Location"]
    assert location.startswith("http://localhost:49176/?token=")
    assert ALICE in _whoami(env, query_of(location)["token"], tmp_path / "sso-home")

    # Logins are in the audit trail, as password logins are.
    def recorded() -> list[dict[str, Any]] | None:
        events = admin.get(f"{sso.base}/api/v1/audit", params={"method": "OidcLogin"}, timeout=TIMEOUT)
        found = [e for e in events.json().get("events", []) if e.get("outcome") == "OK"]
        return found if len(found) >= 3 else None

    events = wait_for(recorded, timeout=30, what="the single sign-on logins recorded")
    assert all(e["username"] == ALICE for e in events), events


def test_bad_callbacks_are_refused_and_create_nothing(sso: SsoCluster) -> None:
    admin = _admin(sso.base)
    before = _users(admin, sso.base)

    # A state this master never issued.
    browser = requests.Session()
    back = walk_login(browser, f"{sso.base}/oidc/sso", "bob", sso.callback)
    callback = back.headers["Location"]
    query = query_of(callback)
    forged = browser.get(
        sso.callback,
        params={"state": "x" * 43, "code": query["code"]},
        allow_redirects=False,
        timeout=TIMEOUT,
    )
    _refused(forged, 400, "state: unknown")

    # Another browser bringing the callback link: refused, and the login is not spent by it.
    stranger = requests.Session()
    _refused(stranger.get(callback, allow_redirects=False, timeout=TIMEOUT), 400, "another browser")
    assert _users(admin, sso.base) == before

    # The real callback logs bob in; the same callback again is a replayed state.
    assert browser.get(callback, allow_redirects=False, timeout=TIMEOUT).status_code == 302
    _refused(browser.get(callback, allow_redirects=False, timeout=TIMEOUT), 400, "already used")
    after_bob = _users(admin, sso.base)
    assert len(after_bob) == len(before) + 1

    # A spent code under a fresh state of this browser: the provider refuses it, so does Cairn.
    fresh = walk_login(browser, f"{sso.base}/oidc/sso", "bob", sso.callback)
    fresh_state = query_of(fresh.headers["Location"])["state"]
    replayed = browser.get(
        sso.callback,
        params={"state": fresh_state, "code": query["code"]},
        allow_redirects=False,
        timeout=TIMEOUT,
    )
    _refused(replayed, 400, "code: the identity provider refused it (invalid_grant")

    # The provider's own refusal is passed on.
    _refused(
        browser.get(sso.callback, params={"error": "access_denied"}, allow_redirects=False, timeout=TIMEOUT),
        400,
        "access_denied",
    )
    # Hostile queries: too many fields, too long.
    crowded = "&".join(f"f{i}=x" for i in range(100))
    _refused(browser.get(f"{sso.callback}?{crowded}", allow_redirects=False, timeout=TIMEOUT), 400, "fields")
    _refused(browser.get(f"{sso.base}/oidc/sso?redirect={'x' * 9000}", timeout=TIMEOUT), 414, "over 8192")
    assert _users(admin, sso.base) == after_bob


def _tampered(id_token: str) -> str:
    header, payload, signature = id_token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["email"] = "admin"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def test_an_id_token_is_verified_against_the_providers_keys(sso: SsoCluster) -> None:
    """The master's flow (gateway/oidc_flow.py) in this process, against the same provider: a
    genuine ID token passes; the same token with a changed claim, with another login's nonce, or
    for another client is refused."""
    settings = parse_oidc(
        {
            "enabled": True,
            "idp_sso_url": sso.provider.issuer,
            "idp_recipient_url": sso.base,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
        }
    )
    assert settings is not None
    client = OidcClient(settings)
    started = client.start("", "/")
    back = walk_login(requests.Session(), started.authorization_url, "alice", sso.callback)
    query = query_of(back.headers["Location"])
    pending = client.take(query["state"], started.browser_cookie)
    id_token = client.redeem(query["code"], pending)
    assert client.verify(id_token, pending.nonce)["email"] == ALICE
    with pytest.raises(OidcError) as tampered:
        client.verify(_tampered(id_token), pending.nonce)
    assert tampered.value.status == 401 and "id_token: refused" in tampered.value.message
    with pytest.raises(OidcError) as wrong_nonce:
        client.verify(id_token, "another-login")
    assert "nonce" in wrong_nonce.value.message
    other = OidcClient(parse_oidc({**_block(sso), "client_id": "another-client"}))  # type: ignore[arg-type]
    with pytest.raises(OidcError) as wrong_audience:
        other.verify(id_token, pending.nonce)
    assert "aud" in wrong_audience.value.message


def _block(sso: SsoCluster) -> dict[str, Any]:
    return {
        "enabled": True,
        "idp_sso_url": sso.provider.issuer,
        "idp_recipient_url": sso.base,
        "client_id": CLIENT_ID,
    }


def test_without_auto_provisioning_an_unknown_user_is_refused(tmp_path: Path) -> None:
    with _sso_cluster(tmp_path, None, auto_provision=False) as sso:
        admin = _admin(sso.base)
        before = _users(admin, sso.base)
        browser = requests.Session()
        refused = _login(sso, browser, "alice")
        _refused(refused, 403, "auto_provision_users")
        assert _users(admin, sso.base) == before
        # An admin makes the remote user ahead of its first login: then it signs in.
        det_admin = det_runner(determined_env(sso.cluster, tmp_path / "home"), "admin")
        det_admin("user", "create", "--remote", ALICE)
        remote = [u for u in _users(admin, sso.base) if u["username"] == ALICE]
        assert len(remote) == 1 and remote[0]["remote"] is True
        assert _login(sso, requests.Session(), "alice").status_code == 302


def test_the_webui_login_page_signs_in_through_the_provider(sso: SsoCluster, tmp_path: Path) -> None:
    """Chromium on the WebUI: the login page offers the provider; its button goes through the
    provider's login and consent pages and back, signed in as the provider's user."""
    from tests.e2e.test_e2e_webui import browser_on, expect

    for b in browser_on(sso.cluster, tmp_path):
        page = b.page
        b.goto("/experiments")
        page.wait_for_url(re.compile(r"/login"))
        page.get_by_role("link", name="Sign in with TestIdP").click()
        page.wait_for_url(re.compile(re.escape(sso.provider.issuer)))
        page.locator("input[name=login]").fill("alice")
        page.locator("input[name=password]").fill("any")
        page.locator("button[type=submit]").click()
        page.locator("button[type=submit]").click()  # the consent page: Continue
        page.wait_for_url(re.compile(re.escape(sso.base) + r"/experiments"))
        expect(page.get_by_label("Signed in as")).to_have_text("Alice Liddell")
        b.shot("sso-signed-in")
        assert not b.page_errors, b.page_errors
