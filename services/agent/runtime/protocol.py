"""The files and signals through which the agent and a container's supervisor (the shim) talk.

Everything lives in the container's bookkeeping folder (<container dir>/.cairn-agent/), so a
restarted agent finds it again. Its layout (state.json, launch.json, shim.json, child.json,
events.jsonl, kill.json, exit.json, shim.log) is defined once, in cairn.agent_files, which
`cairn cluster down`'s sweep of leftover trial processes reads too.

Writers: events.jsonl has exactly one writer at a time: the agent before the shim starts and
after it exits, the shim in between. Every other file is written atomically (rename).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from cairn.agent_files import META_DIR_NAME, ContainerPaths

__all__ = [
    "CONTROL_SIGNALS",
    "KILL_SIGNAL",
    "META_DIR_NAME",
    "ContainerPaths",
    "ExitReport",
    "LaunchSpec",
]

# SIGTERM and SIGINT are forwarded to the command's process group; KILL_SIGNAL asks for a kill
# with the grace period written in kill.json.
KILL_SIGNAL = signal.SIGUSR1
CONTROL_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, KILL_SIGNAL})


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
    `reason` explains an end the exit code alone does not (a container killed for running out of
    memory).
    """

    exit_code: int | None
    signal: int | None = None
    error: str = ""
    aborted: bool = False
    finished_at: float = 0.0
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "error": self.error,
            "aborted": self.aborted,
            "finished_at": self.finished_at,
            **({"reason": self.reason} if self.reason else {}),
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
            reason=str(data.get("reason") or ""),
        )
