"""Paging the experiments list: the single-query page (ids and total together) agrees with a count
and a page query, on SQLite and PostgreSQL, for Determined's paging rules (negative offsets count
from the end, limit 0 is 100, -1 is all) and past the end."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.master.domain.identity.auth import AuthService
from services.master.domain.kernel.paging import Page, page_of
from services.master.domain.reads import listings as queries
from services.master.store import models
from services.master.store.db import Database
from tests.support.databases import BACKENDS, fresh_database

EXPERIMENTS = 23


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    with fresh_database(request.param, tmp_path) as url:
        database = Database(url or f"sqlite:///{tmp_path / 'listing.db'}")
        database.migrate()
        AuthService(database, 3600).ensure_builtin_users()
        start = datetime(2026, 1, 1, tzinfo=UTC)
        with database.transaction() as s:
            owner = s.scalar(select(models.User.id).where(models.User.username == "determined"))
            for e in range(1, EXPERIMENTS + 1):
                s.add(
                    models.Experiment(
                        name=f"exp-{e % 5}",
                        description="",
                        labels=[],
                        state="COMPLETED" if e % 3 else "ACTIVE",
                        archived=False,
                        config={"searcher": {"name": "single", "metric": "loss"}},
                        original_config="",
                        owner_id=owner,
                        start_time=start + timedelta(minutes=e),
                        progress=(e % 7) / 7,
                        resource_pool="default",
                        searcher_session_id=f"s{e}",
                        model_definition_size=0,
                        notes="",
                        checkpoint_gc_done=True,
                    )
                )
        try:
            yield database
        finally:
            database.dispose()


def _two_queries(
    s: Session, f: queries.ExperimentFilter, sort: str, descending: bool, offset: int, limit: int
) -> tuple[list[int], Page]:
    q = queries._filtered(f)
    total = int(s.scalar(select(func.count()).select_from(q.subquery())) or 0)
    page = page_of(total, offset, limit)
    ids = q.with_only_columns(models.Experiment.id).order_by(*queries._experiment_order(sort, descending))
    ids = ids.offset(page.start)
    if page.limit >= 0:
        ids = ids.limit(page.end - page.start)
    return list(s.scalars(ids)), page


def test_the_one_query_page_matches_count_and_page_queries(db: Database) -> None:
    filters = [
        queries.ExperimentFilter(),
        queries.ExperimentFilter(name="exp-2"),
        queries.ExperimentFilter(states=("ACTIVE",)),
    ]
    with db.read() as s:
        for f, sort, descending, offset, limit in itertools.product(
            filters, ["id", "progress", "name"], [False, True], [0, 3, 22, 23, 40, -1, -5, -100], [0, 4, -1]
        ):
            found = queries.list_experiment_ids(
                s, f, sort=sort, descending=descending, offset=offset, limit=limit
            )
            assert found == _two_queries(s, f, sort, descending, offset, limit), (
                f,
                sort,
                descending,
                offset,
                limit,
            )


def test_a_page_past_the_end_is_empty_with_the_total(db: Database) -> None:
    with db.read() as s:
        ids, page = queries.list_experiment_ids(
            s, queries.ExperimentFilter(), sort="id", descending=False, offset=100, limit=10
        )
    assert ids == [] and page.total == EXPERIMENTS and page.start == page.end == EXPERIMENTS
