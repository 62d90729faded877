"""A notebook task's entrypoint (`python -m cairn.notebook_server`): JupyterLab on the port and
address the master gave the task, under the master's proxy path, reported ready once it answers.

Jupyter's own token and password are off: nothing reaches it but the master's proxy, which checks
the user's session on every request (so no token is left in a browser's history), and it listens
only on the address the master reaches this agent at. Jupyter's XSRF and origin checks stay on.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import datetime

import cairn.task_environment as tenv

READY_POLL_S = 0.5
# How often a notebook with an idle_timeout tells the master whether it is idle.
IDLE_REPORT_S = 5.0


class LaunchError(Exception):
    """The task's environment lacks what a notebook needs."""


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise LaunchError(f"{name} is not set: notebooks run as tasks the master starts")
    return value


def base_url(task_id: str) -> str:
    return f"/proxy/{task_id}/"


def jupyter_command(env: Mapping[str, str], python: str = sys.executable) -> list[str]:
    """JupyterLab's command line for this task."""
    host = _required(env, tenv.SERVICE_HOST)
    port = _required(env, tenv.SERVICE_PORT)
    return [
        python,
        "-m",
        "jupyterlab",
        f"--ServerApp.ip={host}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",  # the master proxies to this port and no other
        "--ServerApp.open_browser=False",
        f"--ServerApp.base_url={base_url(_required(env, tenv.TASK_ID))}",
        # The token comes in JUPYTER_TOKEN (jupyter_environment), never on a command line others
        # can read.
        "--ServerApp.password=",
        # Requests arrive with the master's Host header, which may be a name, not an address.
        "--ServerApp.allow_remote_access=True",
        "--ServerApp.allow_root=True",
        f"--ServerApp.root_dir={os.getcwd()}",
        # No calls out to PyPI or jupyter.org from a cluster's slots.
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=None",
    ]


def service_credential(env: Mapping[str, str]) -> str:
    """Jupyter's token: the hash of the allocation's token, which the master's proxy reads from the
    allocation's row and presents on every request it relays (the notebook kind's
    service_credential). So the user never sees it (no token in a URL), and whatever reaches the
    notebook's port on the agent without the proxy (another task on the machine) is refused."""
    return hashlib.sha256(_required(env, tenv.ALLOCATION_TOKEN).encode()).hexdigest()


def jupyter_environment(env: Mapping[str, str]) -> dict[str, str]:
    return {**env, "JUPYTER_TOKEN": service_credential(env)}


def _request(url: str, credential: str) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"Authorization": f"token {credential}"})


def _answers(url: str, credential: str) -> bool:
    try:
        with urllib.request.urlopen(_request(url, credential), timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _allocation_headers(env: Mapping[str, str]) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Grpc-Metadata-x-allocation-token": f"Bearer {_required(env, tenv.ALLOCATION_TOKEN)}",
    }


def report_ready(env: Mapping[str, str]) -> None:
    """AllocationReady with the allocation's own token: the master records the proxy address."""
    master = _required(env, "DET_MASTER").rstrip("/")
    allocation_id = _required(env, tenv.ALLOCATION_ID)
    request = urllib.request.Request(
        f"{master}/api/v1/allocations/{allocation_id}/ready",
        data=b"{}",
        method="POST",
        headers=_allocation_headers(env),
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


def _get_json(url: str, credential: str) -> object:
    with urllib.request.urlopen(_request(url, credential), timeout=5) as response:
        return json.loads(response.read())


def is_idle(idle_type: str, status: dict[str, object], terminals: list[object], now: float) -> bool:
    """Determined's notebook_idle_type: "kernels_or_terminals" (no kernel or terminal runs),
    "kernel_connections" (no browser is connected to a kernel), "activity" (nothing happened, by
    Jupyter's own last_activity, for two report intervals)."""
    if idle_type == "kernel_connections":
        return status.get("connections") == 0
    if idle_type == "activity":
        last = str(status.get("last_activity") or "")
        try:
            seen = datetime.fromisoformat(last.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return False
        return now - seen > 2 * IDLE_REPORT_S
    return status.get("kernels") == 0 and not terminals


def report_idle(env: Mapping[str, str], idle: bool) -> None:
    master = _required(env, "DET_MASTER").rstrip("/")
    request = urllib.request.Request(
        f"{master}/api/v1/notebooks/{_required(env, tenv.TASK_ID)}/report_idle",
        data=json.dumps({"idle": idle}).encode(),
        method="PUT",
        headers=_allocation_headers(env),
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


def watch_idleness(env: Mapping[str, str], jupyter: subprocess.Popen[bytes], api: str) -> None:
    """Report idleness until Jupyter exits; a failed report (a master restarting) is retried at
    the next interval."""
    idle_type = env[tenv.NOTEBOOK_IDLE_TYPE]
    while True:
        try:
            jupyter.wait(IDLE_REPORT_S)
            return
        except subprocess.TimeoutExpired:
            pass
        try:
            credential = service_credential(env)
            status = _get_json(f"{api}status", credential)
            terminals = _get_json(f"{api}terminals", credential)
            idle = is_idle(
                idle_type,
                status if isinstance(status, dict) else {},
                terminals if isinstance(terminals, list) else [],
                time.time(),
            )
            report_idle(env, idle)
        except (OSError, ValueError) as exc:
            print(f"notebook: could not report idleness: {exc}", file=sys.stderr, flush=True)


def main() -> int:
    env = os.environ
    try:
        command = jupyter_command(env)
        task_id = env[tenv.TASK_ID]
        api = f"http://{env[tenv.SERVICE_HOST]}:{env[tenv.SERVICE_PORT]}{base_url(task_id)}api/"
        credential = service_credential(env)
    except LaunchError as exc:
        print(f"notebook: {exc}", file=sys.stderr)
        return 2
    jupyter = subprocess.Popen(command, env=jupyter_environment(env))
    # The agent stops a task with SIGTERM: Jupyter shuts its kernels down on it.
    signal.signal(signal.SIGTERM, lambda *_: jupyter.send_signal(signal.SIGTERM))
    while jupyter.poll() is None and not _answers(f"{api}status", credential):
        time.sleep(READY_POLL_S)
    if jupyter.poll() is None:
        report_ready(env)
        print(f"notebook: JupyterLab answers at {base_url(task_id)} through the master", flush=True)
        if env.get(tenv.NOTEBOOK_IDLE_TYPE):
            watch_idleness(env, jupyter, api)
    return jupyter.wait()


if __name__ == "__main__":
    sys.exit(main())
