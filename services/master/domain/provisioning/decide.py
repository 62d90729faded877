"""The provisioner's decision for one resource pool: a pure function of the pool's limits, its
instances as last seen, the work waiting in it, and the time. No I/O, no clock: the loop gathers
the inputs and carries out the decision, and tests give it worked examples.

It follows Determined's scale decider (master/internal/rm/agentrm/provisioner/scaledecider):
- Demand: pending requests that an instance of this shape can ever hold (slots up to the instance's,
  or a whole multiple of them, spread over several instances); their slots summed and divided by
  the instance's slots, rounded up; zero-slot work needs an instance per `max_aux_per_instance`.
- Launch: max(0, clamp(min_instances - n, wanted - on_the_way, max_instances - n)), where n counts
  the instances that are not being retired and on_the_way those launched but not connected yet.
- Terminate: instances the provider reports stopped (forgotten), those that never connected within
  `max_agent_starting_period`, those that lost their agent for longer than `max_disconnected_s`,
  and, while more than `min_instances` remain, those idle longer than `max_idle_agent_period`.

Where Cairn goes further, for safety: retirement is two-phase. An instance chosen for retirement is
first drained (its agent takes no new work); it is terminated only once the loop sees it drained
with nothing running on it. So work placed on it between the decision and the drain is never cut
off: it finishes (or, when the pool must shrink below what runs, is preempted and checkpoints), and
a draining instance that was retired only for idleness is taken back when work arrives, instead of
launching a new one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from services.master.configuration.provider import Limits
from services.master.domain.scheduling.shapes import fits_shape


class Phase(StrEnum):
    """An instance's life as the provisioner tracks it."""

    LAUNCHING = "LAUNCHING"  # recorded; the provider was asked (or is about to be)
    STARTING = "STARTING"  # the provider reports it; its agent has not connected yet
    RUNNING = "RUNNING"  # its agent has connected
    DRAINING = "DRAINING"  # chosen for retirement: its agent takes no new work
    TERMINATING = "TERMINATING"  # the provider was asked to terminate it
    GONE = "GONE"  # terminated, stopped, or never launched


class DrainReason(StrEnum):
    IDLE = "idle"  # taken back if work arrives
    SHRINK = "shrink"  # over max_instances: stays drained


@dataclass(frozen=True)
class Instance:
    id: str
    phase: Phase
    launched_at: float
    # The provider still reports it (False: it stopped, or was never created).
    exists: bool = True
    connected: bool = False
    # The agent has allocations (placed, running or stopping) on it.
    busy: bool = False
    # Since when the agent has had nothing to do (None while busy or never connected).
    idle_since: float | None = None
    # Since when a once-connected agent has been away (None while connected).
    disconnected_since: float | None = None
    drain_reason: DrainReason | None = None


@dataclass(frozen=True)
class Demand:
    """Work waiting in the pool: the slot count of each pending allocation."""

    pending_slots: tuple[int, ...] = ()


@dataclass(frozen=True)
class Decision:
    launch: int = 0
    drain: tuple[tuple[str, DrainReason], ...] = ()
    undrain: tuple[str, ...] = ()
    terminate: tuple[str, ...] = ()
    forget: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def acts(self) -> bool:
        return bool(self.launch or self.drain or self.undrain or self.terminate or self.forget)


def wanted_instances(limits: Limits, demand: Demand) -> tuple[int, int]:
    """(instances the waiting work needs, requests no instance of this shape can ever hold)."""
    slot_sum = zero_slot = never = 0
    for slots in demand.pending_slots:
        if slots == 0:
            zero_slot += 1
        elif fits_shape(slots, limits.instance_slots):
            slot_sum += slots
        else:
            never += 1
    by_slots = math.ceil(slot_sum / limits.instance_slots) if limits.instance_slots > 0 else 0
    by_aux = math.ceil(zero_slot / max(1, limits.max_aux_per_instance))
    return max(by_slots, by_aux), never


def decide(limits: Limits, instances: list[Instance], demand: Demand, now: float) -> Decision:
    reasons: list[str] = []
    forget: list[str] = []
    terminate: list[str] = []
    drain: list[tuple[str, DrainReason]] = []
    undrain: list[str] = []

    live: list[Instance] = []
    for inst in instances:
        if inst.phase == Phase.GONE:
            continue
        if inst.phase == Phase.TERMINATING:
            if not inst.exists:
                forget.append(inst.id)
            continue  # asked already; the provider finishes it
        if not inst.exists and inst.phase != Phase.LAUNCHING:
            forget.append(inst.id)
            reasons.append(f"{inst.id}: the provider no longer reports it")
            continue
        live.append(inst)

    # Broken instances: never connected in time, or away too long.
    healthy: list[Instance] = []
    for inst in live:
        starting = inst.phase in (Phase.LAUNCHING, Phase.STARTING) and not inst.connected
        if starting and now - inst.launched_at > limits.max_agent_starting_period_s:
            terminate.append(inst.id)
            reasons.append(
                f"{inst.id}: its agent did not connect within {limits.max_agent_starting_period_s:g} s"
            )
        elif (
            inst.disconnected_since is not None
            and not inst.connected
            and now - inst.disconnected_since > limits.max_disconnected_s
        ):
            terminate.append(inst.id)
            reasons.append(f"{inst.id}: its agent has been away for over {limits.max_disconnected_s:g} s")
        else:
            healthy.append(inst)

    # Drained instances with nothing left on them are retired now.
    remaining: list[Instance] = []
    for inst in healthy:
        if inst.phase == Phase.DRAINING and inst.connected and not inst.busy:
            terminate.append(inst.id)
            reasons.append(f"{inst.id}: drained ({inst.drain_reason or 'retired'}) with nothing running")
        else:
            remaining.append(inst)

    wanted, never = wanted_instances(limits, demand)
    if never:
        reasons.append(
            f"{never} pending request(s) need more slots than an instance has "
            f"({limits.instance_slots}) and are not a multiple of it: no instance is launched for them"
        )
    serving = [i for i in remaining if i.phase != Phase.DRAINING]
    idle_drained = [i for i in remaining if i.phase == Phase.DRAINING and i.drain_reason == DrainReason.IDLE]
    on_the_way = [i for i in serving if not i.connected]
    free = [i for i in serving if i.connected and not i.busy]
    # Capacity that takes the waiting work without a launch: instances still starting, and
    # connected ones with nothing to do (the scheduler has not placed on them yet).
    need = wanted - len(on_the_way) - len(free)

    # Work has arrived: take back instances drained only for idleness, before launching any.
    while need > 0 and idle_drained:
        inst = idle_drained.pop(0)
        undrain.append(inst.id)
        serving.append(inst)
        need -= 1
        reasons.append(f"{inst.id}: taken back from draining, work is waiting")

    # Idle too long: drained, but only those the waiting work does not need, and while more than
    # min_instances would remain.
    count = len(serving)
    spare = len(free) - max(0, wanted - len(on_the_way))
    for inst in sorted(free, key=lambda i: (i.idle_since if i.idle_since is not None else now, i.id)):
        if spare <= 0 or count <= limits.min_instances:
            break
        if inst.idle_since is not None and now - inst.idle_since > limits.max_idle_agent_period_s:
            drain.append((inst.id, DrainReason.IDLE))
            spare -= 1
            count -= 1
            reasons.append(
                f"{inst.id}: idle for {now - inst.idle_since:.0f} s (max_idle_agent_period "
                f"{limits.max_idle_agent_period_s:g} s)"
            )

    # Over max_instances (the limit was lowered): retire the least useful first: those still
    # starting, idle ones, then the newest busy ones.
    if count > limits.max_instances:
        drained = {i for i, _ in drain}
        candidates = sorted(
            (i for i in serving if i.id not in drained),
            key=lambda i: (i.connected, i.busy, -i.launched_at, i.id),
        )
        for inst in candidates[: count - limits.max_instances]:
            if inst.connected:
                drain.append((inst.id, DrainReason.SHRINK))
            else:
                terminate.append(inst.id)
            reasons.append(f"{inst.id}: the pool is over max_instances ({limits.max_instances})")
        count = limits.max_instances

    # Every instance not yet terminated counts against max_instances, draining ones included: the
    # cap is on what the provider runs, not on what takes work.
    retiring = {*terminate, *(i for i, _ in drain)}
    alive = len([i for i in remaining if i.id not in retiring])
    room = max(0, limits.max_instances - alive)
    launch = max(0, min(max(limits.min_instances - count, need), room))
    if launch:
        why = []
        if need > 0:
            why.append(f"{len(demand.pending_slots)} pending request(s) want {wanted} instance(s)")
        if limits.min_instances > count:
            why.append(f"min_instances is {limits.min_instances}")
        reasons.append(f"launch {launch}: " + "; ".join(why))
    elif need > 0 and room == 0:
        reasons.append(f"work is waiting but the pool is at max_instances ({limits.max_instances})")
    return Decision(
        launch=launch,
        drain=tuple(drain),
        undrain=tuple(undrain),
        terminate=tuple(terminate),
        forget=tuple(forget),
        reasons=tuple(reasons),
    )
