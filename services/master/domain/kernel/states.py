"""State machines of experiments, trials, allocations, tasks, workspaces and projects, written as
transition tables.

The names are Determined's. A move not in a table is a bug or a bad request: `check_*` raises
InvalidTransition naming both states, and callers turn that into FAILED_PRECONDITION.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

# Any of the state enums below, for the one check every table shares.
_S = TypeVar("_S", bound=StrEnum)


class InvalidTransition(Exception):
    # A move the table refuses is the caller's precondition failing.
    kind = "FAILED_PRECONDITION"


class RunState(StrEnum):
    """States shared by experiments and trials (Determined reuses one enum for both)."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_KILLED = "STOPPING_KILLED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"
    DELETING = "DELETING"
    DELETE_FAILED = "DELETE_FAILED"
    DELETED = "DELETED"


S = RunState
STOPPING = frozenset({S.STOPPING_COMPLETED, S.STOPPING_CANCELED, S.STOPPING_KILLED, S.STOPPING_ERROR})
TERMINAL = frozenset({S.COMPLETED, S.CANCELED, S.ERROR})
# Where each stopping state ends up once nothing runs any more.
STOPPING_TO_TERMINAL = {
    S.STOPPING_COMPLETED: S.COMPLETED,
    S.STOPPING_CANCELED: S.CANCELED,
    S.STOPPING_KILLED: S.CANCELED,
    S.STOPPING_ERROR: S.ERROR,
}
# Severity order of stopping states: a stop can only be made more severe (kill wins over cancel).
STOPPING_SEVERITY = [S.STOPPING_COMPLETED, S.STOPPING_CANCELED, S.STOPPING_KILLED, S.STOPPING_ERROR]

EXPERIMENT_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    S.ACTIVE: frozenset({S.PAUSED, *STOPPING, S.ERROR}),
    S.PAUSED: frozenset({S.ACTIVE, *STOPPING, S.ERROR}),
    # Unlike Determined, an experiment whose search has finished can still be canceled or killed
    # while its last trials run: kill always wins.
    S.STOPPING_COMPLETED: frozenset(
        {S.COMPLETED, S.STOPPING_CANCELED, S.STOPPING_KILLED, S.STOPPING_ERROR, S.ERROR}
    ),
    S.STOPPING_CANCELED: frozenset({S.CANCELED, S.STOPPING_KILLED, S.STOPPING_ERROR, S.ERROR}),
    S.STOPPING_KILLED: frozenset({S.CANCELED, S.STOPPING_ERROR, S.ERROR}),
    S.STOPPING_ERROR: frozenset({S.ERROR}),
    S.COMPLETED: frozenset({S.DELETING}),
    S.CANCELED: frozenset({S.DELETING}),
    S.ERROR: frozenset({S.DELETING}),
    S.DELETING: frozenset({S.DELETED, S.DELETE_FAILED}),
    S.DELETE_FAILED: frozenset({S.DELETING}),
    S.DELETED: frozenset(),
}

TRIAL_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    S.ACTIVE: frozenset({S.PAUSED, *STOPPING, S.COMPLETED, S.ERROR}),
    S.PAUSED: frozenset({S.ACTIVE, *STOPPING, S.COMPLETED, S.ERROR}),
    S.STOPPING_COMPLETED: frozenset(
        {S.COMPLETED, S.STOPPING_CANCELED, S.STOPPING_KILLED, S.STOPPING_ERROR, S.ERROR}
    ),
    S.STOPPING_CANCELED: frozenset({S.CANCELED, S.STOPPING_KILLED, S.STOPPING_ERROR, S.ERROR}),
    S.STOPPING_KILLED: frozenset({S.CANCELED, S.STOPPING_ERROR, S.ERROR}),
    S.STOPPING_ERROR: frozenset({S.ERROR}),
    S.COMPLETED: frozenset(),
    S.CANCELED: frozenset(),
    S.ERROR: frozenset(),
}


# `det experiment continue` (continuation.py) reopens an ended single-trial experiment and its trial:
# the only moves out of a terminal state, added deliberately for continue alone. They are a table
# of their own, consulted only when the caller says it is continuing, so that no other request
# (activate, a searcher's answer, an allocation's end) can ever revive a finished run.
CONTINUE_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    S.COMPLETED: frozenset({S.ACTIVE}),
    S.CANCELED: frozenset({S.ACTIVE}),
    S.ERROR: frozenset({S.ACTIVE}),
}


# An unmanaged experiment's trials (Determined's Core API v2 run outside the cluster) are moved by
# their own code (PatchTrial), not by allocations: it may report RUNNING (ACTIVE here), and end
# COMPLETED or ERROR; a re-run under the same external id resumes an ended trial (back to ACTIVE),
# as Determined's PatchTrial allows. Nothing stops in between, so there is no STOPPING_* state.
_UNMANAGED_STATES = (S.PAUSED, S.ACTIVE, S.COMPLETED, S.CANCELED, S.ERROR)
UNMANAGED_TRIAL_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    state: frozenset(other for other in _UNMANAGED_STATES if other != state) for state in _UNMANAGED_STATES
}
# Its experiment's state follows its trials' (the most progressed one's), and is deleted like any.
UNMANAGED_EXPERIMENT_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    **{
        state: targets | ({S.DELETING} if state in TERMINAL else frozenset())
        for state, targets in UNMANAGED_TRIAL_TRANSITIONS.items()
    },
    S.DELETING: EXPERIMENT_TRANSITIONS[S.DELETING],
    S.DELETE_FAILED: EXPERIMENT_TRANSITIONS[S.DELETE_FAILED],
    S.DELETED: EXPERIMENT_TRANSITIONS[S.DELETED],
}


class AllocationState(StrEnum):
    PENDING = "PENDING"
    ASSIGNED = "ASSIGNED"
    PULLING = "PULLING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"


A = AllocationState
# Allocations only move forward ("most progressed" wins); any live state can end at once.
ALLOCATION_ORDER = [A.PENDING, A.ASSIGNED, A.PULLING, A.STARTING, A.RUNNING, A.TERMINATING, A.TERMINATED]
ALLOCATION_TRANSITIONS: dict[AllocationState, frozenset[AllocationState]] = {
    state: frozenset(ALLOCATION_ORDER[i + 1 :]) for i, state in enumerate(ALLOCATION_ORDER)
}
LIVE_ALLOCATION = frozenset(ALLOCATION_ORDER[:-1])
# The same, in order, for a query: `state IN (...)` lets an index on the state find the live rows
# among a history of finished ones, which `state != TERMINATED` reads every one of.
LIVE_ALLOCATION_STATES = tuple(ALLOCATION_ORDER[:-1])
# States in which an allocation holds slots on agents.
PLACED_ALLOCATION = frozenset({A.ASSIGNED, A.PULLING, A.STARTING, A.RUNNING, A.TERMINATING})


def check_experiment(
    current: str, target: RunState, *, continuing: bool = False, unmanaged: bool = False
) -> None:
    if unmanaged:
        table = UNMANAGED_EXPERIMENT_TRANSITIONS
    else:
        table = CONTINUE_TRANSITIONS if continuing else EXPERIMENT_TRANSITIONS
    _check("experiment", table, RunState(current), target)


def check_trial(current: str, target: RunState, *, continuing: bool = False, unmanaged: bool = False) -> None:
    if unmanaged:
        table = UNMANAGED_TRIAL_TRANSITIONS
    else:
        table = CONTINUE_TRANSITIONS if continuing else TRIAL_TRANSITIONS
    _check("trial", table, RunState(current), target)


def can_experiment(current: str, target: RunState) -> bool:
    return target in EXPERIMENT_TRANSITIONS[RunState(current)]


def allocation_advances(current: str, target: AllocationState) -> bool:
    """Whether moving an allocation from `current` to `target` is progress (never backwards)."""
    return target in ALLOCATION_TRANSITIONS[AllocationState(current)]


def _check(kind: str, table: Mapping[_S, frozenset[_S]], current: _S, target: _S) -> None:
    """Every table's check: a move it does not list raises InvalidTransition naming both states."""
    if target not in table.get(current, frozenset()):
        raise InvalidTransition(f"{kind} cannot go from {current or 'LIVE'} to {target}")


def is_terminal(state: str) -> bool:
    return state in TERMINAL or state in {S.DELETING, S.DELETED, S.DELETE_FAILED}


def is_stopping(state: str) -> bool:
    return state in STOPPING


class TaskKind(StrEnum):
    """Determined's task types."""

    TRIAL = "TRIAL"
    COMMAND = "COMMAND"
    NOTEBOOK = "NOTEBOOK"
    SHELL = "SHELL"
    TENSORBOARD = "TENSORBOARD"
    GENERIC = "GENERIC"
    CHECKPOINT_GC = "CHECKPOINT_GC"


# Determined's: trials and generic tasks may be preempted (and start again); commands, notebooks,
# shells and TensorBoards run to their end once started.
PREEMPTIBLE_KINDS = frozenset({TaskKind.TRIAL, TaskKind.GENERIC})


class TaskState(StrEnum):
    """A task's own state (Determined's generic-task TaskState); a trial's task mirrors its trial's
    end. A task runs (ACTIVE) until its allocation ends; a stop asked for is STOPPING_* until then."""

    ACTIVE = "ACTIVE"
    STOPPING_PAUSED = "STOPPING_PAUSED"
    PAUSED = "PAUSED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


T = TaskState
TASK_ENDED = frozenset({T.COMPLETED, T.CANCELED, T.ERROR})
TASK_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    T.ACTIVE: frozenset({T.STOPPING_PAUSED, T.STOPPING_CANCELED, *TASK_ENDED}),
    # A pause waits for the allocation to end; a kill meanwhile wins, and so does the task's own end.
    T.STOPPING_PAUSED: frozenset({T.PAUSED, T.STOPPING_CANCELED, *TASK_ENDED}),
    T.PAUSED: frozenset({T.ACTIVE, T.CANCELED}),
    T.STOPPING_CANCELED: frozenset({T.CANCELED}),
    T.COMPLETED: frozenset(),
    T.CANCELED: frozenset(),
    T.ERROR: frozenset(),
}


# A trial's task reopens with its trial (`det experiment continue`), and only then.
TASK_CONTINUE_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    state: frozenset({T.ACTIVE}) for state in TASK_ENDED
}


def check_task(current: str, target: TaskState, *, continuing: bool = False) -> None:
    _check("task", TASK_CONTINUE_TRANSITIONS if continuing else TASK_TRANSITIONS, TaskState(current), target)


class WorkspaceState(StrEnum):
    """A workspace's or a project's state (Determined's WorkspaceState, which projects share): none
    while it lives, then its deletion's progress. A deletion runs in the background while the
    experiments inside are deleted; the row goes when they are gone, or the deletion fails (some
    experiment could not be deleted) and may be asked again."""

    LIVE = ""  # WORKSPACE_STATE_UNSPECIFIED on the wire
    DELETING = "DELETING"
    DELETE_FAILED = "DELETE_FAILED"


WS = WorkspaceState
WORKSPACE_TRANSITIONS: dict[WorkspaceState, frozenset[WorkspaceState]] = {
    WS.LIVE: frozenset({WS.DELETING}),
    WS.DELETING: frozenset({WS.DELETE_FAILED}),
    WS.DELETE_FAILED: frozenset({WS.DELETING}),
}


def check_workspace(kind: str, current: str, target: WorkspaceState) -> None:
    """`kind`: "workspace" or "project", which share the table."""
    _check(kind, WORKSPACE_TRANSITIONS, WorkspaceState(current), target)


class CheckpointState(StrEnum):
    """A checkpoint's state (Determined's): COMPLETED once reported; PARTIALLY_DELETED when a
    deletion removed some of its files and kept the rest; DELETED once none of its files is left
    (a user's deletion, garbage collection): the row stays, as Determined keeps it, so clients that
    delete a checkpoint read it back DELETED. The row goes with its experiment."""

    COMPLETED = "COMPLETED"
    PARTIALLY_DELETED = "PARTIALLY_DELETED"
    DELETED = "DELETED"


CK = CheckpointState
CHECKPOINT_TRANSITIONS: dict[CheckpointState, frozenset[CheckpointState]] = {
    CK.COMPLETED: frozenset({CK.PARTIALLY_DELETED, CK.DELETED}),
    # A later deletion may take more of what is left.
    CK.PARTIALLY_DELETED: frozenset({CK.PARTIALLY_DELETED, CK.DELETED}),
    CK.DELETED: frozenset(),
}


def check_checkpoint(uuid: str, current: str, target: CheckpointState) -> None:
    _check(f"checkpoint {uuid}", CHECKPOINT_TRANSITIONS, CheckpointState(current), target)
