"""Determined's bind mounts on the process runtime with the stock `det` on a cluster of one agent and
one slot: an absolute container_path is where the command finds the host folder (read-only where
asked), a relative one is under its working directory; a user's own mounts follow the admin's
policy, while what the cluster mounts itself (the default shared_fs checkpoint storage) works out
of the box for a user who is no admin: a Core API trial writes its checkpoints there."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import DET_TRIAL_DIR, det_core_config, wait_state
from tests.support.cluster import AuthedStub

pytestmark = pytest.mark.one_slot


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A host folder any task user may read (not under pytest's 0700 folders, nor /tmp, which a
    task sees a private one of)."""
    path = Path(tempfile.mkdtemp(prefix="cairn-e2e-data-", dir="/var/tmp"))
    path.chmod(0o755)
    (path / "marker").write_text("from the host\n")
    (path / "marker").chmod(0o644)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.usefixtures("needs_private_mounts")
def test_absolute_and_relative_container_paths_as_determined(
    det_admin: Callable[..., str], det: Callable[..., str], data_dir: Path, tmp_path: Path
) -> None:
    admin, user = det_admin, det
    target = f"/mnt/cairn-e2e-{uuid.uuid4().hex[:8]}"
    try:
        absolute = admin("cmd", "run", "-v", f"{data_dir}:{target}", f"cat {target}/marker")
        assert "from the host" in absolute
        relative = admin("cmd", "run", "-v", f"{data_dir}:inputs/data", "cat inputs/data/marker")
        assert "from the host" in relative

        config = tmp_path / "read_only.yaml"
        config.write_text(
            f"bind_mounts: [{{host_path: {data_dir}, container_path: {target}, read_only: true}}]\n"
        )
        write = f"touch {target}/written && echo WROTE || echo REFUSED"
        read_only = admin("cmd", "run", "--config-file", str(config), write)
        assert "REFUSED" in read_only and not (data_dir / "written").exists()

        # A user who is no admin mounts only under the paths the operator allows (none here).
        refused = user("cmd", "run", "-v", f"{data_dir}:{target}", "true", check=False)
        assert "bind_mounts[0].host_path" in refused
    finally:
        with contextlib.suppress(OSError):
            Path(target).rmdir()  # the mount point the agent made: empty on the host


def test_a_users_trial_writes_checkpoints_to_the_default_storage(
    det: Callable[..., str], sdk: Callable[[str], Any], api: AuthedStub, tmp_path: Path
) -> None:
    config = det_core_config(
        tmp_path,
        "experiment",
        hyperparameters={"steps": 4, "increment_by": 1},
        searcher={"max_length": {"batches": 4}},
    )
    assert "Created experiment 1" in det("experiment", "create", str(config), str(DET_TRIAL_DIR))
    wait_state(api, 1, "COMPLETED", timeout=180)
    checkpoints = sdk("result = [c.uuid for c in client.get_experiment(1).list_checkpoints()]")
    assert checkpoints
