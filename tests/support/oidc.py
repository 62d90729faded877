"""A real OpenID Connect provider for the tests (tests/support/oidc_provider/: panva's
oidc-provider on node, installed by `make install`), started on loopback, and a browser's walk
through its login with plain HTTP requests."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests

from tests.support.ports import free_port

PROVIDER_DIR = Path(__file__).resolve().parent / "oidc_provider"
CLIENT_ID = "cairn"
CLIENT_SECRET = "cairn-test-secret"


@dataclass
class TestProvider:
    issuer: str
    process: subprocess.Popen[str]

    __test__ = False


@contextmanager
def running_provider(
    redirect_uris: list[str], accounts: dict[str, dict[str, object]]
) -> Iterator[TestProvider]:
    node = shutil.which("node")
    if node is None or not (PROVIDER_DIR / "node_modules" / "oidc-provider").exists():
        pytest.fail("the test OpenID provider is not installed: run `make install` (needs node and npm)")
    port = free_port()
    config = {
        "port": port,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uris": redirect_uris,
        "accounts": accounts,
    }
    process = subprocess.Popen(
        [node, str(PROVIDER_DIR / "server.mjs")],
        cwd=PROVIDER_DIR,
        env={**os.environ, "OIDC_TEST_CONFIG": json.dumps(config)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    said: list[str] = []
    ready = threading.Event()

    def read() -> None:
        # Until it is ready (the library may warn first), then drained, so that a chatty
        # provider never blocks on a full pipe.
        assert process.stdout is not None
        for line in process.stdout:
            if not ready.is_set():
                said.append(line)
                if line.startswith("ready "):
                    ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(30):
        process.kill()
        raise RuntimeError(f"the OpenID provider did not start: {''.join(said)[-2000:]}")
    try:
        yield TestProvider(said[-1].split()[1], process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')


def walk_login(browser: requests.Session, start_url: str, login: str, stop_at: str) -> requests.Response:
    """A browser's walk from `start_url` through the provider's login and consent pages (its
    development interactions: any password) until a redirect to a URL starting with `stop_at`,
    which is returned unfollowed."""
    answer = browser.get(start_url, allow_redirects=False, timeout=30)
    for _ in range(20):
        if answer.is_redirect:
            target = urljoin(answer.url, answer.headers["Location"])
            if target.startswith(stop_at):
                return answer
            answer = browser.get(target, allow_redirects=False, timeout=30)
            continue
        assert answer.status_code == 200, (answer.status_code, answer.text[:500])
        action = _FORM_ACTION.search(answer.text)
        assert action is not None, answer.text[:500]
        form = {"login": login, "password": "any"} if 'name="login"' in answer.text else {}
        if 'name="prompt"' in answer.text:
            prompt = re.search(r'name="prompt" value="([^"]+)"', answer.text)
            form["prompt"] = prompt.group(1) if prompt else "login"
        answer = browser.post(
            urljoin(answer.url, action.group(1)), data=form, allow_redirects=False, timeout=30
        )
    raise AssertionError("the login did not come back to the master")


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
