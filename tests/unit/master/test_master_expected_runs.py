"""How long the start forecast expects each trial allocation to run (domain/scheduling/
expected_runs.py), from a run's pace between its first progress report and its latest, and the
pace each trial's run keeps (metrics/progress.note_pace)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.master.domain.metrics.progress import note_pace
from services.master.domain.scheduling.expected_runs import TrialRun, estimate, pace_of, typical_runs
from services.master.store import models

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def _run(
    alloc: str,
    *,
    placed: bool = True,
    run_id: int = 1,
    started: float | None = 30.0,
    progress: float = 0.0,
    reported: float | None = None,
    first: tuple[float, float] | None = None,
    experiment_id: int = 1,
) -> TrialRun:
    """`first`: (its progress, seconds ago) at the run's first report; `reported`: seconds since
    the latest."""
    return TrialRun(
        allocation_id=alloc,
        experiment_id=experiment_id,
        placed=placed,
        run_id=run_id,
        start_time=_ago(started) if started is not None else None,
        progress=progress,
        progress_at=_ago(reported) if reported is not None else None,
        pace_run_id=run_id if first is not None else None,
        pace_progress=first[0] if first is not None else None,
        pace_at=_ago(first[1]) if first is not None else None,
    )


def test_a_resumed_run_is_timed_by_its_own_pace_not_its_trials_whole_progress() -> None:
    # Resumed at half done 20 s ago (first report then); 0.7 done 2 s ago: 0.2 in 18 s, so the
    # 0.3 left takes 27 s, less the 2 s since that report.
    resumed = _run("r", started=21.0, progress=0.7, reported=2.0, first=(0.5, 20.0))
    pace = pace_of(1, 0.7, _ago(2.0), 1, 0.5, _ago(20.0))
    assert pace is not None and pace.per_second == pytest.approx(0.2 / 18)
    expected = estimate([resumed], typical_runs([], []), NOW)
    assert expected.seconds["r"] == pytest.approx(25.0)
    # The trial's progress over the run's time alone (0.7 in 21 s) would say 9 s.


def test_a_run_without_a_pace_yet_and_a_waiting_one_go_by_their_experiments_typical_pace() -> None:
    # The experiment's trials do 0.1 a second after 2 s of start-up.
    typical = typical_runs([(1, 0.1, 2.0), (1, 0.1, 2.0)], [])
    fresh = _run("fresh", started=1.0)  # no report yet: 2 s of start-up, then 10 s, 1 s gone
    one_report = _run("one", started=5.0, progress=0.3, reported=1.0, first=(0.3, 1.0))
    waiting = _run("wait", placed=False, started=None, progress=0.4)  # resumes at 0.4
    expected = estimate([fresh, one_report, waiting], typical, NOW)
    assert expected.seconds["fresh"] == pytest.approx(11.0)
    assert expected.seconds["one"] == pytest.approx(6.0)  # 0.7 at 0.1/s, reported a second ago
    assert expected.seconds["wait"] == pytest.approx(8.0)  # start-up + 0.6 at 0.1/s
    # A restart costs the start-up again.
    assert expected.restart_seconds == {"fresh": 2.0, "one": 2.0, "wait": 2.0}


def test_without_progress_the_finished_trials_runs_say_how_long_and_else_nothing_does() -> None:
    typical = typical_runs([], [(1, 40.0), (1, 60.0)])
    running = _run("running", started=30.0)
    waiting = _run("waiting", placed=False, started=None)
    other = _run("other", experiment_id=2)
    expected = estimate([running, waiting, other], typical, NOW)
    assert expected.seconds == {"running": 20.0, "waiting": 50.0}  # "other": unknown


def test_a_run_keeps_the_pace_of_its_own_reports() -> None:
    trial = models.Trial(run_id=1, progress=0.0)
    trial.progress = 0.5
    note_pace(trial, 0.5, _ago(10.0))
    trial.progress = 0.7
    note_pace(trial, 0.7, _ago(2.0))
    assert (trial.pace_run_id, trial.pace_progress, trial.pace_at, trial.progress_at) == (
        1,
        0.5,
        _ago(10.0),
        _ago(2.0),
    )
    # Its next run starts a pace of its own, from its own first report (back at its checkpoint).
    trial.run_id = 2
    trial.progress = 0.6
    note_pace(trial, 0.6, _ago(1.0))
    assert (trial.pace_run_id, trial.pace_progress, trial.pace_at) == (2, 0.6, _ago(1.0))
    # A report below the run's first (it went back to a checkpoint) starts it again.
    note_pace(trial, 0.55, NOW)
    assert (trial.pace_progress, trial.pace_at) == (0.55, NOW)
