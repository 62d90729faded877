"""The environment a container gets, and the agent's flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.agent.containers.determined_info import rendezvous_file
from services.agent.containers.python_envs import PythonEnv, PythonEnvError, PythonEnvs, parse_task_env
from services.agent.containers.task_env import MasterFacts, split_host_port, task_environment
from services.agent.requests import RendezvousInfo
from services.agent.settings import parse_settings
from services.agent.slots import DeviceKind, SlotInfo, SlotType

GPUS = [SlotInfo(str(i), DeviceKind.CUDA, "GPU", f"GPU-{i}", 1, i) for i in range(4)]


def environment(slots: list[SlotInfo], **overrides: object) -> dict[str, str]:
    options: dict[str, object] = {
        "base": {"PATH": "/usr/bin", "HOME": "/home/u", "LC_ALL": "C", "AWS_SECRET_ACCESS_KEY": "no"},
        "spec_environment": {"DET_TRIAL_ID": "7", "CAIRN_AGENT_ID": "spoofed"},
        "agent_id": "a1",
        "container_id": "c1",
        "slots": slots,
        "workdir": Path("/w/c1"),
        "master": MasterFacts("master.example:8090", cluster_id="cl", master_id="m", http_port=8443),
        "python_env": PythonEnv("task", Path("/opt/venv")),
    }
    options.update(overrides)
    return task_environment(**options)  # type: ignore[arg-type]


def test_basics_spec_and_agent_facts_in_that_order() -> None:
    env = environment([GPUS[1], GPUS[3]])
    assert env["PATH"] == "/opt/venv/bin:/usr/bin"
    assert env["VIRTUAL_ENV"] == "/opt/venv"
    assert env["HOME"] == "/home/u" and env["LC_ALL"] == "C"
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["DET_TRIAL_ID"] == "7"
    assert env["CAIRN_AGENT_ID"] == env["DET_AGENT_ID"] == "a1"
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["DET_SLOT_IDS"] == "[1,3]" and json.loads(env["CAIRN_SLOT_IDS"]) == [1, 3]
    assert env["DET_MASTER"] == "http://master.example:8443"
    assert env["DET_MASTER_HOST"] == env["DET_MASTER_ADDR"] == "master.example"
    assert env["DET_MASTER_PORT"] == "8443"
    assert env["CAIRN_MASTER_ADDR"] == "master.example:8090"
    assert env["DET_CLUSTER_ID"] == "cl" and env["DET_MASTER_ID"] == "m"
    assert env["CAIRN_WORKDIR"] == "/w/c1"


def test_cpu_allocations_see_no_gpu_and_ipv6_masters_are_bracketed() -> None:
    env = environment([], master=MasterFacts("[::1]:8090"))
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["DET_SLOT_IDS"] == "[]"
    assert env["DET_MASTER"] == "http://[::1]:8080"
    assert env["DET_MASTER_HOST"] == "::1"


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("h:1", ("h", 1, "")),
        ("[::1]:90", ("::1", 90, "")),
        ("h", ("h", None, "")),
    ],
)
def test_split_host_port(address: str, expected: tuple[str, int | None, str]) -> None:
    assert split_host_port(address) == expected


def test_flags_defaults_and_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CAIRN_MASTER_ADDR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = parse_settings(["--agent-id", "box-1"])
    assert settings.master == "127.0.0.1:8090"
    assert settings.port == 0
    assert settings.slot_type == SlotType.AUTO and settings.slots is None
    assert settings.reconnect_timeout == 0 and not settings.kill_containers_on_exit
    assert settings.work_dir == (tmp_path / ".local/share/cairn/agent/box-1").resolve()
    monkeypatch.setenv("CAIRN_MASTER_ADDR", "m:9")
    assert parse_settings(["--agent-id", "x"]).master == "m:9"
    for argv, field in (
        (["--master", "nohost"], "--master"),
        (["--master", "h:99999"], "--master"),
        (["--slots", "-1"], "--slots"),
        (["--agent-id", "bad/id"], "--agent-id"),
        (["--reconnect-timeout", "-3"], "--reconnect-timeout"),
    ):
        with pytest.raises(SystemExit):
            parse_settings(argv)
        assert field in capsys.readouterr().err


def test_rendezvous_facts_for_launchers_and_determined() -> None:
    rendezvous = RendezvousInfo(
        container_addrs=("10.0.0.1", "10.0.0.2"),
        container_slot_counts=(2, 2),
        container_rank=1,
        c10d_port=29407,
        collectives_port=30407,
        det_pub_port=12374,
        det_pull_port=12375,
    )
    env = environment(GPUS[2:], rendezvous=rendezvous)
    assert env["CAIRN_CONTAINER_RANK"] == "1"
    assert json.loads(env["CAIRN_CONTAINER_ADDRS"]) == ["10.0.0.1", "10.0.0.2"]
    assert json.loads(env["CAIRN_CONTAINER_SLOT_COUNTS"]) == [2, 2]
    assert env["CAIRN_CHIEF_IP"] == env["DET_CHIEF_IP"] == "10.0.0.1"
    assert env["C10D_PORT"] == env["CAIRN_C10D_PORT"] == "29407"
    assert env["CAIRN_COLLECTIVES_PORT"] == "30407"
    assert env["INTER_TRAIN_PROCESS_COMM_PORT_1"] == "12374"
    assert env["INTER_TRAIN_PROCESS_COMM_PORT_2"] == "12375"
    assert env["DET_RESOURCES_ID"] == "c1"
    assert env["CAIRN_GPU_UUIDS"] == "GPU-2,GPU-3" and env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert rendezvous_file(rendezvous, 2) == {
        "container_addrs": ["10.0.0.1", "10.0.0.2"],
        "container_rank": 1,
        "container_slot_counts": [2, 2],
    }
    # From a master that sends no rendezvous: rank 0 of 1.
    assert environment([])["CAIRN_CONTAINER_RANK"] == "0"
    assert rendezvous_file(None, 3)["container_slot_counts"] == [3]


def test_task_environments_are_chosen_by_image(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").touch()
    task = parse_task_env(f"cairn-task={venv}")
    envs = PythonEnvs([task])
    assert envs.choose("").env == task and envs.choose("cairn-task").note == ""
    assert envs.choose("agent").env.name == "agent"
    other = envs.choose("determinedai/pytorch-ngc-dev:0736b6d")
    assert other.env == task and "runs no images" in other.note and "cairn-task" in other.note
    assert PythonEnvs([]).default.name == "agent"
    with pytest.raises(PythonEnvError, match="expected NAME=DIR"):
        parse_task_env(str(venv))
    with pytest.raises(PythonEnvError, match="does not exist"):
        parse_task_env(f"x={tmp_path / 'missing'}")
    with pytest.raises(PythonEnvError, match="is none of the task environments"):
        PythonEnvs([task], default="nope")
