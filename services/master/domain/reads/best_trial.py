"""An experiment's best trial in SQL, for experiments-search's filter and sort on metrics and on the
searcher metric's value (Determined reads them from the trial its experiments row names as
best_trial_id).

The best trial is the one whose searcher metric value (its best validation's, kept on the trial) is
best by the experiment's `searcher.smaller_is_better` (true when unset); among equals the first
made. That is the trial the listings name as best (listings._trial_aggregates), so a search's sort
and its answers' bestTrial agree."""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, select
from sqlalchemy.orm import aliased

from services.master.domain.reads.json_values import json_boolean
from services.master.store import models

# The best trial of the experiment a query is over, joined by best_trial_join().
BEST_TRIAL = aliased(models.Trial, name="best_trial")


def best_trial_id(dialect: str) -> Any:
    """The id of the best trial of the models.Experiment row of the enclosing query (a correlated
    scalar subquery); NULL while no trial has a searcher metric value."""
    smaller_is_better = json_boolean(models.Experiment.config, ("searcher", "smaller_is_better"), dialect)
    # One subquery per direction, chosen outside them: SQLite resolves no outer column in the
    # ORDER BY of a subquery inside a join's ON clause.
    return case(
        (smaller_is_better == "false", _first_by(descending=True)),
        else_=_first_by(descending=False),
    )


def _first_by(*, descending: bool) -> Any:
    t = aliased(models.Trial, name="candidate")
    value = t.searcher_metric_value.desc() if descending else t.searcher_metric_value.asc()
    return (
        select(t.id)
        .where(t.experiment_id == models.Experiment.id, t.searcher_metric_value.is_not(None))
        .order_by(value, t.id.asc())
        .limit(1)
        .correlate(models.Experiment)
        .scalar_subquery()
    )


def best_trial_join(dialect: str) -> Any:
    """The condition that joins BEST_TRIAL to its experiment (an outer join: an experiment without
    a best trial stays, its metric columns NULL)."""
    return BEST_TRIAL.id == best_trial_id(dialect)
