"""A process-runtime task's /dev/shm (containers/task_shm.py): the config's resources.shm_size
(Determined's default 4 GiB when unset) as a tmpfs of its own in the task's mount namespace, made
at the start and at a standby's hand-over alike; the host's /dev/shm untouched; where the agent
cannot make a namespace, a word in the task's log."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from services.agent.containers.preparation import StartError
from services.agent.containers.task_env import MasterFacts
from services.agent.containers.task_shm import ShmSizeError, shm_size
from services.agent.requests import StartRequest
from services.agent.runtime.private_mounts import Bind, in_private_mounts, split_private_mounts, tmpfs
from services.agent.runtime.protocol import ContainerPaths
from tests.unit.agent.namespace_probe import bound_at_hand_over
from tests.unit.agent.preparers import one_slot_preparer

GIB = 1 << 30


def config(**resources: object) -> str:
    return json.dumps({"environment": {}, "resources": resources})


@pytest.mark.parametrize(
    ("container_config", "expected"),
    [
        ("", (4 * GIB, False)),
        (config(), (4 * GIB, False)),
        (config(shm_size="512M"), (512 << 20, True)),
        (config(shm_size=1 << 30), (GIB, True)),
        (config(shm_size=0), (64 << 20, True)),  # Docker's own default, never an unbounded tmpfs
    ],
)
def test_the_size_is_the_configs_or_determineds_default(
    container_config: str, expected: tuple[int, bool]
) -> None:
    assert shm_size(container_config) == expected


@pytest.mark.parametrize("bad", ["{", config(shm_size="lots"), config(shm_size=-1), config(shm_size=True)])
def test_an_unreadable_size_names_the_field(bad: str) -> None:
    with pytest.raises(ShmSizeError, match=r"container_config|resources\.shm_size"):
        shm_size(bad)


def test_a_tmpfs_goes_through_the_command_line_and_back() -> None:
    argv = in_private_mounts(["df"], [Bind(Path("/x"), "/tmp"), tmpfs("/dev/shm", 123)])
    binds, inner = split_private_mounts(argv)
    assert inner == ["df"] and [b.tmpfs_bytes for b in binds] == [None, 123]
    with pytest.raises(ValueError, match="positive"):
        tmpfs("/dev/shm", 0)


def prepare(tmp_path: Path, *, private: bool, container_config: str) -> tuple[list[str], list[str]]:
    paths = ContainerPaths(tmp_path / "c1")
    paths.meta.mkdir(parents=True)
    notes: list[str] = []
    prepared = one_slot_preparer(private=private).prepare(
        StartRequest(
            container_id="c1",
            allocation_id="a1",
            slot_ids=("0",),
            entrypoint=("df -B1 /dev/shm",),
            shell=True,
            container_config=container_config,
        ),
        paths,
        MasterFacts("m:1"),
        note=lambda message, _level: notes.append(message),
        aborted=lambda: False,
    )
    return prepared.argv, notes


def test_the_task_is_given_its_own_dev_shm_where_the_agent_can(tmp_path: Path) -> None:
    argv, notes = prepare(tmp_path, private=True, container_config=config(shm_size="256M"))
    binds, inner = split_private_mounts(argv)
    assert [(b.target, b.tmpfs_bytes) for b in binds] == [("/dev/shm", 256 << 20)]
    assert inner == ["sh", "-c", "df -B1 /dev/shm"] and notes == []


def test_without_a_namespace_the_hosts_dev_shm_is_said_in_the_log(tmp_path: Path) -> None:
    argv, notes = prepare(tmp_path / "a", private=False, container_config=config(shm_size="256M"))
    assert argv == ["sh", "-c", "df -B1 /dev/shm"]
    assert len(notes) == 1 and "resources.shm_size" in notes[0] and "host's" in notes[0]
    _, quiet = prepare(tmp_path / "b", private=False, container_config=config())
    assert quiet == []  # nothing asked, nothing to say
    with pytest.raises(StartError, match=r"resources\.shm_size"):
        prepare(tmp_path / "c", private=True, container_config=config(shm_size="lots"))


def shm_bytes(df_output: str) -> int:
    """The size column of `df -B1 /dev/shm`."""
    return int(df_output.strip().splitlines()[-1].split()[1])


@pytest.mark.usefixtures("needs_private_mounts")
def test_a_started_task_sees_a_dev_shm_of_its_size_and_the_host_keeps_its_own() -> None:
    host_before = subprocess.run(["df", "-B1", "/dev/shm"], capture_output=True, text=True, check=True).stdout
    argv = in_private_mounts(["df", "-B1", "/dev/shm"], [tmpfs("/dev/shm", 96 << 20)])
    inside = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    assert shm_bytes(inside) == 96 << 20
    host_after = subprocess.run(["df", "-B1", "/dev/shm"], capture_output=True, text=True, check=True).stdout
    assert shm_bytes(host_after) == shm_bytes(host_before)


# A standby's hand-over: the tmpfs is mounted into a namespace that already runs.
BIND_TMPFS = """
import sys
from services.agent.runtime.private_mounts import bind_in_namespace, tmpfs
bind_in_namespace(int(sys.argv[1]), [tmpfs("/dev/shm", int(sys.argv[2]))])
"""


@pytest.mark.usefixtures("needs_private_mounts")
def test_a_standby_gets_its_dev_shm_at_the_hand_over() -> None:
    out = bound_at_hand_over("read line; df -B1 /dev/shm", [], BIND_TMPFS, [str(80 << 20)])
    assert shm_bytes(out) == 80 << 20


def test_the_process_runtime_notes_the_pull_settings_it_leaves_aside(tmp_path: Path) -> None:
    pull = json.dumps({"environment": {"force_pull_image": True, "registry_auth": {"username": "u"}}})
    _, notes = prepare(tmp_path / "a", private=False, container_config=pull)
    assert len(notes) == 1 and "environment.force_pull_image and environment.registry_auth" in notes[0]
    _, quiet = prepare(tmp_path / "b", private=False, container_config=config())
    assert quiet == []
