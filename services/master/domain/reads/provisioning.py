"""What a pool's provisioner shows: its live instances and its recent decisions (newest first)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.master.store import models

SHOWN_EVENTS = 20


@dataclass(frozen=True)
class ProvisioningView:
    instances: list[models.ProvisionedInstance]
    events: list[models.ProvisionerEvent]

    @property
    def last_error(self) -> str:
        """The provider's failure while it persists: the newest event, when it is one."""
        if self.events and self.events[0].action == "error":
            return self.events[0].message
        return ""


def pool_provisioning(s: Session, pool: str, events: int = SHOWN_EVENTS) -> ProvisioningView:
    instances = list(
        s.scalars(
            select(models.ProvisionedInstance)
            .where(
                models.ProvisionedInstance.resource_pool == pool, models.ProvisionedInstance.phase != "GONE"
            )
            .order_by(models.ProvisionedInstance.launched_at, models.ProvisionedInstance.id)
        )
    )
    recent = list(
        s.scalars(
            select(models.ProvisionerEvent)
            .where(models.ProvisionerEvent.resource_pool == pool)
            .order_by(models.ProvisionerEvent.id.desc())
            .limit(events)
        )
    )
    return ProvisioningView(instances, recent)


@dataclass(frozen=True)
class ProvisioningCounts:
    """Per pool, for /metrics: instances by phase, launches and retirements ever, idle seconds."""

    by_phase: list[tuple[str, str, int]]
    launched: list[tuple[str, int]]
    retired: list[tuple[str, int]]
    idle_seconds: list[tuple[str, float]]


def provisioning_counts(s: Session, now: datetime) -> ProvisioningCounts:
    instance = models.ProvisionedInstance
    by_phase = [
        (str(pool), str(phase), int(n))
        for pool, phase, n in s.execute(
            select(instance.resource_pool, instance.phase, func.count())
            .where(instance.phase != "GONE")
            .group_by(instance.resource_pool, instance.phase)
        )
    ]
    launched = [
        (str(pool), int(n))
        for pool, n in s.execute(
            select(instance.resource_pool, func.count()).group_by(instance.resource_pool)
        )
    ]
    retired = [
        (str(pool), int(n))
        for pool, n in s.execute(
            select(instance.resource_pool, func.count())
            .where(instance.phase == "GONE")
            .group_by(instance.resource_pool)
        )
    ]
    idle: dict[str, float] = {}
    for pool, since in s.execute(
        select(instance.resource_pool, instance.idle_since).where(
            instance.phase != "GONE", instance.idle_since.is_not(None)
        )
    ):
        if since is None:
            continue
        start = since if since.tzinfo else since.replace(tzinfo=UTC)
        idle[str(pool)] = idle.get(str(pool), 0.0) + max(0.0, (now - start).total_seconds())
    return ProvisioningCounts(by_phase, launched, retired, sorted(idle.items()))
