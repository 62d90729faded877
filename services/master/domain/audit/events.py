"""One audited call, as the edge hands it over: small, immutable, bounded before it is queued (a
failed login's name or an error message may be as long as the request allowed, and a full queue
holds ten thousand of these)."""

from __future__ import annotations

from typing import NamedTuple

# Who called: a user (by session), trial code (by its allocation's token), an agent, the cluster's
# own services (by the cluster token), or a caller whose credentials were not established.
USER = "user"
ALLOCATION = "allocation"
AGENT = "agent"
CLUSTER = "cluster"
ANONYMOUS = "anonymous"
ACTORS = (USER, ALLOCATION, AGENT, CLUSTER, ANONYMOUS)

OK = "OK"

# Column sizes (store/models.py AuditEvent): values are cut to these before they are queued.
MAX_USERNAME = 128
MAX_METHOD = 128
MAX_ERROR = 512
MAX_ADDRESS = 128
MAX_ALLOCATION_ID = 128


def bounded(text: str, most: int) -> str:
    """`text` cut to `most` characters, marked as cut."""
    return text if len(text) <= most else text[: most - 1] + "…"


class AuditRecord(NamedTuple):
    """A call that changed something or tried to. `at`: seconds since the epoch when it arrived;
    `targets`: the objects its request named (targets.encode stores them). A named tuple: made
    on every audited call, where a frozen dataclass cost ten times as much to build."""

    at: float
    method: str
    outcome: str
    actor: str
    user_id: int | None = None
    username: str = ""
    allocation_id: str = ""
    targets: tuple[tuple[str, str], ...] = ()
    error: str = ""
    address: str = ""
    transport: str = ""
    duration_ms: float = 0.0
