"""core.distributed between real processes: the chief's hub over TCP on loopback, collectives with
their `_local` forms across two "nodes", a peer that dies, a stranger without the token, and the
searcher operations, preemption and sharded checkpoints that ride on them."""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cairn.core.checkpoint import CheckpointContext
from cairn.core.checkpoint_records import LocalCheckpointRecords
from cairn.core.checkpoint_storage import local_storage
from cairn.core.distributed import DistributedContext
from cairn.core.tcp_collectives import CollectivesError, Member, TcpCollectives
from tests.support.ports import free_port

KEY = "allocation-token-for-tests"
Job = Callable[[DistributedContext, Path], Any]


def _worker(rank: int, nodes: int, per_node: int, port: int, job: Job, tmp: str, out: Any) -> None:
    os.environ["CAIRN_ALLOCATION_TOKEN"] = KEY
    try:
        dist = DistributedContext(
            rank=rank,
            size=nodes * per_node,
            local_rank=rank % per_node,
            local_size=per_node,
            cross_rank=rank // per_node,
            cross_size=nodes,
            chief_ip="127.0.0.1",
            port=port,
        )
        try:
            result = job(dist, Path(tmp))
        finally:
            dist.close()
        out.put((rank, "ok", result))
    except BaseException as exc:
        out.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def run_job(
    job: Job, tmp_path: Path, nodes: int = 2, per_node: int = 2, timeout: float = 60
) -> dict[int, Any]:
    """Run `job` on nodes * per_node processes; {rank: ("ok", result) | ("error", text)}."""
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    port = free_port()
    size = nodes * per_node
    processes = [
        context.Process(target=_worker, args=(rank, nodes, per_node, port, job, str(tmp_path), out))
        for rank in range(size)
    ]
    for process in processes:
        process.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < size and time.monotonic() < deadline:
            try:
                rank, status, value = out.get(timeout=0.5)
            except Exception:
                if all(not p.is_alive() for p in processes) and out.empty():
                    break
                continue
            results[rank] = (status, value)
    finally:
        for process in processes:
            process.join(5)
            if process.is_alive():
                process.kill()
    return results


def _collectives(dist: DistributedContext, _tmp: Path) -> dict[str, Any]:
    return {
        "allgather": dist.allgather(dist.rank * 10),
        "gather": dist.gather(f"r{dist.rank}"),
        "broadcast": dist.broadcast({"from": dist.rank}),
        "allgather_local": dist.allgather_local(dist.rank),
        "gather_local": dist.gather_local(dist.local_rank),
        "broadcast_local": dist.broadcast_local(dist.rank),
        "many": [dist.allgather(i)[dist.size - 1] for i in range(50)],
    }


def test_collectives_across_two_nodes_of_two(tmp_path: Path) -> None:
    results = run_job(_collectives, tmp_path)
    assert sorted(results) == [0, 1, 2, 3], results
    for rank, (status, value) in results.items():
        assert status == "ok", value
        node_first = rank - rank % 2
        assert value["allgather"] == [0, 10, 20, 30]
        assert value["gather"] == (["r0", "r1", "r2", "r3"] if rank == 0 else None)
        assert value["broadcast"] == {"from": 0}
        assert value["allgather_local"] == [node_first, node_first + 1]
        assert value["gather_local"] == ([0, 1] if rank % 2 == 0 else None)
        assert value["broadcast_local"] == node_first
        assert value["many"] == list(range(50))


def _dies(dist: DistributedContext, _tmp: Path) -> Any:
    dist.allgather("hello")
    if dist.rank == 2:
        os._exit(3)  # a crash: no goodbye
    return dist.allgather("after")


def test_a_peer_that_dies_fails_the_others_instead_of_hanging(tmp_path: Path) -> None:
    results = run_job(_dies, tmp_path, timeout=30)
    assert 2 not in results
    for rank in (0, 1, 3):
        status, value = results[rank]
        # The hub names the rank that left; a rank that asks after the chief has gone finds no hub.
        assert status == "error", (rank, value)
        assert "rank 2 left the job" in value or "lost the chief's collectives hub" in value, (rank, value)
    assert "rank 2 left the job" in results[0][1]


def test_a_connection_without_the_token_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    chief = TcpCollectives(Member(0, 2, 0, 0, 2), "127.0.0.1", port, b"right", connect_timeout_s=5)
    try:
        with pytest.raises(CollectivesError, match="could not reach the chief's collectives hub"):
            TcpCollectives(Member(1, 2, 0, 1, 2), "127.0.0.1", port, b"wrong", connect_timeout_s=1)
        with pytest.raises(CollectivesError, match="does not fit a job of 2"):
            TcpCollectives(Member(5, 6, 0, 5, 6), "127.0.0.1", port, b"right", connect_timeout_s=1)
    finally:
        chief.close(wait_s=0)


def _mismatch(dist: DistributedContext, _tmp: Path) -> Any:
    return dist.allgather(1) if dist.rank == 0 else dist.broadcast(1)


def test_ranks_calling_different_collectives_fail_with_a_message(tmp_path: Path) -> None:
    results = run_job(_mismatch, tmp_path, nodes=1, per_node=2, timeout=30)
    assert all(status == "error" for status, _ in results.values()), results
    assert any(
        "called broadcast while others called allgather" in v or "called allgather while" in v
        for _, v in results.values()
    )


def _sharded_checkpoint(dist: DistributedContext, tmp: Path) -> Any:
    storage = local_storage(str(tmp / "ckpts"))
    checkpoints = CheckpointContext(dist, storage, LocalCheckpointRecords(storage))
    with checkpoints.store_path({"steps_completed": 5}, shard=True) as (path, storage_id):
        (path / f"shard-{dist.rank}.bin").write_bytes(bytes([dist.rank]) * 10)
    with checkpoints.restore_path(storage_id) as restored:
        files = sorted(p.name for p in restored.iterdir())
    return storage_id, files


def test_a_sharded_checkpoint_holds_every_ranks_files(tmp_path: Path) -> None:
    results = run_job(_sharded_checkpoint, tmp_path)
    ids = {value[0] for status, value in results.values() if status == "ok"}
    assert len(results) == 4 and len(ids) == 1, results
    (storage_id,) = ids
    assert all(status == "ok" for status, _ in results.values()), results
    for _, (_, files) in results.values():
        assert files == ["metadata.json", "shard-0.bin", "shard-1.bin", "shard-2.bin", "shard-3.bin"]
    assert (tmp_path / "ckpts" / storage_id / "shard-3.bin").read_bytes() == bytes([3]) * 10


def _conflicting_shards(dist: DistributedContext, tmp: Path) -> Any:
    storage = local_storage(str(tmp / "ckpts"))
    checkpoints = CheckpointContext(dist, storage, LocalCheckpointRecords(storage))
    with checkpoints.store_path({"steps_completed": 5}, shard=True) as (path, _):
        (path / "same.bin").write_bytes(b"x")


def test_two_ranks_writing_one_file_fail_the_checkpoint_everywhere(tmp_path: Path) -> None:
    results = run_job(_conflicting_shards, tmp_path, nodes=1, per_node=2)
    assert all(
        status == "error" and "'same.bin' was written by rank 0 and rank 1" in value
        for status, value in results.values()
    ), results
    leftovers = [p for p in (tmp_path / "ckpts").iterdir() if not p.name.startswith(".")]
    assert leftovers == []
