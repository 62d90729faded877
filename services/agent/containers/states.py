"""Container states and failure types (the proto's names), and the moves allowed between states."""

from __future__ import annotations

from enum import StrEnum


class ContainerState(StrEnum):
    ASSIGNED = "ASSIGNED"
    PULLING = "PULLING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    TERMINATED = "TERMINATED"


class FailureType(StrEnum):
    NONE = ""
    CONTAINER_FAILED = "CONTAINER_FAILED"
    CONTAINER_ABORTED = "CONTAINER_ABORTED"
    TASK_ERROR = "TASK_ERROR"
    AGENT_FAILED = "AGENT_FAILED"
    KILLED = "KILLED"
    DEVICE_FAILED = "DEVICE_FAILED"


S = ContainerState
ALLOWED_MOVES: dict[ContainerState, frozenset[ContainerState]] = {
    S.ASSIGNED: frozenset({S.PULLING, S.STARTING, S.TERMINATED}),
    S.PULLING: frozenset({S.STARTING, S.TERMINATED}),
    S.STARTING: frozenset({S.RUNNING, S.TERMINATED}),
    S.RUNNING: frozenset({S.TERMINATED}),
    S.TERMINATED: frozenset(),
}


def can_move(current: ContainerState, target: ContainerState) -> bool:
    return target in ALLOWED_MOVES[current]
