"""Determined's startup hook (containers/startup_hook.py), run for real: what it exports reaches
the command, a failing hook stops the task with its code, and a context without one runs as is."""

from __future__ import annotations

import subprocess
from pathlib import Path

from services.agent.containers.startup_hook import STARTUP_HOOK, with_startup_hook

COMMAND = ["sh", "-c", 'echo "command sees ${HOOKED:-nothing}"; exit 3']


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=30, check=False)


def test_what_the_hook_exports_reaches_the_command_whose_code_is_the_tasks(tmp_path: Path) -> None:
    (tmp_path / STARTUP_HOOK).write_text('echo "hook ran"\nexport HOOKED=yes\n')
    done = _run(with_startup_hook(COMMAND, tmp_path), tmp_path)
    assert done.stdout.splitlines() == ["hook ran", "command sees yes"]
    assert done.returncode == 3  # the command's own exit code: it was exec'd


def test_a_failing_hook_ends_the_task_before_its_command(tmp_path: Path) -> None:
    (tmp_path / STARTUP_HOOK).write_text("echo installing\nfalse\necho never\n")
    done = _run(with_startup_hook(COMMAND, tmp_path), tmp_path)
    assert done.stdout.splitlines() == ["installing"]
    assert done.returncode == 1


def test_without_a_hook_the_command_is_unchanged(tmp_path: Path) -> None:
    assert with_startup_hook(COMMAND, tmp_path) == COMMAND
    (tmp_path / STARTUP_HOOK).mkdir()  # not a file: no hook
    assert with_startup_hook(COMMAND, tmp_path) == COMMAND
