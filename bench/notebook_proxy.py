"""Notebooks through the master's proxy: how long `det notebook start` takes until JupyterLab
answers at /proxy/{task_id}/, and what the proxy costs against reaching the notebook's own port.

Start: each run calls the stock client's `det notebook start --no-browser` (zero slots, on a
cluster that is already up) and, from the moment it was invoked, polls the proxy every 20 ms with
the user's session until Jupyter's /api/status answers 200. `det` itself returns once the master
says the allocation is ready; both times are recorded. The notebook is killed before the next run.

Overhead: on one running notebook, interleaved in rounds, (a) an HTTP GET of Jupyter's /api/status
through the master and directly to the notebook's port on the agent, and (b) the round trip of a
one-line cell (`1`) over the kernel's websocket, through the master and directly. The direct path
is what a browser on the agent's machine would see; the difference is what the master's
authentication, authorisation lookup and relay add.

    .venv/bin/python -m bench.notebook_proxy [--starts 5] [--requests 200] [--cells 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import requests

from bench.cairn_cluster import Api, cairn_cluster
from tests.support.websocket import WebSocket

REPO = Path(__file__).resolve().parents[1]
DET = REPO / ".venv-task" / "bin" / "det"


def det(env: dict[str, str], *args: str, stdin: str = "") -> str:
    done = subprocess.run(
        [str(DET), "-u", "determined", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout


def proxied_status_ok(http: requests.Session, url: str) -> bool:
    try:
        return http.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


def one_start(env: dict[str, str], http: requests.Session, master: str) -> dict[str, float]:
    """`det notebook start` to the first 200 through the proxy; the notebook is killed after."""
    known = {n["id"] for n in json.loads(det(env, "notebook", "list", "--json"))}
    invoked = time.monotonic()
    started = subprocess.Popen(
        [str(DET), "-u", "determined", "notebook", "start", "--no-browser", "--config", "resources.slots=0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    task_id = ""
    answered = None
    deadline = invoked + 240
    while time.monotonic() < deadline and answered is None:
        if not task_id:
            # The new notebook's id, from the master's list (`det` prints it only at the end).
            ids = {n["id"] for n in http.get(f"{master}/api/v1/notebooks", timeout=10).json()["notebooks"]}
            task_id = next(iter(ids - known), "")
        if task_id and proxied_status_ok(http, f"{master}/proxy/{task_id}/api/status"):
            answered = time.monotonic() - invoked
            break
        time.sleep(0.02)
    started.communicate(timeout=240)
    det_returned = time.monotonic() - invoked
    if answered is None:
        raise RuntimeError("the notebook never answered through the proxy")
    det(env, "notebook", "kill", task_id)
    return {"det_start_s": det_returned, "answers_s": answered}


def direct_address(state_dir: Path, task_id: str) -> tuple[str, str]:
    """host:port the notebook listens on and the credential it takes, from the allocation's row
    (what the proxy reads)."""
    (database,) = [p for p in state_dir.rglob("*.db") if p.is_file()][:1] or [None]
    if database is None:
        raise RuntimeError(f"no SQLite database under {state_dir}")
    with sqlite3.connect(database) as db:
        row = db.execute(
            "SELECT proxy_address, token_hash FROM allocations"
            " WHERE task_id = ? AND proxy_address IS NOT NULL ORDER BY run_id DESC LIMIT 1",
            (task_id,),
        ).fetchone()
    if row is None:
        raise RuntimeError(f"notebook {task_id} has no proxy address")
    return str(row[0]), str(row[1])


def execute(ws: WebSocket, code: str) -> None:
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "bench"}
    ws.send_text(
        json.dumps(
            {
                "header": {**header, "session": uuid.uuid4().hex, "version": "5.3"},
                "parent_header": {},
                "metadata": {},
                "content": {"code": code, "silent": False, "store_history": False},
                "channel": "shell",
                "buffers": [],
            }
        )
    )
    while True:
        message = json.loads(ws.receive_text())
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if message["header"]["msg_type"] == "execute_result":
            return


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(1000 * statistics.median(ordered), 2),
        "p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 2),
    }


def overhead(
    env: dict[str, str], http: requests.Session, master: str, state_dir: Path, n_requests: int, n_cells: int
) -> dict[str, dict[str, float]]:
    det(env, "notebook", "start", "--no-browser", "--config", "resources.slots=0")
    (listed,) = [n for n in json.loads(det(env, "notebook", "list", "--json")) if n["state"] == "RUNNING"]
    task_id = listed["id"]
    base_path = f"/proxy/{task_id}/"
    # The notebook's own port answers only its credential (the proxy presents it): so does the
    # direct path here, as a browser on the agent's machine holding it would.
    direct, credential = direct_address(state_dir, task_id)
    routes = {"proxy": f"{master}{base_path}", "direct": f"http://{direct}{base_path}"}
    samples: dict[str, list[float]] = {f"http_{k}": [] for k in routes} | {f"ws_{k}": [] for k in routes}
    plain = requests.Session()  # the direct path has no session to check
    plain.headers["Authorization"] = f"token {credential}"
    for route in routes.values():  # warm both paths (connections, Jupyter's first answers)
        for client in (http, plain):
            client.get(f"{route}api/status", timeout=30)
    for _ in range(n_requests):
        for name, route in routes.items():
            client = http if name == "proxy" else plain
            began = time.perf_counter()
            assert client.get(f"{route}api/status", timeout=30).status_code == 200
            samples[f"http_{name}"].append(time.perf_counter() - began)

    http.get(f"{routes['proxy']}lab", timeout=60)  # Jupyter sets its XSRF cookie with the page
    xsrf = http.cookies.get("_xsrf") or ""
    kernel = http.post(
        f"{routes['proxy']}api/kernels", json={"name": "python3"}, headers={"X-XSRFToken": xsrf}, timeout=60
    ).json()["id"]
    master_url = urlparse(master)
    sockets = {
        "proxy": WebSocket.connect(
            master_url.hostname or "127.0.0.1",
            master_url.port or 80,
            f"{base_path}api/kernels/{kernel}/channels",
            {"Authorization": http.headers["Authorization"], "Cookie": f"_xsrf={xsrf}", "X-XSRFToken": xsrf},
            timeout=60,
        ),
        "direct": WebSocket.connect(
            direct.rpartition(":")[0],
            int(direct.rpartition(":")[2]),
            f"{base_path}api/kernels/{kernel}/channels",
            {"Cookie": f"_xsrf={xsrf}", "X-XSRFToken": xsrf, "Authorization": f"token {credential}"},
            timeout=60,
        ),
    }
    try:
        for ws in sockets.values():
            execute(ws, "1")
        for _ in range(n_cells):
            for name, ws in sockets.items():
                began = time.perf_counter()
                execute(ws, "1")
                samples[f"ws_{name}"].append(time.perf_counter() - began)
    finally:
        for ws in sockets.values():
            ws.close()
        det(env, "notebook", "kill", task_id)
    return {name: percentiles(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--cells", type=int, default=100)
    args = parser.parse_args()
    if not DET.exists():
        raise SystemExit("the stock Determined client is missing: run `make install` (it builds .venv-task)")
    with tempfile.TemporaryDirectory(prefix="cairn-bench-notebook-") as tmp:
        state_dir = Path(tmp) / "cluster"
        with cairn_cluster(state_dir, agents=1, slots=1) as api:
            master = api.http_url.rstrip("/")
            env = {**os.environ, "DET_MASTER": master, "HOME": str(Path(tmp) / "home")}
            det(env, "user", "login", "determined", stdin="\n")
            http = requests.Session()
            http.headers["Authorization"] = f"Bearer {session_token(api)}"
            starts = [one_start(env, http, master) for _ in range(args.starts)]
            result = {
                "load_average": os.getloadavg()[0],
                "start": {
                    key: {
                        "median_s": round(statistics.median(s[key] for s in starts), 2),
                        "max_s": round(max(s[key] for s in starts), 2),
                    }
                    for key in ("det_start_s", "answers_s")
                },
                "overhead": overhead(env, http, master, state_dir, args.requests, args.cells),
            }
    print(json.dumps(result, indent=2))


def session_token(api: Api) -> str:
    return str(api.metadata[0][1].removeprefix("Bearer "))


if __name__ == "__main__":
    main()
