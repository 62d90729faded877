"""Cairn's side of the search-quality benchmark: one experiment on a fresh local cluster per run.

The cluster is real (1 agent, 2 slots, SQLite; bench/cairn_cluster.py). The model definition is a
small copy of this package (task.py and cairn_trial.py), so Cairn trials train exactly what the
peers train. While the experiment runs, the epochs consumed are counted from the trials' summaries
(GetExperimentTrials, every POLL_S); once they pass the budget the experiment is killed and every
report is read (GetMetrics) for the record, which is measured to the report that spent the budget
(RunRecord.budget_s), not to the poll that noticed it.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from bench.cairn_cluster import Api, cairn_cluster
from bench.hpo.accounting import EpochReport, epochs_for
from bench.hpo.budget import MAX_EPOCHS, NUM_RUNGS, REDUCTION_FACTOR
from bench.hpo.record import ENDED_BY_BUDGET, ENDED_BY_SEARCH, RunRecord, plain_hparams
from bench.hpo.task import (
    BATCH_SIZES,
    CACHE_DIR_ENV,
    DEPTH,
    DROPOUT,
    LEARNING_RATE,
    WEIGHT_DECAY,
    WIDTH,
)
from cairn.api.v1 import experiment_pb2, trial_pb2
from services.common.logging import get_logger

log = get_logger(__name__)
HERE = Path(__file__).parent
SLOTS = 2
# Far more trials than a budget can pay for: the budget, not max_trials, ends every run.
MAX_TRIALS = 1000
POLL_S = 1.0

_HALVING = f"""
  name: async_halving
  metric: validation_error
  smaller_is_better: true
  max_trials: {MAX_TRIALS}
  num_rungs: {NUM_RUNGS}
  divisor: {REDUCTION_FACTOR}
  time_metric: epochs
  max_time: {MAX_EPOCHS}
  max_concurrent_trials: {SLOTS}"""

SEARCHERS = {
    "cairn_asha_stop": _HALVING + "\n  stop_once: true",
    "cairn_asha_promote": _HALVING + "\n  stop_once: false",
    "cairn_random": f"""
  name: random
  metric: validation_error
  smaller_is_better: true
  max_trials: {MAX_TRIALS}
  max_length: {{epochs: {MAX_EPOCHS}}}
  max_concurrent_trials: {SLOTS}""",
}


def _log_uniform(bounds: tuple[float, float]) -> str:
    low, high = (round(math.log10(v), 6) for v in bounds)
    return f"{{type: log, base: 10, minval: {low}, maxval: {high}}}"


# Where the trials share the generated data: not /tmp, which is each isolated trial's own (the
# process runtime gives a task user's task a private /tmp), so each would generate it again.
SHARED_DATA_CACHE = "/var/tmp/cairn-bench-hpo"


def experiment_config(system: str, seed: int, warm_starts: bool = True) -> str:
    # Warm starts: each trial and each promotion runs in an interpreter the agent prepared with
    # torch imported, and torch._dynamo, which torch imports only when the first optimizer is made
    # (~1.3 s of CPU on this machine). Not scikit-learn (~1.5 s more per standby): only the run's
    # first trial generates the data, every other one loads it from SHARED_DATA_CACHE.
    modules = "torch, torch._dynamo"
    preload = f"\n  preload_modules: [{modules}]" if warm_starts else ""
    return f"""
name: hpo-{system}-seed{seed}
entrypoint: python3 -m bench.hpo.cairn_trial
hyperparameters:
  learning_rate: {_log_uniform(LEARNING_RATE)}
  weight_decay: {_log_uniform(WEIGHT_DECAY)}
  width: {{type: int, minval: {WIDTH[0]}, maxval: {WIDTH[1]}}}
  depth: {{type: int, minval: {DEPTH[0]}, maxval: {DEPTH[1]}}}
  dropout: {{type: double, minval: {DROPOUT[0]}, maxval: {DROPOUT[1]}}}
  batch_size: {{type: categorical, vals: {list(BATCH_SIZES)}}}
searcher:{SEARCHERS[system]}
reproducibility:
  experiment_seed: {seed}
max_restarts: 0
environment:
  environment_variables: [{CACHE_DIR_ENV}={SHARED_DATA_CACHE}]{preload}
"""


def model_definition(into: Path) -> Path:
    """The trial's directory: this package's task and trial modules under their own import path."""
    package = into / "bench" / "hpo"
    package.mkdir(parents=True)
    (into / "bench" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    for name in ("budget.py", "task.py", "cairn_trial.py"):
        shutil.copy(HERE / name, package / name)
    return into


def _trial_ids(api: Api, experiment_id: int) -> Iterator[trial_pb2.Trial]:
    offset = 0
    while True:
        page = api.GetExperimentTrials(
            trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id, offset=offset, limit=200)
        ).trials
        yield from page
        if len(page) < 200:
            return
        offset += len(page)


class ReportReader:
    """An experiment's validation reports: counted while it runs from its trials' summaries (one
    call), read in full once it has ended.

    Counting by the summaries keeps the harness off the master's back: reading every trial's
    reports each poll made ~1,000 GetMetrics calls a run (a promotion ASHA trial waiting at its
    rung is not terminal, so nearly every trial was read again), work Ray Tune's in-process
    stopper does not ask of its system."""

    def __init__(self, api: Api, experiment_id: int) -> None:
        self.api = api
        self.experiment_id = experiment_id
        self.trials = 0
        self.hparams: dict[str, dict[str, Any]] = {}

    def count(self) -> int:
        """Validation reports stored so far (each trial's summary counts its reports)."""
        reported = 0
        trials = list(_trial_ids(self.api, self.experiment_id))
        self.trials = len(trials)
        for trial in trials:
            if str(trial.id) not in self.hparams:
                self.hparams[str(trial.id)] = plain_hparams(json_format.MessageToDict(trial.hparams))
            summary = json_format.MessageToDict(trial.summary_metrics)
            reported += int(summary.get("validation_metrics", {}).get("epochs", {}).get("count", 0))
        return reported

    def _read(self, trial_id: int) -> list[EpochReport]:
        reports = []
        request = trial_pb2.GetMetricsRequest(trial_ids=[trial_id], group="validation", max_datapoints=0)
        for response in self.api.GetMetrics(request):
            for row in response.metrics:
                metrics = row.metrics["avg_metrics"]
                reports.append(
                    EpochReport(
                        trial=str(trial_id),
                        epoch=int(metrics["epochs"]),
                        error=float(metrics["validation_error"]),
                        wall_time=float(metrics["wall_time"]),
                    )
                )
        return reports

    def read(self) -> list[EpochReport]:
        """Every report of every trial (once the experiment has ended)."""
        self.count()  # the trials and their hyperparameters, up to date
        reports: list[EpochReport] = []
        for trial_id in sorted(int(trial) for trial in self.hparams):
            reports += self._read(trial_id)
        return reports


def _state(api: Api, experiment_id: int) -> str:
    experiment = api.GetExperiment(
        experiment_pb2.GetExperimentRequest(experiment_id=experiment_id)
    ).experiment
    return experiment_pb2.Experiment.State.Name(experiment.state).removeprefix("STATE_")


def run_cairn(system: str, seed: int, budget: float, timeout_s: float, warm_starts: bool = True) -> RunRecord:
    budget_epochs = epochs_for(budget, MAX_EPOCHS)
    config = experiment_config(system, seed, warm_starts)
    with tempfile.TemporaryDirectory(prefix="cairn-hpo-") as scratch:
        root = Path(scratch)
        model_dir = model_definition(root / "model")
        with cairn_cluster(root / "state", agents=1, slots=SLOTS) as api:
            started = time.monotonic()
            started_at = time.time()
            experiment_id = api.create(config, model_dir)
            reader = ReportReader(api, experiment_id)
            ended_by = ENDED_BY_SEARCH
            while time.monotonic() - started < timeout_s:
                done = _state(api, experiment_id) in ("COMPLETED", "CANCELED", "ERROR")
                reported = reader.count()
                log.info("cairn run", system=system, seed=seed, epochs=reported, of=budget_epochs)
                if reported >= budget_epochs:
                    ended_by = ENDED_BY_BUDGET
                    break
                if done:
                    break
                time.sleep(POLL_S)
            else:
                raise TimeoutError(f"{system} seed {seed}: budget not spent in {timeout_s} s")
            wall = time.monotonic() - started
            outcome = _state(api, experiment_id)
            if outcome not in ("COMPLETED", "CANCELED", "ERROR"):
                api.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
                outcome = api.wait_terminal(experiment_id, timeout=120)
            # Reports that reached the master before the kill count too: they were paid for.
            reports = reader.read()
    return RunRecord(
        system=system,
        seed=seed,
        budget=budget,
        max_epochs=MAX_EPOCHS,
        wall_s=wall,
        trials=reader.trials,
        ended_by=ended_by,
        reports=reports,
        settings={"searcher": SEARCHERS[system].strip(), "cluster": "1 agent, 2 slots, SQLite"},
        hparams=reader.hparams,
        started_at=started_at,
    )
