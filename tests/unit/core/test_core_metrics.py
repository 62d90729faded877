"""core.train on a cluster: batching, sequence numbers, retries, ordering, and failures that reach
the training code."""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

import cairn.core
from cairn.core.cluster_info import get_cluster_info
from cairn.core.context import cluster_context
from cairn.core.master_session import MasterSession
from cairn.core.retry import RetryPolicy
from cairn.core.settings import CoreSettings
from cairn.core.train import ClusterTrainContext
from tests.unit.core.conftest import ClusterEnv
from tests.unit.core.core_master_double import TOKEN, RunningDouble, wait_for

FAST_RETRY = RetryPolicy(first_delay_s=0.02, max_delay_s=0.05, give_up_after_s=0.5)


def _seqs(reports: list) -> list[int]:
    return [report.seq for report in reports]


def _batches(env: ClusterEnv) -> list:
    return env.master.calls.of("ReportTrialMetricsBatch")


def _batch_seqs(batch: Any) -> list[int]:
    """The sequence numbers a batch carried, whichever form it was sent in."""
    if batch.reports_json:
        return [int(entry[0]) for entry in json.loads(batch.reports_json)]
    return _seqs(batch.reports)


def test_reports_are_batched_with_increasing_sequence_numbers(cluster_env: ClusterEnv) -> None:
    info = get_cluster_info()
    assert info is not None
    with cluster_context(info, settings=CoreSettings(metrics_batch_size=500)) as core:
        for step in range(1, 1201):
            core.train.report_training_metrics(step, {"loss": 1.0 / step})
        core.train.report_validation_metrics(1200, {"loss": 0.5, "accuracy": 0.9})
    stored = cluster_env.master.stored_reports
    assert _seqs(stored) == list(range(1, 1202))
    assert [r.steps_completed for r in stored[:3]] == [1, 2, 3]
    assert stored[-1].group == "validation"
    batches = _batches(cluster_env)
    assert len(batches) >= 3, "1201 reports cannot fit in fewer than three batches of 500"
    assert all(len(_batch_seqs(batch)) <= 500 for batch in batches)
    assert all(batch.trial_id == 3 and batch.trial_run_id == 2 for batch in batches)
    sent_in_order = [seq for batch in batches for seq in _batch_seqs(batch)]
    assert sent_in_order == sorted(sent_in_order)


def test_report_content(cluster_env: ClusterEnv) -> None:
    with cairn.core.init() as core:
        core.train.report_training_metrics(
            10, {"loss": 0.25, "name": "x", "ok": True}, batch_metrics=[{"loss": 0.3}, {"loss": 0.2}]
        )
        core.train.report_metrics("inference", 10, {"latency_ms": 12})
    training, custom = cluster_env.master.stored_reports
    assert training.group == "training"
    assert training.steps_completed == 10
    assert json_format.MessageToDict(training.metrics) == {"loss": 0.25, "name": "x", "ok": True}
    assert [json_format.MessageToDict(b) for b in training.batch_metrics] == [{"loss": 0.3}, {"loss": 0.2}]
    assert training.report_time.seconds > 0
    assert custom.group == "inference"
    assert json_format.MessageToDict(custom.metrics) == {"latency_ms": 12}


def test_metrics_wait_at_most_a_linger_before_sending(cluster_env: ClusterEnv) -> None:
    with cairn.core.init() as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
        assert wait_for(lambda: len(cluster_env.master.stored_reports) == 1, timeout=2.0)


def test_batch_resent_after_lost_reply_is_stored_once(cluster_env: ClusterEnv) -> None:
    cluster_env.master.fail("ReportTrialMetricsBatch", grpc.StatusCode.UNAVAILABLE, after_work=True)
    with cairn.core.init() as core:
        for step in range(1, 6):
            core.train.report_training_metrics(step, {"loss": float(step)})
        assert core.train.flush(timeout=10.0)  # type: ignore[attr-defined]
    batches = _batches(cluster_env)
    assert len(batches) >= 2
    # The resend carries exactly the numbers of the attempt whose reply was lost.
    assert _batch_seqs(batches[1]) == _batch_seqs(batches[0])
    assert _seqs(cluster_env.master.stored_reports) == [1, 2, 3, 4, 5]


def test_batch_retried_through_an_outage(cluster_env: ClusterEnv) -> None:
    cluster_env.master.fail("ReportTrialMetricsBatch", grpc.StatusCode.UNAVAILABLE, times=2)
    cluster_env.master.fail("ReportTrialMetricsBatch", grpc.StatusCode.DEADLINE_EXCEEDED)
    info = get_cluster_info()
    assert info is not None
    with cluster_context(info, settings=CoreSettings(retry=RetryPolicy(0.02, 0.05, 10.0))) as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
        core.train.report_training_metrics(2, {"loss": 0.5})
    assert _seqs(cluster_env.master.stored_reports) == [1, 2]
    assert len(_batches(cluster_env)) >= 4


def test_refusal_surfaces_on_next_call_and_at_exit(cluster_env: ClusterEnv) -> None:
    cluster_env.master.fail("ReportTrialMetricsBatch", grpc.StatusCode.FAILED_PRECONDITION)
    core = cairn.core.init()
    core.start()
    core.train.report_training_metrics(1, {"loss": 1.0})
    assert wait_for(lambda: len(_batches(cluster_env)) == 1)
    with pytest.raises(cairn.core.MetricsReportError, match="FAILED_PRECONDITION"):
        # Within a bounded number of calls the failure reaches the training loop.
        for step in range(2, 1000):
            core.train.report_training_metrics(step, {"loss": 1.0})
            time.sleep(0.005)
    with pytest.raises(cairn.core.MetricsReportError, match="from seq 1 on were not stored"):
        core.close()
    assert cluster_env.master.stored_reports == []


def test_outage_longer_than_the_retry_budget_fails_the_exit(cluster_env: ClusterEnv) -> None:
    cluster_env.master.fail("ReportTrialMetricsBatch", grpc.StatusCode.UNAVAILABLE, times=1000)
    info = get_cluster_info()
    assert info is not None
    context = cluster_context(info, settings=CoreSettings(retry=FAST_RETRY))
    with pytest.raises(cairn.core.MetricsReportError, match="no answer from the master"), context as core:
        core.train.report_training_metrics(1, {"loss": 1.0})


def test_a_later_process_of_the_allocation_continues_after_the_stored_numbers(
    cluster_env: ClusterEnv,
) -> None:
    # An earlier process of the same allocation stored seqs 1 and 2 (an entrypoint running two
    # scripts): the new one asks first and numbers its reports after them, so nothing is dropped.
    cluster_env.master.store_seqs_beforehand([1, 2])
    with cairn.core.init() as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
    assert _seqs(cluster_env.master.stored_reports) == [3]
    assert cluster_env.master.sequence_queries == 1


def test_the_opening_question_is_asked_off_the_training_thread(cluster_env: ClusterEnv) -> None:
    # The start does not wait a round trip for the stored numbering; the first report does, so
    # numbers still continue after what another process of the allocation stored.
    cluster_env.master.store_seqs_beforehand([1, 2])
    cluster_env.master.sequence_gate.clear()
    core = cairn.core.init()
    core.start()  # returns with the question unanswered (the gate is shut)
    reported = threading.Event()

    def report() -> None:
        core.train.report_training_metrics(1, {"loss": 1.0})
        reported.set()

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    assert not reported.wait(0.2), "the first report did not wait for the numbering"
    cluster_env.master.sequence_gate.set()
    assert reported.wait(5.0)
    core.close()
    assert _seqs(cluster_env.master.stored_reports) == [3]
    assert cluster_env.master.sequence_queries == 1


def test_a_refused_opening_question_surfaces_on_the_first_report(cluster_env: ClusterEnv) -> None:
    info = get_cluster_info()
    assert info is not None
    cluster_env.master.sequence_gate.clear()
    core = cluster_context(info, settings=CoreSettings(retry=FAST_RETRY))
    core.start()
    cluster_env.master.stop_answering_sequence_queries()
    cluster_env.master.sequence_gate.set()
    with pytest.raises(cairn.core.MetricsReportError, match="cannot be reported"):
        core.train.report_training_metrics(1, {"loss": 1.0})
    with pytest.raises(cairn.core.MetricsReportError, match="cannot be reported"):
        core.close()


def test_second_context_of_the_allocation_continues_the_numbers(cluster_env: ClusterEnv) -> None:
    for steps in (1, 2):
        with cairn.core.init() as core:
            core.train.report_training_metrics(steps, {"loss": 1.0})
    assert _seqs(cluster_env.master.stored_reports) == [1, 2]


def test_full_queue_holds_the_reporter_back(cluster_env: ClusterEnv) -> None:
    cluster_env.master.metrics_gate.clear()
    info = get_cluster_info()
    assert info is not None
    settings = CoreSettings(metrics_queue_size=3, metrics_batch_size=2)
    done = []
    with cluster_context(info, settings=settings) as core:

        def report_many() -> None:
            for step in range(1, 21):
                core.train.report_training_metrics(step, {"loss": 1.0})
                done.append(step)

        reporter = threading.Thread(target=report_many, daemon=True)
        reporter.start()
        # A batch (of at most 2) is stuck at the master and 3 reports fill the queue: the reporter
        # waits after 4 to 6 reports, however the sender happened to split the first batch.
        assert wait_for(lambda: len(done) >= 4, timeout=2.0)
        time.sleep(0.3)
        assert reporter.is_alive()
        assert 4 <= len(done) <= 6
        cluster_env.master.metrics_gate.set()
        reporter.join(timeout=10.0)
        assert not reporter.is_alive()
    assert _seqs(cluster_env.master.stored_reports) == list(range(1, 21))


def test_the_next_batch_goes_while_the_last_is_stored_and_names_it(cluster_env: ClusterEnv) -> None:
    """A master that keeps them in order gets a second batch before answering the first, naming the
    first one's highest number (after_seq); everything is stored once, in order."""
    cluster_env.master.orders_batches = True
    cluster_env.master.metrics_gate.clear()  # the first batch (no after_seq) waits at the master
    info = get_cluster_info()
    assert info is not None
    with cluster_context(info, settings=CoreSettings(metrics_batch_size=10, metrics_linger_s=0.05)) as core:
        for step in range(1, 21):
            core.train.report_training_metrics(step, {"loss": 1.0 / step})
        assert wait_for(lambda: len(_batches(cluster_env)) >= 2, timeout=5.0)
        assert cluster_env.master.stored_reports == []  # both on their way, neither answered
        cluster_env.master.metrics_gate.set()
    # The two calls are in flight together, so the test master's handler threads may note them in
    # either order (a whole run saw [10, 0]): which is which is told by their after_seq.
    first, second = sorted(_batches(cluster_env)[:2], key=lambda b: b.after_seq)
    assert [first.after_seq, second.after_seq] == [0, _batch_seqs(first)[-1]]
    assert _seqs(cluster_env.master.stored_reports) == list(range(1, 21))


def test_one_batch_at_a_time_for_a_master_that_does_not_order_them(cluster_env: ClusterEnv) -> None:
    cluster_env.master.metrics_gate.clear()
    info = get_cluster_info()
    assert info is not None
    with cluster_context(info, settings=CoreSettings(metrics_batch_size=10, metrics_linger_s=0.05)) as core:
        for step in range(1, 21):
            core.train.report_training_metrics(step, {"loss": 1.0 / step})
        assert wait_for(lambda: len(_batches(cluster_env)) >= 1, timeout=5.0)
        time.sleep(0.3)
        assert len(_batches(cluster_env)) == 1  # the second waits for the first's answer
        cluster_env.master.metrics_gate.set()
    assert all(b.after_seq == 0 for b in _batches(cluster_env))
    assert _seqs(cluster_env.master.stored_reports) == list(range(1, 21))


def test_values_are_made_plain(cluster_env: ClusterEnv) -> None:
    class Scalar:
        """Stands for a numpy or torch scalar: it has .item()."""

        def __init__(self, value: float) -> None:
            self.value = value

        def item(self) -> float:
            return self.value

    with cairn.core.init() as core:
        core.train.report_training_metrics(
            Scalar(3),  # type: ignore[arg-type]
            {
                "loss": Scalar(0.5),
                "nan": math.nan,
                "inf": math.inf,
                "neg": -math.inf,
                "nested": [1, {"a": 2}],
            },
        )
    (report,) = cluster_env.master.stored_reports
    assert report.steps_completed == 3
    assert json_format.MessageToDict(report.metrics) == {
        "loss": 0.5,
        "nan": "NaN",
        "inf": "Infinity",
        "neg": "-Infinity",
        "nested": [1, {"a": 2}],
    }


def test_numpy_values(cluster_env: ClusterEnv) -> None:
    np = pytest.importorskip("numpy")
    with cairn.core.init() as core:
        core.train.report_training_metrics(np.int64(5), {"loss": np.float32(0.5), "count": np.int32(3)})
        with pytest.raises(TypeError, match="not a single number"):
            core.train.report_training_metrics(6, {"loss": np.array([1.0, 2.0])})
    (report,) = cluster_env.master.stored_reports
    assert report.steps_completed == 5
    assert json_format.MessageToDict(report.metrics) == {"loss": 0.5, "count": 3}


def test_bad_reports_are_refused_before_queueing(cluster_env: ClusterEnv) -> None:
    with cairn.core.init() as core:
        with pytest.raises(RuntimeError, match="'accuracy' returned an invalid scalar value: None"):
            core.train.report_validation_metrics(1, {"loss": 0.1, "accuracy": None})
        with pytest.raises(ValueError, match=r"must not contain '\.'"):
            core.train.report_metrics("a.b", 1, {"x": 1})
        with pytest.raises(ValueError, match="non-empty"):
            core.train.report_metrics("", 1, {"x": 1})
        with pytest.raises(ValueError, match="steps_completed: must be >= 0"):
            core.train.report_training_metrics(-1, {"x": 1})
        with pytest.raises(TypeError, match="steps_completed: must be an integer"):
            core.train.report_training_metrics(1.5, {"x": 1})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"metrics\['x'\]: unsupported value of type object"):
            core.train.report_training_metrics(1, {"x": object()})
        with pytest.raises(TypeError, match="keys must be strings"):
            core.train.report_training_metrics(1, {1: 2})  # type: ignore[dict-item]
        with pytest.raises(ValueError, match="between 0 and 1"):
            core.train.report_progress(1.5)
        # Bytes cannot be stored: dropped from validation metrics, as Determined does.
        core.train.report_validation_metrics(2, {"loss": 0.1, "blob": b"\x00"})
    (report,) = cluster_env.master.stored_reports
    assert json_format.MessageToDict(report.metrics) == {"loss": 0.1}


def test_progress_early_exit_and_best_validation(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    with cairn.core.init() as core:
        core.train.report_progress(0.25)
        assert core.train.get_experiment_best_validation() is None
        master.best_metric = 0.125
        assert core.train.get_experiment_best_validation() == 0.125
        core.train.report_early_exit(cairn.core.EarlyExitReason.USER_REQUESTED_STOP)
        # A second report is refused by the master and ignored, as in Determined.
        core.train.report_early_exit(cairn.core.EarlyExitReason.INVALID_HP)
    assert master.batch_progress == [0.25]
    (batch,) = [call for call in master.calls.of("ReportTrialMetricsBatch") if call.HasField("progress")]
    assert batch.trial_id == 3
    first_exit = master.calls.of("ReportTrialSearcherEarlyExit")[0]
    assert first_exit.early_exit.reason == first_exit.early_exit.EXITED_REASON_USER_REQUESTED_STOP


def test_progress_rides_on_the_batch_of_the_reports_around_it(cluster_env: ClusterEnv) -> None:
    """An epoch's validation and its progress are one call; of progress reported faster than the
    sender sends, only the latest goes."""
    master = cluster_env.master
    with cairn.core.init() as core:
        core.train.report_validation_metrics(1, {"loss": 0.5})
        core.train.report_progress(0.1)
        core.train.report_progress(0.2)
        assert core.train.flush(timeout=10.0)  # type: ignore[attr-defined]
        assert master.batch_progress == [0.2]
    (batch,) = _batches(cluster_env)
    assert _batch_seqs(batch) == [1] and batch.progress == 0.2
    assert not master.calls.of("ReportTrialProgress")


def test_one_batch_carrying_progress_is_on_its_way_at_a_time(cluster_env: ClusterEnv) -> None:
    """Two batches carrying progress on their way together could be stored in either order, and
    leave the older value: the next value waits for the last one's answer, and only the latest of
    those reported meanwhile goes."""
    master = cluster_env.master
    master.orders_batches = True
    master.metrics_gate.clear()  # holds the first batch at the master
    core = cairn.core.init()
    core.start()
    core.train.report_progress(0.1)
    assert wait_for(lambda: len(_progress_batches(master)) == 1)
    core.train.report_progress(0.2)
    core.train.report_progress(0.3)
    time.sleep(0.3)  # several lingers: nothing more goes while the first is unanswered
    assert len(_progress_batches(master)) == 1
    master.metrics_gate.set()
    assert core.train.flush(timeout=10.0)  # type: ignore[attr-defined]
    assert master.batch_progress == [0.1, 0.3]
    core.close()


def _progress_batches(master: Any) -> list[Any]:
    return [call for call in master.calls.of("ReportTrialMetricsBatch") if call.HasField("progress")]


def test_progress_alone_is_stored_by_the_close(cluster_env: ClusterEnv) -> None:
    """Progress with no report queued goes in a batch of its own, and the close waits for it."""
    cluster_env.master.metrics_gate.clear()  # held until the close is under way
    core = cairn.core.init()
    core.start()
    core.train.report_progress(0.75)
    threading.Timer(0.3, cluster_env.master.metrics_gate.set).start()
    core.close()
    assert cluster_env.master.batch_progress == [0.75]
    assert cluster_env.master.stored_reports == []


def test_progress_that_cannot_be_stored_fails_the_close(cluster_env: ClusterEnv) -> None:
    cluster_env.master.fail("ReportTrialMetricsBatch", grpc.StatusCode.FAILED_PRECONDITION)
    core = cairn.core.init()
    core.start()
    core.train.report_progress(0.5)
    with pytest.raises(cairn.core.MetricsReportError, match="progress not stored"):
        core.close()
    assert cluster_env.master.batch_progress == []


def test_an_older_master_that_reads_no_progress_in_batches_gets_its_own_call(
    cluster_env: ClusterEnv,
) -> None:
    cluster_env.master.reads_batch_progress = False
    with cairn.core.init() as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
        core.train.report_progress(0.5)
        assert core.train.flush(timeout=10.0)  # type: ignore[attr-defined]
        core.train.report_progress(0.75)
    calls = cluster_env.master.calls.of("ReportTrialProgress")
    assert [(c.trial_id, c.progress, c.is_raw) for c in calls] == [(3, 0.5, True), (3, 0.75, True)]
    assert _seqs(cluster_env.master.stored_reports) == [1]
    # Learned once: later progress is not offered in a batch again.
    assert len(_progress_batches(cluster_env.master)) == 1


def test_every_call_carries_the_allocation_token(cluster_env: ClusterEnv) -> None:
    with cairn.core.init() as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
        core.train.report_progress(0.5)
    assert cluster_env.master.unauthenticated_calls == 0
    assert cluster_env.master.stored_reports


def test_reporting_outside_the_with_block_is_refused(cluster_env: ClusterEnv) -> None:
    core = cairn.core.init()
    with pytest.raises(RuntimeError, match=r"with cairn\.core\.init"):
        core.train.report_training_metrics(1, {"loss": 1.0})
    core.close()


def test_an_older_master_that_reads_no_json_batches_gets_the_reports_as_messages(
    cluster_env: ClusterEnv,
) -> None:
    """The Core API sends a batch as one JSON document; a master from before that form answers it
    as an empty batch (nothing stored): the shipper sends the same reports again as messages, and
    keeps to them. Same sequence numbers: nothing is stored twice."""
    cluster_env.master.reads_json_batches = False
    with cairn.core.init() as core:
        for step in (1, 2, 3):
            core.train.report_training_metrics(step, {"loss": 1.0 / step})
        core.train.report_validation_metrics(3, {"loss": 0.25})
    assert _seqs(cluster_env.master.stored_reports) == [1, 2, 3, 4]
    assert [r.group for r in cluster_env.master.stored_reports] == ["training"] * 3 + ["validation"]


def test_a_report_is_a_copy_of_the_callers_dict(cluster_env: ClusterEnv) -> None:
    metrics = {"loss": 1.0}
    with cairn.core.init() as core:
        core.train.report_training_metrics(1, metrics)
        metrics["loss"] = 2.0  # a loop that reuses its dict
        metrics["extra"] = 3.0
        core.train.report_training_metrics(2, metrics)
    first, second = cluster_env.master.stored_reports
    assert json_format.MessageToDict(first.metrics) == {"loss": 1.0}
    assert json_format.MessageToDict(second.metrics) == {"loss": 2.0, "extra": 3.0}


def test_a_rank_other_than_the_chief_may_not_report(master: RunningDouble) -> None:
    session = MasterSession(master.address, TOKEN, CoreSettings())
    try:
        train = ClusterTrainContext(
            session, trial_id=3, trial_run_id=2, experiment_id=7, allocation_id="7.3.rank1", is_chief=False
        )
        with pytest.raises(RuntimeError, match=r"only the chief \(rank 0\) may report metrics"):
            train.report_training_metrics(1, {"loss": 1.0})
    finally:
        session.close()
    assert master.master.calls.of("ReportTrialMetricsBatch") == []


def test_reporting_after_the_context_closed_is_refused(cluster_env: ClusterEnv) -> None:
    with cairn.core.init() as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
    with pytest.raises(RuntimeError, match=r"with cairn\.core\.init"):
        core.train.report_training_metrics(2, {"loss": 1.0})
    assert _seqs(cluster_env.master.stored_reports) == [1]
