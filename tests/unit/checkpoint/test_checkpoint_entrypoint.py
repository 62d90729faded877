"""`python -m services.checkpoint` as a real process: ready file, serving, clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from google.protobuf import struct_pb2

from cairn.checkpoint.v1 import checkpoint_pb2 as pb
from cairn.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from services.common.channels import internal_channel

REPO_ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def test_entrypoint_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "CAIRN_CLUSTER_TOKEN": "tok",
    }
    log_path = tmp_path / "service.log"
    log_file = open(log_path, "wb")  # noqa: SIM115 - closed in finally
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.checkpoint",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--log-format",
            "json",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.exists():
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "no ready file"
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        assert info["pid"] == process.pid

        storage = struct_pb2.Struct()
        storage.update({"type": "directory", "container_path": str(tmp_path / "ckpts")})
        channel = internal_channel(f"127.0.0.1:{info['grpc_port']}", cluster_token="tok")
        answer = pb_grpc.CheckpointServiceStub(channel).CheckStorage(
            pb.CheckStorageRequest(storage=storage), timeout=10
        )
        channel.close()
        assert answer.ok, answer.error

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=STOP_TIMEOUT_S) == 0, log_path.read_text()
        assert '"event": "stopped"' in log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
        log_file.close()


def test_entrypoint_help_names_the_default_port() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.checkpoint", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "default 8093" in result.stdout
