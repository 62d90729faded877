"""The Python environments the process runtime runs tasks in, chosen by `environment.image`.

A Docker runtime runs a task in an image; the process runtime runs it on this machine, in one of
the Python environments (virtualenvs) the agent was given with `--task-env NAME=DIR`. A config's
`environment.image` that names one of them chooses it; any other image (a Determined config's
`determinedai/...` image, say) cannot run here and the task gets the default environment, with a
line in its log that says so. The agent's own interpreter is always offered as "agent".

Where the local cluster (`cairn cluster up`) finds `make install`'s task environment (.venv-task:
Cairn's client, Determined's 0.38.1 package, PyTorch, scikit-learn, TensorBoard), that is the
default, so a Determined script's `import determined` works on a default cluster.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

AGENT_ENV = "agent"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}$")


class PythonEnvError(ValueError):
    """A --task-env flag that names no usable environment; the message names the flag's value."""


@dataclass(frozen=True)
class PythonEnv:
    name: str
    # The environment's prefix (a virtualenv's folder, or the interpreter's sys.prefix).
    prefix: Path

    @property
    def bin_dir(self) -> Path:
        return self.prefix / "bin"


@dataclass(frozen=True)
class EnvChoice:
    env: PythonEnv
    # Why the image asked for was not used, for the task's log; empty when it was (or none was).
    note: str = ""


def agent_env() -> PythonEnv:
    return PythonEnv(AGENT_ENV, Path(sys.prefix))


def parse_task_env(text: str) -> PythonEnv:
    """`NAME=DIR` as given to --task-env; DIR must hold bin/python3."""
    name, sep, directory = text.partition("=")
    if not sep or not name or not directory:
        raise PythonEnvError(f"{text!r}: expected NAME=DIR (a virtualenv's folder)")
    if not _NAME.match(name):
        raise PythonEnvError(f"{text!r}: NAME may hold letters, digits and . _ : / @ - (at most 128)")
    prefix = Path(directory).expanduser().resolve()
    if not (prefix / "bin" / "python3").exists():
        raise PythonEnvError(f"{text!r}: {prefix / 'bin' / 'python3'} does not exist")
    return PythonEnv(name, prefix)


class PythonEnvs:
    def __init__(self, envs: Sequence[PythonEnv], default: str | None = None) -> None:
        self._envs: dict[str, PythonEnv] = {}
        for env in [*envs, agent_env()]:
            self._envs.setdefault(env.name, env)
        chosen = default or (envs[0].name if envs else AGENT_ENV)
        if chosen not in self._envs:
            raise PythonEnvError(
                f"default {chosen!r} is none of the task environments: {', '.join(self._envs)}"
            )
        self.default = self._envs[chosen]

    @property
    def names(self) -> list[str]:
        return list(self._envs)

    def choose(self, image: str) -> EnvChoice:
        if not image:
            return EnvChoice(self.default)
        found = self._envs.get(image)
        if found is not None:
            return EnvChoice(found)
        return EnvChoice(
            self.default,
            f"environment.image {image!r}: the process runtime runs no images; this task runs in the "
            f"agent's task environment {self.default.name!r} ({self.default.prefix}); "
            f"images this agent offers by name: {', '.join(self._envs)}",
        )
