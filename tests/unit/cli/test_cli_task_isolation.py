"""A local cluster's trials run as an unprivileged user when it can (root, an interpreter that user
can run), and the cluster says so either way; its state directory is owner-only."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.localcluster import plan, task_isolation
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.task_isolation import TaskIsolation, decide

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture
def shared_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="cairn-shared-", dir="/tmp"))
    base.chmod(0o755)
    monkeypatch.setattr(task_isolation, "SHARED_ROOT", base / "clusters")
    yield base / "clusters"
    shutil.rmtree(base, ignore_errors=True)


def decide_with(
    state_dir: Path, interpreter: str, **overrides: object
) -> tuple[TaskIsolation | None, list[str]]:
    said: list[str] = []
    arguments: dict[str, object] = {
        "state_dir": state_dir,
        "runtime": "process",
        "interpreter": interpreter,
        "requested_user": "nobody",
        "progress": said.append,
        **overrides,
    }
    return decide(**arguments), said  # type: ignore[arg-type]


def test_the_state_dir_is_owner_only(tmp_path: Path) -> None:
    paths = ClusterPaths(tmp_path / "cluster")
    paths.create()
    for folder in (paths.state_dir, paths.master_dir, paths.agents_dir, paths.logs_dir, paths.run_dir):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_docker_and_an_explicit_no_mean_no_task_user(tmp_path: Path) -> None:
    assert decide_with(tmp_path, SYSTEM_PYTHON, runtime="docker") == (None, [])
    assert decide_with(tmp_path, SYSTEM_PYTHON, requested_user="") == (None, [])


def test_without_root_the_cluster_says_trials_are_not_isolated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_isolation.os, "geteuid", lambda: 1000)
    isolation, said = decide_with(tmp_path, SYSTEM_PYTHON)
    assert isolation is None
    assert len(said) == 1 and said[0].startswith("warning: trials run as this user, not isolated")


@needs_root
def test_an_interpreter_the_task_user_cannot_reach_is_said_and_not_pretended(
    shared_root: Path, tmp_path: Path
) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    (hidden / "python3").symlink_to(shutil.which("python3") or SYSTEM_PYTHON)
    isolation, said = decide_with(tmp_path / "state", str(hidden / "python3"))
    assert isolation is None
    assert len(said) == 1 and "trials run as root, not isolated" in said[0] and str(hidden) in said[0]


@needs_root
@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason="no system Python")
def test_as_root_trials_get_the_task_user_and_folders_outside_the_state_dir(
    shared_root: Path, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    isolation, said = decide_with(state_dir, SYSTEM_PYTHON)
    assert isolation is not None
    nobody = pwd.getpwnam("nobody")
    assert isolation.user == "nobody"
    assert (
        isolation.tasks_root.parent == isolation.checkpoint_dir.parent == task_isolation.shared_dir(state_dir)
    )
    assert task_isolation.shared_dir(state_dir).parent == shared_root
    assert stat.S_IMODE(isolation.tasks_root.stat().st_mode) == 0o711
    checkpoints = isolation.checkpoint_dir.stat()
    assert (checkpoints.st_uid, stat.S_IMODE(checkpoints.st_mode)) == (nobody.pw_uid, 0o700)
    where = f"in {isolation.tasks_root}; default checkpoints in {isolation.checkpoint_dir}"
    assert said == [f"trials run as user 'nobody', {where}"]
    # The same folders on the next `up` of the same cluster.
    assert decide_with(state_dir, SYSTEM_PYTHON)[0] == isolation

    paths = ClusterPaths(state_dir)
    options = plan.ClusterOptions(state_dir=state_dir, task_env=None, isolation=isolation)
    agent = plan.agent(options, paths, 1, "127.0.0.1:8090").command
    assert agent[agent.index("--task-user") + 1] == "nobody"
    assert agent[agent.index("--task-root") + 1] == str(isolation.tasks_root / "agent-1")
    master = plan.master(options, paths, scheduler="s", searcher="s", checkpoint="c").command
    assert master[master.index("--checkpoint-dir") + 1] == str(isolation.checkpoint_dir)


def test_an_unknown_task_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_isolation.os, "geteuid", lambda: 0)
    with pytest.raises(task_isolation.TaskIsolationError, match="no user 'no-such-user-xyz'"):
        decide_with(tmp_path, SYSTEM_PYTHON, requested_user="no-such-user-xyz")


@needs_root
@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason="no system Python")
def test_a_task_env_under_tmp_is_said_to_share_tmp(shared_root: Path) -> None:
    """A clone under /tmp: its .venv-task would be hidden by a private /tmp, so the agent keeps
    /tmp shared for its trials and `cluster up` says so."""
    env = shared_root.parent / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    isolation, said = decide_with(shared_root.parent / "state", str(env / "bin" / "python3"))
    assert isolation is not None
    assert said[-1] == (
        f"note: the trials' Python environment ({env}) is under /tmp, so trials share this machine's "
        "/tmp (each one's TMPDIR is a folder of its own)"
    )
