"""A TensorBoard task's entrypoint (`python -m cairn.tensorboard_server`): fetches its trials'
TensorBoard files from checkpoint storage into one folder per trial, serves TensorBoard on the
port and address the master gave the task under the master's proxy path, reports the allocation
ready once TensorBoard answers, and fetches what is new every FETCH_INTERVAL_S until it is killed.

Which trials, and each one's checkpoint storage, come from the master in the task's environment
(CAIRN_TENSORBOARD_SOURCES); where their files are in storage is Determined's layout
(cairn.tensorboard.layout) under the cluster's id (DET_CLUSTER_ID).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import cairn.task_environment as tenv
from cairn.notebook_server import LaunchError, report_ready
from cairn.storage.errors import StorageError
from cairn.tensorboard.fetcher import TensorboardFetcher, TrialSource

READY_POLL_S = 0.5
FETCH_INTERVAL_S = 5.0
# TensorBoard re-reads its log directory this often (seconds).
RELOAD_INTERVAL_S = 5


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise LaunchError(f"{name} is not set: TensorBoards run as tasks the master starts")
    return value


def base_path(task_id: str) -> str:
    return f"/proxy/{task_id}"


def trial_sources(env: Mapping[str, str]) -> list[TrialSource]:
    raw = _required(env, tenv.TENSORBOARD_SOURCES)
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise LaunchError(f"{tenv.TENSORBOARD_SOURCES}: not JSON ({exc})") from None
    if not isinstance(items, list):
        raise LaunchError(f"{tenv.TENSORBOARD_SOURCES}: must be a JSON list")
    sources = []
    for index, item in enumerate(items):
        try:
            sources.append(
                TrialSource(int(item["experiment_id"]), int(item["trial_id"]), dict(item["storage"]))
            )
        except (KeyError, TypeError, ValueError):
            raise LaunchError(f"{tenv.TENSORBOARD_SOURCES}[{index}]: not a trial with its storage") from None
    return sources


def tensorboard_command(env: Mapping[str, str], logdir: Path, python: str = sys.executable) -> list[str]:
    """TensorBoard's command line for this task: on the service address only, under the proxy path."""
    return [
        python,
        "-m",
        "tensorboard.main",
        f"--logdir={logdir}",
        f"--host={_required(env, tenv.SERVICE_HOST)}",
        f"--port={_required(env, tenv.SERVICE_PORT)}",
        f"--path_prefix={base_path(_required(env, tenv.TASK_ID))}",
        # The data server (load_fast) does not read runs whose files appear after it started.
        "--load_fast=false",
        f"--reload_interval={RELOAD_INTERVAL_S}",
    ]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _fetch(fetcher: TensorboardFetcher) -> None:
    try:
        count = fetcher.fetch_once()
    except (OSError, StorageError) as exc:
        # Storage that is briefly unreachable: the next pass tries again.
        print(f"tensorboard: fetching files failed: {exc}", file=sys.stderr, flush=True)
        return
    if count:
        print(f"tensorboard: fetched {count} new or grown file(s)", flush=True)


def main() -> int:
    env = os.environ
    try:
        sources = trial_sources(env)
        cluster_id = _required(env, tenv.CLUSTER_ID)
        task_id = _required(env, tenv.TASK_ID)
        address = f"{_required(env, tenv.SERVICE_HOST)}:{_required(env, tenv.SERVICE_PORT)}"
        url = f"http://{address}{base_path(task_id)}/"
    except LaunchError as exc:
        print(f"tensorboard: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cairn-tensorboard-") as logdir:
        fetcher = TensorboardFetcher(cluster_id, sources, Path(logdir))
        print(f"tensorboard: showing {len(sources)} trial(s)", flush=True)
        _fetch(fetcher)
        board = subprocess.Popen(tensorboard_command(env, Path(logdir)))
        # The agent stops a task with SIGTERM: TensorBoard is stopped with it.
        signal.signal(signal.SIGTERM, lambda *_: board.send_signal(signal.SIGTERM))
        while board.poll() is None and not _answers(url):
            time.sleep(READY_POLL_S)
        if board.poll() is None:
            report_ready(env)
            print(f"tensorboard: TensorBoard answers at {base_path(task_id)}/ through the master", flush=True)
        while board.poll() is None:
            try:
                board.wait(FETCH_INTERVAL_S)
            except subprocess.TimeoutExpired:
                _fetch(fetcher)
        return board.wait()


if __name__ == "__main__":
    sys.exit(main())
