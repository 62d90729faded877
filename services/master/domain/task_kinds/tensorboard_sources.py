"""Which trials a TensorBoard task shows, decided when each of its allocations starts: the trials
named at launch, then the named experiments' trials, at most MAX_TRIALS (as Determined), each with
its experiment's checkpoint storage. So a TensorBoard of a running experiment that restarts picks
up the trials created since."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from services.master.domain.kernel.context import Work
from services.master.domain.reads.experiments import GONE
from services.master.store import models

# The config key the launch records what the TensorBoard shows under (set by the master only).
SOURCES_KEY = "tensorboard"
MAX_TRIALS = 100


def shown_ids(config: dict[str, Any] | None) -> tuple[list[int], list[int]]:
    """(experiment ids, trial ids) a TensorBoard's config says it shows."""
    sources = (config or {}).get(SOURCES_KEY) or {}
    return list(sources.get("experiment_ids") or []), list(sources.get("trial_ids") or [])


def sources(w: Work, task: models.Task) -> list[dict[str, Any]]:
    """The trials a TensorBoard allocation shows, each with its experiment's checkpoint storage:
    the named trials, then the named experiments' trials, at most MAX_TRIALS (the lowest ids)."""
    experiment_ids, trial_ids = shown_ids(task.config)
    q = select(models.Trial.id, models.Trial.experiment_id).join(
        models.Experiment, models.Experiment.id == models.Trial.experiment_id
    )
    q = q.where(models.Experiment.state.not_in(GONE))
    chosen: list[tuple[int, int]] = []
    queries = []
    if trial_ids:
        queries.append(q.where(models.Trial.id.in_(trial_ids)).order_by(models.Trial.id))
    if experiment_ids:
        queries.append(
            q.where(models.Trial.experiment_id.in_(experiment_ids))
            .order_by(models.Trial.id)
            .limit(MAX_TRIALS)
        )
    for query in queries:
        chosen += [
            (int(trial_id), int(experiment_id)) for trial_id, experiment_id in w.session.execute(query)
        ]
    seen: set[int] = set()
    storages: dict[int, Any] = {}
    result: list[dict[str, Any]] = []
    for trial_id, experiment_id in chosen:
        if trial_id in seen or len(result) >= MAX_TRIALS:
            continue
        seen.add(trial_id)
        if experiment_id not in storages:
            exp = w.session.get_one(models.Experiment, experiment_id)
            storages[experiment_id] = (exp.config or {}).get("checkpoint_storage") or {}
        result.append(
            {"experiment_id": experiment_id, "trial_id": trial_id, "storage": storages[experiment_id]}
        )
    return result
