"""Determined's startup hook: a `startup-hook.sh` at the top of a task's context directory runs
before the task's command, in the same shell, so what it exports (a PATH, a package it installed,
an environment variable) is there for the command. Determined's entrypoint scripts source it with
bash under `set -e` for trials, commands, notebooks, shells and TensorBoards alike; a hook that
fails ends the task with its exit code, and the command never starts."""

from __future__ import annotations

from pathlib import Path

STARTUP_HOOK = "startup-hook.sh"

# `exec` keeps the command the task's own process (its signals, its exit code), as without a hook.
_RUN_HOOK_THEN_COMMAND = f'set -e; source ./{STARTUP_HOOK}; set +e; exec "$@"'


def with_startup_hook(argv: list[str], workdir: Path) -> list[str]:
    """`argv` preceded by the context's startup hook when it has one; `argv` itself otherwise."""
    if not (workdir / STARTUP_HOOK).is_file():
        return argv
    return ["bash", "-c", _RUN_HOOK_THEN_COMMAND, STARTUP_HOOK, *argv]
