"""The job listing's forecast (domain/scheduling/start_forecast.py, the scheduler's PredictStarts):
a waiting job's predicted start from the running work's pace, and the job whose end lets it start;
no forecast, and why, when what is ahead has no known end."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cairn.api.v1 import job_pb2
from services.common import interceptors
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.states import TaskKind
from services.master.domain.scheduling.expected_runs import expected_runs
from services.master.domain.scheduling.start_forecast import JobForecast, StartForecast, StartForecasts
from services.master.servicers.api.service import CairnServicer
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.servicer_double import Context, api_deps

pytestmark = pytest.mark.on_each_database


def _jobs(master: Master) -> dict[str, job_pb2.Job]:
    api = CairnServicer(
        api_deps(master, forecasts=StartForecasts(master.ctx), waiting=master.scheduling.waiting)
    )
    token = interceptors._principal.set(master.admin)
    try:
        answer = api.GetJobsV2(job_pb2.GetJobsV2Request(resource_pool="default", limit=-1), Context())
    finally:
        interceptors._principal.reset(token)
    return {job.full.job_id: job.full for job in answer.jobs}


def test_a_waiting_job_is_forecast_to_start_when_the_running_one_ends(master: Master) -> None:
    master.add_agent("a1", slots=1)
    first = master.create()
    (running,) = master.trials(first)
    alloc = master.live(running.id)
    master.run_containers(alloc.id)
    # Half done after a minute: a minute to go.
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.Allocation, alloc.id).start_time = utcnow() - timedelta(seconds=60)
        w.session.get_one(models.Trial, running.id).progress = 0.5
    second = master.create()
    (waiting,) = master.trials(second)

    with master.db.read() as s:
        expected = expected_runs(s, utcnow()).seconds
    assert expected[alloc.id] == pytest.approx(60, abs=2)
    # The waiting trial's experiment has no run to go by yet: unknown.
    assert master.live(waiting.id).id not in expected

    jobs = _jobs(master)
    ahead, behind = jobs[f"exp-{first}"], jobs[f"exp-{second}"]
    assert not ahead.HasField("predicted_start")  # it runs
    assert behind.predicted_after == f"exp-{first}"
    start = behind.predicted_start.ToDatetime().replace(tzinfo=utcnow().tzinfo)
    assert timedelta(seconds=50) < start - utcnow() < timedelta(seconds=70)


def test_work_with_no_known_end_gives_no_forecast_and_says_why(master: Master) -> None:
    master.add_agent("a1", slots=1)
    command = master.launch(TaskKind.COMMAND, {"entrypoint": "sleep 600"})
    assert command
    experiment_id = master.create()
    jobs = _jobs(master)
    behind = jobs[f"exp-{experiment_id}"]
    assert not behind.HasField("predicted_start")
    assert "no start within 7 days: the work ahead of it has no known end" in behind.predicted_after


def test_a_running_trials_own_pace_forecasts_the_next_start_and_the_listing_says_when(master: Master) -> None:
    master.add_agent("a1", slots=1)
    first = master.create()
    (running,) = master.trials(first)
    alloc = master.live(running.id)
    master.run_containers(alloc.id)
    now = utcnow()
    # Resumed at half done (its run's first report, 20 s ago), 0.7 done 2 s ago: 0.2 in 18 s, so
    # 27 s for the 0.3 left, 25 s from now. (Its trial's progress over the run's 21 s says 9 s.)
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.Allocation, alloc.id).start_time = now - timedelta(seconds=21)
        trial = w.session.get_one(models.Trial, running.id)
        trial.progress, trial.progress_at = 0.7, now - timedelta(seconds=2)
        trial.pace_run_id, trial.pace_progress, trial.pace_at = alloc.run_id, 0.5, now - timedelta(seconds=20)
    second = master.create()
    behind = _jobs(master)[f"exp-{second}"]
    assert behind.predicted_after == f"exp-{first}"
    start = behind.predicted_start.ToDatetime().replace(tzinfo=now.tzinfo)
    assert timedelta(seconds=22) < start - now < timedelta(seconds=28)
    made = behind.forecast_time.ToDatetime().replace(tzinfo=now.tzinfo)
    assert now - timedelta(seconds=1) < made < utcnow()


def test_a_forecast_a_moment_old_passes_over_the_starts_made_since() -> None:
    made = utcnow()
    at = [made + timedelta(seconds=s) for s in (5, 10, 15)]
    forecast = StartForecast(
        jobs={"exp-1": JobForecast(frozenset({"a1", "a2", "a3"}), tuple((t, "exp-0") for t in at))},
        job_of={"a1": "exp-1", "a2": "exp-1", "a3": "exp-1"},
        no_start="none",
        made_at=made,
    )
    assert forecast.next_start(["a1", "a2", "a3"], ["a1", "a2", "a3"], made) == (at[0], "exp-0")
    # One of them started since (whichever it was): the job's next start is the forecast's second.
    assert forecast.next_start(["a1", "a2", "a3"], ["a1", "a2"], made) == (at[1], "exp-0")
    assert forecast.next_start(["a2", "a3", "a4"], ["a2", "a3", "a4"], made) == (at[1], "exp-0")
    # 12 s on, none started: the job runs behind the forecast; its next start is the first the
    # forecast put after now. 20 s on, none is left after now: it is due now.
    later = made + timedelta(seconds=12)
    assert forecast.next_start(["a1", "a2", "a3"], ["a1", "a2", "a3"], later) == (at[2], "exp-0")
    much_later = made + timedelta(seconds=20)
    assert forecast.next_start(["a1", "a2", "a3"], ["a1", "a2", "a3"], much_later) == (much_later, "exp-0")
    # All three started: the forecast says nothing of a4 (queued since), and says so; nor of a job
    # it did not see.
    assert "the next forecast tells" in str(forecast.next_start(["a1", "a2", "a3", "a4"], ["a4"], made))
    assert forecast.next_start(["a5"], ["a5"], made) == "none"
