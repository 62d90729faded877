"""Warm starts, the pure part: which commands a prepared interpreter may run, and which prepared
interpreter fits which command.

A prepared interpreter (see warm_interpreter.py) is a `python3` of the task's environment, started
ahead of time with the Core API and the experiment's `environment.preload_modules` imported. It can
stand in for a command only where running the command in it is what the command would have done
itself: a plain `python3 [-u] SCRIPT ARGS...` or `python3 [-u] -m MODULE ARGS...` (as a list, or as
a shell string with nothing a shell would interpret), whose `python3` is the very interpreter that
was prepared, with the same environment at interpreter start. Anything else (other programs, shell
syntax, interpreter options, commands wrapped for a task user or a private mount namespace) starts
cold, as before.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.agent.runtime.private_mounts import Bind, split_private_mounts
from services.agent.task_user import own_tmp, split_run_as

# Always imported: the Core API (Cairn's, and Determined's package where the environment has it is
# up to the experiment to declare: it is heavier).
CORE_MODULES = ("cairn.core",)
MAX_PRELOAD_MODULES = 64
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_PYTHON_NAME = re.compile(r"^python(3(\.[0-9]+)?)?$")
# Characters with which a shell string means more than a list of words (quotes are fine: shlex
# splits them as sh does, since $, ` and \ are refused).
_SHELL_SYNTAX = set("|&;<>()$`\\*?[]#~{}!\n\t")

# Variables that name one container or one allocation: the prepared interpreter starts without
# them (it does not know its trial yet) and gets them, with the rest, when it is assigned one.
_PER_TASK_PREFIXES = ("CAIRN_", "DET_")
_PER_TASK_NAMES = frozenset(
    {"C10D_PORT", "INTER_TRAIN_PROCESS_COMM_PORT_1", "INTER_TRAIN_PROCESS_COMM_PORT_2"}
)


@dataclass(frozen=True)
class PythonRun:
    """What a python command runs: a script or a module, with its arguments."""

    python: str  # the interpreter's path as PATH found it (a virtualenv's bin/python3 stays so)
    module: bool
    target: str
    args: tuple[str, ...]
    unbuffered: bool = False
    # Given as a shell string: sh would have exported PWD to the command.
    through_shell: bool = False

    def assignment(self, env: Mapping[str, str], cwd: str) -> dict[str, Any]:
        """The message a prepared interpreter runs it from (warm_interpreter.py reads it)."""
        return {
            "module": self.module,
            "target": self.target,
            "args": list(self.args),
            "unbuffered": self.unbuffered,
            "env": {**env, "PWD": cwd} if self.through_shell else dict(env),
            "cwd": cwd,
        }


@dataclass(frozen=True)
class WarmCommand:
    """A python run as the process runtime wraps it: run as the task user (a setpriv prefix), in a
    mount namespace with the container's own folders bound (private_mounts.py)."""

    run: PythonRun
    run_as: tuple[str, ...] = ()
    # Present: the command runs in a mount namespace of its own, these bound in it.
    binds: tuple[Bind, ...] = ()


@dataclass(frozen=True)
class WarmKey:
    """Prepared interpreters are interchangeable exactly when their keys are equal."""

    python: str
    modules: tuple[str, ...]
    start_env: frozenset[tuple[str, str]]
    run_as: tuple[str, ...] = ()
    bind_targets: tuple[str, ...] = ()


def warm_command(argv: Sequence[str], env: Mapping[str, str]) -> WarmCommand | None:
    """`argv` as the runtime made it, taken apart; None when a prepared interpreter cannot run it."""
    binds, inner = split_private_mounts(argv)
    run_as, inner = split_run_as(inner)
    run = python_run(inner, env)
    if run is None:
        return None
    return WarmCommand(run, tuple(run_as), tuple(binds))


def python_run(argv: Sequence[str], env: Mapping[str, str]) -> PythonRun | None:
    """The python run `argv` is, or None when a prepared interpreter could not run it faithfully."""
    words = list(argv)
    through_shell = len(words) == 3 and words[0] == "sh" and words[1] == "-c"
    if through_shell:
        if any(ch in _SHELL_SYNTAX for ch in words[2]):
            return None
        words = shlex.split(words[2])
    if not words or not _PYTHON_NAME.match(words[0]):
        return None
    python = shutil.which(words[0], path=env.get("PATH", ""))
    if python is None:
        return None
    rest = words[1:]
    unbuffered = False
    if rest and rest[0] == "-u":
        unbuffered, rest = True, rest[1:]
    if len(rest) >= 2 and rest[0] == "-m" and _MODULE_NAME.match(rest[1]):
        return PythonRun(python, True, rest[1], tuple(rest[2:]), unbuffered, through_shell)
    if rest and not rest[0].startswith("-"):
        return PythonRun(python, False, rest[0], tuple(rest[1:]), unbuffered, through_shell)
    return None


def start_environment(env: Mapping[str, str], cwd: str, home: str) -> dict[str, str]:
    """The environment a prepared interpreter starts with: the task's, less what names one task.
    A task user's HOME is the task's own (new, empty) folder: the standby's is its own folder
    `home`, as empty, which is all the interpreter's start reads of it (no ~/.local). So is a
    TMPDIR that is the task's own /tmp folder (where /tmp stays shared: preparation.py), or every
    container would be of a kind of its own and none would find a standby."""
    start = {
        k: v for k, v in env.items() if not k.startswith(_PER_TASK_PREFIXES) and k not in _PER_TASK_NAMES
    }
    if start.get("HOME") == cwd:
        start["HOME"] = home
    if start.get("TMPDIR") == own_tmp(cwd):
        start["TMPDIR"] = home
    return start


def warm_key(command: WarmCommand, modules: Sequence[str], env: Mapping[str, str], cwd: str) -> WarmKey:
    return WarmKey(
        command.run.python,
        tuple(modules),
        frozenset(start_environment(env, cwd, _OWN_FOLDER).items()),
        command.run_as,
        tuple(bind.target for bind in command.binds),
    )


# What a key says for "HOME is the task's own folder".
_OWN_FOLDER = "<own folder>"


class PreloadError(ValueError):
    """environment.preload_modules is not a list of module names; the message names the field."""


def preload_modules(container_config: str) -> tuple[str, ...]:
    """The experiment's declared heavy imports (`environment.preload_modules`, a Cairn extension)
    from the config part the master sends; () when none are declared (no warm starts)."""
    if not container_config:
        return ()
    try:
        config = json.loads(container_config)
    except ValueError as exc:
        raise PreloadError(f"start.spec.container_config: not JSON: {exc}") from exc
    environment = config.get("environment") if isinstance(config, dict) else None
    declared = environment.get("preload_modules") if isinstance(environment, dict) else None
    if declared is None:
        return ()
    field = "environment.preload_modules"
    if not isinstance(declared, list) or len(declared) > MAX_PRELOAD_MODULES:
        raise PreloadError(f"{field}: must be a list of at most {MAX_PRELOAD_MODULES} module names")
    for name in declared:
        if not isinstance(name, str) or not _MODULE_NAME.match(name):
            raise PreloadError(f"{field}: {name!r} is not a module name (such as torch or numpy.linalg)")
    return tuple(dict.fromkeys([*CORE_MODULES, *declared]))
