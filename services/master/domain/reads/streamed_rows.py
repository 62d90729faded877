"""The reads of Determined's streaming updates (domain/streams/sync.py): which projects, models or
model versions a subscription matches, with their seq and workspace, and the rows themselves by id.

A subscription names ids per column and matches a row when any column holds one of its ids
(Determined ORs them). A model version's workspace is its model's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from services.master.store import models

StreamedRow = models.Project | models.RegisteredModel | models.ModelVersion
StreamedType = type[models.Project] | type[models.RegisteredModel] | type[models.ModelVersion]


def matching(
    s: Session, row_type: StreamedType, ids_by_column: Mapping[str, frozenset[int]]
) -> list[tuple[int, int, int]]:
    """(id, seq, workspace id) of every row matching, by id."""
    clauses = [getattr(row_type, column).in_(sorted(ids)) for column, ids in ids_by_column.items() if ids]
    if not clauses:
        return []
    if row_type is models.ModelVersion:
        query = select(
            models.ModelVersion.id, models.ModelVersion.seq, models.RegisteredModel.workspace_id
        ).join(models.RegisteredModel, models.RegisteredModel.id == models.ModelVersion.model_id)
    else:
        query = select(row_type.id, row_type.seq, row_type.workspace_id)  # type: ignore[union-attr]
    query = query.where(or_(*clauses)).order_by(row_type.id)
    return [(row_id, seq, workspace) for row_id, seq, workspace in s.execute(query)]


def by_ids(s: Session, row_type: StreamedType, ids: Sequence[int]) -> list[StreamedRow]:
    """The rows with these ids that still exist, by id."""
    if not ids:
        return []
    return list(s.scalars(select(row_type).where(row_type.id.in_(list(ids))).order_by(row_type.id)))
