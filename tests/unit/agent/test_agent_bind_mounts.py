"""Determined's bind_mounts on the process runtime: an absolute container_path bound in the task's
own mount namespace (read-only where asked), a relative one a link in the working directory, a
target over the machine's system folders refused naming the field, and without a namespace a word
in the task's log."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from services.agent.containers.system_folders import covered_system_folder
from services.agent.containers.task_env import MasterFacts
from services.agent.requests import MountRequest, StartRequest
from services.agent.runtime.private_mounts import in_private_mounts, read_only, split_private_mounts
from services.agent.runtime.protocol import ContainerPaths
from tests.unit.agent.namespace_probe import bound_at_hand_over
from tests.unit.agent.preparers import one_slot_preparer


def request(*mounts: MountRequest) -> StartRequest:
    return StartRequest(
        container_id="c1",
        allocation_id="a1",
        slot_ids=("0",),
        entrypoint=("ls /data",),
        shell=True,
        mounts=mounts,
    )


def test_absolute_container_paths_are_bound_where_the_agent_can(tmp_path: Path) -> None:
    data, models = tmp_path / "data", tmp_path / "models"
    data.mkdir()
    models.mkdir()
    paths = ContainerPaths(tmp_path / "c1")
    paths.meta.mkdir(parents=True)
    notes: list[str] = []
    prepared = one_slot_preparer(private=True).prepare(
        request(
            MountRequest(str(data), "/data"),
            MountRequest(str(models), "/mnt/models", read_only=True),
            MountRequest(str(data), "inputs/data"),
        ),
        paths,
        MasterFacts("m:1"),
        note=lambda message, _level: notes.append(message),
        aborted=lambda: False,
    )
    binds, _ = split_private_mounts(prepared.argv)
    mine = [(b.folder, b.target, b.read_only) for b in binds if b.tmpfs_bytes is None]
    assert mine == [(str(data), "/data", False), (str(models), "/mnt/models", True)]
    assert (paths.root / "inputs" / "data").resolve() == data.resolve()  # relative: a link
    assert notes == []


def test_without_a_namespace_an_absolute_container_path_is_reported(tmp_path: Path) -> None:
    paths = ContainerPaths(tmp_path / "c1")
    paths.meta.mkdir(parents=True)
    notes: list[str] = []
    prepared = one_slot_preparer(private=False).prepare(
        request(MountRequest(str(tmp_path), "/data")),
        paths,
        MasterFacts("m:1"),
        note=lambda message, _level: notes.append(message),
        aborted=lambda: False,
    )
    assert prepared.argv == ["sh", "-c", "ls /data"]
    assert len(notes) == 1 and "/data" in notes[0] and "root" in notes[0]


@pytest.mark.parametrize("target", ["/", "/usr", "/usr/local/bin", "/etc/x", "/proc", "/dev/x", "/run"])
def test_a_target_over_the_machines_system_folders_is_refused(target: str) -> None:
    problem = one_slot_preparer(private=True).problem(request(MountRequest("/srv/data", target)))
    assert problem is not None and problem.startswith("start.spec.mounts") and target in problem


def test_links_on_the_way_are_followed(tmp_path: Path) -> None:
    (tmp_path / "sneaky").symlink_to("/usr")
    assert covered_system_folder(str(tmp_path / "sneaky" / "bin")) == "/usr"
    assert covered_system_folder("/data") is None and covered_system_folder("/mnt/models") is None
    assert one_slot_preparer(private=True).problem(request(MountRequest("/srv/data", "/data"))) is None


@pytest.mark.usefixtures("needs_private_mounts")
def test_a_read_only_bind_reads_and_refuses_writes_in_the_namespace_only(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    (source / "marker").write_text("seen\n")
    script = 'cat "$1/marker"; touch "$1/written" 2>/dev/null && echo wrote || echo refused'
    argv = in_private_mounts(["sh", "-c", script, "sh", str(target)], [read_only(source, str(target))])
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.split() == ["seen", "refused"]
    assert not (source / "written").exists() and not (target / "marker").exists()


# A standby's hand-over: the same read-only bind made by the binder's system calls.
BIND_READ_ONLY = """
import sys
from pathlib import Path
from services.agent.runtime.private_mounts import bind_in_namespace, read_only
bind_in_namespace(int(sys.argv[1]), [read_only(Path(sys.argv[2]), sys.argv[3])])
"""


@pytest.mark.usefixtures("needs_private_mounts")
def test_a_standby_gets_the_read_only_bind_at_the_hand_over(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    (source / "marker").write_text("seen\n")
    script = 'read line; cat "$1/marker"; touch "$1/written" 2>/dev/null && echo wrote || echo refused'
    out = bound_at_hand_over(script, [str(target)], BIND_READ_ONLY, [str(source), str(target)])
    assert out.split() == ["seen", "refused"] and not (source / "written").exists()
