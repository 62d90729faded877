"""The model registry as the API shows it: models with their owner and version count, versions with
their checkpoint, labels by popularity, and which checkpoints are registered (what GC and deletion
must leave alone).

A model is named in requests by its name or, all digits, by its id (Determined's rule; names may
not be all digits, so the two never clash)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import InvalidArgument, NotFound
from services.master.domain.kernel.paging import Page, page_of
from services.master.domain.reads import visibility
from services.master.domain.reads.checkpoints import CheckpointRecord
from services.master.domain.reads.checkpoints import checkpoint as checkpoint_record
from services.master.store import models

RegisteredModel = models.RegisteredModel
ModelVersion = models.ModelVersion


@dataclass(frozen=True)
class ModelRow:
    model: models.RegisteredModel
    username: str
    num_versions: int


@dataclass(frozen=True)
class VersionRow:
    version: models.ModelVersion
    model: ModelRow
    username: str
    checkpoint: CheckpointRecord


@dataclass(frozen=True)
class ModelQuery:
    """Determined's GetModels filters; empty means "any"."""

    sort_by: str = "id"  # id, name, description, creation_time, last_updated_time, num_versions, workspace
    descending: bool = False
    offset: int = 0
    limit: int = 0  # 0 or -1: all
    name: str = ""
    description: str = ""
    labels: Sequence[str] = ()
    archived: bool | None = None
    users: Sequence[str] = ()
    user_ids: Sequence[int] = ()
    workspace_ids: Sequence[int] = ()
    workspace_names: Sequence[str] = ()
    model_id: int = 0
    # The workspaces the caller may read (None: all): reads/visibility.py.
    visible: frozenset[int] | None = None


# Bounds on a listing's filters, checked before any query is built.
MAX_FILTER_VALUES = 1000
MAX_FILTER_CHARS = 16_384


def check_query(q: ModelQuery) -> None:
    for field in ("labels", "users", "user_ids", "workspace_ids", "workspace_names"):
        values = getattr(q, field)
        if len(values) > MAX_FILTER_VALUES:
            raise InvalidArgument(f"{field}: at most {MAX_FILTER_VALUES} values (got {len(values)})")
    for field in ("name", "description"):
        if len(getattr(q, field)) > MAX_FILTER_CHARS:
            raise InvalidArgument(f"{field}: at most {MAX_FILTER_CHARS} characters")


def _version_counts() -> Any:
    return (
        select(ModelVersion.model_id, func.count(ModelVersion.id).label("n"))
        .group_by(ModelVersion.model_id)
        .subquery()
    )


def _rows_query() -> tuple[Select[Any], Any]:
    counts = _version_counts()
    query = (
        select(RegisteredModel, models.User.username, func.coalesce(counts.c.n, 0))
        .join(models.User, models.User.id == RegisteredModel.user_id)
        .outerjoin(counts, counts.c.model_id == RegisteredModel.id)
    )
    return query, counts


def _row(result: Any) -> ModelRow:
    model, username, count = result
    return ModelRow(model=model, username=username, num_versions=int(count))


def identifies_by_id(identifier: str) -> bool:
    return identifier.isascii() and identifier.isdigit()


def model(s: Session, identifier: str) -> ModelRow:
    query, _ = _rows_query()
    if identifies_by_id(identifier):
        query = query.where(RegisteredModel.id == int(identifier))
    else:
        query = query.where(RegisteredModel.name == identifier)
    found = s.execute(query).first()
    if found is None:
        raise NotFound(f"model {identifier!r} not found")
    return _row(found)


def name_taken(s: Session, name: str, *, other_than: int | None = None) -> bool:
    """Whether another model has this name, letters' case aside (Determined's uniqueness)."""
    query = select(RegisteredModel.id).where(func.lower(RegisteredModel.name) == name.lower())
    if other_than is not None:
        query = query.where(RegisteredModel.id != other_than)
    return s.scalar(query.limit(1)) is not None


def _contains(column: Any, text: str) -> Any:
    return func.lower(column).contains(text.lower(), autoescape=True)


def models_page(s: Session, q: ModelQuery) -> tuple[list[ModelRow], Page]:
    check_query(q)
    query, counts = _rows_query()
    query = visibility.in_column(query, RegisteredModel.workspace_id, q.visible)
    if q.model_id:
        query = query.where(RegisteredModel.id == q.model_id)
    if q.archived is not None:
        query = query.where(RegisteredModel.archived.is_(q.archived))
    if q.name:
        query = query.where(_contains(RegisteredModel.name, q.name))
    if q.description:
        query = query.where(_contains(RegisteredModel.description, q.description))
    if q.users:
        query = query.where(models.User.username.in_(list(q.users)))
    if q.user_ids:
        query = query.where(RegisteredModel.user_id.in_(list(q.user_ids)))
    # Determined: ids win over names when both are given.
    if q.workspace_ids:
        query = query.where(RegisteredModel.workspace_id.in_(list(q.workspace_ids)))
    elif q.workspace_names:
        named = select(models.Workspace.id).where(models.Workspace.name.in_(list(q.workspace_names)))
        query = query.where(RegisteredModel.workspace_id.in_(named))
    columns: dict[str, Any] = {
        "name": RegisteredModel.name,
        "description": RegisteredModel.description,
        "creation_time": RegisteredModel.creation_time,
        "last_updated_time": RegisteredModel.last_updated_time,
        "num_versions": func.coalesce(counts.c.n, 0),
    }
    if q.sort_by == "workspace":
        query = query.join(models.Workspace, models.Workspace.id == RegisteredModel.workspace_id)
        columns["workspace"] = models.Workspace.name
    order = []
    if q.sort_by in columns:
        column = columns[q.sort_by]
        order.append(column.desc() if q.descending else column.asc())
    order.append(RegisteredModel.id.desc() if q.descending else RegisteredModel.id.asc())
    query = query.order_by(*order)
    limit = -1 if q.limit == 0 else q.limit
    if q.labels:
        # Labels live in a JSON list: filtered here, the same way on SQLite and PostgreSQL.
        wanted = set(q.labels)
        rows = [row for row in map(_row, s.execute(query)) if wanted <= set(row.model.labels or [])]
        page = page_of(len(rows), q.offset, limit)
        return rows[page.start : page.end], page
    total = s.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
    page = page_of(total, q.offset, limit)
    rows = [_row(r) for r in s.execute(query.offset(page.start).limit(page.end - page.start))]
    return rows, page


def _version_row(s: Session, owner: ModelRow, version: models.ModelVersion) -> VersionRow:
    username = s.scalar(select(models.User.username).where(models.User.id == version.user_id)) or ""
    return VersionRow(
        version=version,
        model=owner,
        username=username,
        checkpoint=checkpoint_record(s, version.checkpoint_uuid),
    )


def versions_page(
    s: Session,
    identifier: str,
    *,
    by_creation_time: bool = False,
    descending: bool = False,
    offset: int = 0,
    limit: int = 0,
) -> tuple[ModelRow, list[VersionRow], Page]:
    """A model's versions by version number (or creation time); limit 0 or -1: all."""
    owner = model(s, identifier)
    key = ModelVersion.creation_time if by_creation_time else ModelVersion.version
    order = [key.desc(), ModelVersion.id.desc()] if descending else [key.asc(), ModelVersion.id.asc()]
    total = s.scalar(select(func.count(ModelVersion.id)).where(ModelVersion.model_id == owner.model.id)) or 0
    page = page_of(total, offset, -1 if limit == 0 else limit)
    versions = s.scalars(
        select(ModelVersion)
        .where(ModelVersion.model_id == owner.model.id)
        .order_by(*order)
        .offset(page.start)
        .limit(page.end - page.start)
    )
    return owner, [_version_row(s, owner, v) for v in versions], page


def version(s: Session, identifier: str, number: int) -> VersionRow:
    owner = model(s, identifier)
    found = s.scalar(
        select(ModelVersion).where(ModelVersion.model_id == owner.model.id, ModelVersion.version == number)
    )
    if found is None:
        raise NotFound(f"version {number} of model {identifier!r} not found")
    return _version_row(s, owner, found)


def labels(
    s: Session, workspace_id: int | None = None, workspaces: visibility.Workspaces = None
) -> list[str]:
    """Every model label in use (of the models in `workspaces`; None: all): the most used first,
    then alphabetically (Determined's order)."""
    query = visibility.in_column(select(RegisteredModel.labels), RegisteredModel.workspace_id, workspaces)
    if workspace_id:
        query = query.where(RegisteredModel.workspace_id == workspace_id)
    uses: Counter[str] = Counter()
    for model_labels in s.scalars(query):
        uses.update({label for label in model_labels or [] if isinstance(label, str)})
    return sorted(uses, key=lambda label: (-uses[label], label))


def _registered(s: Session, *conditions: Any) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    rows = s.execute(
        select(ModelVersion.checkpoint_uuid, RegisteredModel.name, ModelVersion.version)
        .join(RegisteredModel, RegisteredModel.id == ModelVersion.model_id)
        .join(models.Checkpoint, models.Checkpoint.uuid == ModelVersion.checkpoint_uuid)
        .join(models.Trial, models.Trial.id == models.Checkpoint.trial_id)
        .where(*conditions)
        .order_by(ModelVersion.checkpoint_uuid, RegisteredModel.name, ModelVersion.version)
    )
    for uuid, name, number in rows:
        found.setdefault(uuid, []).append(f"{name!r} version {number}")
    return found


# Uuids per IN (...) list: far under SQLite's limit on bound parameters.
_UUIDS_PER_QUERY = 500


def registered_versions(s: Session, checkpoint_uuids: Iterable[str]) -> dict[str, list[str]]:
    """For each of these checkpoints that is registered: its versions, as "'name' version N"."""
    uuids = sorted(set(checkpoint_uuids))
    found: dict[str, list[str]] = {}
    for start in range(0, len(uuids), _UUIDS_PER_QUERY):
        chunk = uuids[start : start + _UUIDS_PER_QUERY]
        found.update(_registered(s, ModelVersion.checkpoint_uuid.in_(chunk)))
    return found


def registered_in_experiment(s: Session, experiment_id: int) -> dict[str, list[str]]:
    """registered_versions for every checkpoint of the experiment."""
    return _registered(s, models.Trial.experiment_id == experiment_id)


def describe_registered(registered: dict[str, list[str]]) -> str:
    """ "checkpoint U is model 'm' version 1, ..." for a refusal message."""
    return "; ".join(f"checkpoint {uuid} is model {', '.join(names)}" for uuid, names in registered.items())
