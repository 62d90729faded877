"""Many rows sent to PostgreSQL as one JSON document are stored exactly as the ordinary statements
store them. A search's new trials, tasks and allocation requests (store/json_rows.py): the same
columns, the Python-side defaults, None in a JSON column as JSON null, timestamps through
UtcDateTime; the scheduling view learns the new allocations by id, not as a change of everything.
A flush's UPDATE of many rows (store/json_updates.py): the same values of every type. Either way a
value JSON cannot carry, or a row an executemany names twice, goes the ordinary way. On SQLite
both sides are the ordinary statements."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import bindparam, select, text, update

from services.master.domain.kernel.clock import utcnow
from services.master.domain.scheduling import scheduling_view
from services.master.store import json_rows, json_updates, models
from services.master.store.inserted import insert_rows
from tests.unit.master.domain.harness import Master, config_text

pytestmark = pytest.mark.on_each_database

TRIALS = json_rows.MIN_ROWS + 4
UPDATES_MIN_ROWS = json_updates.MIN_ROWS  # as the module has it, before a test sets it

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
    sent = json_rows.SENT["rows"]
    as_json = master.create(_grid())
    # The trials, their tasks and their allocation requests; none on SQLite.
    assert json_rows.SENT["rows"] - sent == (3 * TRIALS if master.db.dialect == "postgresql" else 0)
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


def _task_rows(master: Master, prefix: str, **values: Any) -> list[dict[str, Any]]:
    experiment_id = master.create(config_text())
    owner_id = master.experiment(experiment_id).owner_id
    return [
        {
            "id": f"{prefix}-{n}",
            "kind": "COMMAND",
            "owner_id": owner_id,
            "description": f"task {n}",
            "config": {"huge": 2**70 + n, "none": None, "text": 'é\n"', "float": 1e16, "list": [1.5, None]},
            "job_id": "job",
            "state": "ACTIVE",
            "start_time": datetime(2026, 1, 2, 3, 4, 5, 678901 + n, tzinfo=timezone(timedelta(hours=2))),
            "experiment_id": experiment_id,
            "slots": n,
            **values,
        }
        for n in range(json_rows.MIN_ROWS)
    ]


def _tasks_like(master: Master, prefix: str) -> list[models.Task]:
    with master.db.read() as s:
        return list(s.scalars(select(models.Task).where(models.Task.id.like(f"{prefix}-%")).order_by("id")))


def test_an_inserted_rows_timestamps_and_json_text_are_stored_as_the_ordinary_insert_stores_them(
    master: Master,
) -> None:
    """Microseconds and a zone other than UTC (stored as the same instant); a JSON column's text
    as its own encoder writes it (an integer past 64 bits, an escaped string, 1e16)."""
    rows = _task_rows(master, "json-rows")
    sent = json_rows.SENT["rows"]
    with master.db.transaction() as s:
        insert_rows(s, models.Task, rows)
    assert json_rows.SENT["rows"] - sent == (len(rows) if master.db.dialect == "postgresql" else 0)
    stored = _tasks_like(master, "json-rows")
    assert [task.config for task in stored] == [row["config"] for row in rows]
    assert [task.start_time for task in stored] == [row["start_time"] for row in rows]
    assert [task.start_time.microsecond for task in stored] == [678901 + n for n in range(len(rows))]
    assert [task.slots for task in stored] == list(range(len(rows)))
    assert all(task.resource_pool == "" for task in stored)  # the column's default
    with master.db.read() as s:
        texts = s.scalars(
            text("SELECT CAST(config AS TEXT) FROM tasks WHERE id LIKE 'json-rows-%' ORDER BY id")
        )
        assert list(texts) == [json.dumps(row["config"]) for row in rows]


def test_a_value_json_cannot_carry_is_inserted_the_ordinary_way(master: Master) -> None:
    """A float for an integer column: PostgreSQL rounds a literal 2.0, and refuses "2.0" from JSON."""
    rows = _task_rows(master, "float-slots", slots=2.0)
    sent = json_rows.SENT["rows"]
    with master.db.transaction() as s:
        insert_rows(s, models.Task, rows)
    assert json_rows.SENT["rows"] == sent
    assert [task.slots for task in _tasks_like(master, "float-slots")] == [2] * len(rows)


def _trials_of(master: Master, experiment_id: int) -> list[dict[str, Any]]:
    table = models.Trial.__table__
    with master.db.read() as s:
        rows = s.execute(
            select(table).where(table.c.experiment_id == experiment_id).order_by(table.c.id)
        ).mappings()
        return [{k: v for k, v in row.items() if k not in _OWN} for row in rows]


def _change_every_trial(master: Master, experiment_id: int, when: datetime) -> None:
    """One flush that updates every trial alike (an executemany of one UPDATE): a string, a
    timestamp, a float, a JSON value, a NULL."""
    with master.db.transaction() as s:
        trials = s.scalars(
            select(models.Trial).where(models.Trial.experiment_id == experiment_id).order_by(models.Trial.id)
        ).all()
        for n, trial in enumerate(trials):
            trial.runner_status = f"status {n}"
            trial.progress_at = when
            trial.progress = (n + 1) / 3
            trial.summary_metrics = {"n": n, "list": [1, None, "é"]}
            trial.early_exit_reason = None


def test_a_flushs_updates_of_many_rows_are_stored_alike_as_one_json_document(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_json, ordinary = master.create(_grid()), master.create(_grid())
    when = utcnow()
    before = dict(json_updates.SENT)
    _change_every_trial(master, as_json, when)
    sent = json_updates.SENT["rows"] - before["rows"]
    assert sent == (TRIALS if master.db.dialect == "postgresql" else 0)

    monkeypatch.setattr(json_updates, "MIN_ROWS", 10**6)  # the same changes the ordinary way
    _change_every_trial(master, ordinary, when)
    assert json_updates.SENT["rows"] - before["rows"] == sent
    assert _trials_of(master, as_json) == _trials_of(master, ordinary)
    assert _trials_of(master, as_json)[4]["runner_status"] == "status 4"

    # A JSON column set to None in a batched UPDATE: JSON null on both sides, not SQL NULL.
    for experiment_id, min_rows in ((as_json, UPDATES_MIN_ROWS), (ordinary, 10**6)):
        monkeypatch.setattr(json_updates, "MIN_ROWS", min_rows)
        sent = json_updates.SENT["rows"]
        with master.db.transaction() as s:
            for trial in s.scalars(select(models.Trial).where(models.Trial.experiment_id == experiment_id)):
                trial.summary_metrics = None
        json_path = experiment_id == as_json and master.db.dialect == "postgresql"
        assert json_updates.SENT["rows"] - sent == (TRIALS if json_path else 0)
    assert _rows(master, as_json)["trials"] == _rows(master, ordinary)["trials"]
    assert not _rows(master, as_json)["trials"][0]["summary_metrics_is_sql_null"]


def test_what_json_cannot_carry_or_a_row_named_twice_is_updated_as_before(master: Master) -> None:
    """A NaN (JSON has none) goes the ordinary way and is stored as NaN; an executemany naming one
    row twice applies both in order, the last one standing (a join would apply one of them)."""
    experiment_id = master.create(_grid())
    with master.db.transaction() as s:
        trials = s.scalars(select(models.Trial).where(models.Trial.experiment_id == experiment_id)).all()
        for trial in trials:
            trial.searcher_metric_value = math.nan
            trial.runner_status = "nan"
    stored = [row["searcher_metric_value"] for row in _trials_of(master, experiment_id)]
    if master.db.dialect == "postgresql":
        assert all(math.isnan(value) for value in stored)
    else:
        assert stored == [None] * TRIALS  # SQLite keeps no NaN

    table = models.Trial.__table__
    ids = _ids_of(master, experiment_id)
    twice = [{"trial": trial_id, "status": f"first {trial_id}"} for trial_id in ids]
    twice += [{"trial": ids[0], "status": "second"}]
    with master.db.transaction() as s:
        s.execute(
            update(table).where(table.c.id == bindparam("trial")).values(runner_status=bindparam("status")),
            twice,
        )
    statuses = [row["runner_status"] for row in _trials_of(master, experiment_id)]
    assert statuses[0] == "second" and statuses[1] == f"first {ids[1]}"

    sent = json_updates.SENT["rows"]
    with master.db.transaction() as s:  # a float for an integer column: PostgreSQL rounds it
        s.execute(
            update(table).where(table.c.id == bindparam("trial")).values(restarts=bindparam("restarts")),
            [{"trial": trial_id, "restarts": 2.0} for trial_id in ids],
        )
    assert json_updates.SENT["rows"] == sent
    assert [row["restarts"] for row in _trials_of(master, experiment_id)] == [2] * TRIALS


def _ids_of(master: Master, experiment_id: int) -> list[int]:
    with master.db.read() as s:
        return list(
            s.scalars(
                select(models.Trial.id)
                .where(models.Trial.experiment_id == experiment_id)
                .order_by(models.Trial.id)
            )
        )
