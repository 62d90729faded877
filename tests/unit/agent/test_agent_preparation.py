"""Checking a start request against the agent, command lines, and mounts for the process runtime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.agent.containers.preparation import Preparer, command_line
from services.agent.containers.task_env import MasterFacts
from services.agent.requests import MountRequest, StartRequest
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


CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize(
    ("private_mounts", "in_docker", "shown_at"),
    [
        (True, False, "/run/determined/etc/ssl/master.crt"),
        (False, True, "/run/determined/etc/ssl/master.crt"),
    ],
)
def test_under_tls_determined_tasks_get_the_ca_as_det_master_cert_file(
    tmp_path: Path, private_mounts: bool, in_docker: bool, shown_at: str
) -> None:
    paths = ContainerPaths(tmp_path / "c1")
    paths.meta.mkdir(parents=True)
    prep = Preparer(
        agent_id="a1",
        slots=cpu_slots("a1", 2, brand="cpu"),
        fetch_context=lambda _allocation: iter(()),
        base_env={"PATH": "/bin"},
        private_mounts=private_mounts,
        in_docker=in_docker,
    )
    determined = {"DET_TASK_ID": "t1", "DET_ALLOCATION_ID": "a1"}
    prepared = prep.prepare(
        request(environment=determined, runtime="docker" if in_docker else ""),
        paths,
        MasterFacts("m:1", ca_pem=CA_PEM),
        note=lambda _message, _level: None,
        aborted=lambda: False,
    )
    assert (prepared.env["DET_USE_TLS"], prepared.env["DET_MASTER_CERT_FILE"]) == ("true", shown_at)
    assert prepared.env["DET_MASTER"].startswith("https://")
    assert (paths.run_determined / "etc" / "ssl" / "master.crt").read_text() == CA_PEM
    cluster = json.loads((paths.run_determined / "info" / "cluster.json").read_text())
    assert cluster["master_cert_file"] == shown_at


def test_without_tls_determined_tasks_are_told_so(tmp_path: Path) -> None:
    paths = ContainerPaths(tmp_path / "c1")
    paths.meta.mkdir(parents=True)
    prepared = preparer().prepare(
        request(environment={"DET_TASK_ID": "t1", "DET_ALLOCATION_ID": "a1"}),
        paths,
        MasterFacts("m:1"),
        note=lambda _message, _level: None,
        aborted=lambda: False,
    )
    assert prepared.env["DET_USE_TLS"] == "false" and "DET_MASTER_CERT_FILE" not in prepared.env
    assert not (paths.run_determined / "etc").exists()
