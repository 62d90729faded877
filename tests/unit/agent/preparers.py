"""The Preparer (services/agent/containers/preparation.py) as the mount tests make one: agent "a1"
with one CPU slot, no model definition to fetch, PATH alone in its environment."""

from __future__ import annotations

from services.agent.containers.preparation import Preparer
from services.agent.slots import cpu_slots


def one_slot_preparer(*, private: bool) -> Preparer:
    """`private`: the agent makes private mount namespaces (it runs as root)."""
    return Preparer(
        agent_id="a1",
        slots=cpu_slots("a1", 1, brand="cpu"),
        fetch_context=lambda _allocation: iter(()),
        base_env={"PATH": "/bin"},
        private_mounts=private,
    )
