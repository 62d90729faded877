"""What trial code's allocation token opens: its own trial, and only while its allocation runs.

Every check of a caller holding only an allocation token goes through this module, so the two
rules hold in one place: a token dies with its allocation (an ended allocation's token is refused
as UNAUTHENTICATED, naming why), and a token opens only the trial, allocation, experiment and
checkpoints of its own allocation (anything else is PERMISSION_DENIED, naming both trials).
Users (session tokens) and internal callers are not trial code; their access is checked elsewhere.
Each check reads the allocation in the caller's own session, so it holds for the transaction that
acts on it, not just at the moment the token was first looked up.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.kernel.errors import NotFound, PermissionDenied, Unauthenticated
from services.master.domain.kernel.states import A
from services.master.store import models


def is_trial_code(principal: Principal) -> bool:
    """True for a caller that holds only an allocation token."""
    return principal.allocation_id is not None and principal.user_id is None and not principal.internal


_ENDED = "its allocation token no longer opens the API"


def live_allocation(s: Session, allocation_id: str) -> models.Allocation:
    """The allocation a token names, refused once it has ended."""
    alloc: models.Allocation = _live(s.get(models.Allocation, allocation_id))
    return alloc


def _live(found: Any) -> Any:
    """`found`, a token's allocation (its mapped row, or a read of its columns with `id` and
    `state`), unless it is gone or has ended: such a token opens nothing."""
    if found is None:
        raise Unauthenticated("invalid allocation token")
    if found.state == A.TERMINATED:
        raise Unauthenticated(f"allocation {found.id} has ended: {_ENDED}")
    return found


# Built once: every call trial code makes is authenticated by it. Two columns, not the mapped
# Allocation: the ORM load of a whole row (its JSON placements among it) and building the statement
# were most of the authentication's CPU, itself a tenth of the master's per trial (bench/README.md,
# "The search benchmark's work priced").
_ALLOCATIONS = models.Allocation.__table__
_TOKEN_OWNER = select(_ALLOCATIONS.c.id, _ALLOCATIONS.c.state).where(
    _ALLOCATIONS.c.token_hash == bindparam("token_hash")
)


def allocation_of_token(s: Session, token_hash: str) -> str:
    """The running allocation a token (by its hash) belongs to, refused as live_allocation
    refuses once it has ended. One read of two columns, on every call trial code makes."""
    return str(_live(s.execute(_TOKEN_OWNER, {"token_hash": token_hash}).first()).id)


# Built once, as _TOKEN_OWNER: the checks below need four columns of the token's allocation, not
# the mapped row (an ORM load decodes its JSON placements; it was 8 % of the call threads' samples
# over no-op trials, bench.control_plane_cost). Read in the caller's session all the same.
_LIVE = select(
    _ALLOCATIONS.c.id, _ALLOCATIONS.c.state, _ALLOCATIONS.c.trial_id, _ALLOCATIONS.c.task_id
).where(_ALLOCATIONS.c.id == bindparam("allocation_id"))


def _live_row(s: Session, allocation_id: str) -> Any:
    """live_allocation's check, reading only the columns the checks compare, unless the caller's
    session holds the allocation already (metric intake reads it with its trial; a checkpoint's
    report loads it): then that, as `Session.get` would, with no query."""
    held = s.identity_map.get(Session.identity_key(models.Allocation, allocation_id))
    return _live(held if held is not None else s.execute(_LIVE, {"allocation_id": allocation_id}).first())


def own_trial(s: Session, principal: Principal) -> int:
    """The trial trial code's allocation runs (only for trial code)."""
    assert principal.allocation_id is not None
    alloc = _live_row(s, principal.allocation_id)
    if alloc.trial_id is None:
        raise PermissionDenied(f"allocation {principal.allocation_id} runs no trial")
    return int(alloc.trial_id)


def check_trial(s: Session, principal: Principal, trial_id: int, field: str = "trial_id") -> None:
    """Trial code may only name its own trial; `field` is where the request names it."""
    if not is_trial_code(principal):
        return
    own = own_trial(s, principal)
    if own != trial_id:
        if s.get(models.Trial, trial_id) is None:
            raise NotFound(f"trial {trial_id} not found")
        raise PermissionDenied(
            f"{field}: allocation {principal.allocation_id} belongs to trial {own}, not trial {trial_id}"
        )


def check_allocation(s: Session, principal: Principal, allocation_id: str) -> None:
    """Trial code may only read or answer its own allocation's signals."""
    if not is_trial_code(principal):
        return
    _live_row(s, str(principal.allocation_id))
    if principal.allocation_id != allocation_id:
        raise PermissionDenied(
            f"allocation_id: the token belongs to allocation {principal.allocation_id}, "
            f"not allocation {allocation_id}"
        )


def check_task(s: Session, principal: Principal, task_id: str) -> None:
    """Task code may only read its own task (its logs); `task_id` is where the request names it."""
    if not is_trial_code(principal):
        return
    alloc = _live_row(s, str(principal.allocation_id))
    if alloc.task_id != task_id:
        raise PermissionDenied(
            f"task_id: allocation {principal.allocation_id} belongs to task {alloc.task_id}, "
            f"not task {task_id}"
        )


def check_experiment(s: Session, principal: Principal, experiment_id: int) -> None:
    """Trial code may read what belongs to its own trial's experiment (e.g. its best metric)."""
    if not is_trial_code(principal):
        return
    trial = s.get_one(models.Trial, own_trial(s, principal))
    if trial.experiment_id != experiment_id:
        raise PermissionDenied(
            f"experiment_id: allocation {principal.allocation_id} belongs to experiment "
            f"{trial.experiment_id}, not experiment {experiment_id}"
        )


def check_checkpoint(s: Session, principal: Principal, uuid: str, field: str = "uuid") -> None:
    """Trial code may only change checkpoints its own trial stored."""
    if not is_trial_code(principal):
        return
    own = own_trial(s, principal)
    checkpoint = s.get(models.Checkpoint, uuid)
    if checkpoint is None:
        raise NotFound(f"{field}: checkpoint {uuid} not found")
    if checkpoint.trial_id != own:
        raise PermissionDenied(
            f"{field}: checkpoint {uuid} belongs to trial {checkpoint.trial_id}, not to trial {own} "
            f"of allocation {principal.allocation_id}"
        )
