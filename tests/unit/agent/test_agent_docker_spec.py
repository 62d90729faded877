"""The docker runtime's translation of a task's configuration into a container (pure: no Docker)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from cairn.agent_files import (
    DOCKER_LABEL_AGENT_ID,
    DOCKER_LABEL_CONTAINER_ID,
)
from services.agent.runtime.docker_engine import ContainerEnd, FrameDecoder, pull_progress_line
from services.agent.runtime.docker_shim import exit_report_of, written_so_far
from services.agent.runtime.docker_spec import (
    CONTAINER_WORKDIR,
    DEFAULT_SHM_BYTES,
    BindMount,
    ContainerConfigError,
    ContainerSpec,
    DeviceMapping,
    DockerDefaults,
    SlotShare,
    container_spec,
    parse_memory_size,
)
from services.agent.runtime.events import EventWriter, LogLine

DEFAULTS = DockerDefaults(image="cairn-task:default")
CPU = SlotShare(cpu_slots=1)
GPU = SlotShare(gpu_uuids=("GPU-aaa", "GPU-bbb"))
LABELS = {DOCKER_LABEL_AGENT_ID: "agent-1", DOCKER_LABEL_CONTAINER_ID: "c-1"}


def spec(config: dict[str, Any], share: SlotShare = CPU, **kwargs: Any) -> ContainerSpec:
    options: dict[str, Any] = {
        "command": ["python3", "train.py"],
        "env": {"CAIRN_TRIAL_ID": "7", "CUDA_VISIBLE_DEVICES": "2,3"},
        "share": share,
        "labels": LABELS,
        "defaults": DEFAULTS,
    }
    options.update(kwargs)
    return container_spec(config, **options)


def error_of(config: dict[str, Any], share: SlotShare = CPU) -> str:
    with pytest.raises(ContainerConfigError) as caught:
        spec(config, share)
    return str(caught.value)


# -- environment.image ------------------------------------------------------------------------------
def test_the_default_image_when_the_config_names_none() -> None:
    assert spec({}).image == "cairn-task:default"
    assert spec({"environment": {"image": None}}).image == "cairn-task:default"


def test_one_image_for_every_flavour() -> None:
    assert spec({"environment": {"image": "mine:1"}}).image == "mine:1"
    assert spec({"environment": {"image": "mine:1"}}, GPU).image == "mine:1"


def test_cpu_slots_take_the_cpu_image_and_gpu_slots_the_cuda_image() -> None:
    config = {"environment": {"image": {"cpu": "img:cpu", "cuda": "img:cuda"}}}
    assert spec(config, CPU).image == "img:cpu"
    assert spec(config, GPU).image == "img:cuda"


def test_a_flavour_without_an_image_takes_the_default() -> None:
    assert spec({"environment": {"image": {"cuda": "img:cuda"}}}, CPU).image == "cairn-task:default"


def test_bad_images_name_the_field() -> None:
    assert error_of({"environment": {"image": {"tpu": "x"}}}).startswith("environment.image: unknown device")
    assert error_of({"environment": {"image": 3}}).startswith("environment.image:")
    assert error_of({"environment": {"image": "a b"}}).startswith("environment.image:")
    assert error_of({"environment": []}).startswith("environment: must be an object")


# -- force_pull_image, registry_auth ---------------------------------------------------------------
def test_force_pull_and_registry_auth() -> None:
    auth = {"username": "u", "password": "p", "serveraddress": "reg.example:5000"}
    made = spec({"environment": {"force_pull_image": True, "registry_auth": auth}})
    assert made.force_pull is True
    assert made.registry_auth == auth
    assert spec({}).force_pull is False and spec({}).registry_auth is None


def test_bad_pull_settings_name_the_field() -> None:
    assert error_of({"environment": {"force_pull_image": "yes"}}).startswith("environment.force_pull_image:")
    assert error_of({"environment": {"registry_auth": "u:p"}}).startswith("environment.registry_auth:")
    assert error_of({"environment": {"registry_auth": {"user": "u"}}}).startswith(
        "environment.registry_auth.user: unknown field"
    )
    assert error_of({"environment": {"registry_auth": {"password": 1}}}).startswith(
        "environment.registry_auth.password:"
    )


# -- environment_variables ------------------------------------------------------------------------
def test_environment_variables_are_added_to_the_task_environment() -> None:
    made = spec({"environment": {"environment_variables": ["A=1", "B=x=y", "EMPTY="]}})
    assert made.env["A"] == "1" and made.env["B"] == "x=y" and made.env["EMPTY"] == ""
    assert made.env["CAIRN_TRIAL_ID"] == "7"


def test_environment_variables_per_flavour() -> None:
    config = {"environment": {"environment_variables": {"cpu": ["WHICH=cpu"], "cuda": ["WHICH=cuda"]}}}
    assert spec(config, CPU).env["WHICH"] == "cpu"
    assert spec(config, GPU).env["WHICH"] == "cuda"


def test_bad_environment_variables_name_the_item() -> None:
    assert error_of({"environment": {"environment_variables": ["A=1", "NOEQUALS"]}}).startswith(
        "environment.environment_variables[1]:"
    )
    assert error_of({"environment": {"environment_variables": "A=1"}}).startswith(
        "environment.environment_variables:"
    )


# -- bind_mounts ------------------------------------------------------------------------------------
def test_bind_mounts_with_every_field() -> None:
    made = spec(
        {
            "bind_mounts": [
                {"host_path": "/data", "container_path": "/mnt/data", "read_only": True},
                {"host_path": "/shared", "container_path": "/shared", "propagation": "rshared"},
                {"host_path": "/rel", "container_path": "inputs"},
            ]
        }
    )
    assert made.mounts == [
        BindMount("/data", "/mnt/data", True, "rprivate"),
        BindMount("/shared", "/shared", False, "rshared"),
        BindMount("/rel", f"{CONTAINER_WORKDIR}/inputs", False, "rprivate"),
    ]


def test_the_tasks_own_mounts_come_first_and_the_config_wins_a_path() -> None:
    task = [BindMount("/ckpt", "/ckpt"), BindMount("/other", "/data")]
    made = spec({"bind_mounts": [{"host_path": "/mine", "container_path": "/data"}]}, task_mounts=task)
    assert made.mounts == [BindMount("/ckpt", "/ckpt"), BindMount("/mine", "/data")]


def test_bad_bind_mounts_name_the_field() -> None:
    def first(mount: Any) -> str:
        return error_of({"bind_mounts": [mount]})

    assert first({"host_path": "rel", "container_path": "/x"}).startswith("bind_mounts[0].host_path:")
    assert first({"host_path": "/x"}).startswith("bind_mounts[0].container_path: required")
    assert first({"host_path": "/x", "container_path": "/y", "read_only": "no"}).startswith(
        "bind_mounts[0].read_only:"
    )
    assert first({"host_path": "/x", "container_path": "/y", "propagation": "sideways"}).startswith(
        "bind_mounts[0].propagation:"
    )
    assert first({"host_path": "/x", "container_path": "/y", "mode": "rw"}).startswith(
        "bind_mounts[0].mode: unknown field"
    )
    assert first({"host_path": "/x", "container_path": CONTAINER_WORKDIR}).startswith(
        "bind_mounts[0].container_path:"
    )
    assert error_of({"bind_mounts": {"host_path": "/x"}}).startswith("bind_mounts: must be a list")


# -- resources ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, 0),
        (1024, 1024),
        ("512", 512),
        ("4G", 4 << 30),
        ("512Mi", 512 << 20),
        ("1.5 GB", 3 << 29),
        ("2k", 2048),
    ],
)
def test_memory_sizes(text: Any, expected: int) -> None:
    assert parse_memory_size(text, "resources.shm_size") == expected


def test_shm_size_defaults_to_determineds_4_gib() -> None:
    assert spec({}).shm_size == DEFAULT_SHM_BYTES == 4 << 30
    assert spec({"resources": {"shm_size": "1G"}}).shm_size == 1 << 30
    assert spec({"resources": {"shm_size": 65536}}).shm_size == 65536
    assert error_of({"resources": {"shm_size": "lots"}}).startswith("resources.shm_size:")
    assert error_of({"resources": {"shm_size": -1}}).startswith("resources.shm_size:")


def test_devices_as_strings_and_objects() -> None:
    made = spec(
        {
            "resources": {
                "devices": [
                    "/dev/fuse",
                    "/dev/a:/dev/b",
                    "/dev/c:/dev/d:r",
                    {"host_path": "/dev/e", "container_path": "/dev/f", "mode": "rw"},
                ]
            }
        }
    )
    assert made.devices == [
        DeviceMapping("/dev/fuse", "/dev/fuse", "rwm"),
        DeviceMapping("/dev/a", "/dev/b", "rwm"),
        DeviceMapping("/dev/c", "/dev/d", "r"),
        DeviceMapping("/dev/e", "/dev/f", "rw"),
    ]
    assert made.devices[2].docker_text() == "/dev/c:/dev/d:r"


def test_bad_devices_name_the_item() -> None:
    assert error_of({"resources": {"devices": ["/dev/a", "dev/b"]}}).startswith("resources.devices[1]:")
    assert error_of({"resources": {"devices": ["/dev/a:/dev/b:x"]}}).startswith("resources.devices[0]:")
    assert error_of({"resources": {"devices": [{"host": "/dev/a"}]}}).startswith("resources.devices[0].host:")
    assert error_of({"resources": {"devices": "/dev/a"}}).startswith("resources.devices: must be a list")


# -- slots --------------------------------------------------------------------------------------------
def test_gpu_slots_are_exactly_those_gpus_by_uuid() -> None:
    made = spec({}, GPU)
    assert made.gpu_uuids == ["GPU-aaa", "GPU-bbb"]
    # Inside, the container's GPUs are numbered from 0: the host's indices must not leak in.
    assert "CUDA_VISIBLE_DEVICES" not in made.env
    assert made.nano_cpus == 0


def test_cpu_slots_share_cores_by_weight_and_limit_only_when_configured() -> None:
    made = spec({}, SlotShare(cpu_slots=2))
    assert made.gpu_uuids == []
    assert made.cpu_shares == 2048 and made.nano_cpus == 0
    assert made.env["CUDA_VISIBLE_DEVICES"] == "2,3"  # what the task env says: no GPU for CPU slots
    limited = spec({}, SlotShare(cpu_slots=2), defaults=DockerDefaults("img", cpus_per_slot=1.5))
    assert limited.nano_cpus == 3_000_000_000


def test_host_networking_and_capabilities() -> None:
    made = spec({"environment": {"add_capabilities": ["SYS_PTRACE"], "drop_capabilities": ["NET_RAW"]}})
    assert made.network_mode == "host"
    assert made.cap_add == ["SYS_PTRACE"] and made.cap_drop == ["NET_RAW"]
    assert error_of({"environment": {"add_capabilities": "SYS_PTRACE"}}).startswith(
        "environment.add_capabilities:"
    )


def test_labels_are_cairns_own() -> None:
    assert spec({}).labels == LABELS
    with pytest.raises(ContainerConfigError, match="labels"):
        spec({}, labels={"owner": "me"})


def test_the_spec_travels_as_json() -> None:
    made = spec(
        {
            "bind_mounts": [{"host_path": "/d", "container_path": "/d", "read_only": True}],
            "resources": {"devices": ["/dev/fuse"]},
        },
        GPU,
    )
    assert ContainerSpec.from_json(json.loads(json.dumps(made.to_json()))) == made


# -- the supervisor's pieces --------------------------------------------------------------------------
def test_docker_frames_keep_stdout_and_stderr_apart_across_chunks() -> None:
    stream = (
        b"\x01\x00\x00\x00\x00\x00\x00\x06out 0\n"
        + b"\x02\x00\x00\x00\x00\x00\x00\x06err 0\n"
        + b"\x01\x00\x00\x00\x00\x00\x00\x02ab"
    )
    decoder = FrameDecoder()
    frames = []
    for i in range(0, len(stream), 5):  # arbitrary chunking, headers split included
        frames += decoder.feed(stream[i : i + 5])
    assert frames == [("stdout", b"out 0\n"), ("stderr", b"err 0\n"), ("stdout", b"ab")]


def test_exit_reports_of_docker_ends() -> None:
    assert exit_report_of(ContainerEnd(0, False, "", 1.0)).exit_code == 0
    plain = exit_report_of(ContainerEnd(3, False, "", 1.0))
    assert (plain.exit_code, plain.signal, plain.reason) == (3, None, "")
    killed = exit_report_of(ContainerEnd(137, False, "", 1.0))
    assert (killed.exit_code, killed.signal) == (137, signal.SIGKILL)
    oom = exit_report_of(ContainerEnd(137, True, "", 1.0))
    assert oom.exit_code == 137 and "out of memory" in oom.reason and "OOMKilled" in oom.reason
    failed = exit_report_of(ContainerEnd(127, False, "exec: train.py: not found", 1.0))
    assert failed.exit_code is None and "exec: train.py: not found" in failed.error


def test_a_new_supervisor_continues_where_the_event_file_ends(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    writer = EventWriter(events, 4)
    writer.write_state("RUNNING")
    writer.write_logs([LogLine("stdout", "a"), LogLine("stderr", "b"), LogLine("stdout", "c")])
    writer.write_logs([LogLine("stdout", "agent note", source="agent")])
    writer.close()
    with open(events, "ab") as f:
        f.write(b'{"seq":9,"t":1,"kind":"log","std":"stdout","msg":"cut sh')  # its writer died here
    assert written_so_far(events) == (9, {"stdout": 2, "stderr": 1}, True)
    assert written_so_far(tmp_path / "none.jsonl") == (1, {"stdout": 0, "stderr": 0}, False)


def test_pull_progress_becomes_throttled_log_lines() -> None:
    shown: dict[tuple[str, str], float] = {}
    assert pull_progress_line({"status": "Pulling from library/python", "id": "3.11"}, shown) == (
        "3.11: Pulling from library/python"
    )
    first = pull_progress_line({"status": "Downloading", "id": "abc", "progress": "[=>   ] 1MB/9MB"}, shown)
    assert first == "abc: Downloading [=>   ] 1MB/9MB"
    # The next progress of the same layer and step within the interval is not a line of its own.
    assert (
        pull_progress_line({"status": "Downloading", "id": "abc", "progress": "[==>  ] 2MB/9MB"}, shown) == ""
    )
    assert pull_progress_line({"status": "Download complete", "id": "abc"}, shown) == "abc: Download complete"
    assert pull_progress_line({"progressDetail": {}}, shown) == ""
