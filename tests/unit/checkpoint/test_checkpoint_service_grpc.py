"""CheckpointService through the real gRPC server on a free port."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from cairn.checkpoint.v1 import checkpoint_pb2 as pb
from cairn.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from services.checkpoint.server import serve
from services.common.channels import internal_channel

Stub = pb_grpc.CheckpointServiceStub
CHUNK = 1024 * 1024
TIMEOUT = 30
FILES = {
    "metadata.json": b'{"steps_completed": 7}',
    "state/model.pt": os.urandom(CHUNK * 2 + 12345),  # more than one download chunk
    "state/empty.bin": b"",
    "exactly-one-chunk.bin": os.urandom(CHUNK),
}


def struct(section: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(section)
    return message


def upload_messages(
    section: dict[str, Any], checkpoint_uuid: str, files: dict[str, bytes], piece: int = 300_000
) -> Iterator[pb.UploadChunk]:
    yield pb.UploadChunk(header=pb.UploadHeader(storage=struct(section), checkpoint_uuid=checkpoint_uuid))
    for path, data in files.items():
        offsets = list(range(0, len(data), piece)) or [0]
        for index, offset in enumerate(offsets):
            yield pb.UploadChunk(
                file=pb.FileChunk(
                    path=path,
                    offset=offset,
                    data=data[offset : offset + piece],
                    mode=0o640 if index == 0 else 0,
                    eof=index == len(offsets) - 1,
                )
            )


def download(
    stub: Stub, section: dict[str, Any], checkpoint_uuid: str, globs: tuple[str, ...] = ()
) -> list[Any]:
    request = pb.DownloadRequest(storage=struct(section), checkpoint_uuid=checkpoint_uuid, globs=globs)
    return [message.file for message in stub.Download(request, timeout=TIMEOUT)]


def reassemble(chunks: list[pb.FileChunk]) -> dict[str, bytes]:
    files: dict[str, bytearray] = {}
    for chunk in chunks:
        data = files.setdefault(chunk.path, bytearray())
        assert chunk.offset == len(data)
        data.extend(chunk.data)
    return {path: bytes(data) for path, data in files.items()}


def test_upload_then_download_is_byte_identical(
    checkpoint_stub: Stub, storage_section: dict[str, Any]
) -> None:
    answer = checkpoint_stub.Upload(upload_messages(storage_section, "ckpt-rt", FILES), timeout=TIMEOUT)
    assert dict(answer.resources) == {path: len(data) for path, data in FILES.items()}

    chunks = download(checkpoint_stub, storage_section, "ckpt-rt")
    assert reassemble(chunks) == FILES
    assert max(len(chunk.data) for chunk in chunks) == CHUNK
    by_file: dict[str, list[pb.FileChunk]] = {}
    for chunk in chunks:
        by_file.setdefault(chunk.path, []).append(chunk)
    for path, file_chunks in by_file.items():
        assert [c.eof for c in file_chunks] == [False] * (len(file_chunks) - 1) + [True], path
        assert file_chunks[0].mode != 0 and all(c.mode == 0 for c in file_chunks[1:]), path
    assert len(by_file["state/empty.bin"]) == 1 and by_file["state/empty.bin"][0].data == b""
    assert len(by_file["exactly-one-chunk.bin"]) == 1

    only_state = reassemble(download(checkpoint_stub, storage_section, "ckpt-rt", ("state/*",)))
    assert only_state == {"state/model.pt": FILES["state/model.pt"], "state/empty.bin": b""}


def test_list_files(checkpoint_stub: Stub, storage_section: dict[str, Any]) -> None:
    checkpoint_stub.Upload(upload_messages(storage_section, "ckpt-ls", {"a.txt": b"abc"}), timeout=TIMEOUT)
    listed = checkpoint_stub.ListFiles(
        pb.ListFilesRequest(storage=struct(storage_section), checkpoint_uuid="ckpt-ls"), timeout=TIMEOUT
    )
    assert listed.exists and dict(listed.resources) == {"a.txt": 3}
    missing = checkpoint_stub.ListFiles(
        pb.ListFilesRequest(storage=struct(storage_section), checkpoint_uuid="nope"), timeout=TIMEOUT
    )
    assert not missing.exists and dict(missing.resources) == {}


def invalid(error: pytest.ExceptionInfo[grpc.RpcError]) -> str:
    assert isinstance(error.value, grpc.Call)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, error.value.details()
    return error.value.details() or ""


def test_upload_stream_errors(checkpoint_stub: Stub, tmp_path: Path) -> None:
    section = {"type": "directory", "container_path": str(tmp_path)}
    chunk = pb.UploadChunk(file=pb.FileChunk(path="a", offset=0, data=b"x", eof=True))
    header = pb.UploadChunk(header=pb.UploadHeader(storage=struct(section), checkpoint_uuid="c"))

    with pytest.raises(grpc.RpcError) as before_header:
        checkpoint_stub.Upload(iter([chunk, header]), timeout=TIMEOUT)
    assert invalid(before_header) == "header: the first message must be an UploadHeader, not a file chunk"

    with pytest.raises(grpc.RpcError) as second_header:
        checkpoint_stub.Upload(iter([header, chunk, header]), timeout=TIMEOUT)
    assert invalid(second_header) == "message 2: a second UploadHeader; only the first message is one"

    with pytest.raises(grpc.RpcError) as empty:
        checkpoint_stub.Upload(iter([]), timeout=TIMEOUT)
    assert "the stream is empty" in invalid(empty)

    gap = pb.UploadChunk(file=pb.FileChunk(path="b", offset=4, data=b"x"))
    with pytest.raises(grpc.RpcError) as bad_offset:
        checkpoint_stub.Upload(iter([header, chunk, gap]), timeout=TIMEOUT)
    assert invalid(bad_offset) == "file.offset: 4 for b, expected 0 (its first chunk)"

    escape = pb.UploadChunk(file=pb.FileChunk(path="../x", offset=0, data=b"x", eof=True))
    with pytest.raises(grpc.RpcError) as unsafe:
        checkpoint_stub.Upload(iter([header, escape]), timeout=TIMEOUT)
    assert "must not contain '..'" in invalid(unsafe)

    # Bad input changed nothing: not even the complete file "a" of the refused streams.
    assert [path.name for path in tmp_path.iterdir()] == [".cairn-staging"]
    assert list((tmp_path / ".cairn-staging").iterdir()) == []


def test_config_errors_are_invalid_argument(checkpoint_stub: Stub) -> None:
    header = pb.UploadChunk(
        header=pb.UploadHeader(storage=struct({"type": "shared_fs"}), checkpoint_uuid="c")
    )
    with pytest.raises(grpc.RpcError) as upload:
        checkpoint_stub.Upload(iter([header]), timeout=TIMEOUT)
    assert invalid(upload) == "checkpoint_storage.host_path: required for type shared_fs"

    with pytest.raises(grpc.RpcError) as no_storage:
        checkpoint_stub.ListFiles(pb.ListFilesRequest(checkpoint_uuid="c"), timeout=TIMEOUT)
    assert invalid(no_storage).startswith("checkpoint_storage: required")

    with pytest.raises(grpc.RpcError) as gcs:
        checkpoint_stub.Delete(
            pb.DeleteRequest(storage=struct({"type": "gcs", "bucket": "b"}), checkpoint_uuids=["c"]),
            timeout=TIMEOUT,
        )
    assert "gcs is not supported by Cairn yet" in invalid(gcs)


def test_download_of_a_missing_checkpoint_is_not_found(checkpoint_stub: Stub, tmp_path: Path) -> None:
    section = {"type": "directory", "container_path": str(tmp_path)}
    with pytest.raises(grpc.RpcError) as error:
        download(checkpoint_stub, section, "missing")
    assert isinstance(error.value, grpc.Call)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    assert error.value.details() == f"checkpoint missing not found in directory storage at {tmp_path}"


def test_delete_reports_each_checkpoint(checkpoint_stub: Stub, storage_section: dict[str, Any]) -> None:
    for name in ("d1", "d2"):
        checkpoint_stub.Upload(
            upload_messages(storage_section, name, {"keep.json": b"{}", "drop.bin": b"xx"}), timeout=TIMEOUT
        )
    partial = checkpoint_stub.Delete(
        pb.DeleteRequest(storage=struct(storage_section), checkpoint_uuids=["d1"], globs=["*.bin"]),
        timeout=TIMEOUT,
    )
    assert [(r.checkpoint_uuid, dict(r.remaining), r.error) for r in partial.results] == [
        ("d1", {"keep.json": 2}, "")
    ]

    full = checkpoint_stub.Delete(
        pb.DeleteRequest(storage=struct(storage_section), checkpoint_uuids=["d1", "bad/uuid", "d2", "gone"]),
        timeout=TIMEOUT,
    )
    results = {r.checkpoint_uuid: (dict(r.remaining), r.error) for r in full.results}
    assert results["d1"] == ({}, "") and results["d2"] == ({}, "") and results["gone"] == ({}, "")
    assert "must be a single path segment" in results["bad/uuid"][1]

    with pytest.raises(grpc.RpcError) as bad_glob:
        checkpoint_stub.Delete(
            pb.DeleteRequest(storage=struct(storage_section), checkpoint_uuids=["d1"], globs=["/etc/*"]),
            timeout=TIMEOUT,
        )
    assert "glob '/etc/*': must be relative" in invalid(bad_glob)


def test_collect_garbage(checkpoint_stub: Stub, storage_section: dict[str, Any]) -> None:
    for name in ("g1", "g2", "g3"):
        checkpoint_stub.Upload(upload_messages(storage_section, name, {"m": name.encode()}), timeout=TIMEOUT)
    request = pb.CollectGarbageRequest(
        storage=struct(storage_section),
        policy=pb.GcPolicy(
            save_experiment_best=0, save_trial_best=1, save_trial_latest=1, smaller_is_better=True
        ),
        checkpoints=[
            pb.GcCandidate(checkpoint_uuid="g1", trial_id=1, steps_completed=10, searcher_metric=0.9),
            pb.GcCandidate(checkpoint_uuid="g2", trial_id=1, steps_completed=20, searcher_metric=0.1),
            pb.GcCandidate(checkpoint_uuid="g3", trial_id=1, steps_completed=30),
        ],
        protected_uuids=[],
    )
    for _attempt in range(2):  # idempotent: the second run answers the same
        answer = checkpoint_stub.CollectGarbage(request, timeout=TIMEOUT)
        assert list(answer.kept) == ["g2", "g3"]
        assert [(d.checkpoint_uuid, dict(d.remaining), d.error) for d in answer.deleted] == [("g1", {}, "")]

    request.policy.save_trial_latest = -1
    with pytest.raises(grpc.RpcError) as bad_policy:
        checkpoint_stub.CollectGarbage(request, timeout=TIMEOUT)
    assert invalid(bad_policy) == "policy.save_trial_latest: must be >= 0, not -1"

    # Without a policy every number would read 0 and nothing would be kept: refused instead.
    request.ClearField("policy")
    with pytest.raises(grpc.RpcError) as no_policy:
        checkpoint_stub.CollectGarbage(request, timeout=TIMEOUT)
    assert invalid(no_policy).startswith("policy: required")
    assert checkpoint_stub.ListFiles(
        pb.ListFilesRequest(storage=struct(storage_section), checkpoint_uuid="g2"), timeout=TIMEOUT
    ).exists


def test_check_storage(checkpoint_stub: Stub, storage_section: dict[str, Any], tmp_path: Path) -> None:
    good = checkpoint_stub.CheckStorage(
        pb.CheckStorageRequest(storage=struct(storage_section)), timeout=TIMEOUT
    )
    assert (good.ok, good.error) == (True, "")

    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("x")
    bad = checkpoint_stub.CheckStorage(
        pb.CheckStorageRequest(storage=struct({"type": "shared_fs", "host_path": str(not_a_dir)})),
        timeout=TIMEOUT,
    )
    assert not bad.ok and "not writable" in bad.error

    invalid_config = checkpoint_stub.CheckStorage(
        pb.CheckStorageRequest(storage=struct({"type": "directory"})), timeout=TIMEOUT
    )
    assert (invalid_config.ok, invalid_config.error) == (
        False,
        "checkpoint_storage.container_path: required for type directory",
    )


def test_cluster_token_is_required_when_configured(tmp_path: Path) -> None:
    server = serve(host="127.0.0.1", port=0, cluster_token="s3cret")
    address = f"127.0.0.1:{server.port}"
    request = pb.CheckStorageRequest(storage=struct({"type": "directory", "container_path": str(tmp_path)}))
    try:
        for token in (None, "wrong"):
            channel = internal_channel(address, cluster_token=token)
            with pytest.raises(grpc.RpcError) as refused:
                Stub(channel).CheckStorage(request, timeout=TIMEOUT)
            assert isinstance(refused.value, grpc.Call)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            channel.close()
        # Streaming calls are guarded too.
        channel = internal_channel(address, cluster_token=None)
        with pytest.raises(grpc.RpcError) as refused_stream:
            Stub(channel).Upload(iter([]), timeout=TIMEOUT)
        assert isinstance(refused_stream.value, grpc.Call)
        assert refused_stream.value.code() == grpc.StatusCode.UNAUTHENTICATED
        channel.close()

        channel = internal_channel(address, cluster_token="s3cret")
        assert Stub(channel).CheckStorage(request, timeout=TIMEOUT).ok
        channel.close()
    finally:
        server.stop(grace=1.0)
