"""Determined's filter and sort on metric, hyperparameter, metadata and tag columns, on both
databases (the SQL reads JSON by its type, which each database tests its own way): runs filtered
and sorted by their summary metrics and hyperparameter values, missing values last in both
directions; experiments-search reading its best trial's metrics and its configured
hyperparameters; the best trial chosen by the searcher metric and smaller_is_better; unknown
columns refused, naming them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from services.master.domain.checkpoints import checkpoints
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.reads import runs
from services.master.domain.reads.listings import best_trials, experiment_rows_by_id
from services.master.domain.trials import run_metadata
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database

VALIDATIONS = "LOCATION_TYPE_VALIDATIONS"
RUN_HP = "LOCATION_TYPE_RUN_HYPERPARAMETERS"
HP = "LOCATION_TYPE_HYPERPARAMETERS"
NUMBER = "COLUMN_TYPE_NUMBER"


def _leaf(
    column: str, operator: str, value: Any, location: str, kind: str = "COLUMN_TYPE_TEXT"
) -> dict[str, Any]:
    return {
        "kind": "field",
        "columnName": column,
        "location": location,
        "operator": operator,
        "type": kind,
        "value": value,
    }


def _filter(*children: dict[str, Any], conjunction: str = "and") -> str:
    group = {"kind": "group", "conjunction": conjunction, "children": list(children)}
    return json.dumps({"filterGroup": group, "showArchived": False})


def _run_ids(master: Master, filter_text: str | None = None, sort: str | None = None) -> list[int]:
    with master.db.read() as s:
        rows, _ = runs.search_runs(
            s,
            project_id=models.UNCATEGORIZED_PROJECT_ID,
            filter_text=filter_text,
            sort=sort,
            offset=0,
            limit=0,
        )
    return [r.trial.id for r in rows]


def _experiment_ids(master: Master, filter_text: str | None = None, sort: str | None = None) -> list[int]:
    with master.db.read() as s:
        ids, _ = runs.search_experiment_ids(
            s, project_id=None, filter_text=filter_text, sort=sort, offset=0, limit=0
        )
    return ids


def _grid(metric: str = "loss", smaller_is_better: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "searcher": {
            "name": "grid",
            "metric": metric,
            "smaller_is_better": smaller_is_better,
            "max_length": 1,
            "max_concurrent_trials": 0,
        },
        "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.2, 0.3]}, **extra},
    }


def test_runs_filter_on_metrics_hyperparameters_metadata_and_tags(master: Master) -> None:
    first = master.create(hyperparameters={"lr": 0.1, "opt": "sgd"}, labels=["Keep", "a"])
    second = master.create(hyperparameters={"lr": 0.5, "opt": "adam"}, labels=["other"])
    bare = master.create(hyperparameters={"lr": "fast"})
    ((t1,), (t2,), (t3,)) = (master.trials(first), master.trials(second), master.trials(bare))
    master.report(t1.id, 1, "validation", 1, 1, loss=0.3)
    master.report(t2.id, 1, "validation", 1, 1, loss=0.7)
    master.report(t1.id, 1, "training", 1, 2, loss=2.0)
    master.report(t1.id, 1, "training", 2, 3, loss=1.0)
    run_metadata.set_metadata(master.ctx, master.admin, t2.id, {"phase": "eval", "epoch": 3})

    below = _leaf("validation.loss.last", "<", 0.5, VALIDATIONS, NUMBER)
    assert _run_ids(master, _filter(below)) == [t1.id]
    # A numeric text with type NUMBER is compared as a number; a name without its aggregate reads last.
    assert _run_ids(master, _filter(_leaf("validation.loss", ">=", "0.5", VALIDATIONS, NUMBER))) == [t2.id]
    assert _run_ids(master, _filter(_leaf("training.loss.min", "=", 1, "LOCATION_TYPE_TRAINING"))) == [t1.id]
    assert _run_ids(master, _filter(_leaf("training.loss.max", "=", 2, "LOCATION_TYPE_TRAINING"))) == [t1.id]
    assert _run_ids(master, _filter(_leaf("validation.loss.last", "isEmpty", None, VALIDATIONS))) == [t3.id]

    assert _run_ids(master, _filter(_leaf("hp.opt", "=", "adam", RUN_HP))) == [t2.id]
    assert _run_ids(master, _filter(_leaf("hp.opt", "contains", "sg", RUN_HP))) == [t1.id]
    # A text value is no number: no match for `lr < 1`, and no database error.
    assert _run_ids(master, _filter(_leaf("hp.lr", "<", 1, RUN_HP, NUMBER))) == [t1.id, t2.id]
    assert _run_ids(master, _filter(_leaf("hp.lr", "=", "fast", HP))) == [t3.id]

    # Tags are the experiment's labels; `contains` ignores case, as Determined's ILIKE.
    assert _run_ids(master, _filter(_leaf("tags", "contains", "keep", "LOCATION_TYPE_EXPERIMENT"))) == [t1.id]
    assert _run_ids(master, _filter(_leaf("tags", "isEmpty", None, "LOCATION_TYPE_EXPERIMENT"))) == [t3.id]
    assert _run_ids(master, _filter(_leaf("id", "=", second, "LOCATION_TYPE_EXPERIMENT"))) == [t2.id]

    metadata = "LOCATION_TYPE_RUN_METADATA"
    assert _run_ids(master, _filter(_leaf("metadata.phase", "=", "eval", metadata))) == [t2.id]
    assert _run_ids(master, _filter(_leaf("metadata.epoch", ">", 2, metadata, NUMBER))) == [t2.id]

    # A condition the filter builder has not been given a value for yet holds for every run.
    assert _run_ids(master, _filter(_leaf("validation.loss.last", "<", None, VALIDATIONS))) == [
        t1.id,
        t2.id,
        t3.id,
    ]
    either = _filter(below, _leaf("hp.opt", "=", "adam", RUN_HP), conjunction="or")
    assert _run_ids(master, either) == [t1.id, t2.id]


def test_unknown_or_malformed_columns_are_refused_naming_them(master: Master) -> None:
    master.create()
    refusals = [
        (_leaf("nope", "=", 1, VALIDATIONS), "'nope' is not a metric column"),
        (_leaf("validation.lo ss.last", "<", 1, VALIDATIONS), "'validation.lo ss.last' is not a metric"),
        (_leaf("hp.a{b}", "=", 1, RUN_HP), "'hp.a{b}' is not a hyperparameter name"),
        (_leaf("nope", "=", 1, "LOCATION_TYPE_EXPERIMENT"), "on column 'nope' at LOCATION_TYPE_EXPERIMENT"),
        (_leaf("id", "=", 1, "LOCATION_TYPE_NOWHERE"), "on column 'id' at LOCATION_TYPE_NOWHERE"),
        (_leaf("validation.loss.last", "<", "low", VALIDATIONS, NUMBER), "'low' is not a number"),
        (_leaf("name", "contains", "x" * 5000, ""), "at most 4096 characters"),
    ]
    for leaf, message in refusals:
        with pytest.raises(InvalidArgument, match="children\\[0\\]") as refused:
            _run_ids(master, _filter(leaf))
        assert message in str(refused.value)
    with pytest.raises(InvalidArgument, match=r"does not filter experiments on column 'metadata\.a'"):
        _experiment_ids(master, _filter(_leaf("metadata.a", "=", 1, "LOCATION_TYPE_RUN_METADATA")))
    for sort, message in [
        ("hp.a{b}=asc", "'hp.a{b}' is not a hyperparameter name"),
        ("validation=asc", "does not sort runs by 'validation'"),
        ("validation.loss.last=up", "invalid sort direction"),
    ]:
        with pytest.raises(InvalidArgument, match="sort") as refused:
            _run_ids(master, sort=sort)
        assert message in str(refused.value)


def test_runs_sort_by_hyperparameter_and_metric_with_missing_values_last(master: Master) -> None:
    high = master.create(hyperparameters={"lr": 0.5})
    low = master.create(hyperparameters={"lr": 0.1})
    text = master.create(hyperparameters={"lr": "fast"})
    ((t_high,), (t_low,), (t_text,)) = (master.trials(high), master.trials(low), master.trials(text))
    master.report(t_high.id, 1, "validation", 1, 1, loss=0.7)
    master.report(t_low.id, 1, "validation", 1, 1, loss=0.3)

    assert _run_ids(master, sort="hp.lr=asc") == [t_low.id, t_high.id, t_text.id]
    assert _run_ids(master, sort="hp.lr=desc") == [t_high.id, t_low.id, t_text.id]
    # Runs without the metric come last in both directions (Determined's null ordering).
    assert _run_ids(master, sort="validation.loss.last=asc") == [t_low.id, t_high.id, t_text.id]
    assert _run_ids(master, sort="validation.loss.last=desc") == [t_high.id, t_low.id, t_text.id]
    assert _run_ids(master, sort="searcherMetricsVal=asc") == [t_low.id, t_high.id, t_text.id]
    assert _run_ids(master, sort="searcherMetricsVal=desc") == [t_high.id, t_low.id, t_text.id]
    # Ties fall back to id ascending; two keys apply in turn.
    assert _run_ids(master, sort="validation.loss.min=desc,hp.lr=asc") == [t_high.id, t_low.id, t_text.id]


def _best(master: Master, experiment_id: int) -> int | None:
    with master.db.read() as s:
        (row,) = experiment_rows_by_id(s, [experiment_id])
    return row.trials.best_trial_id


def test_experiments_search_reads_best_trials_and_configured_hyperparameters(master: Master) -> None:
    smaller = master.create(**_grid())
    larger = master.create(**_grid(metric="accuracy", smaller_is_better=False))
    lr_range = {"type": "double", "minval": 0.01, "maxval": 0.2}
    ranged = master.create(hyperparameters={"lr": lr_range, "opt": "sgd"})
    idle = master.create(hyperparameters={"lr": 0.1})
    small_trials, large_trials = master.trials(smaller), master.trials(larger)
    for trial, loss in zip(small_trials, (0.5, 0.2, 0.9), strict=True):
        master.report(trial.id, 1, "validation", 1, 1, loss=loss)
    for trial, accuracy in zip(large_trials, (0.6, 0.8, 0.7), strict=True):
        master.report(trial.id, 1, "validation", 1, 1, accuracy=accuracy, loss=accuracy)

    # The best trial by the searcher metric and smaller_is_better.
    assert _best(master, smaller) == small_trials[1].id
    assert _best(master, larger) == large_trials[1].id
    assert _best(master, idle) is None
    with master.db.read() as s:
        rows = best_trials(s, [_best(master, smaller), None, _best(master, larger)])
    assert sorted(rows) == [small_trials[1].id, large_trials[1].id]
    assert rows[small_trials[1].id].trial.searcher_metric_value == 0.2

    # Metric columns read the best trial's summary: 0.2 and 0.8.
    low_loss = _leaf("validation.loss.last", "<", 0.5, VALIDATIONS, NUMBER)
    assert _experiment_ids(master, _filter(low_loss)) == [smaller]
    high_accuracy = _leaf("validation.accuracy.last", ">=", 0.8, VALIDATIONS, NUMBER)
    assert _experiment_ids(master, _filter(high_accuracy)) == [larger]
    by_value = _leaf("searcherMetricsVal", ">", 0.5, "LOCATION_TYPE_EXPERIMENT", NUMBER)
    assert _experiment_ids(master, _filter(by_value)) == [larger]
    everyone = [smaller, larger, ranged, idle]
    assert _experiment_ids(master, sort="validation.loss.last=asc") == [smaller, larger, ranged, idle]
    assert _experiment_ids(master, sort="validation.loss.last=desc") == [larger, smaller, ranged, idle]
    assert _experiment_ids(master, sort="searcherMetricsVal=desc") == [larger, smaller, ranged, idle]
    assert sorted(_experiment_ids(master, sort="hp.lr=asc")) == sorted(everyone)
    assert _experiment_ids(master, sort="hp.lr=asc")[:2] == [ranged, idle]  # 0.01 (range), 0.1 (const)

    # Hyperparameters are the configured ones: a const's value, a range holding a number.
    assert _experiment_ids(master, _filter(_leaf("hp.lr", "=", 0.1, HP, NUMBER))) == [idle]
    assert _experiment_ids(master, _filter(_leaf("hp.lr", "contains", 0.05, HP, NUMBER))) == [ranged]
    assert _experiment_ids(master, _filter(_leaf("hp.lr", "notContains", 0.05, HP, NUMBER))) == [
        smaller,
        larger,
    ]
    assert _experiment_ids(master, _filter(_leaf("hp.opt", "contains", "sg", HP))) == [ranged]
    assert _experiment_ids(master, _filter(_leaf("hp.opt", "isEmpty", None, HP))) == [smaller, larger, idle]
    assert _experiment_ids(master, _filter(_leaf("hp.lr", "<", 0.05, HP, NUMBER))) == [ranged]


def test_derived_columns_filter_and_sort_as_the_project_columns_offer_them(master: Master) -> None:
    searched = master.create(**_grid())
    single = master.create(hyperparameters={"lr": 0.1})
    (single_run,) = master.trials(single)
    checkpoints.report(
        master.ctx,
        master.admin,
        checkpoints.ReportedCheckpoint(
            uuid=str(uuid.uuid4()),
            allocation_id=master.live(single_run.id).id,
            resources={"weights": 1000},
            metadata={"steps_completed": 1},
        ),
    )
    grid_runs = [t.id for t in master.trials(searched)]
    exp = "LOCATION_TYPE_EXPERIMENT"

    assert _run_ids(master, _filter(_leaf("searcherType", "=", "grid", ""))) == grid_runs
    assert _run_ids(master, _filter(_leaf("searcherMetric", "contains", "LOS", ""))) == [
        *grid_runs,
        single_run.id,
    ]
    assert _run_ids(master, _filter(_leaf("checkpointCount", ">", 0, "", NUMBER))) == [single_run.id]
    assert _run_ids(master, _filter(_leaf("checkpointSize", ">=", 1000, "", NUMBER))) == [single_run.id]
    assert _run_ids(master, sort="checkpointSize=desc")[0] == single_run.id
    assert _experiment_ids(master, _filter(_leaf("numTrials", "=", 3, exp, NUMBER))) == [searched]
    assert _experiment_ids(master, _filter(_leaf("checkpointCount", "=", 1, exp, NUMBER))) == [single]
    assert _experiment_ids(master, _filter(_leaf("searcherType", "=", "single", exp))) == [single]
    # Progress is a whole percentage, as Determined's filter reads it.
    assert _experiment_ids(master, _filter(_leaf("progress", "<", 100, exp, NUMBER))) == [searched, single]
    assert _experiment_ids(master, sort="numTrials=desc") == [searched, single]
