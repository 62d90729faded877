"""The hub's connected and placeable agents are kept between changes (a pass asks several times,
the scheduling loop at every wake-up): every change of membership must show in the next answer."""

from __future__ import annotations

from services.master.domain.scheduling.agent_hub import AgentHub


def test_connected_and_placeable_agents_follow_every_change_of_membership() -> None:
    hub = AgentHub()
    assert hub.connected_ids() == frozenset()
    a1 = hub.attach("a1")
    a2 = hub.attach("a2")
    assert hub.connected_ids() == {"a1", "a2"}
    assert hub.placeable_ids() == {"a1", "a2"}
    # Asked again with nothing changed: the same answer, not a new walk over the links.
    assert hub.placeable_ids() is hub.placeable_ids()
    assert hub.connected_ids() is hub.connected_ids()

    hub.mark_stopping("a1")  # takes no new work, still connected
    assert hub.connected_ids() == {"a1", "a2"}
    assert hub.placeable_ids() == {"a2"}

    a2.close()  # its stream ended: closed before it is detached
    assert hub.connected_ids() == {"a1"}
    assert hub.placeable_ids() == frozenset()
    hub.detach(a2)
    assert hub.connected_ids() == {"a1"}

    replaced = hub.attach("a1")  # a new stream: the old one closes, and stopping is forgotten
    assert a1.closed.is_set()
    assert hub.placeable_ids() == {"a1"}

    hub.refuse("a1", "revoked")
    assert replaced.closed.is_set()
    assert hub.connected_ids() == frozenset()
    assert hub.placeable_ids() == frozenset()

    hub.attach("a3")
    assert hub.placeable_ids() == {"a3"}
    hub.close_all()
    assert hub.connected_ids() == frozenset()
    assert hub.placeable_ids() == frozenset()
