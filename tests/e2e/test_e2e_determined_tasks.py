"""Tasks' configs honoured as Determined honours them, driven with the stock client
(determined==0.38.1) on a cluster of one agent and one slot: a context's `startup-hook.sh` runs
before a command's and a trial's own command, in the same shell, and a failing hook ends the task
before its command; a config template applies to a command as to an experiment."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

HOOK = 'echo "hook ran as $DET_TASK_TYPE"\nexport HOOKED=from-the-hook\n'


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined's own suite runs."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def test_a_startup_hook_runs_before_a_command_and_a_trial(cluster: TestCluster, tmp_path: Path) -> None:
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    context = tmp_path / "context"
    context.mkdir()
    (context / "startup-hook.sh").write_text(HOOK)
    (context / "train.py").write_text(
        "import os\nprint('trial sees', os.environ.get('HOOKED'), flush=True)\n"
    )
    out = det("cmd", "run", "--context", str(context), 'echo "command sees $HOOKED"')
    assert "hook ran as COMMAND" in out and "command sees from-the-hook" in out

    config = tmp_path / "hooked.yaml"
    config.write_text(
        "name: hooked\nentrypoint: python3 train.py\nmax_restarts: 0\n"
        "searcher: {name: single, metric: x, max_length: {batches: 1}}\n"
    )
    experiment_id = int(det("experiment", "create", str(config), str(context)).split()[-1])
    sdk = sdk_runner(determined_env(cluster, tmp_path / "home"))
    ended = sdk(
        f"exp = client.get_experiment({experiment_id})\n"
        "state = exp.wait(interval=1)\n"
        "result = [state.value, [t.id for t in exp.list_trials()]]"
    )
    assert ended[0] == "STATE_COMPLETED"
    lines = det("trial", "logs", str(ended[1][0]))
    assert "hook ran as TRIAL" in lines and "trial sees from-the-hook" in lines


def test_a_failing_hook_ends_the_command_before_it_starts(cluster: TestCluster, tmp_path: Path) -> None:
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    context = tmp_path / "context"
    context.mkdir()
    (context / "startup-hook.sh").write_text("echo installing\nexit 7\n")
    # The command's output (RAN-2) is not its text (RAN-$((1+1))), which its name repeats.
    out = det("cmd", "run", "--context", str(context), "echo RAN-$((1+1))", check=False)
    assert "installing" in out and "RAN-2" not in out

    def ended() -> dict[str, object] | None:
        (listed,) = json.loads(det("cmd", "list", "--json"))
        return listed if listed["state"] == "TERMINATED" else None

    listed = wait_for(ended, timeout=60, what="the hooked command to end")
    assert "RAN-2" not in det("task", "logs", str(listed["id"]))


def test_a_template_applies_to_a_command(cluster: TestCluster, tmp_path: Path) -> None:
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    template = tmp_path / "template.yaml"
    template.write_text(
        "description: templated\nenvironment:\n  environment_variables: [FROM_TEMPLATE=yes, BOTH=template]\n"
    )
    det("template", "create", "team-env", str(template))
    config = tmp_path / "command.yaml"
    config.write_text("environment:\n  environment_variables: [BOTH=config]\n")
    out = det(
        "cmd",
        "run",
        "--template",
        "team-env",
        "--config-file",
        str(config),
        'echo "got $FROM_TEMPLATE $BOTH"',
    )
    assert "got yes config" in out
    (listed,) = json.loads(det("cmd", "list", "--json"))
    assert listed["description"] == "templated"
    out = det("cmd", "run", "--template", "nope", "true", check=False)
    assert "no template named 'nope'" in out
    assert len(json.loads(det("cmd", "list", "--json"))) == 1  # the refused launch left nothing
    det("template", "remove", "team-env")
