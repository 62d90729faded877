"""A priority pool whose workspaces or users have quotas (guaranteed and maximum slots, quotas.py):
Determined's priority pass (priority_pass.py) over its slotted requests, with the quotas' rules
around it. A pool without quotas keeps the plain priority pass, as it was.

1. A group holding more than its maximum (an admin lowered it) gives back its youngest placements,
   preempted gracefully for no request in particular (Preemption.for_allocation_id is empty).
2. Guaranteed work first, whatever its priority: each pending request, in queue order, that fits
   in what is left of its workspace's (else its user's) guarantee starts where it fits. One that
   does not fit reclaims: running preemptible work of other groups is preempted, never taking a
   group below its own guarantee (quotas.keeps_guarantees), always a whole allocation (a gang is
   never split), never work placed after the pool's `protect_started_after` (its minimum run
   before reclaim); the least important first (the lowest priority, then the oldest placed, as
   fair share reclaims oldest-borrowed first), then any victim the request does not need after all
   is given back. It is reserved in the room made and starts on a later pass, once they release.
   This happens whether or not the pool's priority preemption is enabled: a guarantee is an
   admin's promise of slots within a bounded time. A request that can neither start nor reclaim
   waits, and the pool keeps its free slots for it: nothing but guaranteed work starts until it
   fits (unless it would not fit even in an idle pool: then waiting gains it nothing).
3. The rest: the priority pass, with the quotas as its admission: a request that would take its
   workspace or user past a maximum waits, its reason naming the quota, and holds back nothing
   else (it is no blocker of lower priorities); priority preemption never takes a group below its
   guarantee. Each request's quota is its own, so the pass looks at every request.

As in both passes, once a preemption is chosen nothing more starts in the pass: the slots being
freed belong to the request that asked for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from services.scheduler.domain import reasons
from services.scheduler.domain.capacity import PoolCapacity
from services.scheduler.domain.fitting import apply_fit, find_fit
from services.scheduler.domain.model import AllocationRequest, Preemption, ResourcePool
from services.scheduler.domain.ordering import effective_priority, queue_key
from services.scheduler.domain.pass_fits import fits_when_idle, start_where_it_fits
from services.scheduler.domain.priority_pass import (
    PassOutcome,
    Shape,
    levels_of,
    run_priority_pass,
    shape_of,
)
from services.scheduler.domain.quotas import Gap, Quotas, user_of, workspace_of
from services.scheduler.domain.reasons import PoolFacts


class _Held:
    """Slots held by each workspace and user during the pass."""

    def __init__(self, running: Iterable[AllocationRequest]) -> None:
        self.workspace: Counter[str] = Counter()
        self.user: Counter[str] = Counter()
        for r in running:
            self.add(r, r.slots_needed)

    def add(self, r: AllocationRequest, slots: int) -> None:
        self.workspace[workspace_of(r)] += slots
        self.user[user_of(r)] += slots


@dataclass
class _Admission:
    """The quotas as the priority pass asks them (priority_pass.Admission)."""

    quotas: Quotas
    held: _Held
    kept: _Held
    running: dict[str, AllocationRequest]

    def holds_back(self, request: AllocationRequest) -> str | None:
        return self.quotas.over_maximum(request, self.held)

    def took(self, request: AllocationRequest) -> None:
        self.held.add(request, request.slots_needed)

    def may_preempt(
        self, victim: AllocationRequest, for_request: AllocationRequest, chosen: Sequence[AllocationRequest]
    ) -> bool:
        return self.quotas.keeps_guarantees(victim, for_request, chosen, self.kept)

    def preempted(self, victims: Sequence[str]) -> None:
        for victim_id in victims:
            victim = self.running[victim_id]
            self.held.add(victim, -victim.slots_needed)
            self.kept.add(victim, -victim.slots_needed)


@dataclass
class _Guaranteed:
    """Step 2 of the module docstring over the working state."""

    pool: ResourcePool
    facts: PoolFacts
    capacity: PoolCapacity
    quotas: Quotas
    held: _Held
    kept: _Held
    # Reclaimable running work: preemptible and past the minimum run, least important first.
    candidates: list[AllocationRequest]
    idle: PoolCapacity | None
    fits_idle: dict[Shape, bool]
    outcome: PassOutcome = field(default_factory=PassOutcome)
    preempted: dict[str, str] = field(default_factory=dict)
    first_preemptor: str | None = None
    deprived: tuple[AllocationRequest, Gap] | None = None
    # What was found impossible at a version of the working state stays so until it changes.
    version: int = 0
    no_place: dict[Shape, int] = field(default_factory=dict)
    no_reclaim: dict[tuple[Shape, str, str], int] = field(default_factory=dict)

    def fits_when_idle(self, r: AllocationRequest) -> bool:
        return fits_when_idle(self, r)

    def start(self, r: AllocationRequest) -> bool:
        return start_where_it_fits(self, r)

    def _released(self, victims: Iterable[AllocationRequest]) -> PoolCapacity:
        trial = self.capacity.copy()
        for victim in victims:
            trial.release(victim.allocation_id)
        return trial

    def reclaim(self, r: AllocationRequest, gap: Gap) -> bool:
        """Preempt other groups' work over their guarantees until `r` fits; reserve `r` there."""
        memo = (shape_of(r), gap.kind, gap.key)
        if self.no_reclaim.get(memo) == self.version:
            return False
        trial = self.capacity.copy()
        chosen: list[AllocationRequest] = []
        for candidate in self.candidates:
            if gap.covers(candidate) or candidate.allocation_id in self.preempted:
                continue
            if not self.quotas.keeps_guarantees(candidate, r, chosen, self.kept):
                continue
            trial.release(candidate.allocation_id)
            chosen.append(candidate)
            if find_fit(r, trial, self.pool.fitting_policy) is not None:
                break
        else:
            self.no_reclaim[memo] = self.version
            return False
        # The least important come first, but a gang may have needed only the last ones: give back
        # every victim it fits without (the most recently chosen tried first).
        for victim in reversed(list(chosen)):
            fewer = [v for v in chosen if v is not victim]
            if find_fit(r, self._released(fewer), self.pool.fitting_policy) is not None:
                chosen = fewer
        trial = self._released(chosen)
        fit = find_fit(r, trial, self.pool.fitting_policy)
        assert fit is not None  # the victims kept are a set it fitted with
        apply_fit(trial, fit, r.allocation_id)
        self.capacity = trial
        self.version += 1
        for victim in chosen:
            self.held.add(victim, -victim.slots_needed)
            self.kept.add(victim, -victim.slots_needed)
            self.preempted[victim.allocation_id] = r.allocation_id
            self.outcome.preemptions.append(Preemption(victim.allocation_id, r.allocation_id))
        self.held.add(r, r.slots_needed)
        self.first_preemptor = self.first_preemptor or r.allocation_id
        ids = [v.allocation_id for v in chosen]
        self.outcome.waiting[r.allocation_id] = reasons.reclaiming_guarantee(ids, gap.name, self.pool.name)
        return True

    def wait(self, r: AllocationRequest, gap: Gap) -> None:
        idle_fit = self.fits_when_idle(r)
        why_not = reasons.cannot_fit(r, self.facts, self.capacity, idle_fit)
        self.outcome.waiting[r.allocation_id] = reasons.below_guarantee(
            gap.name, gap.held, gap.guaranteed, self.pool.name, why_not
        )
        if idle_fit and self.deprived is None:
            self.deprived = (r, gap)


def run_priority_quota_pass(
    pool: ResourcePool,
    facts: PoolFacts,
    capacity: PoolCapacity,
    pending: Sequence[AllocationRequest],
    running: Sequence[AllocationRequest],
    idle_pool: PoolCapacity | None = None,
    fits_idle_by_shape: dict[Shape, bool] | None = None,
) -> PassOutcome:
    """Decide for the slotted `pending` requests of a priority pool with quotas, given its slotted
    `running` ones. `capacity` is the pass's own working copy; `idle_pool` and `fits_idle_by_shape`
    as for run_priority_pass."""
    quotas = Quotas(pool)
    # What each group holds, counting what this pass places and reserves: what a maximum counts.
    held = _Held(running)
    preempted: set[str] = set()
    maximum_victims = quotas.over_maximums(held, preempted, lambda _kind, _keys: running)
    # What each group keeps for sure: its running work less what this pass preempts (work placed
    # in the pass may yet be held back). What a guarantee protects, so it is never overestimated.
    kept = _Held(running)
    for victim in maximum_victims:
        kept.add(victim, -victim.slots_needed)

    protect = pool.protect_started_after_ns
    candidates = sorted(
        (
            c
            for c in running
            if c.preemptible
            and c.slots_needed > 0
            and c.allocation_id not in preempted
            and not (protect and c.started_at_ns > protect)
        ),
        key=lambda c: (-effective_priority(c, pool), c.started_at_ns, c.allocation_id),
    )
    guaranteed = _Guaranteed(
        pool,
        facts,
        capacity,
        quotas,
        held,
        kept,
        candidates,
        idle_pool,
        fits_idle_by_shape if fits_idle_by_shape is not None else {},
    )
    outcome = guaranteed.outcome
    outcome.preemptions.extend(Preemption(v.allocation_id, "") for v in maximum_victims)
    rest: list[AllocationRequest] = []
    for r in sorted(pending, key=lambda r: queue_key(r, pool)):
        quota = quotas.over_maximum(r, held)
        if quota is not None:
            outcome.waiting[r.allocation_id] = quota
            continue
        gap = quotas.within_guarantee(r, held)
        if gap is None:
            rest.append(r)
        elif not (guaranteed.start(r) or guaranteed.reclaim(r, gap)):
            guaranteed.wait(r, gap)

    if guaranteed.deprived is not None:
        deprived, gap = guaranteed.deprived
        for r in rest:
            outcome.waiting[r.allocation_id] = quotas.over_maximum(r, held) or reasons.held_for_guarantee(
                deprived, gap.name, pool.name
            )
        return outcome
    if not rest:
        return outcome
    by_id = {r.allocation_id: r for r in running}
    # Priority preemption takes from running work, less what step 2 already preempted.
    preempted_before = {v.allocation_id: "" for v in maximum_victims} | guaranteed.preempted
    remaining = [r for r in running if r.allocation_id not in preempted_before]
    after = run_priority_pass(
        pool,
        facts,
        guaranteed.capacity,
        levels_of(rest, pool),
        remaining,
        guaranteed.idle,
        guaranteed.fits_idle,
        admission=_Admission(quotas, held, kept, by_id),
        preempted_before=preempted_before,
        preemptor_before=guaranteed.first_preemptor,
    )
    outcome.started.extend(after.started)
    outcome.preemptions.extend(after.preemptions)
    outcome.waiting.update(after.all_waiting())
    return outcome
