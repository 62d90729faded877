"""The state Determined's API answers for an experiment or a trial: an ACTIVE one shows what its
allocations are doing, every other state is answered as stored.

Determined stores a running experiment or trial as ACTIVE and turns ACTIVE into QUEUED, PULLING,
STARTING or RUNNING on every read (master/internal/api_experiment.go `enrichExperimentState`, over
the allocations of the experiment's job; api_trials.go `enrichTrialState`, over the trial's task):
any allocation RUNNING gives RUNNING, else the most progressed of STARTING and PULLING, else QUEUED
(no allocation at all, or only waiting, assigned, terminating or ended ones). The stored state
never changes for it: transitions, filters by state and sorting by state all use the stored one,
as Determined's do (its `states` filters compare the stored column).

An unmanaged experiment's trials have no allocations: their code runs outside the cluster and
reports RUNNING itself, which Cairn stores as ACTIVE (kernel/states.py); Determined stores and
answers that RUNNING, so an ACTIVE unmanaged trial, and its experiment, answer RUNNING.

Each function answers a whole page with at most one query (none when nothing on it is ACTIVE and
managed), whatever the page's length.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import ColumnElement, and_, case, func, select
from sqlalchemy.orm import Session

from services.master.domain.kernel.states import AllocationState, RunState
from services.master.store import models

# How far an allocation has got towards running; 0 (QUEUED) for any other state.
_PROGRESS = {AllocationState.PULLING: 1, AllocationState.STARTING: 2, AllocationState.RUNNING: 3}
_SHOWN = {0: "QUEUED", 1: "PULLING", 2: "STARTING", 3: "RUNNING"}
# The derived states, most progressed last: what an ACTIVE experiment or trial may answer.
DERIVED_STATES = ("QUEUED", "PULLING", "STARTING", "RUNNING")


def _progress_rank() -> ColumnElement[int]:
    return case(
        {state.value: rank for state, rank in _PROGRESS.items()}, value=models.Allocation.state, else_=0
    )


def display_state(stored: str, progress: int | None, *, unmanaged: bool = False) -> str:
    """The rule for one experiment or trial: `progress` is the most progressed of its allocations
    (0 or None: none has started pulling)."""
    if stored != RunState.ACTIVE:
        return stored
    if unmanaged:
        return "RUNNING"
    return _SHOWN[progress or 0]


def experiment_display_states(s: Session, experiments: Iterable[models.Experiment]) -> dict[int, str]:
    """Each experiment's answered state, by id, from one aggregate over the allocations of the
    page's managed ACTIVE experiments (their trials' allocations: Determined's job's)."""
    page = list(experiments)
    probed = [e.id for e in page if e.state == RunState.ACTIVE and not e.unmanaged]
    progress: dict[int, int] = {}
    if probed:
        rows = s.execute(
            select(models.Trial.experiment_id, func.max(_progress_rank()))
            .join(models.Allocation, models.Allocation.trial_id == models.Trial.id)
            .where(
                models.Trial.experiment_id.in_(probed),
                models.Allocation.state.in_([state.value for state in _PROGRESS]),
            )
            .group_by(models.Trial.experiment_id)
        )
        progress = {int(experiment_id): int(rank or 0) for experiment_id, rank in rows}
    return {e.id: display_state(e.state, progress.get(e.id), unmanaged=e.unmanaged) for e in page}


def trial_display_states(s: Session, trials: Iterable[models.Trial]) -> dict[int, str]:
    """Each trial's answered state, by id, from one query over the page's ACTIVE trials: whether
    their experiment is unmanaged, and the most progressed of their allocations."""
    page = list(trials)
    probed = [t.id for t in page if t.state == RunState.ACTIVE]
    facts: dict[int, tuple[bool, int]] = {}
    if probed:
        rows = s.execute(
            select(models.Trial.id, models.Experiment.unmanaged, func.max(_progress_rank()))
            .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
            .outerjoin(
                models.Allocation,
                and_(
                    models.Allocation.trial_id == models.Trial.id,
                    models.Allocation.state.in_([state.value for state in _PROGRESS]),
                ),
            )
            .where(models.Trial.id.in_(probed))
            .group_by(models.Trial.id, models.Experiment.unmanaged)
        )
        facts = {int(trial_id): (bool(unmanaged), int(rank or 0)) for trial_id, unmanaged, rank in rows}
    shown = {}
    for t in page:
        unmanaged, rank = facts.get(t.id, (False, 0))
        shown[t.id] = display_state(t.state, rank, unmanaged=unmanaged)
    return shown
