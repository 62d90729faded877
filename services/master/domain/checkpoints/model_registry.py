"""The model registry (Determined's): models, and their versions, each a checkpoint.

Names follow Determined's rules: not blank, no double spaces, no slashes, not all digits (an
all-digit identifier names a model by id), unique ignoring case. Versions are numbered 1, 2, ... per
model, one above the highest that exists (as Determined numbers them: deleting the newest version
frees its number). A version points at a COMPLETED checkpoint; while it exists the checkpoint is
kept from garbage collection and refused deletion (checkpoints.py, experiments.py).

Every change is validated whole before anything is written, so a refused request changes nothing.
Only a model's owner or an admin may change a model or its versions.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.checkpoints.deletion_fence import CHECKPOINT_DELETIONS
from services.master.domain.identity import access, scopes
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from services.master.domain.kernel.states import CheckpointState, RunState
from services.master.domain.reads import models as reads
from services.master.store import models

log = get_logger(__name__)

MAX_NAME_CHARS = 255
MAX_DESCRIPTION_CHARS = 16_384
MAX_COMMENT_CHARS = 16_384
MAX_NOTES_CHARS = 1_048_576
MAX_LABELS = 256
MAX_LABEL_CHARS = 255
MAX_METADATA_BYTES = 256 * 1024
MAX_UUID_CHARS = 64
# How long a registration waits for a deletion of its checkpoint's files that is under way.
DELETION_WAIT_S = 60.0

_BEING_DELETED = frozenset({RunState.DELETING, RunState.DELETED, RunState.DELETE_FAILED})


@dataclass(frozen=True)
class NewModel:
    name: str
    description: str = ""
    metadata: dict[str, Any] | None = None
    labels: list[Any] | None = None
    notes: str = ""
    workspace_id: int | None = None
    workspace_name: str | None = None


@dataclass(frozen=True)
class ModelEdit:
    """What to change; None leaves a field as it is."""

    name: str | None = None
    description: str | None = None
    notes: str | None = None
    metadata: dict[str, Any] | None = None
    labels: list[Any] | None = None
    workspace_id: int | None = None
    workspace_name: str | None = None


@dataclass(frozen=True)
class NewVersion:
    checkpoint_uuid: str
    name: str = ""
    comment: str = ""
    metadata: dict[str, Any] | None = None
    labels: list[Any] | None = None
    notes: str = ""


@dataclass(frozen=True)
class VersionEdit:
    """What to change; None leaves a field as it is."""

    name: str | None = None
    comment: str | None = None
    notes: str | None = None
    metadata: dict[str, Any] | None = None
    labels: list[Any] | None = None


# ---- validation ---------------------------------------------------------------------------------


def checked_model_name(name: str, field: str = "name") -> str:
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{field}: at most {MAX_NAME_CHARS} characters (got {len(name)})")
    if not name.replace(" ", ""):
        raise InvalidArgument(f"{field}: model names cannot be blank")
    if any(not ch.isprintable() for ch in name):
        raise InvalidArgument(f"{field}: model names cannot contain control characters")
    if "  " in name:
        raise InvalidArgument(f"{field}: model names cannot have excessive spacing")
    if "/" in name or "\\" in name:
        raise InvalidArgument(f"{field}: model names cannot have slashes")
    if reads.identifies_by_id(name):
        raise InvalidArgument(f"{field}: model names cannot be only numbers")
    return name


def _text(value: str | None, field: str, limit: int) -> str | None:
    if value is not None and len(value) > limit:
        raise InvalidArgument(f"{field}: at most {limit} characters (got {len(value)})")
    return value


def checked_labels(labels: list[Any] | None, field: str = "labels") -> list[str] | None:
    """Non-blank strings, each kept once, in the order given."""
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


def checked_metadata(metadata: dict[str, Any] | None, field: str = "metadata") -> dict[str, Any] | None:
    if metadata is None:
        return None
    try:
        size = len(json.dumps(metadata, separators=(",", ":"), allow_nan=False))
    except ValueError:
        raise InvalidArgument(f"{field}: NaN and infinities are not JSON") from None
    if size > MAX_METADATA_BYTES:
        raise InvalidArgument(f"{field}: at most {MAX_METADATA_BYTES} bytes of JSON (got {size})")
    return metadata


# ---- loading and access -------------------------------------------------------------------------


def load(w: Work, identifier: str) -> models.RegisteredModel:
    """The model by name, or by id when `identifier` is all digits."""
    if reads.identifies_by_id(identifier):
        found = w.session.get(models.RegisteredModel, int(identifier))
    else:
        found = w.session.scalar(
            select(models.RegisteredModel).where(models.RegisteredModel.name == identifier)
        )
    if found is None:
        raise NotFound(f"model {identifier!r} not found")
    return found


def _load_version(w: Work, model: models.RegisteredModel, number: int) -> models.ModelVersion:
    found = w.session.scalar(
        select(models.ModelVersion).where(
            models.ModelVersion.model_id == model.id, models.ModelVersion.version == number
        )
    )
    if found is None:
        raise NotFound(f"version {number} of model {model.name!r} not found")
    return found


def check_can_modify(
    s: Session,
    principal: Principal,
    model: models.RegisteredModel,
    permission: Permission = Permission.EDIT_MODEL_REGISTRY,
    *,
    owners: tuple[int | None, ...] = (),
    others: Permission = Permission.CHANGE_OTHERS,
) -> None:
    """Not found unless the caller may see the model; refused unless they may do `permission` to
    it (its owner, or `owners`, or who holds `others` on its workspace: identity/access.py)."""
    access.check_object(
        s,
        principal,
        permission,
        model.workspace_id,
        [model.user_id, *owners],
        f"model {model.name!r}",
        view=Permission.VIEW_MODEL_REGISTRY,
        others=others,
    )


def _check_may_create_in(s: Session, principal: Principal, workspace_id: int) -> None:
    access.check_readable(principal, Permission.VIEW_WORKSPACE, workspace_id, f"workspace {workspace_id}", s)
    access.check(
        principal,
        Permission.CREATE_MODEL_REGISTRY,
        workspace_id,
        f"create models in workspace {workspace_id}",
        s,
    )


def _check_not_archived(model: models.RegisteredModel, doing: str) -> None:
    if model.archived:
        raise FailedPrecondition(f"model {model.name!r} is archived: unarchive it to {doing}")


def _workspace(w: Work, workspace_id: int | None, workspace_name: str | None) -> int | None:
    """The workspace named by id (first) or name; None when neither is given."""
    if workspace_id is not None:
        found = w.session.get(models.Workspace, workspace_id)
        if found is None:
            raise NotFound(f"workspace_id: workspace {workspace_id} not found")
    elif workspace_name:
        found = w.session.scalar(select(models.Workspace).where(models.Workspace.name == workspace_name))
        if found is None:
            raise NotFound(f"workspace_name: workspace {workspace_name!r} not found")
    else:
        return None
    if found.archived or found.state:
        raise FailedPrecondition(f"workspace {found.name!r} is archived or being deleted: it takes no models")
    return found.id


def _check_name_free(w: Work, name: str, other_than: int | None = None) -> None:
    if reads.name_taken(w.session, name, other_than=other_than):
        raise AlreadyExists(f"name: a model named {name!r} already exists (names are compared ignoring case)")


# ---- models -------------------------------------------------------------------------------------


def create_model(ctx: MasterContext, w: Work, principal: Principal, new: NewModel) -> int:
    """The new model's id; its owner is the caller."""
    if principal.user_id is None:
        raise PermissionDenied("only a user may create a model")
    workspace_id = _workspace(w, new.workspace_id, new.workspace_name) or models.UNCATEGORIZED_WORKSPACE_ID
    _check_may_create_in(w.session, principal, workspace_id)
    name = checked_model_name(new.name)
    description = _text(new.description, "description", MAX_DESCRIPTION_CHARS) or ""
    notes = _text(new.notes, "notes", MAX_NOTES_CHARS) or ""
    labels = checked_labels(new.labels) or []
    metadata = checked_metadata(new.metadata) or {}
    _check_name_free(w, name)
    now = utcnow()
    model = models.RegisteredModel(
        name=name,
        description=description,
        metadata_=metadata,
        labels=labels,
        notes=notes,
        user_id=principal.user_id,
        workspace_id=workspace_id,
        archived=False,
        creation_time=now,
        last_updated_time=now,
    )
    w.session.add(model)
    w.session.flush()
    log.info("model created", model_id=model.id, model_name=name, user_id=principal.user_id)
    return model.id


def patch_model(ctx: MasterContext, w: Work, principal: Principal, identifier: str, edit: ModelEdit) -> int:
    """The model's id (its name may have changed)."""
    model = load(w, identifier)
    check_can_modify(w.session, principal, model)
    _check_not_archived(model, "change it")
    name = checked_model_name(edit.name) if edit.name is not None else None
    description = _text(edit.description, "description", MAX_DESCRIPTION_CHARS)
    notes = _text(edit.notes, "notes", MAX_NOTES_CHARS)
    labels = checked_labels(edit.labels)
    metadata = checked_metadata(edit.metadata)
    workspace_id = _workspace(w, edit.workspace_id, edit.workspace_name)
    if workspace_id is not None and workspace_id != model.workspace_id:
        _check_may_create_in(w.session, principal, workspace_id)
    if name is not None and name != model.name:
        _check_name_free(w, name, other_than=model.id)
    changes = {
        "name": name,
        "description": description,
        "notes": notes,
        "labels": labels,
        "metadata_": metadata,
        "workspace_id": workspace_id,
    }
    changed = [key for key, value in changes.items() if value is not None and getattr(model, key) != value]
    for key in changed:
        setattr(model, key, changes[key])
    if changed:
        model.last_updated_time = utcnow()
        log.info("model changed", model_id=model.id, fields=changed)
    return model.id


def set_archived(ctx: MasterContext, w: Work, principal: Principal, identifier: str, archived: bool) -> None:
    model = load(w, identifier)
    check_can_modify(w.session, principal, model)
    model.archived = archived


def delete_model(ctx: MasterContext, w: Work, principal: Principal, identifier: str) -> None:
    """The model and all its versions; their checkpoints stay (and may be deleted from now on)."""
    model = load(w, identifier)
    check_can_modify(
        w.session,
        principal,
        model,
        Permission.DELETE_MODEL_REGISTRY,
        others=Permission.DELETE_OTHER_USER_MODEL_REGISTRY,
    )
    w.session.execute(delete(models.ModelVersion).where(models.ModelVersion.model_id == model.id))
    w.session.delete(model)
    log.info("model deleted", model_id=model.id, model_name=model.name)


# ---- versions -----------------------------------------------------------------------------------


def _checkpoint_to_register(w: Work, uuid: str) -> models.Checkpoint:
    checkpoint = w.session.get(models.Checkpoint, uuid)
    if checkpoint is None:
        raise NotFound(f"checkpoint_uuid: checkpoint {uuid} not found")
    if checkpoint.state != CheckpointState.COMPLETED:
        raise FailedPrecondition(
            f"checkpoint {uuid} is {checkpoint.state}: only a COMPLETED checkpoint can be a model version"
        )
    experiment_state = w.session.scalar(
        select(models.Experiment.state)
        .join(models.Trial, models.Trial.experiment_id == models.Experiment.id)
        .where(models.Trial.id == checkpoint.trial_id)
    )
    if experiment_state in _BEING_DELETED:
        raise FailedPrecondition(f"checkpoint {uuid} belongs to an experiment that is being deleted")
    return checkpoint


def _check_may_read_checkpoint(s: Session, principal: Principal, checkpoint: models.Checkpoint) -> None:
    """A version names a checkpoint its registrant may read (its experiment's artifacts)."""
    experiment_id = s.scalar(select(models.Trial.experiment_id).where(models.Trial.id == checkpoint.trial_id))
    workspace_id = scopes.of_experiment_id(s, experiment_id) if experiment_id is not None else None
    access.check_readable(
        principal,
        Permission.VIEW_EXPERIMENT_ARTIFACTS,
        workspace_id,
        f"checkpoint_uuid: checkpoint {checkpoint.uuid}",
        s,
    )


def _add_version(w: Work, principal: Principal, identifier: str, new: NewVersion) -> tuple[int, int] | None:
    """(model id, version number), or None when a deletion of the checkpoint's files is under way."""
    model = load(w, identifier)
    check_can_modify(w.session, principal, model)
    _check_not_archived(model, "register new versions")
    name = _text(new.name, "name", MAX_NAME_CHARS) or ""
    comment = _text(new.comment, "comment", MAX_COMMENT_CHARS) or ""
    notes = _text(new.notes, "notes", MAX_NOTES_CHARS) or ""
    labels = checked_labels(new.labels) or []
    metadata = checked_metadata(new.metadata) or {}
    checkpoint = _checkpoint_to_register(w, new.checkpoint_uuid)
    _check_may_read_checkpoint(w.session, principal, checkpoint)
    if CHECKPOINT_DELETIONS.held(checkpoint.uuid):
        return None
    highest = w.session.scalar(
        select(func.max(models.ModelVersion.version)).where(models.ModelVersion.model_id == model.id)
    )
    number = (highest or 0) + 1
    now = utcnow()
    assert principal.user_id is not None  # the servicer asks for a user
    w.session.add(
        models.ModelVersion(
            model_id=model.id,
            version=number,
            checkpoint_uuid=checkpoint.uuid,
            name=name,
            comment=comment,
            notes=notes,
            metadata_=metadata,
            labels=labels,
            user_id=principal.user_id,
            creation_time=now,
            last_updated_time=now,
        )
    )
    model.last_updated_time = now
    log.info("model version registered", model_id=model.id, version=number, checkpoint_uuid=checkpoint.uuid)
    return model.id, number


def register_version(
    ctx: MasterContext, principal: Principal, identifier: str, new: NewVersion
) -> tuple[int, int]:
    """(model id, version number). Runs its own units of work: when the checkpoint's files are
    being deleted right now (GC deciding, a user's deletion), it waits for that to finish and
    tries again, so that it never registers a checkpoint whose files are going."""
    if principal.user_id is None:
        raise PermissionDenied("only a user may register a model version")
    if not new.checkpoint_uuid:
        raise InvalidArgument("checkpoint_uuid: required")
    if len(new.checkpoint_uuid) > MAX_UUID_CHARS:
        raise InvalidArgument(f"checkpoint_uuid: at most {MAX_UUID_CHARS} characters")
    deadline = time.monotonic() + DELETION_WAIT_S
    while True:
        with ctx.unit_of_work() as w:
            added = _add_version(w, principal, identifier, new)
        if added is not None:
            return added
        if not CHECKPOINT_DELETIONS.wait_until_free(new.checkpoint_uuid, deadline):
            raise FailedPrecondition(
                f"checkpoint {new.checkpoint_uuid} is being garbage collected or deleted; try again later"
            )


def patch_version(
    ctx: MasterContext, w: Work, principal: Principal, identifier: str, number: int, edit: VersionEdit
) -> int:
    """The model's id."""
    model = load(w, identifier)
    check_can_modify(w.session, principal, model)
    version = _load_version(w, model, number)
    changes = {
        "name": _text(edit.name, "name", MAX_NAME_CHARS),
        "comment": _text(edit.comment, "comment", MAX_COMMENT_CHARS),
        "notes": _text(edit.notes, "notes", MAX_NOTES_CHARS),
        "labels": checked_labels(edit.labels),
        "metadata_": checked_metadata(edit.metadata),
    }
    changed = [key for key, value in changes.items() if value is not None and getattr(version, key) != value]
    for key in changed:
        setattr(version, key, changes[key])
    if changed:
        version.last_updated_time = model.last_updated_time = utcnow()
        log.info("model version changed", model_id=model.id, version=number, fields=changed)
    return model.id


def delete_version(ctx: MasterContext, w: Work, principal: Principal, identifier: str, number: int) -> None:
    """The version goes; its checkpoint stays (and may be deleted from now on)."""
    model = load(w, identifier)
    access.check_readable(
        principal, Permission.VIEW_MODEL_REGISTRY, model.workspace_id, f"model {model.name!r}", w.session
    )
    version = _load_version(w, model, number)
    check_can_modify(
        w.session,
        principal,
        model,
        Permission.DELETE_MODEL_VERSION,
        owners=(version.user_id,),
        others=Permission.DELETE_OTHER_USER_MODEL_VERSION,
    )
    w.session.delete(version)
    model.last_updated_time = utcnow()
    log.info("model version deleted", model_id=model.id, version=number)
