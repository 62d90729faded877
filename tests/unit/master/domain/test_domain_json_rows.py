"""A search's new trials, tasks and allocation requests sent to PostgreSQL as one JSON document each
(store/json_rows.py) are stored exactly as the ordinary INSERT stores them: the same columns, the
Python-side defaults, None in a JSON column as JSON null, timestamps through UtcDateTime; the
scheduling view learns the new allocations by id, not as a change of everything; and a value JSON
cannot carry falls back to the ordinary INSERT. On SQLite both sides are the ordinary INSERT."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, text

from services.master.domain.kernel.clock import utcnow
from services.master.domain.scheduling import scheduling_view
from services.master.store import json_rows, models
from services.master.store.inserted import insert_rows
from tests.unit.master.domain.harness import Master, config_text

pytestmark = pytest.mark.on_each_database

TRIALS = json_rows.MIN_ROWS + 4

# What differs between two experiments' rows by nature: their ids and times.
_OWN = {
    "id",
    "experiment_id",
    "request_id",
    "search_session_id",
    "trial_id",
    "task_id",
    "job_id",
    "description",
    "start_time",
    "requested_at",
    "seed",
    "last_activity",
}


def _grid() -> str:
    return config_text(
        searcher={"name": "grid", "metric": "loss", "max_length": 1, "max_concurrent_trials": 0},
        hyperparameters={
            "x": {"type": "int", "minval": 0, "maxval": TRIALS - 1, "count": TRIALS},
            "nested": {"type": "const", "val": {"a": [1, 2.5, None, "é"]}},
        },
    )


def _rows(master: Master, experiment_id: int) -> dict[str, list[dict[str, Any]]]:
    """Every column of the experiment's trials, tasks and allocations, as stored, less `_OWN`;
    and whether each JSON column is SQL NULL (JSON null and SQL NULL both read as None)."""
    tables: dict[str, list[dict[str, Any]]] = {}
    with master.db.read() as s:
        trial_ids = list(
            s.scalars(
                select(models.Trial.id).where(models.Trial.experiment_id == experiment_id).order_by("id")
            )
        )
        wheres = {
            models.Trial: models.Trial.experiment_id == experiment_id,
            models.Task: models.Task.experiment_id == experiment_id,
            models.Allocation: models.Allocation.trial_id.in_(trial_ids),
        }
        for model, where in wheres.items():
            table = model.__table__
            json_columns = [c.name for c in table.columns if c.type.__class__.__name__ == "JSON"]
            nulls = [table.c[name].is_(None).label(f"{name}_is_sql_null") for name in json_columns]
            order = "trial_id" if model is models.Allocation else "start_time, id"
            got = s.execute(select(table).where(where).order_by(text(order))).mappings().all()
            null_flags = s.execute(select(*nulls).where(where).order_by(text(order))).mappings()
            tables[table.name] = [
                {**{k: v for k, v in row.items() if k not in _OWN}, **flags}
                for row, flags in zip(got, null_flags, strict=True)
            ]
            assert len(tables[table.name]) == TRIALS
    return tables


def test_a_searchs_rows_are_stored_alike_as_one_json_document_and_as_ordinary_inserts(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the scheduling view's tracker learns of each INSERT it knows by row.
    learned: list[list[Any] | None] = []
    inserted_ids = scheduling_view._inserted_ids
    monkeypatch.setattr(
        scheduling_view, "_inserted_ids", lambda state: learned.append(inserted_ids(state)) or learned[-1]
    )
    as_json = master.create(_grid())
    with master.db.read() as s:
        allocations = list(
            s.scalars(
                select(models.Allocation.id)
                .join(models.Trial, models.Trial.id == models.Allocation.trial_id)
                .where(models.Trial.experiment_id == as_json)
                .order_by(models.Trial.id)
            )
        )
    assert allocations in learned  # by id, as from a flush, not as a change of everything
    assert None not in learned

    monkeypatch.setattr(json_rows, "MIN_ROWS", 10**6)  # the same search the ordinary way
    ordinary = master.create(_grid())

    assert _rows(master, as_json) == _rows(master, ordinary)


def test_a_value_json_cannot_carry_is_inserted_the_ordinary_way(master: Master) -> None:
    """orjson refuses an integer past 64 bits, which Python's json (the JSON column's own
    encoder) writes."""
    experiment_id = master.create(config_text())
    owner_id = master.experiment(experiment_id).owner_id
    now = utcnow()
    rows = [
        {
            "id": f"json-rows-{n}",
            "kind": "COMMAND",
            "owner_id": owner_id,
            "description": f"task {n}",
            "config": {"huge": 2**70 + n, "none": None},
            "job_id": "job",
            "state": "ACTIVE",
            "start_time": now,
            "experiment_id": experiment_id,
        }
        for n in range(json_rows.MIN_ROWS)
    ]
    with master.db.transaction() as s:
        insert_rows(s, models.Task, rows)
    with master.db.read() as s:
        stored = s.scalars(select(models.Task).where(models.Task.id.like("json-rows-%")).order_by("id")).all()
    assert [task.config for task in stored] == [row["config"] for row in rows]
    assert all(task.start_time == now and task.resource_pool == "" for task in stored)
