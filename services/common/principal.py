"""Who is calling a service. Kept apart from gRPC so domain code can take it as an argument."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Principal:
    """A user (by session token), a running allocation (by its token), an agent (by its own
    credential), or an internal caller."""

    user_id: int | None = None
    username: str = ""
    admin: bool = False
    allocation_id: str | None = None
    # Set for internal callers that presented the cluster token (or, to the master's gateway
    # service alone, the per-boot gateway key).
    internal: bool = False
    # An agent that presented its own credential: the agent id it was issued to, the only one it
    # may speak as (the master's agent service checks every hello and request against it).
    agent_id: str | None = None
    # What a user may do, as the master's access module computed it for this call
    # (services/master/domain/identity/grants.py): set where the caller is established, so a call
    # computes it once. Not part of the caller's identity: never compared.
    grants: object | None = field(default=None, compare=False, repr=False)
