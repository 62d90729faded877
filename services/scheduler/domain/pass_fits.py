"""Where a request fits, as the fair-share pass (fair_share.py) and the priority pass with quotas
(quota_pass.py) both look for it: whether its shape would fit with nothing running, and starting
it where it fits now. What was found impossible for a shape stays so while the pass's working
state is unchanged (its `version`), so a shape is not looked for twice at one version."""

from __future__ import annotations

from typing import Protocol

from services.scheduler.domain import reasons
from services.scheduler.domain.capacity import PoolCapacity
from services.scheduler.domain.fitting import apply_fit, find_fit
from services.scheduler.domain.model import AllocationRequest, ResourcePool
from services.scheduler.domain.priority_pass import PassOutcome, Shape, shape_of


class _Holds(Protocol):
    def add(self, r: AllocationRequest, slots: int) -> None: ...


class FittingPass(Protocol):
    """What a pass keeps that these need."""

    @property
    def pool(self) -> ResourcePool: ...
    @property
    def capacity(self) -> PoolCapacity: ...
    @property
    def held(self) -> _Holds: ...
    @property
    def outcome(self) -> PassOutcome: ...
    @property
    def first_preemptor(self) -> str | None: ...
    @property
    def fits_idle(self) -> dict[Shape, bool]: ...
    @property
    def no_place(self) -> dict[Shape, int]: ...

    idle: PoolCapacity | None
    version: int


def fits_when_idle(p: FittingPass, r: AllocationRequest) -> bool:
    """Whether `r`'s shape would fit in the pool with nothing running (the idle pool made once)."""
    shape = shape_of(r)
    if shape not in p.fits_idle:
        if p.idle is None:
            p.idle = p.capacity.emptied()
        p.fits_idle[shape] = find_fit(r, p.idle, p.pool.fitting_policy) is not None
    return p.fits_idle[shape]


def start_where_it_fits(p: FittingPass, r: AllocationRequest) -> bool:
    """Start `r` where it fits now; whether it did. Held for the pass's first preemptor, if one
    reclaimed earlier in the pass, instead of starting: what it freed is its."""
    shape = shape_of(r)
    if p.no_place.get(shape) == p.version:
        return False
    fit = find_fit(r, p.capacity, p.pool.fitting_policy)
    if fit is None:
        p.no_place[shape] = p.version
        return False
    apply_fit(p.capacity, fit, r.allocation_id)
    p.version += 1
    p.held.add(r, r.slots_needed)
    if p.first_preemptor is not None:
        p.outcome.waiting[r.allocation_id] = reasons.held_for_preemption(p.first_preemptor)
    else:
        p.outcome.started.append((r, fit))
    return True
