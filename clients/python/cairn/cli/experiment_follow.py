"""`experiment create --follow`: a live view of an experiment until it ends.

Shows trials queued / running / done, the best searcher metric so far and a progress bar; on a
terminal, redrawn in place; otherwise one line per change (for logs and CI)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from cairn.api.v1 import experiment_pb2, trial_pb2
from cairn.cli.experiment_views import best_metric, progress, trial_metric
from cairn.cli.output import enum_label, metric_text, percent_text
from cairn.cli.paging import fetch_all
from cairn.cli.trial_logs import TrialLogFollower
from cairn.client.session import Session

ExpState = experiment_pb2.Experiment.State
TrialState = trial_pb2.Trial.State

TERMINAL_STATES = frozenset(
    {
        ExpState.STATE_COMPLETED,
        ExpState.STATE_CANCELED,
        ExpState.STATE_ERROR,
        ExpState.STATE_DELETING,
        ExpState.STATE_DELETED,
        ExpState.STATE_DELETE_FAILED,
    }
)
EXIT_COMPLETED = 0
EXIT_ERROR = 1
EXIT_CANCELED = 2

_QUEUED = frozenset({TrialState.STATE_QUEUED})
_RUNNING = frozenset(
    {
        TrialState.STATE_PULLING,
        TrialState.STATE_STARTING,
        TrialState.STATE_RUNNING,
        TrialState.STATE_STOPPING_CANCELED,
        TrialState.STATE_STOPPING_KILLED,
        TrialState.STATE_STOPPING_COMPLETED,
        TrialState.STATE_STOPPING_ERROR,
    }
)
_DONE = frozenset({TrialState.STATE_COMPLETED, TrialState.STATE_CANCELED, TrialState.STATE_ERROR})
# Allocation states (in Trial.runner_state) that mean an ACTIVE trial holds its slots.
_ALLOCATION_ON_SLOTS = frozenset({"ASSIGNED", "PULLING", "STARTING", "RUNNING", "TERMINATING"})
_LOG_DRAIN_S = 5.0


def exit_code_for(state: int) -> int:
    if state == ExpState.STATE_COMPLETED:
        return EXIT_COMPLETED
    if state == ExpState.STATE_CANCELED:
        return EXIT_CANCELED
    return EXIT_ERROR


@dataclass(frozen=True)
class FollowSnapshot:
    experiment_id: int
    state: str
    terminal: bool
    exit_code: int
    progress: float | None
    queued: int
    running: int
    paused: int
    done: int
    metric_name: str
    best_metric: float | None
    best_trial: int | None

    def summary(self) -> str:
        parts = [f"Experiment {self.experiment_id} {self.state}"]
        counts = f"trials: {self.queued} queued, {self.running} running, {self.done} done"
        if self.paused:
            counts += f", {self.paused} paused"
        parts.append(counts)
        if self.best_metric is not None:
            best = f"best {self.metric_name or 'metric'}: {metric_text(self.best_metric)}"
            if self.best_trial is not None:
                best += f" (trial {self.best_trial})"
            parts.append(best)
        if self.progress is not None:
            parts.append(f"progress {percent_text(self.progress)}")
        return " · ".join(parts)


def _phase(trial: trial_pb2.Trial) -> str:
    """ "queued", "running", "paused", "done" or "" (for an unknown state)."""
    if trial.state == TrialState.STATE_ACTIVE:
        # A master that stores ACTIVE rather than QUEUED/RUNNING tells the two apart by the state
        # of the trial's allocation, which it reports as the runner state.
        return "running" if trial.runner_state.upper() in _ALLOCATION_ON_SLOTS else "queued"
    if trial.state in _QUEUED:
        return "queued"
    if trial.state in _RUNNING:
        return "running"
    if trial.state in _DONE:
        return "done"
    if trial.state == TrialState.STATE_PAUSED:
        return "paused"
    return ""


def take_snapshot(exp: experiment_pb2.Experiment, trials: Sequence[trial_pb2.Trial]) -> FollowSnapshot:
    phases = [_phase(t) for t in trials]
    metric = best_metric(exp)
    best_trial = exp.best_trial_id if exp.HasField("best_trial_id") else None
    if metric is None:
        # An older master may not fill the experiment's best; work it out from the trials.
        scored = [(value, t.id) for t in trials if (value := trial_metric(t)) is not None]
        if scored:
            metric, best_trial = min(scored) if exp.smaller_is_better else max(scored)
    return FollowSnapshot(
        experiment_id=exp.id,
        state=enum_label(ExpState.Name(exp.state)),
        terminal=exp.state in TERMINAL_STATES,
        exit_code=exit_code_for(exp.state),
        progress=progress(exp),
        queued=phases.count("queued"),
        running=phases.count("running"),
        paused=phases.count("paused"),
        done=phases.count("done"),
        metric_name=exp.searcher_metric,
        best_metric=metric,
        best_trial=best_trial,
    )


class _View:
    """Redraws in place on a terminal; prints a line per change elsewhere."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Live | None = Live(console=console, refresh_per_second=4) if console.is_terminal else None
        self._last_line = ""

    def __enter__(self) -> _View:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)

    def show(self, snap: FollowSnapshot) -> None:
        line = snap.summary()
        if self._live is None:
            if line != self._last_line:
                self.console.print(Text(line))
        else:
            grid = Table.grid(padding=(0, 1))
            grid.add_row(
                ProgressBar(total=1.0, completed=snap.progress or 0.0, width=40),
                Text(percent_text(snap.progress) or "–"),
            )
            self._live.update(Group(Text(line), grid))
        self._last_line = line

    def log_line(self, text: str) -> None:
        self.console.print(Text(text))


def _trials(session: Session, experiment_id: int) -> list[trial_pb2.Trial]:
    def page(offset: int, limit: int) -> trial_pb2.GetExperimentTrialsResponse:
        return session.api.GetExperimentTrials(
            trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id, offset=offset, limit=limit)
        )

    return fetch_all(page, "trials")


def follow_experiment(
    session: Session,
    experiment_id: int,
    *,
    stream_logs: bool,
    console: Console,
    error_console: Console,
    poll_interval_s: float = 1.0,
) -> int:
    """Block until the experiment reaches a terminal state; the exit code says which."""
    follower: TrialLogFollower | None = None
    view = _View(console)
    try:
        with view:
            while True:
                exp = session.api.GetExperiment(
                    experiment_pb2.GetExperimentRequest(experiment_id=experiment_id)
                ).experiment
                trials = _trials(session, experiment_id)
                snap = take_snapshot(exp, trials)
                view.show(snap)
                if stream_logs and follower is None and trials:
                    first = min(trials, key=lambda t: t.id)
                    follower = TrialLogFollower(
                        session,
                        first.id,
                        emit=view.log_line,
                        report=lambda message: error_console.print(Text(f"warning: {message}")),
                    )
                    follower.start()
                if snap.terminal:
                    if follower is not None:
                        follower.finish(_LOG_DRAIN_S)
                        follower = None
                    return snap.exit_code
                time.sleep(poll_interval_s)
    finally:
        if follower is not None:
            follower.finish(0.0)
