"""Small helpers for end-to-end tests: configs, model definitions, reading state back."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cairn.api.v1 import experiment_pb2, trial_pb2
from cairn.client.model_definition import build_model_definition
from tests.support.cluster import AuthedStub, TestCluster
from tests.support.polling import wait_for

TRIAL_DIR = Path(__file__).parent / "fixtures" / "trial"
# A trial written against the stock Core API (fixtures/det_trial/det_core_trial.py).
DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"


def config(**overrides: Any) -> str:
    base: dict[str, Any] = {
        "name": "e2e",
        "entrypoint": "python3 trial.py",
        "hyperparameters": {"steps": 6, "step_s": 0.05},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 6}},
        "max_restarts": 0,
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return yaml.safe_dump(base)


def det_core_config(
    folder: Path,
    name: str,
    *,
    hyperparameters: dict[str, Any] | None = None,
    searcher: dict[str, Any] | None = None,
    **fields: Any,
) -> Path:
    """A config file (`folder/NAME.yaml`) for det_core_trial.py (DET_TRIAL_DIR): a single search
    of 6 batches maximizing x, steps 0.05 s apart, no restarts. `hyperparameters` and `searcher`
    add to those (a `steps` hyperparameter sets the trial's own length); other fields are set
    as given."""
    text = yaml.safe_dump(
        {
            "name": name,
            "entrypoint": "python3 det_core_trial.py",
            "hyperparameters": {"step_s": 0.05, **(hyperparameters or {})},
            "searcher": {
                "name": "single",
                "metric": "x",
                "smaller_is_better": False,
                "max_length": {"batches": 6},
                **(searcher or {}),
            },
            "max_restarts": 0,
            **fields,
        }
    )
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def create(api: AuthedStub, text: str, model_dir: Path = TRIAL_DIR, activate: bool = True) -> int:
    files = build_model_definition(model_dir)
    response = api.CreateExperiment(
        experiment_pb2.CreateExperimentRequest(config=text, model_definition=files, activate=activate)
    )
    return int(response.experiment.id)


def experiment(api: AuthedStub, experiment_id: int) -> experiment_pb2.Experiment:
    return api.GetExperiment(experiment_pb2.GetExperimentRequest(experiment_id=experiment_id)).experiment


def state(api: AuthedStub, experiment_id: int) -> str:
    return experiment_pb2.Experiment.State.Name(experiment(api, experiment_id).state).removeprefix("STATE_")


def trials(api: AuthedStub, experiment_id: int) -> list[trial_pb2.Trial]:
    return list(
        api.GetExperimentTrials(trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id)).trials
    )


def trial_state(t: trial_pb2.Trial) -> str:
    return trial_pb2.Trial.State.Name(t.state).removeprefix("STATE_")


# The states an experiment ends in: none of them moves on by itself.
ENDED = ("COMPLETED", "ERROR", "CANCELED")
# What an ACTIVE experiment or trial is answered as (Determined's derived states, as its e2e
# `_is_experiment_active` accepts them): the stored ACTIVE shown as its allocations' progress.
ACTIVE_STATES = frozenset({"ACTIVE", "QUEUED", "PULLING", "STARTING", "RUNNING"})


def wait_active(api: AuthedStub, experiment_id: int, timeout: float = 120) -> None:
    last = ""

    def active() -> bool:
        nonlocal last
        last = state(api, experiment_id)
        return last in ACTIVE_STATES

    try:
        wait_for(active, timeout=timeout, what=f"experiment {experiment_id} to be active")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it is {last or 'unread'}") from None


def wait_state(api: AuthedStub, experiment_id: int, wanted: str, timeout: float = 120) -> None:
    """Until the experiment is `wanted`. One that ended otherwise fails the wait at once, saying how
    it ended and what its trials last logged; a wait that times out says the state it last read.
    (A trial that failed at start once read as an experiment left ACTIVE for three minutes: the wait
    for COMPLETED ran out its 180 s after the experiment had ended ERROR, and named the state read
    before it began.)"""
    last = ""

    def settled() -> bool:
        nonlocal last
        last = state(api, experiment_id)
        return last == wanted or last in ENDED

    try:
        wait_for(settled, timeout=timeout, what=f"experiment {experiment_id} to be {wanted}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it is {last or 'unread'}") from None
    if last != wanted:
        raise AssertionError(
            f"experiment {experiment_id} ended {last}, not {wanted}; its trials last logged:\n"
            + "\n".join(trial_log_tail(api, experiment_id))
        )


def trial_log_tail(api: AuthedStub, experiment_id: int, lines: int = 40) -> list[str]:
    """The last `lines` lines its trials logged, in trial order."""
    said = [line for t in trials(api, experiment_id) for line in logs(api, t.id)]
    return said[-lines:]


def logs(api: AuthedStub, trial_id: int) -> list[str]:
    return [
        line.message.rstrip("\n") for line in api.TrialLogs(trial_pb2.TrialLogsRequest(trial_id=trial_id))
    ]


def ledger(lines: list[str]) -> dict[str, list[tuple[int, int]]]:
    """What the test trial said it reported: group → [(steps, run)]."""
    result: dict[str, list[tuple[int, int]]] = {"training": [], "validation": []}
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[0] == "LEDGER":
            result[parts[1]].append((int(parts[2]), int(parts[3])))
    return result


def stored_metrics(api: AuthedStub, trial_id: int, group: str) -> list[trial_pb2.MetricsReport]:
    request = trial_pb2.GetMetricsRequest(trial_ids=[trial_id], group=group)
    return [report for response in api.GetMetrics(request) for report in response.metrics]


def run_cairn(
    env: dict[str, str], *args: str, stdin: str = "", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """One `cairn ARGS...` in its own process with exactly `env`; whatever it exits with."""
    return subprocess.run(
        [sys.executable, "-m", "cairn.cli.main", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cairn_cli(cluster: TestCluster, home: Path, user: str = "determined") -> Callable[..., str]:
    """Cairn's own CLI (`cairn ARGS...`) logged in as `user` (empty password), its state in `home`;
    a command that fails fails the test, unless called with check=False."""
    env = {**os.environ, "CAIRN_MASTER": cluster.address, "CAIRN_CONFIG_DIR": str(home)}

    def run(*args: str, stdin: str = "", check: bool = True) -> str:
        done = run_cairn(env, *args, stdin=stdin)
        if check:
            assert done.returncode == 0, f"cairn {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout if check else done.stdout + done.stderr

    run("user", "login", user, "--password-stdin", stdin="\n")
    return run
