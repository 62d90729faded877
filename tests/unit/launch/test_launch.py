"""The launch layers: rank-tagged output of wrap_rank, and the torchrun command the torch launcher
builds from the cluster info."""

from __future__ import annotations

import io
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cairn.core.cluster_info import cluster_info_from_env
from cairn.launch import torch_distributed, wrap_rank


def copied(data: bytes) -> bytes:
    sink = io.BytesIO()
    with tempfile.TemporaryFile() as source:
        source.write(data)
        source.seek(0)
        wrap_rank.copy_lines(source, sink, b"[rank=3] ")  # type: ignore[arg-type]
    return sink.getvalue()


def test_every_line_gets_the_rank_prefix() -> None:
    assert copied(b"a\nb\r\nc\rd") == b"[rank=3] a\n[rank=3] b\n[rank=3] c\n[rank=3] d\n"
    assert copied(b"") == b""
    long = b"x" * (wrap_rank.MAX_LINE_BYTES + 10)
    assert copied(long + b"\n").count(b"[rank=3] ") == 2


def test_wrap_rank_keeps_streams_and_exit_code(tmp_path: Path) -> None:
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)"
    result = subprocess.run(
        [sys.executable, "-m", "cairn.launch.wrap_rank", "5", "--", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 7
    assert result.stdout == "[rank=5] out\n" and result.stderr == "[rank=5] err\n"


def test_wrap_rank_reads_the_rank_from_the_environment() -> None:
    assert wrap_rank.resolve_rank("RANK", {"RANK": "2"}) == 2
    with pytest.raises(SystemExit, match="RANK is ''"):
        wrap_rank.resolve_rank("RANK", {})
    with pytest.raises(SystemExit, match="usage"):
        wrap_rank.parse(["python3", "x.py"])


def cluster_env(rank: int) -> dict[str, str]:
    return {
        "CAIRN_ALLOCATION_ID": "1.2.1",
        "CAIRN_ALLOCATION_TOKEN": "t",
        "CAIRN_MASTER_ADDR": "m:8090",
        "CAIRN_EXPERIMENT_ID": "1",
        "CAIRN_TRIAL_ID": "2",
        "CAIRN_TRIAL_RUN_ID": "1",
        "CAIRN_SLOT_IDS": "[0,1]",
        "CAIRN_CONTAINER_ADDRS": '["10.0.0.1","10.0.0.2"]',
        "CAIRN_CONTAINER_SLOT_COUNTS": "[2,2]",
        "CAIRN_CONTAINER_RANK": str(rank),
    }


def test_the_torchrun_command_from_the_cluster_info() -> None:
    info = cluster_info_from_env(cluster_env(1))
    command = torch_distributed.launch_command(info, ["--log-dir", "x"], ["python3", "train.py"], 29411)
    joined = " ".join(command[1:])
    assert joined.startswith("-m torch.distributed.run --nnodes 2 --nproc_per_node 2 --node_rank 1")
    assert "--master_addr 10.0.0.1 --master_port 29411 --max_restarts 0 --log-dir x" in joined
    assert joined.endswith("--module cairn.launch.wrap_rank RANK -- python3 train.py")
    # One container: the chief is on loopback whatever its address.
    single = cluster_info_from_env(
        {**cluster_env(0), "CAIRN_CONTAINER_ADDRS": '["10.0.0.1"]', "CAIRN_CONTAINER_SLOT_COUNTS": "[2]"}
    )
    assert "--master_addr 127.0.0.1" in " ".join(torch_distributed.launch_command(single, [], ["x"], 1))
    assert torch_distributed.split_args(["--a", "1", "--", "python3", "t.py"]) == (
        ["--a", "1"],
        ["python3", "t.py"],
    )
    assert torch_distributed.c10d_port({"CAIRN_C10D_PORT": "29444"}) == 29444
