"""Whose a container is (its task, trial and experiment, allocation and agent), for what agents
send by container id alone: log lines and system-metric samples. A container's owner never changes
once it exists, so it is read once and remembered; what a batch does not find here is read in one
statement."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import bindparam, select

from services.master.domain.kernel.context import MasterContext
from services.master.store import models

# Remembered containers at most (a cache emptied when full: at ~200 bytes an owner, 10 MB).
MAX_REMEMBERED = 50_000
# Ids per read: SQLite binds at most 32,766 parameters, PostgreSQL 65,535; a batch has far fewer.
IDS_PER_READ = 500


# Built once (a statement built per call cost its build and cache key each time); the ids expand.
_OWNERS = (
    select(
        models.Container.id,
        models.Allocation.task_id,
        models.Allocation.trial_id,
        models.Allocation.id,
        models.Container.agent_id,
        models.Trial.experiment_id,
        models.Experiment.config_version,
    )
    .select_from(models.Container)
    .join(models.Allocation, models.Allocation.id == models.Container.allocation_id)
    .outerjoin(models.Trial, models.Trial.id == models.Allocation.trial_id)
    .outerjoin(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
    .where(models.Container.id.in_(bindparam("ids", expanding=True)))
)


@dataclass(frozen=True)
class ContainerOwner:
    task_id: str
    trial_id: int | None
    allocation_id: str
    agent_id: str
    # The trial's experiment (whose log policies its lines are matched against) and the version
    # of its config when the container was made (a continued experiment's may differ); None for
    # a task that is no trial.
    experiment_id: int | None = None
    config_version: int = 0


class ContainerOwners:
    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self._remembered: dict[str, ContainerOwner] = {}
        self._lock = threading.Lock()

    def of(self, container_ids: Iterable[str]) -> dict[str, ContainerOwner]:
        """The owners of those of `container_ids` that exist (an unknown id is left out)."""
        wanted = set(container_ids)
        with self._lock:
            found = {c: o for c in wanted if (o := self._remembered.get(c)) is not None}
        missing = [c for c in wanted if c not in found]
        if not missing:
            return found
        with self._ctx.db.read() as s:
            for start in range(0, len(missing), IDS_PER_READ):
                for row in s.execute(_OWNERS, {"ids": missing[start : start + IDS_PER_READ]}):
                    found[row[0]] = ContainerOwner(
                        task_id=row[1],
                        trial_id=row[2],
                        allocation_id=row[3],
                        agent_id=row[4],
                        experiment_id=row[5],
                        config_version=row[6] or 0,
                    )
        with self._lock:
            if len(self._remembered) > MAX_REMEMBERED:
                self._remembered.clear()
            self._remembered.update({c: found[c] for c in missing if c in found})
        return found
