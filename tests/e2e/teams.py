"""Two teams sharing one pool on a real cluster of two agents of one slot: what the e2e tests of a
pool's scheduler (fair share, quotas in a priority pool) set up alike. The cluster's pool schedules
as the test's master.yaml says; each team is a workspace with a project `p`; their experiments run
the Core API trial of fixtures/det_trial, which logs DET-INFO once it runs, DET-PREEMPTED when it
gives its slot back and DET-RESUMED when it resumes from its checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.determined_client import sdk_runner
from tests.e2e.helpers import DET_TRIAL_DIR, AuthedStub, det_core_config, logs, trials
from tests.support.cluster import TestCluster, running_cluster


@contextmanager
def pool_cluster(tmp_path: Path, db_url: str | None, scheduler: str) -> Iterator[TestCluster]:
    """Two agents of one slot, the default pool's `scheduler:` block as `scheduler` (YAML lines
    indented under it)."""
    config = tmp_path / "master.yaml"
    config.write_text(f"resource_pools:\n  - pool_name: default\n    scheduler:\n{scheduler}")
    with running_cluster(
        tmp_path / "cluster", db_url, agents=2, slots=1, extra_env={"CAIRN_MASTER_CONFIG": str(config)}
    ) as cluster:
        yield cluster


def make_teams(admin: Callable[..., str], *names: str) -> None:
    """A workspace per team, each with a project `p`, made with the stock `det`."""
    for workspace in names:
        admin("workspace", "create", workspace)
        admin("project", "create", workspace, "p")


def pool_types(env: dict[str, str]) -> list[list[str]]:
    """Each pool's name and scheduler type, as the stock SDK reads them."""
    return sdk_runner(env, "admin")(
        "result = [(p.name, p.schedulerType.value) for p in "
        "bindings.get_GetResourcePools(client._determined._session).resourcePools]\n"
    )


def submit(
    admin: Callable[..., str],
    tmp_path: Path,
    workspace: str,
    name: str,
    trials: int,
    steps: int,
    priority: int | None = None,
) -> int:
    """A team's experiment of `trials` trials (all at once) of `steps` steps of 0.1 s each,
    created with the stock `det`: its id."""
    searcher: dict[str, object] = {"max_length": {"batches": 1}}
    if trials > 1:
        searcher |= {"name": "random", "max_trials": trials, "max_concurrent_trials": trials}
    fields: dict[str, object] = {"workspace": workspace, "project": "p"}
    if priority is not None:
        fields["resources"] = {"priority": priority}
    hyperparameters = {
        "steps": steps,
        "step_s": 0.1,
        "increment_by": {"type": "double", "minval": 1, "maxval": 2},
    }
    path = det_core_config(tmp_path, name, hyperparameters=hyperparameters, searcher=searcher, **fields)
    return created(admin("experiment", "create", str(path), str(DET_TRIAL_DIR)))


def created(output: str) -> int:
    """The experiment id `det experiment create` printed."""
    return int(output.split("Created experiment ")[1].split(maxsplit=1)[0])


def running_trials(api: AuthedStub, experiment_id: int) -> int:
    """How many of the experiment's trials have started running their code."""
    return sum(1 for t in trials(api, experiment_id) if any("DET-INFO" in line for line in logs(api, t.id)))


def preempted_runs(api: AuthedStub, experiment_id: int) -> list[list[str]]:
    """The logs of the experiment's trials that were preempted."""
    every = [logs(api, t.id) for t in trials(api, experiment_id)]
    return [lines for lines in every if any(line.startswith("DET-PREEMPTED") for line in lines)]
