"""Progress carried by a metric batch (ReportTrialMetricsBatchRequest.progress): stored with the
batch's reports in one unit of work, told to the searcher at the same marks as ReportTrialProgress,
and checked before anything is stored."""

from __future__ import annotations

import math

import pytest

from cairn.searcher.v1 import searcher_pb2 as spb
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.metrics import intake
from services.master.domain.metrics.reports import Report
from services.master.store import models
from tests.unit.master.domain.harness import Master

# On each database: metric intake, whose lock depends on the database.
pytestmark = pytest.mark.on_each_database


def _running_trial(master: Master) -> models.Trial:
    master.add_agent("a1", slots=1)
    (trial,) = master.trials(master.create())
    master.run_containers(master.live(trial.id).id)
    return trial


def _validation(seq: int) -> list[Report]:
    return [Report("validation", seq, {"loss": 1.0 / seq}, seq=seq)]


def _progress_events(master: Master, experiment_id: int) -> list[float]:
    """The progress the searcher is told of, waiting in the outbox (the tests run no pump)."""
    with master.db.read() as s:
        rows = s.query(models.SearcherEvent).filter(models.SearcherEvent.experiment_id == experiment_id)
        events = [spb.SearcherEvent.FromString(row.payload) for row in rows.order_by(models.SearcherEvent.id)]
    return [e.trial_progress.progress for e in events if e.HasField("trial_progress")]


def _trial(master: Master, trial_id: int) -> models.Trial:
    with master.db.read() as s:
        return s.get_one(models.Trial, trial_id)


def test_a_batch_stores_its_reports_and_the_progress_it_carries(master: Master) -> None:
    trial = _running_trial(master)
    told_before = _progress_events(master, trial.experiment_id)
    result = intake.report(master.ctx, master.admin, trial.id, trial.run_id, _validation(1), progress=0.25)
    assert result.stored == 1
    assert master.stored_steps(trial.id, "validation") == [1]
    assert _trial(master, trial.id).progress == pytest.approx(0.25)
    assert _progress_events(master, trial.experiment_id) == [*told_before, 0.25]

    # Within the same mark the searcher is not told again (as with ReportTrialProgress).
    intake.report(master.ctx, master.admin, trial.id, trial.run_id, _validation(2), progress=0.26)
    assert _trial(master, trial.id).progress == pytest.approx(0.26)
    assert _progress_events(master, trial.experiment_id) == [*told_before, 0.25]


def test_a_batch_of_progress_alone_stores_no_report(master: Master) -> None:
    trial = _running_trial(master)
    result = intake.report(master.ctx, master.admin, trial.id, trial.run_id, [], progress=1.0)
    assert (result.stored, result.duplicates) == (0, 0)
    assert master.stored_steps(trial.id) == [] and master.stored_steps(trial.id, "validation") == []
    assert _trial(master, trial.id).progress == 1.0
    assert _progress_events(master, trial.experiment_id)[-1] == 1.0


@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan])
def test_bad_progress_is_refused_and_nothing_of_the_batch_is_stored(master: Master, bad: float) -> None:
    trial = _running_trial(master)
    with pytest.raises(InvalidArgument, match="progress: must be between 0 and 1"):
        intake.report(master.ctx, master.admin, trial.id, trial.run_id, _validation(1), progress=bad)
    assert master.stored_steps(trial.id, "validation") == []
    assert _trial(master, trial.id).progress == 0.0


def test_a_batch_resent_after_it_was_stored_does_not_set_its_older_progress(master: Master) -> None:
    trial = _running_trial(master)
    first = [Report("training", 1, {"loss": 1.0}, seq=1)]
    intake.report(master.ctx, master.admin, trial.id, trial.run_id, first, progress=0.5)
    intake.report(master.ctx, master.admin, trial.id, trial.run_id, _validation(2), progress=0.7)
    result = intake.report(master.ctx, master.admin, trial.id, trial.run_id, first, progress=0.5)
    assert (result.stored, result.duplicates) == (0, 1)
    assert _trial(master, trial.id).progress == pytest.approx(0.7)


def test_progress_that_tells_the_searcher_takes_the_process_wide_lock(
    master_on_each_database: Master,
) -> None:
    """Progress that passes a mark tells the searcher (an outbox event ordered against the trial's
    exit): such a batch takes the process-wide lock; progress within a mark leaves a training
    batch on PostgreSQL its trial's lock alone."""
    master = master_on_each_database
    trial = _running_trial(master)
    training = [Report("training", 1, {"loss": 1.0}, seq=1)]
    assert intake._intake_lock(master.ctx, trial.id, training, progress=0.5) is None
    intake.report(master.ctx, master.admin, trial.id, trial.run_id, training, progress=0.5)
    within_the_mark = intake._intake_lock(master.ctx, trial.id, training, progress=0.51)
    if master.db.dialect == "postgresql":
        assert within_the_mark is not None
    else:
        assert within_the_mark is None  # SQLite: one writer, one lock
