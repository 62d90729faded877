"""Read models for the API: experiments with their trial aggregates, trials, agents with slots.

Lists are built with a fixed number of queries whatever their length (one for the page, one per
aggregate over the page's ids), never one query per row.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, defer

from services.common.lru import BoundedLru
from services.master.domain.config import config_view
from services.master.domain.kernel.paging import DEFAULT_LIMIT, Page, page_of
from services.master.domain.kernel.states import LIVE_ALLOCATION, CheckpointState, RunState
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.reads import visibility
from services.master.domain.reads.display_states import experiment_display_states, trial_display_states
from services.master.domain.reads.workspaces import ExperimentPlace, experiment_places
from services.master.store import models


@dataclass
class TrialAggregate:
    trial_ids: list[int] = field(default_factory=list)
    best_metric: float | None = None
    best_trial_id: int | None = None
    states: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ExperimentConfig:
    """An experiment's configuration and what derives from it. Cached by (id, start time, config
    version), so lists need not load and parse every config on every read; an edit moves the
    version, so a changed config is never served from the cache."""

    key: tuple[int, datetime, int]
    config: dict[str, Any]
    original_config: str
    smaller_is_better: bool


class _ConfigCache:
    def __init__(self, max_entries: int = 20_000) -> None:
        self._entries: BoundedLru[tuple[int, datetime, int], ExperimentConfig] = BoundedLru(max_entries)

    def get_many(self, s: Session, experiments: list[models.Experiment]) -> dict[int, ExperimentConfig]:
        found: dict[int, ExperimentConfig] = {}
        missing: dict[int, tuple[int, datetime, int]] = {}
        for exp in experiments:
            key = (exp.id, exp.start_time, exp.config_version)
            entry = self._entries.get(key)
            if entry is None:
                missing[exp.id] = key
            else:
                found[exp.id] = entry
        if missing:
            rows = s.execute(
                select(
                    models.Experiment.id, models.Experiment.config, models.Experiment.original_config
                ).where(models.Experiment.id.in_(list(missing)))
            )
            loaded = {}
            for experiment_id, config, original in rows:
                entry = ExperimentConfig(
                    missing[experiment_id], config, original, config_view(config).smaller_is_better
                )
                found[experiment_id] = loaded[entry.key] = entry
            self._entries.put_many(loaded)
        return found


EXPERIMENT_CONFIGS = _ConfigCache()


def without_configs(query: Select[models.Experiment]) -> Select[models.Experiment]:
    """Experiment rows without their (large) config columns: use EXPERIMENT_CONFIGS for those."""
    return query.options(defer(models.Experiment.config), defer(models.Experiment.original_config))


@dataclass
class ExperimentRow:
    experiment: models.Experiment
    static: ExperimentConfig
    username: str
    display_name: str
    trials: TrialAggregate
    # The state the API answers (display_states.py): ACTIVE shown as its allocations' progress.
    state: str
    checkpoint_count: int = 0
    checkpoint_size: int = 0
    allocation_states: dict[str, int] = field(default_factory=dict)
    # Its project and workspace.
    place: ExperimentPlace | None = None


def _trial_aggregates(
    s: Session, experiments: list[models.Experiment], configs: dict[int, ExperimentConfig]
) -> dict[int, TrialAggregate]:
    result: dict[int, TrialAggregate] = {e.id: TrialAggregate() for e in experiments}
    if not experiments:
        return result
    direction = {e.id: configs[e.id].smaller_is_better for e in experiments}
    rows = s.execute(
        select(
            models.Trial.experiment_id,
            models.Trial.id,
            models.Trial.state,
            models.Trial.searcher_metric_value,
        )
        .where(models.Trial.experiment_id.in_(list(result)))
        .order_by(models.Trial.id)
    )
    for experiment_id, trial_id, state, metric in rows:
        agg = result[experiment_id]
        agg.trial_ids.append(trial_id)
        agg.states[state] = agg.states.get(state, 0) + 1
        if metric is None:
            continue
        better = agg.best_metric is None or (
            metric < agg.best_metric if direction[experiment_id] else metric > agg.best_metric
        )
        if better:
            agg.best_metric, agg.best_trial_id = metric, trial_id
    return result


def _checkpoint_aggregates(s: Session, ids: list[int]) -> dict[int, tuple[int, int]]:
    if not ids:
        return {}
    rows = s.execute(
        select(
            models.Trial.experiment_id,
            func.count(models.Checkpoint.uuid),
            func.coalesce(func.sum(models.Checkpoint.size), 0),
        )
        .join(models.Checkpoint, models.Checkpoint.trial_id == models.Trial.id)
        .where(models.Trial.experiment_id.in_(ids), models.Checkpoint.state == CheckpointState.COMPLETED)
        .group_by(models.Trial.experiment_id)
    )
    return {experiment_id: (int(count), int(size)) for experiment_id, count, size in rows}


def _allocation_states(s: Session, ids: list[int]) -> dict[int, dict[str, int]]:
    result: dict[int, dict[str, int]] = defaultdict(dict)
    if not ids:
        return result
    rows = s.execute(
        select(models.Trial.experiment_id, models.Allocation.state, func.count())
        .join(models.Allocation, models.Allocation.trial_id == models.Trial.id)
        .where(models.Trial.experiment_id.in_(ids), models.Allocation.state.in_(list(LIVE_ALLOCATION)))
        .group_by(models.Trial.experiment_id, models.Allocation.state)
    )
    for experiment_id, state, count in rows:
        result[experiment_id][state] = int(count)
    return result


def experiment_rows(s: Session, experiments: list[models.Experiment]) -> list[ExperimentRow]:
    ids = [e.id for e in experiments]
    users = {
        u.id: u
        for u in s.scalars(select(models.User).where(models.User.id.in_({e.owner_id for e in experiments})))
    }
    configs = EXPERIMENT_CONFIGS.get_many(s, experiments)
    trials = _trial_aggregates(s, experiments, configs)
    checkpoints = _checkpoint_aggregates(s, ids)
    allocs = _allocation_states(s, ids)
    places = experiment_places(s, {e.project_id for e in experiments})
    shown = experiment_display_states(s, experiments)
    rows = []
    for exp in experiments:
        owner = users.get(exp.owner_id)
        count, size = checkpoints.get(exp.id, (0, 0))
        rows.append(
            ExperimentRow(
                experiment=exp,
                static=configs[exp.id],
                username=owner.username if owner else "",
                display_name=owner.display_name if owner else "",
                trials=trials[exp.id],
                state=shown[exp.id],
                checkpoint_count=count,
                checkpoint_size=size,
                allocation_states=dict(allocs.get(exp.id, {})),
                place=places.get(exp.project_id),
            )
        )
    return rows


@dataclass(frozen=True)
class ExperimentFilter:
    name: str = ""
    description: str = ""
    labels: tuple[str, ...] = ()
    archived: bool | None = None
    states: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    user_ids: tuple[int, ...] = ()
    # 0: every project.
    project_id: int = 0
    # The workspaces the caller may read (None: all): reads/visibility.py.
    workspaces: frozenset[int] | None = None


SORT_COLUMNS = {
    "id": models.Experiment.id,
    "description": models.Experiment.description,
    "start_time": models.Experiment.start_time,
    "end_time": models.Experiment.end_time,
    "state": models.Experiment.state,
    "progress": models.Experiment.progress,
    "name": models.Experiment.name,
    "resource_pool": models.Experiment.resource_pool,
    "forked_from": models.Experiment.parent_id,
    "user": models.User.username,
    "project_id": models.Experiment.project_id,
}


def _filtered(f: ExperimentFilter) -> Select[models.Experiment]:
    q = without_configs(
        select(models.Experiment)
        .join(models.User, models.User.id == models.Experiment.owner_id)
        .where(models.Experiment.state.not_in([RunState.DELETING, RunState.DELETED]))
    )
    if f.name:
        q = q.where(models.Experiment.name.contains(f.name, autoescape=True))
    if f.description:
        q = q.where(models.Experiment.description.contains(f.description, autoescape=True))
    if f.archived is not None:
        q = q.where(models.Experiment.archived.is_(f.archived))
    if f.states:
        q = q.where(models.Experiment.state.in_(f.states))
    if f.users:
        q = q.where(models.User.username.in_(f.users))
    if f.user_ids:
        q = q.where(models.Experiment.owner_id.in_(f.user_ids))
    if f.project_id:
        q = q.where(models.Experiment.project_id == f.project_id)
    return visibility.experiments(q, f.workspaces)


def _experiment_order(sort: str, descending: bool) -> list[Any]:
    column = SORT_COLUMNS.get(sort)
    if sort == "num_trials":
        trial_count = (
            select(func.count(models.Trial.id)).where(models.Trial.experiment_id == models.Experiment.id)
        ).scalar_subquery()
        order = [trial_count.desc() if descending else trial_count.asc()]
    elif sort == "searcher_metric_val":
        best = (
            select(func.min(models.Trial.searcher_metric_value))
            .where(models.Trial.experiment_id == models.Experiment.id)
            .scalar_subquery()
        )
        order = [best.desc() if descending else best.asc()]
    else:
        column = column if column is not None else models.Experiment.id
        order = [column.desc() if descending else column.asc()]
    order.append(models.Experiment.id.desc() if descending else models.Experiment.id.asc())
    return order


def list_experiment_ids(
    s: Session, f: ExperimentFilter, *, sort: str, descending: bool, offset: int, limit: int
) -> tuple[list[int], Page]:
    """The ids on the requested page, in order, and the page (total included)."""
    q = _filtered(f)
    if f.labels:
        # Labels live in a JSON list; filter in Python over the (small) candidate set's ids.
        candidates = [e for e in s.scalars(q) if set(f.labels) <= set(e.labels or [])]
        ids = [e.id for e in candidates]
        q = _filtered(ExperimentFilter(workspaces=f.workspaces)).where(models.Experiment.id.in_(ids))
    order = _experiment_order(sort, descending)
    if offset >= 0:
        # One round trip for the page and the total; only an empty page needs a count of its own.
        effective_limit = DEFAULT_LIMIT if limit == 0 else limit
        counted = q.with_only_columns(models.Experiment.id, func.count().over()).order_by(*order)
        counted = counted.offset(offset)
        if effective_limit >= 0:
            counted = counted.limit(effective_limit)
        rows = s.execute(counted).all()
        if rows:
            return [row[0] for row in rows], page_of(int(rows[0][1]), offset, limit)
    total = int(s.scalar(select(func.count()).select_from(q.subquery())) or 0)
    page = page_of(total, offset, limit)
    on_page = q.with_only_columns(models.Experiment.id).order_by(*order).offset(page.start)
    if page.limit >= 0:
        on_page = on_page.limit(page.end - page.start)
    return list(s.scalars(on_page)), page


def experiment_rows_by_id(s: Session, ids: list[int]) -> list[ExperimentRow]:
    """The listing rows of these experiments, in the order of `ids` (missing ids are left out)."""
    if not ids:
        return []
    found = {
        e.id: e
        for e in s.scalars(without_configs(select(models.Experiment).where(models.Experiment.id.in_(ids))))
    }
    return experiment_rows(s, [found[i] for i in ids if i in found])


def best_trials(s: Session, ids: list[int | None]) -> dict[int, TrialRow]:
    """The rows of the trials named (experiments' best trials, TrialAggregate.best_trial_id), by id;
    None (an experiment with no best trial yet) names none."""
    wanted = sorted({i for i in ids if i is not None})
    if not wanted:
        return {}
    found = list(s.scalars(select(models.Trial).where(models.Trial.id.in_(wanted))))
    return {row.trial.id: row for row in trial_rows(s, found)}


@dataclass
class TrialRow:
    trial: models.Trial
    allocation: models.Allocation | None
    task_ids: list[str]
    # The state the API answers (display_states.py): ACTIVE shown as its allocations' progress.
    state: str
    checkpoint_count: int = 0
    checkpoint_size: int = 0
    best_validation: models.Metric | None = None
    latest_validation: models.Metric | None = None
    best_checkpoint: models.Checkpoint | None = None


def trial_rows(s: Session, trials: list[models.Trial]) -> list[TrialRow]:
    ids = [t.id for t in trials]
    if not ids:
        return []
    latest_alloc: dict[int, models.Allocation] = {}
    for alloc in s.scalars(
        select(models.Allocation)
        .where(models.Allocation.trial_id.in_(ids))
        .order_by(models.Allocation.run_id)
    ):
        latest_alloc[int(alloc.trial_id or 0)] = alloc
    metric_ids = {i for t in trials for i in (t.best_validation_id, t.latest_validation_id) if i is not None}
    metric_rows = (
        {m.id: m for m in s.scalars(select(models.Metric).where(models.Metric.id.in_(metric_ids)))}
        if metric_ids
        else {}
    )
    best_steps = {
        t.id: metric_rows[t.best_validation_id].steps_completed
        for t in trials
        if t.best_validation_id in metric_rows
    }
    best_checkpoints: dict[int, models.Checkpoint] = {}
    if best_steps:
        for ck in s.scalars(
            select(models.Checkpoint).where(
                models.Checkpoint.trial_id.in_(list(best_steps)),
                models.Checkpoint.state == CheckpointState.COMPLETED,
            )
        ):
            if ck.steps_completed == best_steps.get(ck.trial_id):
                best_checkpoints[ck.trial_id] = ck
    ckpts: dict[int, tuple[int, int]] = {}
    for trial_id, count, size in s.execute(
        select(models.Checkpoint.trial_id, func.count(), func.coalesce(func.sum(models.Checkpoint.size), 0))
        .where(models.Checkpoint.trial_id.in_(ids), models.Checkpoint.state == CheckpointState.COMPLETED)
        .group_by(models.Checkpoint.trial_id)
    ):
        ckpts[trial_id] = (int(count), int(size))
    shown = trial_display_states(s, trials)
    return [
        TrialRow(
            trial=t,
            allocation=latest_alloc.get(t.id),
            task_ids=[trial_task_id(t.experiment_id, t.request_id)],
            state=shown[t.id],
            checkpoint_count=ckpts.get(t.id, (0, 0))[0],
            checkpoint_size=ckpts.get(t.id, (0, 0))[1],
            best_validation=metric_rows.get(t.best_validation_id) if t.best_validation_id else None,
            latest_validation=metric_rows.get(t.latest_validation_id) if t.latest_validation_id else None,
            best_checkpoint=best_checkpoints.get(t.id),
        )
        for t in trials
    ]
