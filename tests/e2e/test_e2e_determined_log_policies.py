"""Log policies (`log_policies` in an experiment config) acting on a trial's log lines, driven with
the stock client (determined==0.38.1) on a cluster of one agent and one slot, after Determined's
own e2e tests (test_log_policies.py: test_log_policy_cancel_retries,
test_log_policy_exclude_node_single_agent):

- `cancel_retries`: a trial whose logs match fails without a restart (max_restarts 1), and its logs
  say "trial failed and matched logs to a don't retry policy"; without a match it restarts once.
- `exclude_node`: a matching trial restarts once and then waits, queued, since the only agent is
  excluded ("therefore will not schedule on" in its logs); it is then killed, as Determined's test
  does. Without a match it restarts once and ends in ERROR."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

SESSION = "client._determined._session"
MATCHING = r"executing.*action.*exit.*code.*7"
NOT_MATCHING = r"(.*) this should not match (.*)"
# Determined's noop Exit(7) action, in a line its pattern matches, then the exit.
TRIAL = "import sys\nprint('executing action: exit code 7', flush=True)\nsys.exit(7)\n"


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined's own suite runs."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def _create(det, tmp_path: Path, name: str, policy: str) -> int:  # type: ignore[no-untyped-def]
    context = tmp_path / f"context-{name}"
    context.mkdir()
    (context / "exit7.py").write_text(TRIAL)
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        f"name: {name}\nentrypoint: python3 exit7.py\nmax_restarts: 1\n"
        "resources: {slots_per_trial: 1}\n"
        f"log_policies:\n- pattern: '{policy}'\n"
        f"  action: {{type: {name}}}\n"
        "searcher: {name: single, metric: x, max_length: {batches: 1}}\n"
    )
    return int(det("experiment", "create", str(config), str(context)).split()[-1])


def _trial(sdk, experiment_id: int, wait: bool) -> list:  # type: ignore[no-untyped-def,type-arg]
    return sdk(  # type: ignore[no-any-return]
        f"""
s = {SESSION}
exp = client.get_experiment({experiment_id})
state = exp.wait(interval=1).value if {wait} else None
(trial,) = exp.list_trials()
t = bindings.get_GetTrial(s, trialId=trial.id).trial
logs = "\\n".join(trial.iter_logs())
job = bindings.get_GetExperiment(s, experimentId={experiment_id}).jobSummary
result = [state, t.restarts, "don't retry policy" in logs, "therefore will not schedule on" in logs,
          job.state.value if job is not None else None]
"""
    )


@pytest.mark.parametrize("should_match", [True, False])
def test_cancel_retries(cluster: TestCluster, tmp_path: Path, should_match: bool) -> None:
    env = determined_env(cluster, tmp_path / "home")
    det, sdk = det_runner(env), sdk_runner(env)
    experiment_id = _create(det, tmp_path, "cancel_retries", MATCHING if should_match else NOT_MATCHING)
    state, restarts, no_retry, _, _ = _trial(sdk, experiment_id, wait=True)
    assert state == "STATE_ERROR"
    assert (restarts, no_retry) == ((0, True) if should_match else (1, False))


@pytest.mark.parametrize("should_match", [True, False])
def test_exclude_node_single_agent(cluster: TestCluster, tmp_path: Path, should_match: bool) -> None:
    env = determined_env(cluster, tmp_path / "home")
    det, sdk = det_runner(env), sdk_runner(env)
    experiment_id = _create(det, tmp_path, "exclude_node", MATCHING if should_match else NOT_MATCHING)
    if not should_match:
        state, restarts, _, excluded, _ = _trial(sdk, experiment_id, wait=True)
        assert (state, restarts, excluded) == ("STATE_ERROR", 1, False)
        return

    def queued_after_its_restart() -> list | None:  # type: ignore[type-arg]
        found = _trial(sdk, experiment_id, wait=False)
        return found if found[1] == 1 and found[3] and found[4] == "STATE_QUEUED" else None

    _, restarts, _, excluded, job_state = wait_for(
        queued_after_its_restart, timeout=120, interval=1, what="the trial to wait, its only agent excluded"
    )
    assert (restarts, excluded, job_state) == (1, True, "STATE_QUEUED")
    # Cleaned up as Determined's test does.
    det("experiment", "kill", str(experiment_id))
    ended = sdk(f"result = client.get_experiment({experiment_id}).wait(interval=1).value")
    assert ended == "STATE_CANCELED"
