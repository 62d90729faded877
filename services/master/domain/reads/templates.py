"""Config templates as the API lists and shows them (Determined's GetTemplates / GetTemplate)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.paging import Page, page_of
from services.master.domain.reads import visibility
from services.master.store import models

# Bound on the parameters of one IN query (SQLite allows a few thousand at most).
_NAMES_PER_QUERY = 500


@dataclass(frozen=True)
class TemplateRow:
    name: str
    config: dict[str, Any]
    workspace_id: int
    owner_id: int | None


@dataclass(frozen=True)
class TemplateFilter:
    # Only names containing this text, case-insensitively ("" for all).
    name_contains: str = ""
    # Only these workspaces (empty for all).
    workspace_ids: tuple[int, ...] = ()
    descending: bool = False
    offset: int = 0
    # Determined's templates paging: 0 means no limit.
    limit: int = 0
    # The workspaces the caller may read (None: all): reads/visibility.py.
    visible: frozenset[int] | None = None


def template_row(template: models.Template) -> TemplateRow:
    return TemplateRow(
        name=template.name,
        config=dict(template.config),
        workspace_id=template.workspace_id,
        owner_id=template.user_id,
    )


def template(s: Session, name: str) -> TemplateRow:
    found = s.get(models.Template, name)
    if found is None:
        raise NotFound(f"template: no template named {name!r}")
    return template_row(found)


def templates(s: Session, wanted: TemplateFilter) -> tuple[list[TemplateRow], Page]:
    """One page of the matching templates, sorted by name as Determined sorts them (by code point,
    the same on every database, whatever PostgreSQL's collation)."""
    query = visibility.in_column(select(models.Template.name), models.Template.workspace_id, wanted.visible)
    if wanted.workspace_ids:
        query = query.where(models.Template.workspace_id.in_(wanted.workspace_ids))
    needle = wanted.name_contains.lower()
    names = sorted((name for name in s.scalars(query) if needle in name.lower()), reverse=wanted.descending)
    page = page_of(len(names), wanted.offset, -1 if wanted.limit == 0 else wanted.limit)
    chosen = names[page.start : page.end]
    by_name: dict[str, models.Template] = {}
    for start in range(0, len(chosen), _NAMES_PER_QUERY):
        batch = chosen[start : start + _NAMES_PER_QUERY]
        by_name.update(
            (t.name, t) for t in s.scalars(select(models.Template).where(models.Template.name.in_(batch)))
        )
    return [template_row(by_name[name]) for name in chosen], replace(page, limit=wanted.limit)
