"""The files and signals through which the agent and a container's supervisor (the shim) talk.

Everything lives in the container's bookkeeping folder, so a restarted agent finds it again:

    <container dir>/.cairn-agent/
        state.json    the agent's record of the container (pids, state, acknowledged seq)
        launch.json   what the shim runs: argv, environment, cwd, first seq
        shim.json     written by the shim once it can take signals: its pid and start time
        child.json    written by the shim once the command runs: the command's pid = pgid
        events.jsonl  the container's events (state changes and log lines), one JSON per line
        kill.json     the agent's kill request (grace seconds), read by the shim on KILL_SIGNAL
        exit.json     written by the shim when the command has ended and every line is written
        shim.log      the shim's own stderr, for debugging

Writers: events.jsonl has exactly one writer at a time: the agent before the shim starts and
after it exits, the shim in between. Every other file is written atomically (rename).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The bookkeeping folder inside a container's working directory. A model definition may not
# contain it (the unpacker refuses), so user files never collide with it.
META_DIR_NAME = ".cairn-agent"

# SIGTERM and SIGINT are forwarded to the command's process group; KILL_SIGNAL asks for a kill
# with the grace period written in kill.json.
KILL_SIGNAL = signal.SIGUSR1
CONTROL_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, KILL_SIGNAL})


@dataclass(frozen=True)
class ContainerPaths:
    root: Path

    @property
    def meta(self) -> Path:
        return self.root / META_DIR_NAME

    @property
    def state(self) -> Path:
        return self.meta / "state.json"

    @property
    def launch(self) -> Path:
        return self.meta / "launch.json"

    @property
    def shim_info(self) -> Path:
        return self.meta / "shim.json"

    @property
    def child_info(self) -> Path:
        return self.meta / "child.json"

    @property
    def events(self) -> Path:
        return self.meta / "events.jsonl"

    @property
    def kill_request(self) -> Path:
        return self.meta / "kill.json"

    @property
    def exit_report(self) -> Path:
        return self.meta / "exit.json"

    @property
    def shim_log(self) -> Path:
        return self.meta / "shim.log"

    @property
    def context_archive(self) -> Path:
        return self.meta / "context.tar.gz"


@dataclass(frozen=True)
class LaunchSpec:
    """What the shim runs. `env` is the command's whole environment (not the shim's)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    first_seq: int

    def to_json(self) -> dict[str, Any]:
        return {"argv": self.argv, "env": self.env, "cwd": self.cwd, "first_seq": self.first_seq}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchSpec:
        return cls(
            argv=[str(a) for a in data["argv"]],
            env={str(k): str(v) for k, v in data["env"].items()},
            cwd=str(data["cwd"]),
            first_seq=int(data["first_seq"]),
        )


@dataclass(frozen=True)
class ExitReport:
    """How the command ended, as the shim saw it.

    `exit_code` follows the shell's convention: 128+N when killed by signal N. `error` is set when
    the command could not be started at all; `aborted` when a kill arrived before it started.
    """

    exit_code: int | None
    signal: int | None = None
    error: str = ""
    aborted: bool = False
    finished_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "error": self.error,
            "aborted": self.aborted,
            "finished_at": self.finished_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExitReport:
        code = data.get("exit_code")
        sig = data.get("signal")
        return cls(
            exit_code=int(code) if code is not None else None,
            signal=int(sig) if sig is not None else None,
            error=str(data.get("error") or ""),
            aborted=bool(data.get("aborted")),
            finished_at=float(data.get("finished_at") or 0.0),
        )
