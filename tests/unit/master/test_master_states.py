"""The transition tables: Determined's moves are allowed, nothing else is."""

from __future__ import annotations

import pytest

from services.master.domain.kernel.states import (
    ALLOCATION_ORDER,
    EXPERIMENT_TRANSITIONS,
    LIVE_ALLOCATION,
    LIVE_ALLOCATION_STATES,
    STOPPING_TO_TERMINAL,
    TERMINAL,
    TRIAL_TRANSITIONS,
    AllocationState,
    InvalidTransition,
    RunState,
    allocation_advances,
    check_experiment,
    check_trial,
)

S = RunState


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (S.ACTIVE, S.PAUSED),
        (S.PAUSED, S.ACTIVE),
        (S.ACTIVE, S.STOPPING_CANCELED),
        (S.STOPPING_CANCELED, S.STOPPING_KILLED),
        (S.STOPPING_COMPLETED, S.STOPPING_KILLED),
        (S.STOPPING_KILLED, S.CANCELED),
        (S.COMPLETED, S.DELETING),
        (S.DELETING, S.DELETED),
    ],
)
def test_experiment_allows(current: RunState, target: RunState) -> None:
    check_experiment(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (S.COMPLETED, S.ACTIVE),
        (S.CANCELED, S.PAUSED),
        (S.STOPPING_KILLED, S.STOPPING_CANCELED),
        (S.ACTIVE, S.DELETING),
        (S.DELETED, S.DELETING),
    ],
)
def test_experiment_refuses(current: RunState, target: RunState) -> None:
    with pytest.raises(InvalidTransition, match=f"from {current} to {target}"):
        check_experiment(current, target)


def test_trial_can_complete_directly_but_not_come_back() -> None:
    check_trial(S.ACTIVE, S.COMPLETED)
    for terminal in TERMINAL:
        assert TRIAL_TRANSITIONS[terminal] == frozenset()


def test_every_stopping_state_ends_somewhere_reachable() -> None:
    for stopping, terminal in STOPPING_TO_TERMINAL.items():
        assert terminal in EXPERIMENT_TRANSITIONS[stopping]
        assert terminal in TRIAL_TRANSITIONS[stopping]


def test_allocations_only_move_forward() -> None:
    for i, state in enumerate(ALLOCATION_ORDER):
        for j, other in enumerate(ALLOCATION_ORDER):
            assert allocation_advances(state, other) == (j > i)
    assert allocation_advances(AllocationState.PENDING, AllocationState.TERMINATED)


def test_the_live_allocation_states_are_every_state_but_terminated() -> None:
    # Queries name them (`state IN ...`, which the state's index answers): a state missing here
    # would hide its allocations from the liveness loop.
    assert (
        set(LIVE_ALLOCATION_STATES)
        == set(LIVE_ALLOCATION)
        == set(AllocationState) - {AllocationState.TERMINATED}
    )
    assert set(ALLOCATION_ORDER) == set(AllocationState)
