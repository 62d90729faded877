"""The stock Determined client (determined==0.38.1 from PyPI) against a test cluster: its `det` CLI and
its Python SDK, from the task environment `make install` builds (.venv-task), driving the cluster
over REST as a Determined user's would."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import TestCluster

REPO = Path(__file__).resolve().parents[2]
TASK_ENV_BIN = REPO / ".venv-task" / "bin"
DET = TASK_ENV_BIN / "det"


def determined_env(cluster: TestCluster, home: Path) -> dict[str, str]:
    if not DET.exists():
        pytest.fail("the stock Determined client is missing: run `make install` (it builds .venv-task)")
    assert cluster.record is not None and cluster.record.master_http_url
    return {
        **os.environ,
        "DET_MASTER": cluster.record.master_http_url.rstrip("/"),
        "HOME": str(home),  # det keeps its token cache under the home directory
    }


def det_runner(env: dict[str, str], user: str = "determined") -> Callable[..., str]:
    """`det ARGS...` as `user` (logged in once, empty password): its stdout; a failing exit raises
    unless check=False (then stderr is appended). Tests still judge by end state: det exits 0
    after many failures."""

    def run(*args: str, stdin: str = "", check: bool = True) -> str:
        result = subprocess.run(
            [str(DET), "-u", user, *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"det {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result.stdout if check else result.stdout + result.stderr

    run("user", "login", user, stdin="\n")
    return run


def sdk_runner(env: dict[str, str], user: str = "determined") -> Callable[[str], Any]:
    """Run a Python snippet in the task environment with `client` (determined.experimental.client,
    logged in as `user`) and `bindings` in scope; the snippet sets `result`, returned decoded from
    JSON."""

    def run(code: str) -> Any:
        script = (
            "import json\n"
            "from determined.experimental import client\n"
            "from determined.common.api import bindings\n"
            f"client.login(user={user!r}, password='')\n"
            "result = None\n" + code + "\nprint('SDK-RESULT ' + json.dumps(result))\n"
        )
        done = subprocess.run(
            [str(TASK_ENV_BIN / "python"), "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"SDK snippet failed ({done.returncode}):\n{code}\n{done.stdout}\n{done.stderr}"
            )
        line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith("SDK-RESULT "))
        return json.loads(line.removeprefix("SDK-RESULT "))

    return run
