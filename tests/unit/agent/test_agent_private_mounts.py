"""Binding a container's folders into a standby's mount namespace (private_mounts.bind_in_namespace):
into that namespace only, never into the agent's own. Called from a fresh interpreter, as the shim
calls it: this test process has gRPC loaded, whose fork handlers start threads in a forked child,
and a process with threads cannot enter a mount namespace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services.agent.runtime import private_mounts

REPO_ROOT = Path(__file__).resolve().parents[3]
BIND = """
import sys
from pathlib import Path
from services.agent.runtime.private_mounts import Bind, bind_in_namespace
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
    result, found, err = bound_in_a_probe(tmp_path, bind_in_namespace)
    assert result.returncode == 0, result.stderr
    assert found == "in the namespace", err
    assert not mounted(tmp_path / "target")  # the agent's own namespace is untouched


def bound_in_a_probe(
    tmp_path: Path, bind: Callable[[int, Path, Path], subprocess.CompletedProcess[str]]
) -> tuple[subprocess.CompletedProcess[str], str, str]:
    """`bind(pid, source, target)` run against a namespace probe (the source holds a marker): what
    it returned, and what the probe then found at the target (its stdout, stripped, and stderr)."""
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    (source / "marker").write_text("in the namespace")
    probe = namespace_probe(target)
    try:
        result = bind(probe.pid, source, target)
        out, err = probe.communicate(b"go\n", timeout=10)
    finally:
        probe.kill()
        probe.wait()
    return result, out.decode().strip(), err.decode()


def wait_until_shell(pid: int) -> None:
    """Once it is the shell, unshare has made the namespace and its propagation private (binding
    before that could propagate to this namespace: what the shim's hand-over waits out too)."""
    shell = os.path.realpath(shutil.which("sh") or "/bin/sh")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{pid}/exe") == shell:
                return
        except OSError:
            pass
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not become the shell")


def namespace_probe(target: Path) -> subprocess.Popen[bytes]:
    """A process in a mount namespace of its own that, told to, prints what it finds at `target`."""
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
    wait_until_shell(probe.pid)
    return probe


# A standby's shim: the binder is made while it waits (here: while a pipe it holds stays open, as
# the interpreter's stdin does), then told what to bind, or discarded.
BINDER = """
import json, os, sys, time
from pathlib import Path
from services.agent.runtime.private_mounts import Bind, NamespaceBinder
pid, source, target, how = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
held_r, held_w = os.pipe()
try:
    binder = NamespaceBinder(pid)
except OSError as exc:
    sys.exit(f"refused: {exc}")
time.sleep(0.2)  # the standby waits for its container
os.close(held_w)
held_open = os.read(held_r, 1) != b""  # the binder's child must not hold the write end
if how == "bind":
    binder.bind([Bind(Path(source), target)])
elif how == "fail":
    try:
        binder.bind([Bind(Path(source) / "missing", target)])
    except OSError as exc:
        print("failed:", exc)
else:
    binder.discard()
try:
    os.waitpid(-1, os.WNOHANG)
    children_left = True
except ChildProcessError:
    children_left = False
print(json.dumps({"held_open": held_open, "children_left": children_left}))
"""


def run_binder(pid: int, source: Path, target: Path, how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BINDER, str(pid), str(source), str(target), how],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_binder_made_ahead_binds_when_told_and_only_in_the_namespace(tmp_path: Path) -> None:
    result, found, err = bound_in_a_probe(
        tmp_path, lambda pid, source, target: run_binder(pid, source, target, "bind")
    )
    assert result.returncode == 0, result.stderr
    assert found == "in the namespace", err
    assert not mounted(tmp_path / "target")
    # Its child kept no descriptor of the shim's but its own, and was reaped.
    assert json.loads(result.stdout.splitlines()[-1]) == {"held_open": False, "children_left": False}


@pytest.mark.parametrize("how", ["discard", "fail"])
def test_a_discarded_or_failed_binder_binds_nothing_and_leaves_nothing(tmp_path: Path, how: str) -> None:
    result, found, _ = bound_in_a_probe(
        tmp_path, lambda pid, source, target: run_binder(pid, source, target, how)
    )
    assert result.returncode == 0, result.stderr
    assert found == ""
    if how == "fail":
        assert "mount --bind" in result.stdout and "missing" in result.stdout
    assert json.loads(result.stdout.splitlines()[-1]) == {"held_open": False, "children_left": False}


def test_a_binder_for_a_process_in_this_namespace_is_refused(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = run_binder(sleeper.pid, tmp_path, tmp_path / "target", "bind")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode != 0
    assert "refused: process" in result.stderr and "shares this process's mount namespace" in result.stderr
