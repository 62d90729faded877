"""What the agent persists about one container (its state.json), enough for a restarted agent to
find the container's supervisor again and carry on where the last agent process stopped."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from services.agent.containers.states import ContainerState, FailureType
from services.agent.runtime.jsonfile import read_json, write_json_atomic


@dataclass
class ContainerRecord:
    container_id: str
    allocation_id: str
    slot_ids: list[str]
    created_at: float
    description: str = ""
    state: ContainerState = ContainerState.ASSIGNED
    # When the command started running (the RUNNING event's time).
    started_at: float | None = None
    shim_pid: int | None = None
    shim_start_ticks: int | None = None
    # The command's pid, which is also its process group id (from the shim's child.json).
    command_pgid: int | None = None
    # The grace the master gave with the start (used when the agent itself has to kill).
    kill_grace_seconds: int = 0
    # Set once the master asked for a kill (wall-clock time) and the grace it asked for.
    kill_requested_at: float | None = None
    kill_grace: float = 0.0
    # Why it was killed, for the TERMINATED message.
    kill_reason: str = ""
    # The agent killed it for its own shutdown, not on the master's request: its end is the
    # agent's doing (reported as AGENT_FAILED), so it does not count against the trial.
    kill_by_agent: bool = False
    # A kill or terminate that arrived before the command was started.
    abort_requested: bool = False
    exit_code: int | None = None
    failure: FailureType = FailureType.NONE
    # The sequence number of the TERMINATED event.
    final_seq: int | None = None
    finished_at: float | None = None
    # The highest seq the master has stored, and the event-file offset just past it.
    acked_seq: int = 0
    acked_offset: int = 0
    # The highest seq read from the event file so far.
    last_seq: int = 0
    # The master no longer wants this container (not in Welcome.keep_container_ids).
    forgotten: bool = False
    # Its final state and every line reached the master (or it was forgotten): nothing left to do.
    delivered: bool = False

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        data["failure"] = self.failure.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ContainerRecord:
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        values["state"] = ContainerState(values.get("state", ContainerState.ASSIGNED))
        values["failure"] = FailureType(values.get("failure", ""))
        return cls(**values)

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> ContainerRecord | None:
        data = read_json(path)
        if data is None:
            return None
        try:
            return cls.from_json(data)
        except (TypeError, ValueError, KeyError):
            return None
