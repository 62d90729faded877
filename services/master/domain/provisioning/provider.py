"""The one small contract every provider keeps (local processes, Docker containers, EC2): launch
an instance under a given id, list the pool's instances, terminate one. The provisioner's loop
speaks only this; the adapters live in services/master/provisioners/.

Both actions are idempotent by id, which is what makes a master crash safe: an instance is
recorded before it is launched, and a restarted master that finds the record asks again with the
same id; the provider answers "already there" instead of launching a second one (EC2 through its
ClientToken, Docker through the container's name, local agents through their pid file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class ProviderState(StrEnum):
    STARTING = "starting"  # created, not known to be up yet (EC2 pending, a spot request)
    RUNNING = "running"
    STOPPED = "stopped"  # stopping, stopped or terminated: it runs nothing and never will


@dataclass(frozen=True)
class LaunchSpec:
    instance_id: str  # also the id its agent joins with
    resource_pool: str
    slots: int
    # A one-time join token bound to instance_id, for its agent to enrol with (handed to it in
    # $CAIRN_AGENT_JOIN_TOKEN); "" where none was made.
    join_token: str = field(default="", repr=False)


# Where a provider hands the agent its join token (the agent's settings read it there).
JOIN_TOKEN_ENV = "CAIRN_AGENT_JOIN_TOKEN"


@dataclass(frozen=True)
class ProviderInstance:
    id: str
    state: ProviderState


class ProviderError(Exception):
    """A provider could not do what it was asked (quota, credentials, a missing image): its
    message is shown on the pool, and the loop retries with backoff."""


class Provider(Protocol):
    name: str

    def launch(self, spec: LaunchSpec) -> None:
        """Start an instance whose agent joins `spec.resource_pool` as `spec.instance_id`; nothing
        when one with that id exists already."""

    def list(self) -> list[ProviderInstance]:
        """The instances this provider runs for its pool (found by its own tags or records)."""

    def terminate(self, instance_id: str) -> None:
        """Stop the instance for good; nothing when it is gone already."""
