"""Custom searcher tests: the TPE example (examples/custom_searcher/tpe) started as the real program
on a free port and driven over gRPC, as the master drives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from cairn.searcher.v1 import searcher_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[3]
PROGRAM = REPO_ROOT / "examples" / "custom_searcher" / "tpe" / "tpe_searcher.py"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


@dataclass
class SearcherProcess:
    process: subprocess.Popen[bytes]
    ready: dict[str, Any]
    log_path: Path
    channel: grpc.Channel
    stub: searcher_pb2_grpc.SearcherServiceStub

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.ready['grpc_port']}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> int:
        """SIGTERM, then the exit code (killed, and the test failed, if it does not stop in time)."""
        self.channel.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)
            raise AssertionError(f"the searcher ignored SIGTERM; its log:\n{self.log()}") from None


def start_searcher(folder: Path) -> SearcherProcess:
    """Start tpe_searcher.py on port 0 and wait for its ready file."""
    folder.mkdir(parents=True, exist_ok=True)
    ready_path, log_path = folder / "ready.json", folder / "searcher.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, str(PROGRAM), "--port", "0", "--ready-file", str(ready_path)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=folder,
            env=env,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready_path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
            raise AssertionError(f"the searcher did not become ready; its log:\n{log_path.read_text()}")
        time.sleep(0.05)
    ready = json.loads(ready_path.read_text())
    channel = grpc.insecure_channel(f"127.0.0.1:{ready['grpc_port']}")
    grpc.channel_ready_future(channel).result(timeout=START_TIMEOUT_S)
    return SearcherProcess(process, ready, log_path, channel, searcher_pb2_grpc.SearcherServiceStub(channel))


@pytest.fixture(scope="session")
def tpe_searcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearcherProcess]:
    """One searcher process shared by the tests that only need some server (each uses its own
    session ids)."""
    searcher = start_searcher(tmp_path_factory.mktemp("tpe-searcher"))
    try:
        yield searcher
    finally:
        searcher.terminate()


@pytest.fixture
def fresh_tpe_searcher(tmp_path: Path) -> Iterator[SearcherProcess]:
    """A searcher process of the test's own (for restarts and signals)."""
    searcher = start_searcher(tmp_path / "fresh-searcher")
    try:
        yield searcher
    finally:
        searcher.channel.close()
        if searcher.process.poll() is None:
            searcher.terminate()
