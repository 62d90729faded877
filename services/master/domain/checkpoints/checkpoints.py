"""Checkpoint metadata: what trial code reports, reads for the API, deletion and garbage collection.

Files live in checkpoint storage and are the checkpoint service's business; rows live here. The
rule that keeps the two consistent: a row follows its files only after storage answered (a failed
deletion leaves the row as it was, so it can be retried): part of them gone, PARTIALLY_DELETED with
what is left; all gone, DELETED (the row stays, as on Determined, until its experiment goes).
Deleting files that are already gone is not an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from cairn.checkpoint.v1 import checkpoint_pb2 as cpb
from cairn.storage import UnsafePathError, check_globs
from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.checkpoints.deletion_fence import CHECKPOINT_DELETIONS
from services.master.domain.config import config_view
from services.master.domain.identity import access, allocation_access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from services.master.domain.kernel.ports import CheckpointService, storage_struct
from services.master.domain.kernel.states import TERMINAL, CheckpointState, check_checkpoint
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.kernel.topics import trial_topic
from services.master.domain.reads.models import describe_registered, registered_versions
from services.master.store import models

log = get_logger(__name__)


@dataclass(frozen=True)
class ReportedCheckpoint:
    uuid: str
    allocation_id: str
    resources: dict[str, int]
    metadata: dict[str, Any]
    trial_id: int | None = None
    # Reported by an unmanaged trial's code, which has no allocation: its trial's task.
    task_id: str = ""


def _unmanaged_trial_of_task(w: Work, principal: Principal, task_id: str) -> models.Trial:
    """The trial whose task is `task_id` ("<experiment id>.<request id>"), when it is an unmanaged
    experiment's and the caller may change it."""
    exp_part, _, request_id = task_id.partition(".")
    trial = (
        w.session.scalar(
            select(models.Trial).where(
                models.Trial.experiment_id == int(exp_part), models.Trial.request_id == request_id
            )
        )
        if exp_part.isdigit() and request_id
        else None
    )
    if trial is None:
        raise InvalidArgument(f"checkpoint.task_id: no trial's task {task_id!r}")
    exp = w.session.get_one(models.Experiment, trial.experiment_id)
    if not exp.unmanaged:
        raise InvalidArgument(
            f"checkpoint.allocation_id: required (task {task_id!r} is a managed trial's, "
            "reported by its allocation)"
        )
    access.check_experiment(w.session, principal, exp, Permission.UPDATE_EXPERIMENT)
    return trial


def _steps(metadata: dict[str, Any]) -> int:
    steps = metadata.get("steps_completed")
    if not isinstance(steps, (int, float)) or isinstance(steps, bool) or steps < 0:
        raise InvalidArgument("checkpoint.metadata.steps_completed: required, a number >= 0")
    return int(steps)


def report(ctx: MasterContext, principal: Principal, item: ReportedCheckpoint) -> None:
    if not item.uuid:
        raise InvalidArgument("checkpoint.uuid: required")
    steps = _steps(item.metadata)
    with ctx.unit_of_work() as w:
        alloc_id = principal.allocation_id or item.allocation_id
        if not alloc_id and item.task_id:
            # An unmanaged trial's code (off the cluster) has no allocation: it names its task.
            trial = _unmanaged_trial_of_task(w, principal, item.task_id)
        else:
            alloc = w.session.get(models.Allocation, alloc_id) if alloc_id else None
            if alloc is None:
                raise InvalidArgument(f"checkpoint.allocation_id: no allocation {alloc_id!r}")
            allocation_access.check_allocation(w.session, principal, alloc.id)
            trial = w.session.get_one(models.Trial, alloc.trial_id)
            # A user reports only into an experiment they may change.
            access.check_trial(w.session, principal, trial.id, Permission.UPDATE_EXPERIMENT)
        if w.session.get(models.Checkpoint, item.uuid) is not None:
            return  # a retried report
        w.session.add(
            models.Checkpoint(
                uuid=item.uuid,
                trial_id=trial.id,
                allocation_id=alloc_id,
                task_id=trial_task_id(trial.experiment_id, trial.request_id),
                report_time=utcnow(),
                state=CheckpointState.COMPLETED,
                resources={k: int(v) for k, v in item.resources.items()},
                metadata_=item.metadata,
                steps_completed=steps,
                size=sum(int(v) for v in item.resources.values()),
            )
        )
        trial.latest_checkpoint_uuid = item.uuid
        topic = trial_topic(trial.id)
        w.later(lambda: ctx.topics.publish(topic))
    log.info("checkpoint reported", checkpoint_uuid=item.uuid, allocation_id=alloc_id, steps=steps)


def _validation_at(w: Work, trial_id: int, steps: int) -> models.Metric | None:
    return w.session.scalar(
        select(models.Metric)
        .where(
            models.Metric.trial_id == trial_id,
            models.Metric.group_name == "validation",
            models.Metric.steps_completed == steps,
            models.Metric.archived.is_(False),
        )
        .order_by(models.Metric.id.desc())
        .limit(1)
    )


def _reset_latest(w: Work, trial_ids: set[int]) -> None:
    for trial_id in trial_ids:
        trial = w.session.get(models.Trial, trial_id)
        if trial is None:
            continue
        trial.latest_checkpoint_uuid = w.session.scalar(
            select(models.Checkpoint.uuid)
            .where(
                models.Checkpoint.trial_id == trial_id, models.Checkpoint.state == CheckpointState.COMPLETED
            )
            .order_by(models.Checkpoint.steps_completed.desc(), models.Checkpoint.report_time.desc())
            .limit(1)
        )


def apply_deletions(ctx: MasterContext, results: list[cpb.DeletedCheckpoint]) -> list[str]:
    """Rows follow the files: all gone → DELETED; some files left → resources updated.
    Returns the errors."""
    errors = []
    with ctx.unit_of_work() as w:
        touched: set[int] = set()
        for result in results:
            row = w.session.get(models.Checkpoint, result.checkpoint_uuid)
            if result.error:
                errors.append(f"{result.checkpoint_uuid}: {result.error}")
                continue
            if row is None or row.state == CheckpointState.DELETED:
                continue
            touched.add(row.trial_id)
            if result.remaining:
                remaining = dict(result.remaining)
                lost = set(row.resources or {}) - set(remaining)
                row.resources = remaining
                row.size = sum(remaining.values())
                # Only files gone make it partial; a refresh that found what was there, or more,
                # records the files and leaves the state.
                if lost:
                    check_checkpoint(row.uuid, row.state, CheckpointState.PARTIALLY_DELETED)
                    row.state = CheckpointState.PARTIALLY_DELETED
            else:
                check_checkpoint(row.uuid, row.state, CheckpointState.DELETED)
                row.state = CheckpointState.DELETED
                row.resources, row.size = {}, 0
        w.session.flush()
        _reset_latest(w, touched)
    return errors


# One request's bounds: Determined's clients send a handful (the WebUI a page of 100 at most).
MAX_REMOVAL_UUIDS = 1000
MAX_REMOVAL_GLOBS = 100


def delete(ctx: MasterContext, client: CheckpointService, principal: Principal, uuids: list[str]) -> None:
    """A user's deletion of whole checkpoints (Determined's DeleteCheckpoints)."""
    _remove(ctx, client, principal, uuids, None)


def remove_files(
    ctx: MasterContext, client: CheckpointService, principal: Principal, uuids: list[str], globs: list[str]
) -> None:
    """Delete the files matching `globs` from each checkpoint (Determined's CheckpointsRemoveFiles),
    then make the rows follow the files: a checkpoint left with nothing is DELETED, one left with
    part of its files is PARTIALLY_DELETED with what is left. No globs: nothing is deleted and each row's
    files are read from storage again. A checkpoint registered in the model registry is refused
    (all of the request is, before any file goes)."""
    if len(globs) > MAX_REMOVAL_GLOBS:
        raise InvalidArgument(f"checkpoint_globs: more than {MAX_REMOVAL_GLOBS}")
    for index, glob in enumerate(globs):
        try:
            check_globs([glob])
        except UnsafePathError as exc:
            raise InvalidArgument(f"checkpoint_globs[{index}]: {exc}") from None
    _remove(ctx, client, principal, uuids, globs)


def _remove(
    ctx: MasterContext,
    client: CheckpointService,
    principal: Principal,
    uuids: list[str],
    globs: list[str] | None,
) -> None:
    """`globs` None: whole checkpoints; empty: a refresh from storage."""
    if not uuids:
        raise InvalidArgument("checkpoint_uuids: required")
    if len(uuids) > MAX_REMOVAL_UUIDS:
        raise InvalidArgument(f"checkpoint_uuids: more than {MAX_REMOVAL_UUIDS}")
    uuids = list(dict.fromkeys(uuids))
    by_storage: dict[str, tuple[dict[str, Any], list[str]]] = {}
    # Held from before the look at the registry until the rows follow the files: no registration
    # slips in between (deletion_fence.py).
    with CHECKPOINT_DELETIONS.deleting(uuids):
        with ctx.unit_of_work() as w:
            for index, uuid in enumerate(uuids):
                if not uuid:
                    raise InvalidArgument(f"checkpoint_uuids[{index}]: empty")
                row = w.session.get(models.Checkpoint, uuid)
                if row is None:
                    raise NotFound(f"checkpoint {uuid} not found")
                trial = w.session.get_one(models.Trial, row.trial_id)
                exp = w.session.get_one(models.Experiment, trial.experiment_id)
                access.check_experiment(w.session, principal, exp, Permission.DELETE_EXPERIMENT)
                if row.state == CheckpointState.DELETED:
                    continue  # nothing of it is left to delete or to read again
                storage = config_view(exp.config).checkpoint_storage
                key = repr(sorted(storage.items()))
                by_storage.setdefault(key, (storage, []))[1].append(uuid)
            registered = registered_versions(w.session, uuids) if globs != [] else {}
            if registered:
                raise FailedPrecondition(
                    f"{describe_registered(registered)}; delete those model versions first"
                )
        errors: list[str] = []
        for storage, group in by_storage.values():
            if globs == []:
                results = [_listed(uuid, client.list_files(storage, uuid)) for uuid in group]
            else:
                results = list(client.delete(storage, group, globs).results)
            errors += apply_deletions(ctx, results)
    if errors:
        raise InvalidArgument("some checkpoints could not be deleted: " + "; ".join(errors))


def _listed(uuid: str, listing: cpb.ListFilesResponse) -> cpb.DeletedCheckpoint:
    """What storage holds of a checkpoint, as a deletion's result reads (nothing: it is gone)."""
    return cpb.DeletedCheckpoint(
        checkpoint_uuid=uuid, remaining=dict(listing.resources) if listing.exists else {}
    )


class CheckpointGc:
    """Garbage collection by the experiment's policy once it has ended. Owed in the transaction
    that ends the experiment (experiments.transition) and run by the deferred-work loop until it
    succeeds; running it again after it succeeded changes nothing."""

    def __init__(self, ctx: MasterContext, client: CheckpointService) -> None:
        self._ctx = ctx
        self._client = client

    def collect(self, experiment_id: int) -> None:
        """Raises if the checkpoint service or storage failed (the loop retries)."""
        ctx = self._ctx
        with ctx.unit_of_work() as w:
            exp = w.session.get(models.Experiment, experiment_id)
            if exp is None or exp.checkpoint_gc_done or exp.state not in TERMINAL:
                return
            storage = config_view(exp.config).checkpoint_storage
            metric_name = config_view(exp.config).searcher_metric
            candidates = []
            rows = w.session.execute(
                select(models.Checkpoint)
                .join(models.Trial, models.Trial.id == models.Checkpoint.trial_id)
                .where(models.Trial.experiment_id == experiment_id)
                # What is gone already is no candidate: it would take a place the policy keeps.
                .where(models.Checkpoint.state != CheckpointState.DELETED)
            ).scalars()
            for ck in rows:
                candidate = cpb.GcCandidate(
                    checkpoint_uuid=ck.uuid, trial_id=ck.trial_id, steps_completed=ck.steps_completed
                )
                validation = _validation_at(w, ck.trial_id, ck.steps_completed)
                value = (
                    validation.metrics.get(metric_name) if validation is not None and metric_name else None
                )
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    candidate.searcher_metric = float(value)
                candidates.append(candidate)
            policy = cpb.GcPolicy(
                save_experiment_best=int(storage.get("save_experiment_best", 0)),
                save_trial_best=int(storage.get("save_trial_best", 1)),
                save_trial_latest=int(storage.get("save_trial_latest", 1)),
                smaller_is_better=config_view(exp.config).smaller_is_better,
            )
        if candidates:
            uuids = [c.checkpoint_uuid for c in candidates]
            # Checkpoints registered in the model registry are kept whatever the policy says. The
            # fence is held from before that look until the rows follow the files, so that no
            # registration slips in between (deletion_fence.py).
            with CHECKPOINT_DELETIONS.deleting(uuids):
                with ctx.unit_of_work() as w:
                    registered = sorted(registered_versions(w.session, uuids))
                response = self._client.collect_garbage(
                    cpb.CollectGarbageRequest(
                        storage=storage_struct(storage),
                        policy=policy,
                        checkpoints=candidates,
                        protected_uuids=registered,
                    )
                )
                errors = apply_deletions(ctx, list(response.deleted))
            if errors:
                raise RuntimeError("; ".join(errors))
            log.info(
                "checkpoint gc done",
                experiment_id=experiment_id,
                kept=len(response.kept),
                deleted=len(response.deleted),
                registered=len(registered),
            )
        with ctx.unit_of_work() as w:
            exp = w.session.get(models.Experiment, experiment_id)
            if exp is not None:
                exp.checkpoint_gc_done = True

    def delete_experiment_files(self, experiment_id: int) -> None:
        """Before a deleted experiment's rows go: all of its checkpoints' files."""
        with self._ctx.db.read() as s:
            exp = s.get(models.Experiment, experiment_id)
            if exp is None:
                return
            storage = config_view(exp.config).checkpoint_storage
            uuids = list(
                s.scalars(
                    select(models.Checkpoint.uuid)
                    .join(models.Trial, models.Trial.id == models.Checkpoint.trial_id)
                    .where(
                        models.Trial.experiment_id == experiment_id,
                        models.Checkpoint.state != CheckpointState.DELETED,
                    )
                )
            )
        if not uuids:
            return
        errors = apply_deletions(self._ctx, list(self._client.delete(storage, uuids).results))
        if errors:
            raise RuntimeError("; ".join(errors))
