"""One experiment as the API shows it, its trials page by page, its model definition, and the
labels in use. (Experiment and trial listing rows are built in listings.py.)"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.paging import Page, page_of
from services.master.domain.kernel.states import RunState
from services.master.domain.reads import visibility
from services.master.domain.reads.listings import ExperimentRow, TrialRow, experiment_rows, trial_rows
from services.master.store import models

# Experiments on their way out are gone as far as readers are concerned.
GONE = (RunState.DELETING, RunState.DELETED)

# The trial columns a trials page may be sorted by.
TRIAL_SORT_COLUMNS = {
    "id": models.Trial.id,
    "start_time": models.Trial.start_time,
    "end_time": models.Trial.end_time,
    "state": models.Trial.state,
    "searcher_metric": models.Trial.searcher_metric_value,
    "batches": models.Trial.total_batches,
    "restarts": models.Trial.restarts,
}


def check_experiment_exists(s: Session, experiment_id: int) -> None:
    """NotFound unless the experiment is there: one indexed lookup, not the listing's aggregates."""
    state = s.scalar(select(models.Experiment.state).where(models.Experiment.id == experiment_id))
    if state is None or state in GONE:
        raise NotFound(f"experiment {experiment_id} not found")


def experiment_row(s: Session, experiment_id: int) -> ExperimentRow:
    exp = s.get(models.Experiment, experiment_id)
    if exp is None or exp.state in GONE:
        raise NotFound(f"experiment {experiment_id} not found")
    return experiment_rows(s, [exp])[0]


def experiment_trials(
    s: Session,
    experiment_id: int,
    *,
    states: Iterable[str] = (),
    sort: str = "id",
    descending: bool = False,
    offset: int = 0,
    limit: int = 0,
) -> tuple[list[TrialRow], Page]:
    """A page of the experiment's trials (NotFound for an unknown experiment)."""
    check_experiment_exists(s, experiment_id)
    column = TRIAL_SORT_COLUMNS.get(sort, models.Trial.id)
    query = select(models.Trial).where(models.Trial.experiment_id == experiment_id)
    wanted = list(states)
    if wanted:
        query = query.where(models.Trial.state.in_(wanted))
    trials = list(s.scalars(query.order_by(column.desc() if descending else column.asc(), models.Trial.id)))
    page = page_of(len(trials), offset, limit)
    return trial_rows(s, trials[page.start : page.end]), page


def model_definition(s: Session, experiment_id: int) -> bytes:
    """The experiment's context directory as a gzip'd tar (empty when it had none)."""
    check_experiment_exists(s, experiment_id)
    model_def = s.get(models.ModelDefinition, experiment_id)
    return bytes(model_def.archive) if model_def is not None else b""


def labels_in_use(s: Session, workspaces: visibility.Workspaces = None) -> list[str]:
    """The labels of the experiments in `workspaces` (None: all)."""
    labels: set[str] = set()
    for value in s.scalars(visibility.experiments(select(models.Experiment.labels), workspaces)):
        labels.update(value or [])
    return sorted(labels)
