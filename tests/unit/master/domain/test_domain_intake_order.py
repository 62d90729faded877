"""Metric batches sent before the last was answered (ReportTrialMetricsBatchRequest.after_seq):
the master stores them in order of their sequence numbers (domain/kernel/intake_order.py), and refuses,
as retryable, one whose predecessor does not come."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from cairn.core.retry import TRANSIENT_CODES
from services.common.status import status_of
from services.master.domain.kernel.errors import Aborted, FailedPrecondition, NotFound
from services.master.domain.kernel.intake_order import IntakeOrder
from services.master.domain.metrics import intake
from services.master.domain.metrics.reports import Report
from services.master.store import models
from tests.unit.master.domain.harness import Master

# On each database: metric intake from threads, ordered against each database's locks and commits.
pytestmark = pytest.mark.on_each_database


def _running_trial(master: Master) -> models.Trial:
    master.add_agent("a1", slots=1)
    (trial,) = master.trials(master.create())
    master.run_containers(master.live(trial.id).id)
    return trial


def _batch(first: int, last: int) -> list[Report]:
    return [Report("training", seq, {"loss": 1.0 / seq}, seq=seq) for seq in range(first, last + 1)]


def _stored_seqs_by_id(master: Master, trial_id: int) -> list[int]:
    with master.db.read() as s:
        rows = (
            s.query(models.Metric.seq).filter(models.Metric.trial_id == trial_id).order_by(models.Metric.id)
        )
        return [int(seq) for (seq,) in rows]


def test_a_batch_that_arrives_first_waits_for_the_one_it_follows(master: Master) -> None:
    trial = _running_trial(master)
    intake.report(master.ctx, master.admin, trial.id, trial.run_id, _batch(1, 3))
    done: list[int] = []

    def second() -> None:
        result = intake.report(master.ctx, master.admin, trial.id, trial.run_id, _batch(7, 9), after_seq=6)
        done.append(result.stored)

    waiting = threading.Thread(target=second)
    waiting.start()
    time.sleep(0.3)
    assert done == [] and _stored_seqs_by_id(master, trial.id) == [1, 2, 3]  # 7..9 wait for 4..6

    intake.report(master.ctx, master.admin, trial.id, trial.run_id, _batch(4, 6), after_seq=3)
    waiting.join(10)

    assert done == [3]
    assert _stored_seqs_by_id(master, trial.id) == list(range(1, 10))
    summary = master.trials(trial.experiment_id)[0].summary_metrics
    assert summary["avg_metrics"]["loss"]["last"] == pytest.approx(1.0 / 9)


def test_a_batch_whose_predecessor_never_comes_is_refused_as_retryable(master: Master) -> None:
    """A conflict with the run's sequence, not the master's failure: ABORTED (HTTP 409), which the
    Core API retries; never UNAVAILABLE, which the REST gateway answers as a 503 (found by
    schemathesis: a batch with made-up reports and an after_seq of a running trial's run)."""
    trial = _running_trial(master)
    master.ctx.intake_order = IntakeOrder(wait_s=0.2)
    intake.report(master.ctx, master.admin, trial.id, trial.run_id, _batch(1, 3))

    with pytest.raises(Aborted, match="reports up to seq 6 are not stored yet") as refused:
        intake.report(master.ctx, master.admin, trial.id, trial.run_id, _batch(7, 9), after_seq=6)

    assert status_of(refused.value) == grpc.StatusCode.ABORTED and grpc.StatusCode.ABORTED in TRANSIENT_CODES
    assert _stored_seqs_by_id(master, trial.id) == [1, 2, 3]  # nothing of it stored


def test_a_batch_waiting_in_vain_for_a_run_that_is_over_is_refused_for_good(master: Master) -> None:
    """Its predecessors can never come: a clear refusal, not a retryable one (found by schemathesis:
    a REST batch of a made-up run with a made-up after_seq answered 503)."""
    master.add_agent("a1", slots=1)
    experiment_id = master.create()
    (trial,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(trial.id).id)
    master.ctx.intake_order = IntakeOrder(wait_s=0.1)
    with pytest.raises(FailedPrecondition, match=f"trial {trial.id} is on run 1; reports of run 7"):
        intake.report(master.ctx, master.admin, trial.id, 7, _batch(9, 9), after_seq=8)
    master.report(trial.id, 1, "validation", 10, 1, loss=0.5)
    master.exit(container, 0)
    (trial,) = master.trials(experiment_id)
    assert trial.state == "COMPLETED"
    with pytest.raises(
        FailedPrecondition, match=r"after_seq: trial \d+ has ended without reports up to seq 8"
    ):
        intake.report(master.ctx, master.admin, trial.id, trial.run_id, _batch(9, 9), after_seq=8)
    with pytest.raises(NotFound, match="trial 999 not found"):
        intake.report(master.ctx, master.admin, 999, 1, _batch(9, 9), after_seq=8)


def test_a_master_without_a_mark_reads_what_the_run_holds(master: Master) -> None:
    trial = _running_trial(master)
    intake.report(master.ctx, master.admin, trial.id, trial.run_id, _batch(1, 3))
    master.ctx.intake_order = IntakeOrder(wait_s=0.2)  # as after a restart: no mark for the run

    stored = intake.report(master.ctx, master.admin, trial.id, trial.run_id, _batch(4, 5), after_seq=3)

    assert stored.stored == 2 and _stored_seqs_by_id(master, trial.id) == [1, 2, 3, 4, 5]


def test_the_order_forgets_the_runs_it_has_not_seen_longest() -> None:
    order = IntakeOrder(wait_s=0.05, max_runs=2)
    order.stored((1, 1), 10)
    order.stored((2, 1), 5)
    order.stored((3, 1), 7)

    assert order.wait_turn((2, 1), 5, lambda: 0)
    assert order.wait_turn((1, 1), 10, lambda: 10)  # forgotten: read again, and found stored
    assert not order.wait_turn((3, 1), 8, lambda: 7)
