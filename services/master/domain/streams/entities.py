"""What is streamed of each kind, as Determined 0.38 streams it (master/internal/stream/projects.go,
models.go, model_versions.go): the subscription's name, its filters, the keys of its upsert and
deletion messages, and the message itself, field for field.

A filter names ids; a row matches a subscription when any of its filter fields is among the ids
the subscription gives for that field (Determined ORs them). Who may read a row is decided by its
workspace (`workspace_id`, a model version's through its model), as the read APIs decide it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from services.master.store import models

StreamedRow = models.Project | models.RegisteredModel | models.ModelVersion


@dataclass(frozen=True)
class Kind:
    """One streamed kind."""

    name: str  # the subscription's and the `known` set's key ("projects")
    upsert_key: str  # an upsert message's only key ("project")
    table: str
    row_type: type[StreamedRow]
    # Spec field -> the message field its ids are matched against ("workspace_ids" -> "workspace_id").
    filters: Mapping[str, str]
    message: Callable[[Any, int], dict[str, Any]]  # (row, its workspace) -> the wire message

    @property
    def delete_key(self) -> str:
        return f"{self.name}_deleted"


def _time(value: datetime | None) -> str | None:
    """As Go marshals a time.Time: RFC 3339 with the fraction, in UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _project(row: models.Project, workspace_id: int) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "description": row.description,
        "archived": row.archived,
        "created_at": _time(row.created_at),
        "notes": row.notes,
        "workspace_id": workspace_id,
        "user_id": row.user_id,
        "immutable": row.immutable,
        # Determined's WorkspaceState: UNSPECIFIED while the project lives.
        "state": row.state or "UNSPECIFIED",
        "key": row.key,
        "seq": row.seq,
    }


def _model(row: models.RegisteredModel, workspace_id: int) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "description": row.description,
        "archived": row.archived,
        "creation_time": _time(row.creation_time),
        "notes": row.notes,
        "workspace_id": workspace_id,
        "user_id": row.user_id,
        "last_updated_time": _time(row.last_updated_time),
        "metadata": row.metadata_,
        "labels": row.labels,
        "seq": row.seq,
    }


def _model_version(row: models.ModelVersion, workspace_id: int) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "version": row.version,
        "checkpoint_uuid": row.checkpoint_uuid,
        "creation_time": _time(row.creation_time),
        "last_updated_time": _time(row.last_updated_time),
        "metadata": row.metadata_,
        "model_id": row.model_id,
        "user_id": row.user_id,
        "comment": row.comment,
        "labels": row.labels,
        "notes": row.notes,
        # A string in Determined's message (ModelVersionMsg.WorkspaceID), its model's workspace.
        "workspace_id": str(workspace_id),
        "seq": row.seq,
    }


PROJECTS = Kind(
    name="projects",
    upsert_key="project",
    table=models.Project.__tablename__,
    row_type=models.Project,
    filters={"workspace_ids": "workspace_id", "project_ids": "id"},
    message=_project,
)
MODELS = Kind(
    name="models",
    upsert_key="model",
    table=models.RegisteredModel.__tablename__,
    row_type=models.RegisteredModel,
    filters={"workspace_ids": "workspace_id", "model_ids": "id", "user_ids": "user_id"},
    message=_model,
)
MODEL_VERSIONS = Kind(
    name="modelversions",
    upsert_key="modelversion",
    table=models.ModelVersion.__tablename__,
    row_type=models.ModelVersion,
    filters={"model_ids": "model_id", "model_version_ids": "id", "user_ids": "user_id"},
    message=_model_version,
)
KINDS: tuple[Kind, ...] = (PROJECTS, MODELS, MODEL_VERSIONS)
BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}
BY_TABLE: dict[str, Kind] = {k.table: k for k in KINDS}


@dataclass(frozen=True)
class Event:
    """A committed change of one row, ready for every subscriber: the fields its filters and the
    read rule look at, and its message already encoded (once, whoever receives it)."""

    kind: Kind
    id: int
    seq: int
    workspace_id: int
    fields: Mapping[str, int | None]  # filter field -> value
    text: str  # the whole websocket message
    deleted: bool = False
    # Before this change, when it moved the row (a project to another workspace): a subscriber that
    # matched it then and does not now is told it is gone (Determined's "fallout").
    previous_fields: Mapping[str, int | None] | None = None
    previous_workspace_id: int | None = None

    @classmethod
    def upsert(
        cls,
        kind: Kind,
        row: Any,
        workspace_id: int,
        previous: tuple[Mapping[str, int | None], int | None] | None = None,
    ) -> Event:
        # A project's or a model's own workspace, as the row says now; a version's is its model's.
        workspace_id = getattr(row, "workspace_id", workspace_id)
        message = kind.message(row, workspace_id)
        fields = {f: _int_field(message, f) for f in kind.filters.values()}
        text = encode({kind.upsert_key: message})
        if previous is not None and (previous[0] != fields or previous[1] != workspace_id):
            return cls(kind, row.id, row.seq, workspace_id, fields, text, False, previous[0], previous[1])
        return cls(kind, row.id, row.seq, workspace_id, fields, text)

    @property
    def fallout_text(self) -> str:
        """The deletion message a subscriber gets when this change moved the row out of its view."""
        return encode({self.kind.delete_key: str(self.id)})

    @classmethod
    def deletion(
        cls, kind: Kind, row_id: int, seq: int, workspace_id: int, fields: Mapping[str, int | None]
    ) -> Event:
        return cls(kind, row_id, seq, workspace_id, fields, encode({kind.delete_key: str(row_id)}), True)


def _int_field(message: Mapping[str, Any], field: str) -> int | None:
    value = message.get(field)
    return int(value) if isinstance(value, int | str) and str(value).isdigit() else None


def encode(message: Mapping[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), default=str)
