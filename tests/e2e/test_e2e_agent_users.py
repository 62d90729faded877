"""Tasks run as the user's own Linux account (issue 42, item 4; Determined's agent_user_group), with
the stock determined==0.38.1 client on a cluster of one agent and one slot run as root (so its
agent runs tasks as the unprivileged task user, and can switch to any account):

- `det user link-with-agent-user` (admin) links a user; `det user list` shows the link; a command
  and a trial of that user then run as the linked uid/gid, the names resolvable inside the task
  (this machine has no such account: the agent gives the task its own /etc/passwd lines, as
  Determined adds the user to its containers' /etc/passwd);
- `det workspace create --agent-uid ...` links a workspace, whose link wins over the user's;
- an unlinked user's task still runs as the cluster's task user;
- a linked trial that cannot write the default checkpoint folder fails at start and ends its
  experiment ERROR with it, saying why in its logs;
- bad links are refused, naming the field, and change nothing.
Every check reads the uid/gid the task printed in its logs."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from cairn.api.v1 import experiment_pb2
from cairn.localcluster.task_isolation import TASK_USER
from tests.e2e.determined_client import det_runner, determined_env
from tests.e2e.helpers import (
    DET_TRIAL_DIR,
    det_core_config,
    experiment,
    logs,
    trial_state,
    trials,
    wait_state,
)
from tests.support.cluster import TestCluster, running_cluster

# An account this machine does not have (checked): its names come from the task's own passwd lines.
LINKED_UID, LINKED_GID = 47113, 47114
PROBE = "echo RUNAS $(id -u):$(id -g):$(id -un):$(id -gn)"
RUNAS = re.compile(r"RUNAS (\d+:\d+:\S*:\S*)")

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("setpriv"),
        reason="running tasks as another account needs a cluster run as root and setpriv",
    ),
    pytest.mark.one_slot,  # one agent with one slot, as Determined runs its own e2e tests
]


@pytest.fixture
def lab_share() -> Iterator[Path]:
    """A folder only the linked account may write (owner only), outside /tmp (tasks have their own)."""
    folder = Path(tempfile.mkdtemp(prefix="cairn-lab-share-", dir="/var/tmp"))
    os.chown(folder, LINKED_UID, LINKED_GID)
    folder.chmod(0o700)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def link_determined(det_admin: Callable[..., str]) -> None:
    """Link the user "determined" to the account alice:lab (LINKED_UID:LINKED_GID)."""
    det_admin(
        "user", "link-with-agent-user", "determined",
        "--agent-uid", str(LINKED_UID), "--agent-gid", str(LINKED_GID),
        "--agent-user", "alice", "--agent-group", "lab",
    )  # fmt: skip


def created_experiment(det_output: str) -> int:
    """The id `det experiment create` printed."""
    return int(re.findall(r"Created experiment (\d+)", det_output)[0])


def agent_columns(det_admin: Callable[..., str]) -> list[str]:
    """The agent uid, gid, user and group `det user list` shows for the user "determined"."""
    listed = det_admin("user", "list", "--all")
    rows = [[cell.strip() for cell in line.split("|")] for line in listed.splitlines()]
    (row,) = [cells for cells in rows if "determined" in cells]
    return row[-4:]


def ran_as(output: str) -> str:
    """What the probe printed: "uid:gid:user:group"."""
    found = RUNAS.findall(output)
    assert found, output
    return str(found[-1])


def test_a_linked_users_commands_and_trials_run_as_the_linked_account(
    cluster: TestCluster,
    det: Callable[..., str],
    det_admin: Callable[..., str],
    lab_share: Path,
    tmp_path: Path,
) -> None:
    for lookup, value in ((pwd.getpwuid, LINKED_UID),):
        with pytest.raises(KeyError):
            lookup(value)  # the test needs an account unknown here
    task_user = pwd.getpwnam(TASK_USER)
    assert cluster.log("agent-1").count(TASK_USER), "the agent runs tasks as the task user"

    # Unlinked: the cluster's task user, as before.
    assert ran_as(det("cmd", "run", PROBE)).startswith(f"{task_user.pw_uid}:{task_user.pw_gid}:{TASK_USER}:")

    link_determined(det_admin)
    assert agent_columns(det_admin) == [str(LINKED_UID), str(LINKED_GID), "alice", "lab"]

    # A command runs as the account, its names resolvable.
    assert ran_as(det("cmd", "run", PROBE)) == f"{LINKED_UID}:{LINKED_GID}:alice:lab"

    # A trial too (a Determined Core API trial), checkpointing into the lab's share, which only
    # the linked account may write (as an NFS export would be): its checkpoint is that account's.
    config = det_core_config(
        tmp_path,
        "experiment",
        entrypoint=f"{PROBE}; python3 det_core_trial.py",
        hyperparameters={"steps": 3},
        searcher={"max_length": {"batches": 3}},
        checkpoint_storage={"type": "shared_fs", "host_path": str(lab_share)},
    )
    experiment_id = created_experiment(det("experiment", "create", str(config), str(DET_TRIAL_DIR)))
    api = cluster.login()
    wait_state(api, experiment_id, "COMPLETED", timeout=180)
    (trial,) = trials(api, experiment_id)
    assert ran_as("\n".join(logs(api, trial.id))) == f"{LINKED_UID}:{LINKED_GID}:alice:lab"
    written = list(lab_share.rglob("state"))
    assert written and all(path.stat().st_uid == LINKED_UID for path in written), written

    # A workspace's link wins over the user's: here an account the machine has (nobody:nogroup).
    det_admin(
        "workspace", "create", "Lab",
        "--agent-uid", "65534", "--agent-gid", "65534", "--agent-user", "nobody", "--agent-group", "nogroup",
    )  # fmt: skip
    shown = json.loads(det_admin("workspace", "describe", "Lab", "--json"))
    assert shown["agentUserGroup"] == {
        "agentUid": 65534,
        "agentGid": 65534,
        "agentUser": "nobody",
        "agentGroup": "nogroup",
    }
    assert ran_as(det("cmd", "run", "-w", "Lab", PROBE)).startswith("65534:65534:nobody:")
    # Outside it, the user's own link again.
    assert ran_as(det("cmd", "run", PROBE)) == f"{LINKED_UID}:{LINKED_GID}:alice:lab"
    assert api.GetExperiment(experiment_pb2.GetExperimentRequest(experiment_id=experiment_id))


def test_a_linked_trial_that_cannot_write_the_default_checkpoint_folder_ends_its_experiment_at_once(
    cluster: TestCluster, det: Callable[..., str], det_admin: Callable[..., str], tmp_path: Path
) -> None:
    """Once seen as an experiment left ACTIVE for about three minutes: a trial run as a linked
    account, checkpointing into the local cluster's default folder (the task user's, owner only),
    fails at start (its Core API cannot make its TensorBoard folder there) and, with max_restarts 0,
    its experiment ends ERROR with it, the failure in the trial's logs. The three minutes were the
    test's own wait for COMPLETED running out (helpers.wait_state now fails at once on another end);
    the master ends the experiment in the searcher delivery after the trial's end."""
    link_determined(det_admin)
    # The default checkpoint storage: no checkpoint_storage of its own.
    config = det_core_config(
        tmp_path, "experiment", hyperparameters={"steps": 3}, searcher={"max_length": {"batches": 3}}
    )
    experiment_id = created_experiment(det("experiment", "create", str(config), str(DET_TRIAL_DIR)))
    api = cluster.login()
    wait_state(api, experiment_id, "ERROR", timeout=120)
    (trial,) = trials(api, experiment_id)
    assert (trial_state(trial), trial.restarts) == ("ERROR", 0)
    said = "\n".join(logs(api, trial.id))
    assert "PermissionError" in said and "/checkpoints/" in said, said[-3000:]
    # Ended with its trial, as the master recorded both: not after a timer or a heartbeat ran out
    # (a bound far above a searcher delivery on a loaded machine, far below the three minutes).
    ended = experiment(api, experiment_id)
    gap = ended.end_time.ToDatetime() - trial.end_time.ToDatetime()
    assert timedelta(0) <= gap < timedelta(seconds=30), gap


def test_bad_links_are_refused_naming_the_field_and_change_nothing(
    cluster: TestCluster, det: Callable[..., str], det_admin: Callable[..., str]
) -> None:
    def link(*fields: str) -> str:
        return det_admin("user", "link-with-agent-user", "determined", *fields, check=False)

    full = ["--agent-uid", "1500", "--agent-gid", "1600", "--agent-user", "alice", "--agent-group", "lab"]
    root = ["--agent-uid", "0", "--agent-gid", "0", "--agent-user", "root", "--agent-group", "root"]
    assert "agentUid: 0 is root" in link(*root)
    assert "agentUser: a Linux name" in link(*full[:6], "--agent-group", "lab", "--agent-user", "x:0:0")
    assert "agentUid: must be between 0" in link("--agent-uid", "-5", *full[2:])
    # Only an admin links users, and workspaces.
    assert "only an admin" in det("user", "link-with-agent-user", "determined", *full, check=False)
    assert "only an admin" in det("workspace", "create", "Mine", *full, check=False)
    assert "Mine" not in det("workspace", "list")
    # Nothing was stored: the user's tasks still run as the task user.
    assert agent_columns(det_admin) == ["N/A"] * 4  # as det shows a user with no link
    task_user = pwd.getpwnam(TASK_USER)
    assert ran_as(det("cmd", "run", PROBE)).startswith(f"{task_user.pw_uid}:")


@pytest.fixture
def docker_cluster(task_image: str, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot running tasks in containers of the task image (skipped, saying why,
    where dockerd cannot be reached). One database is enough: nothing here depends on it."""
    with running_cluster(
        tmp_path / "docker-cluster", None, agents=1, slots=1, runtime="docker", default_image=task_image
    ) as c:
        yield c


def test_the_docker_runtime_runs_a_linked_users_container_as_the_account(
    docker_cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(docker_cluster, tmp_path / "home")
    det, det_admin = det_runner(env), det_runner(env, "admin")
    link_determined(det_admin)
    # docker --user uid:gid; the names added to the container's own /etc/passwd and /etc/group;
    # its working directory (the context) is the account's to write.
    out = det("cmd", "run", f"{PROBE}; touch written && echo WROTE")
    assert ran_as(out) == f"{LINKED_UID}:{LINKED_GID}:alice:lab" and "WROTE" in out
