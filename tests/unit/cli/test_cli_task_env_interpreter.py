"""scripts/task_python.sh: the task environment (.venv-task) is built on an interpreter the
unprivileged task user can run, so that a local cluster run as root isolates its trials."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "task_python.sh"
MINOR = f"{sys.version_info[0]}.{sys.version_info[1]}"
SYSTEM_PYTHON = Path(f"/usr/bin/python{MINOR}")

pytestmark = pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason=f"no system Python {MINOR}")


def pick(python: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), str(python)], capture_output=True, text=True, timeout=60, check=True)


def test_an_interpreter_in_an_owner_only_folder_gives_way_to_the_systems(tmp_path: Path) -> None:
    hidden = tmp_path / "home"  # as pyenv's /root/.pyenv: mode 0700
    hidden.mkdir(mode=0o700)
    hidden.chmod(0o700)
    python = hidden / f"python{MINOR}"
    shutil.copy2(SYSTEM_PYTHON, python)
    picked = pick(python)
    assert picked.stdout.strip() == str(SYSTEM_PYTHON.resolve())


def test_a_reachable_interpreter_is_kept_as_itself() -> None:
    assert pick(SYSTEM_PYTHON).stdout.strip() == str(SYSTEM_PYTHON.resolve())
    assert pick("python3").stdout.strip().startswith("/")  # a name is looked up, then resolved
