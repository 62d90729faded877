"""How the docker runtime is chosen: the agent's flags, `cairn cluster up --runtime docker`'s agent
command line, and the local cluster's sweep without Docker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.plan import ClusterOptions, agent
from cairn.localcluster.sweep import sweep_docker_containers
from services.agent.settings import parse_settings

BASE = ["--master", "127.0.0.1:8090", "--agent-id", "a1"]


def test_the_agent_runs_processes_unless_told_docker() -> None:
    settings = parse_settings(BASE)
    assert settings.runtime == "process"
    docker = parse_settings(
        [*BASE, "--runtime", "docker", "--default-image", "img:1", "--cpus-per-slot", "2"]
    )
    assert (docker.runtime, docker.default_image, docker.cpus_per_slot) == ("docker", "img:1", 2.0)


def test_the_default_image_is_the_task_image_of_this_checkout() -> None:
    from cairn.task_image import image_tag

    assert parse_settings([*BASE, "--runtime", "docker"]).default_image == image_tag()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--runtime", "podman"], "--runtime"),
        (["--cpus-per-slot", "-1"], "--cpus-per-slot"),
        (["--default-image", "a b"], "--default-image"),
    ],
)
def test_bad_docker_flags_are_refused_by_name(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_settings([*BASE, *flags])
    assert named in capsys.readouterr().err


def test_cluster_up_with_docker_gives_its_agents_the_runtime_and_image(tmp_path: Path) -> None:
    paths = ClusterPaths(tmp_path)
    docker = agent(ClusterOptions(tmp_path, runtime="docker", default_image="img:2"), paths, 1, "127.0.0.1:1")
    command = docker.command
    assert command[command.index("--runtime") + 1] == "docker"
    assert command[command.index("--default-image") + 1] == "img:2"
    assert "--task-env" not in command  # a Python environment of this machine means nothing in a container
    assert "--kill-containers-on-exit" in command
    process = agent(ClusterOptions(tmp_path, runtime="process", task_env=tmp_path), paths, 1, "127.0.0.1:1")
    assert "--runtime" not in process.command and "--task-env" in process.command


def test_the_sweep_works_without_the_docker_sdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # `import docker` now raises ImportError
    assert sweep_docker_containers([tmp_path / "agent-1"]) == []
    assert sweep_docker_containers([]) == []


def test_the_sweep_works_without_dockerd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-dockerd.sock")
    assert sweep_docker_containers([tmp_path / "agent-1"]) == []
