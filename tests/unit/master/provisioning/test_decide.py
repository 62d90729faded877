"""The provisioner's decision, with worked examples: what a pool with these limits, these
instances and this waiting work launches, drains, takes back and terminates, and why."""

from __future__ import annotations

from services.master.configuration.provider import Limits
from services.master.domain.provisioning.decide import (
    Demand,
    DrainReason,
    Instance,
    Phase,
    decide,
    wanted_instances,
)
from services.master.domain.scheduling.shapes import fits_shape

LIMITS = Limits(
    min_instances=0,
    max_instances=3,
    instance_slots=1,
    max_idle_agent_period_s=30,
    max_agent_starting_period_s=60,
    max_disconnected_s=120,
    max_aux_per_instance=4,
)
NOW = 1000.0


def running(name: str, *, busy: bool = False, idle_for: float = 0, launched: float = 0) -> Instance:
    return Instance(
        name,
        Phase.RUNNING,
        launched_at=launched,
        connected=True,
        busy=busy,
        idle_since=None if busy else NOW - idle_for,
    )


def starting(name: str, *, age: float = 5) -> Instance:
    return Instance(name, Phase.STARTING, launched_at=NOW - age)


def test_six_one_slot_trials_on_an_empty_pool_launch_up_to_the_maximum() -> None:
    decision = decide(LIMITS, [], Demand((1,) * 6), NOW)
    assert decision.launch == 3
    assert decision.reasons[-1] == "launch 3: 6 pending request(s) want 6 instance(s)"


def test_instances_on_the_way_and_free_ones_count_before_launching_more() -> None:
    # 3 waiting; one instance starting, one connected with nothing yet: one more is launched.
    decision = decide(LIMITS, [starting("a"), running("b")], Demand((1, 1, 1)), NOW)
    assert (decision.launch, decision.drain, decision.terminate) == (1, (), ())


def test_at_the_maximum_nothing_is_launched_and_the_reason_says_so() -> None:
    busy = [running(n, busy=True) for n in "abc"]
    decision = decide(LIMITS, busy, Demand((1, 1)), NOW)
    assert decision.launch == 0 and not decision.acts
    assert "at max_instances (3)" in decision.reasons[-1]


def test_min_instances_are_kept_launched_without_work() -> None:
    limits = Limits(**{**LIMITS.__dict__, "min_instances": 2})
    assert decide(limits, [], Demand(), NOW).launch == 2
    # ... and an idle one is not retired below the minimum.
    idle = [running("a", idle_for=500), running("b", idle_for=500)]
    assert decide(limits, idle, Demand(), NOW).drain == ()
    three = [*idle, running("c", idle_for=500)]
    assert [i for i, _ in decide(limits, three, Demand(), NOW).drain] == ["a"]


def test_idle_instances_are_drained_first_and_terminated_once_drained() -> None:
    idle = running("a", idle_for=31)
    fresh = running("b", idle_for=10)
    decision = decide(LIMITS, [idle, fresh], Demand(), NOW)
    assert decision.drain == (("a", DrainReason.IDLE),) and decision.terminate == ()
    assert "idle for 31 s" in decision.reasons[0]
    drained = Instance("a", Phase.DRAINING, 0, connected=True, drain_reason=DrainReason.IDLE)
    assert decide(LIMITS, [drained, fresh], Demand(), NOW).terminate == ("a",)


def test_a_draining_instance_with_work_on_it_is_not_terminated() -> None:
    # Work was placed on it between the decision and the drain: it finishes first.
    drained = Instance("a", Phase.DRAINING, 0, connected=True, busy=True, drain_reason=DrainReason.IDLE)
    assert decide(LIMITS, [drained], Demand(), NOW).terminate == ()


def test_work_arriving_takes_back_an_idle_drained_instance_instead_of_launching() -> None:
    drained = Instance("a", Phase.DRAINING, 0, connected=True, busy=True, drain_reason=DrainReason.IDLE)
    decision = decide(LIMITS, [drained], Demand((1,)), NOW)
    assert (decision.undrain, decision.launch) == (("a",), 0)


def test_an_idle_instance_the_waiting_work_needs_is_not_drained() -> None:
    # Idle for long because nothing came, and now a request waits for the scheduler's next pass.
    decision = decide(LIMITS, [running("a", idle_for=500)], Demand((1,)), NOW)
    assert (decision.drain, decision.launch) == ((), 0)


def test_an_agent_that_never_connects_is_terminated_and_replaced() -> None:
    decision = decide(LIMITS, [starting("a", age=61)], Demand((1,)), NOW)
    assert decision.terminate == ("a",) and decision.launch == 1
    assert "did not connect within 60 s" in decision.reasons[0]


def test_an_agent_away_too_long_is_terminated() -> None:
    away = Instance("a", Phase.RUNNING, 0, connected=False, disconnected_since=NOW - 121)
    assert decide(LIMITS, [away], Demand(), NOW).terminate == ("a",)
    briefly = Instance("a", Phase.RUNNING, 0, connected=False, disconnected_since=NOW - 30)
    assert decide(LIMITS, [briefly], Demand(), NOW).terminate == ()


def test_instances_the_provider_no_longer_reports_are_forgotten() -> None:
    vanished = Instance("a", Phase.RUNNING, 0, exists=False, connected=False)
    done = Instance("b", Phase.TERMINATING, 0, exists=False)
    decision = decide(LIMITS, [vanished, done], Demand(), NOW)
    assert decision.forget == ("a", "b")


def test_a_lowered_maximum_drains_the_least_useful_and_launches_nothing() -> None:
    limits = Limits(**{**LIMITS.__dict__, "max_instances": 1})
    instances = [running("a", busy=True, launched=1), running("b", busy=True, launched=2), starting("c")]
    decision = decide(limits, instances, Demand((1,)), NOW)
    assert decision.terminate == ("c",)  # still starting: nothing to lose
    assert decision.drain == (("b", DrainReason.SHRINK),)  # the newest busy one
    assert decision.launch == 0
    # A shrink-drained instance is not taken back for new work.
    b = Instance("b", Phase.DRAINING, 2, connected=True, busy=True, drain_reason=DrainReason.SHRINK)
    assert decide(limits, [running("a", busy=True), b], Demand((1,)), NOW).undrain == ()


def test_gang_requests_count_whole_instances_and_misfits_are_named() -> None:
    two = Limits(**{**LIMITS.__dict__, "instance_slots": 2, "max_instances": 10})
    assert fits_shape(4, 2) and fits_shape(1, 2) and not fits_shape(3, 2)
    assert wanted_instances(two, Demand((4, 1, 1, 3))) == (3, 1)  # (4+1+1)/2; the 3 never fits
    decision = decide(two, [], Demand((4, 3)), NOW)
    assert decision.launch == 2
    assert "not a multiple" in decision.reasons[0]


def test_zero_slot_work_wants_an_instance_per_aux_capacity() -> None:
    assert wanted_instances(LIMITS, Demand((0,) * 9)) == (3, 0)  # 4 per instance
