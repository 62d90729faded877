"""The index of agents by their counts (free_index.py) chooses the agent a look at every agent
would: after any sequence of fits, releases, agents joining, changing and leaving, in a pool and
in its copies (which share the index's groups until they change them)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.domain.capacity import AgentCapacity, PoolCapacity
from services.scheduler.domain.fitting import SCORES, Score, best_agent, filed_best_agent
from services.scheduler.domain.free_index import FreeIndex
from services.scheduler.domain.model import FittingPolicy
from tests.unit.scheduler.scheduler_builders import pending


def _agent(number: int, slots: int, enabled: int, takes_new_work: bool) -> AgentCapacity:
    slot_ids = tuple(str(i) for i in range(slots))
    return AgentCapacity(
        f"a{number}", takes_new_work, slot_ids, frozenset(slot_ids[:enabled]), dict.fromkeys(slot_ids)
    )


_agents = st.builds(
    _agent, st.integers(0, 60), st.integers(1, 8), st.integers(0, 8), st.integers(0, 9).map(lambda n: n > 0)
)
# What happens to a pool between fits: a request placed (its id, slots), one released, an agent
# joining or changing, an agent leaving, a copy taken from then on.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("fit"), st.text(min_size=1, max_size=8), st.integers(1, 8)),
        st.tuples(st.just("release"), st.integers(0, 40)),
        st.tuples(st.just("set"), _agents),
        st.tuples(st.just("remove"), st.integers(0, 60)),
        st.tuples(st.just("copy"), st.booleans()),
    ),
    max_size=40,
)


def _looked_at_every_agent(pool: PoolCapacity, request_id: str, slots: int, score: Score) -> str | None:
    request = pending(request_id, slots)
    chosen = best_agent(request, (a for a in pool if a.num_free >= slots), score)
    return chosen.agent_id if chosen is not None else None


def _filed(pool: PoolCapacity, request_id: str, slots: int, score: Score) -> str | None:
    chosen = filed_best_agent(pending(request_id, slots), pool, score)
    return chosen.agent_id if chosen is not None else None


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_agents, max_size=25, unique_by=lambda a: a.agent_id),
    _steps,
    st.sampled_from(list(SCORES.values())),
)
def test_the_index_chooses_what_a_look_at_every_agent_chooses(
    agents: list[AgentCapacity], steps: list[tuple], score: Score
) -> None:
    pool = PoolCapacity({a.agent_id: a for a in agents})
    placed: list[str] = []
    earlier: list[tuple[PoolCapacity, dict[str, tuple[int, int]]]] = []
    for step in steps:
        if step[0] == "fit":
            _, request_id, slots = step
            expected = _looked_at_every_agent(pool, request_id, slots, score)
            assert _filed(pool, request_id, slots, score) == expected
            if expected is not None:
                allocation_id = f"r{len(placed)}"
                pool.take(expected, pool.agents[expected].free_slots()[:slots], allocation_id)
                placed.append(allocation_id)
        elif step[0] == "release" and placed:
            pool.release(placed[step[1] % len(placed)])
        elif step[0] == "set":
            pool.set_agent(step[1])
        elif step[0] == "remove":
            pool.remove_agent(f"a{step[1]}")
        elif step[0] == "copy":
            # One of the two goes on changing, the other is left as it is now.
            copy = pool.copy()
            kept, pool = (pool, copy) if step[1] else (copy, pool)
            earlier.append((kept, {a.agent_id: a.counts for a in kept}))
    # The index of every pool, copies included, files each agent with free slots by its counts.
    for kept, counts in [*earlier, (pool, {a.agent_id: a.counts for a in pool})]:
        assert {a.agent_id: a.counts for a in kept} == counts
        # Looked at inside: each group holds exactly the agents a rebuilt index files there.
        assert kept.free_index()._groups == FreeIndex.of(counts.items())._groups


def test_an_agent_filed_twice_or_missing_is_an_error_not_a_silent_miss() -> None:
    index = FreeIndex.of([("a1", (2, 4))])
    try:
        index.move("a2", (2, 4), (1, 4))
    except AssertionError as exc:
        assert "a2" in str(exc)
    else:
        raise AssertionError("moving an agent that is not filed must fail")


def test_an_original_changed_after_its_copy_leaves_the_copy_as_it_was() -> None:
    slot_ids = ("0", "1", "2", "3")
    base = PoolCapacity(
        {"a": AgentCapacity("a", True, slot_ids, frozenset(slot_ids), dict.fromkeys(slot_ids))}
    )
    copy = base.copy()
    base.take("a", ["0", "1", "2"], "x")
    assert copy.agents["a"].num_free == 4 and base.agents["a"].num_free == 1
    chosen = filed_best_agent(pending("r", 4), copy, SCORES[FittingPolicy.BEST])
    assert chosen is not None and chosen.free_slots() == list(slot_ids)
