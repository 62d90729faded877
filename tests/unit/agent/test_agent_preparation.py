"""Checking a start request against the agent, command lines, and mounts for the process runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.agent.containers.preparation import Preparer, command_line
from services.agent.containers.requests import MountRequest, StartRequest
from services.agent.containers.task_env import MasterFacts
from services.agent.runtime.protocol import ContainerPaths
from services.agent.slots import cpu_slots


def preparer() -> Preparer:
    return Preparer(
        agent_id="a1",
        slots=cpu_slots("a1", 2, brand="cpu"),
        fetch_context=lambda _allocation: iter(()),
        base_env={"PATH": "/bin"},
    )


def request(**overrides: object) -> StartRequest:
    fields: dict[str, object] = {
        "container_id": "c1",
        "allocation_id": "a1",
        "slot_ids": ("0",),
        "entrypoint": ("python3 train.py",),
        "shell": True,
    }
    fields.update(overrides)
    return StartRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"runtime": "docker"}, "start.spec.runtime"),
        ({"entrypoint": ()}, "start.spec.entrypoint"),
        ({"entrypoint": ("a", "b")}, "start.spec.entrypoint"),
        ({"slot_ids": ("0", "0")}, "start.slot_ids"),
        ({"slot_ids": ("5",)}, "start.slot_ids"),
        ({"mounts": (MountRequest("/data", "../data"),)}, "start.spec.mounts"),
        ({"mounts": (MountRequest("/data", ".cairn-agent/x"),)}, "start.spec.mounts"),
    ],
)
def test_requests_this_agent_cannot_run_name_the_field(overrides: dict[str, object], field: str) -> None:
    problem = preparer().problem(request(**overrides))
    assert problem is not None and problem.startswith(field)


def test_a_good_request_has_no_problem() -> None:
    assert preparer().problem(request()) is None
    assert preparer().problem(request(slot_ids=(), entrypoint=("python3", "-c", "pass"), shell=False)) is None


def test_command_lines_follow_determined() -> None:
    assert command_line(("python3 train.py --x 1",), shell=True) == ["sh", "-c", "python3 train.py --x 1"]
    assert command_line(("python3", "train.py"), shell=False) == ["python3", "train.py"]


def test_relative_mounts_become_links_and_absolute_remaps_are_reported(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    paths = ContainerPaths(tmp_path / "c1")
    paths.meta.mkdir(parents=True)
    notes: list[tuple[str, str]] = []
    prepared = preparer().prepare(
        request(mounts=(MountRequest(str(shared), "ckpt/store"), MountRequest(str(shared), "/elsewhere"))),
        paths,
        MasterFacts("m:1"),
        note=lambda message, level: notes.append((message, level)),
        aborted=lambda: False,
    )
    assert (paths.root / "ckpt" / "store").resolve() == shared.resolve()
    assert [level for _, level in notes] == ["WARNING"] and "/elsewhere" in notes[0][0]
    assert prepared.argv == ["sh", "-c", "python3 train.py"]
    assert prepared.env["CAIRN_WORKDIR"] == str(paths.root)
