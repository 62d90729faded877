"""Binding a container's folders into a standby's mount namespace (private_mounts.bind_in_namespace):
into that namespace only, never into the agent's own. Called from a fresh interpreter, as the shim
calls it: this test process has gRPC loaded, whose fork handlers start threads in a forked child,
and a process with threads cannot enter a mount namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.agent.containers import private_mounts

REPO_ROOT = Path(__file__).resolve().parents[3]
BIND = """
import sys
from pathlib import Path
from services.agent.containers.private_mounts import Bind, bind_in_namespace
try:
    bind_in_namespace(int(sys.argv[1]), [Bind(Path(sys.argv[2]), sys.argv[3])])
except OSError as exc:
    sys.exit(str(exc))
"""


def bind_in_namespace(pid: int, source: Path, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BIND, str(pid), str(source), str(target)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


pytestmark = pytest.mark.skipif(not private_mounts.supported(), reason="needs root, unshare and mount")


def mounted(target: Path) -> bool:
    return any(line.split()[1] == str(target) for line in Path("/proc/self/mounts").read_text().splitlines())


def test_a_process_without_a_namespace_of_its_own_is_refused(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = bind_in_namespace(sleeper.pid, source, target)
        assert result.returncode != 0
        assert "shares this process's mount namespace" in result.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not mounted(target)


def test_binds_land_in_the_namespace_and_nowhere_else(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    (source / "marker").write_text("in the namespace")
    probe = subprocess.Popen(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            'read line; cat "$1"/marker',
            "sh",
            str(target),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Once it is the shell, unshare has made the namespace and its propagation private (binding
        # before that could propagate to this namespace: what the shim's hand-over waits out too).
        shell = os.path.realpath(shutil.which("sh") or "/bin/sh")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if os.readlink(f"/proc/{probe.pid}/exe") == shell:
                    break
            except OSError:
                pass
            time.sleep(0.005)
        result = bind_in_namespace(probe.pid, source, target)
        assert result.returncode == 0, result.stderr
        out, err = probe.communicate(b"go\n", timeout=10)
    finally:
        probe.kill()
        probe.wait()
    assert out.decode().strip() == "in the namespace", err
    assert not mounted(target)  # the agent's own namespace is untouched
