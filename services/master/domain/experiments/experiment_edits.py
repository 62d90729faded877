"""Changing an experiment after creation (Determined's PatchExperiment and job-queue updates): its
name, description, notes and labels, and what the scheduler acts on (priority, weight, max_slots,
resource pool) and the checkpoint GC policy.

An edit is validated whole before anything is written: the patched configuration must pass the
same schema as at creation, so a refused edit changes nothing. Scheduler-facing edits reach the
running experiment at the next scheduling pass: its live allocations take the new priority (a
higher one may preempt lower work), and a lower max_slots gracefully preempts the allocations
above it, newest first (their trials queue again and wait under the cap)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from services.master.domain.allocations import stops
from services.master.domain.config.validation import validate_config
from services.master.domain.config.view import config_view
from services.master.domain.kernel import deferred_work
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import LIVE_ALLOCATION, PLACED_ALLOCATION, TERMINAL
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.topics import experiment_topic
from services.master.domain.workspaces import pool_bindings
from services.master.store import models

MAX_NAME_CHARS = 512
MAX_DESCRIPTION_CHARS = 16_384
MAX_NOTES_CHARS = 1_048_576
MAX_LABELS = 256
MAX_LABEL_CHARS = 255


@dataclass(frozen=True)
class ExperimentEdit:
    """What to change; None leaves a field as it is."""

    name: str | None = None
    description: str | None = None
    notes: str | None = None
    labels: list[str] | None = None
    priority: int | None = None
    weight: float | None = None
    max_slots: int | None = None
    resource_pool: str | None = None
    gc_policy: dict[str, int] | None = None


def _text(value: str | None, field: str, limit: int, *, required: bool = False) -> str | None:
    if value is None:
        return None
    if len(value) > limit:
        raise InvalidArgument(f"{field}: at most {limit} characters (got {len(value)})")
    if required and not value.strip():
        raise InvalidArgument(f"{field}: must not be empty")
    return value


def checked_labels(labels: list[Any] | None, field: str = "labels") -> list[str] | None:
    """Labels as Determined keeps them: non-empty strings, each once, in the order given."""
    if labels is None:
        return None
    if len(labels) > MAX_LABELS:
        raise InvalidArgument(f"{field}: at most {MAX_LABELS} labels (got {len(labels)})")
    kept: list[str] = []
    for index, label in enumerate(labels):
        if not isinstance(label, str) or not label.strip():
            raise InvalidArgument(f"{field}[{index}]: must be a non-empty string")
        if len(label) > MAX_LABEL_CHARS:
            raise InvalidArgument(f"{field}[{index}]: at most {MAX_LABEL_CHARS} characters")
        if label not in kept:
            kept.append(label)
    return kept


def replace_config(exp: models.Experiment, config: dict[str, Any]) -> None:
    """Every change of a stored experiment config after creation: the version moves with it, so no
    read cache serves the old one."""
    exp.config = config
    exp.config_version = (exp.config_version or 0) + 1


def _patched_config(ctx: MasterContext, exp: models.Experiment, edit: ExperimentEdit) -> dict[str, Any]:
    config = copy.deepcopy(exp.config)
    if edit.name is not None:
        config["name"] = edit.name
    if edit.description is not None:
        config["description"] = edit.description
    if edit.labels is not None:
        config["labels"] = edit.labels
    resources = config.setdefault("resources", {})
    if edit.priority is not None:
        resources["priority"] = edit.priority
    if edit.weight is not None:
        resources["weight"] = edit.weight
    if edit.max_slots is not None:
        # Determined: max_slots 0 lifts the cap.
        resources["max_slots"] = edit.max_slots or None
    if edit.resource_pool is not None:
        if edit.resource_pool not in {p.name for p in ctx.settings.pools}:
            raise InvalidArgument(f"resource_pool: no resource pool named {edit.resource_pool!r}")
        resources["resource_pool"] = edit.resource_pool
    if edit.gc_policy is not None:
        config.setdefault("checkpoint_storage", {}).update(edit.gc_policy)
    problems = validate_config(config)
    if problems:
        raise InvalidArgument("; ".join(problems))
    return config


def _live_allocations(w: Work, experiment_id: int) -> list[models.Allocation]:
    return list(
        w.session.scalars(
            select(models.Allocation)
            .join(models.Trial, models.Trial.id == models.Allocation.trial_id)
            .where(
                models.Trial.experiment_id == experiment_id,
                models.Allocation.state.in_(list(LIVE_ALLOCATION)),
            )
        )
    )


def enforce_max_slots(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    """Gracefully preempt the newest placed allocations until the experiment holds no more slots
    than its max_slots."""
    cap = config_view(exp.config).max_slots
    if cap is None:
        return
    placed = [
        a
        for a in _live_allocations(w, exp.id)
        if a.state in PLACED_ALLOCATION and not a.preempt_requested and not a.kill_requested
    ]
    held = sum(a.slots for a in placed)
    for alloc in sorted(placed, key=lambda a: (a.assigned_at or a.requested_at, a.id), reverse=True):
        if held <= cap:
            break
        stops.request_preempt(ctx, w, alloc, f"experiment {exp.id}'s max_slots was lowered to {cap}")
        held -= alloc.slots


def apply(ctx: MasterContext, w: Work, exp: models.Experiment, edit: ExperimentEdit) -> None:
    """Apply `edit` to `exp` (loaded for update, access checked). A new GC policy owes GC again."""
    name = _text(edit.name, "name", MAX_NAME_CHARS, required=True)
    edit = ExperimentEdit(
        name=name,
        description=_text(edit.description, "description", MAX_DESCRIPTION_CHARS),
        notes=_text(edit.notes, "notes", MAX_NOTES_CHARS),
        labels=checked_labels(edit.labels),
        priority=edit.priority,
        weight=edit.weight,
        max_slots=edit.max_slots,
        resource_pool=edit.resource_pool,
        gc_policy=edit.gc_policy,
    )
    if edit.max_slots is not None and edit.max_slots < 0:
        raise InvalidArgument(f"resources.max_slots: must be at least 0 (got {edit.max_slots})")
    config = _patched_config(ctx, exp, edit)
    if edit.resource_pool is not None:
        workspace_id = w.session.scalar(
            select(models.Project.workspace_id).where(models.Project.id == exp.project_id)
        )
        pool_bindings.check_available(w.session, edit.resource_pool, workspace_id or 0, "resource_pool")
    view = config_view(config)
    replace_config(exp, config)
    if edit.name is not None:
        exp.name = edit.name
    if edit.description is not None:
        exp.description = edit.description
    if edit.notes is not None:
        exp.notes = edit.notes
    if edit.labels is not None:
        exp.labels = edit.labels
    if edit.resource_pool is not None:
        exp.resource_pool = edit.resource_pool
    for alloc in _live_allocations(w, exp.id):
        if edit.priority is not None:
            alloc.priority = view.priority
        if edit.resource_pool is not None and alloc.state == A.PENDING:
            alloc.resource_pool = edit.resource_pool  # placed work finishes where it runs
    if edit.max_slots is not None:
        enforce_max_slots(ctx, w, exp)
    if edit.gc_policy is not None:
        exp.checkpoint_gc_done = False  # collect again under the new policy ...
        if exp.state in TERMINAL:  # ... now if it has ended (else its end owes it)
            deferred_work.owe(w, deferred_work.CHECKPOINT_GC, exp.id)
    topic = experiment_topic(exp.id)
    w.later(lambda: ctx.topics.publish(topic))
    w.later(ctx.scheduler_wakeup.set)
