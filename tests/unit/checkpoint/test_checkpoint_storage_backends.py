"""Every backend (shared_fs, directory, s3 through moto's HTTP server) honours the same contract."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
import pytest

from cairn.storage import (
    CheckpointNotFound,
    ChunkStreamError,
    FileChunk,
    StorageConfigError,
    StorageError,
    StorageManager,
    glob_selector,
    storage_manager_from_config,
)

BIG = os.urandom(2 * 1024 * 1024 + 17)
FILES = {
    "metadata.json": b'{"steps_completed": 100}',
    "model/weights.bin": BIG,
    "model/empty.txt": b"",
    "logs/run.log": b"line\n" * 10,
}


def s3_client(section: dict[str, Any]) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=section["endpoint_url"],
        aws_access_key_id=section["access_key"],
        aws_secret_access_key=section["secret_key"],
        region_name="us-east-1",
    )


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def read_files(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def sizes(files: dict[str, bytes]) -> dict[str, int]:
    return {relative: len(data) for relative, data in files.items()}


@pytest.fixture
def manager(storage_section: dict[str, Any]) -> StorageManager:
    return storage_manager_from_config(storage_section)


def test_store_path_then_restore_path(manager: StorageManager) -> None:
    with manager.store_path("ckpt-1") as directory:
        write_files(directory, FILES)
    assert manager.exists("ckpt-1")
    assert manager.list_files("ckpt-1") == sizes(FILES)
    with manager.restore_path("ckpt-1") as restored:
        assert read_files(restored) == FILES


def test_store_path_that_fails_stores_nothing_on_cloud_backends(manager: StorageManager) -> None:
    with pytest.raises(RuntimeError), manager.store_path("ckpt-failed") as directory:
        write_files(directory, {"a": b"1"})
        raise RuntimeError("training crashed")
    if manager.description.startswith("s3"):
        assert not manager.exists("ckpt-failed")


def test_upload_then_download_with_selector(manager: StorageManager, tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_files(local, FILES)
    assert manager.upload(local, "ckpt-2") == sizes(FILES)
    target = tmp_path / "restored"
    copied = manager.download("ckpt-2", target, glob_selector(["model"]))
    assert copied == {"model/weights.bin": len(BIG), "model/empty.txt": 0}
    assert read_files(target) == {"model/weights.bin": BIG, "model/empty.txt": b""}


def test_upload_only_the_paths_given(manager: StorageManager, tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_files(local, FILES)
    # Determined's path sets list directories too, with a trailing "/".
    manager.upload(local, "ckpt-3", paths=["metadata.json", "model/", "model/empty.txt"])
    assert manager.list_files("ckpt-3") == {
        "metadata.json": len(FILES["metadata.json"]),
        "model/empty.txt": 0,
    }
    with pytest.raises(StorageError, match="paths: not found in"):
        manager.upload(local, "ckpt-3", paths=["nope.bin"])


def test_missing_checkpoint(manager: StorageManager, tmp_path: Path) -> None:
    assert not manager.exists("absent")
    assert manager.list_files("absent") == {}
    with pytest.raises(CheckpointNotFound, match="checkpoint absent not found in"):
        manager.download("absent", tmp_path / "x")
    with pytest.raises(CheckpointNotFound), manager.restore_path("absent"):
        pass
    with pytest.raises(CheckpointNotFound):
        manager.iter_file_chunks("absent")


def test_delete_by_globs_then_all_then_again(manager: StorageManager, tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_files(local, FILES)
    manager.upload(local, "ckpt-4")
    remaining = manager.delete("ckpt-4", ["**/*.bin", "logs"])
    assert remaining == {"metadata.json": len(FILES["metadata.json"]), "model/empty.txt": 0}
    assert manager.list_files("ckpt-4") == remaining
    assert manager.delete("ckpt-4", ["no-match-*"]) == remaining
    assert manager.delete("ckpt-4") == {}
    assert not manager.exists("ckpt-4")
    # Idempotent: what is gone stays gone, without an error.
    assert manager.delete("ckpt-4") == {}
    assert manager.delete("ckpt-4", ["*.json"]) == {}
    assert manager.delete("never-existed") == {}


def test_chunks_round_trip_through_write_chunks(manager: StorageManager, tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_files(local, FILES)
    manager.upload(local, "ckpt-5")
    chunks = list(manager.iter_file_chunks("ckpt-5", chunk_size=1024 * 1024))
    big = [chunk for chunk in chunks if chunk.path == "model/weights.bin"]
    assert [chunk.offset for chunk in big] == [0, 1024 * 1024, 2 * 1024 * 1024]
    assert [chunk.eof for chunk in big] == [False, False, True]
    assert big[0].mode != 0 and big[1].mode == 0
    empty = [chunk for chunk in chunks if chunk.path == "model/empty.txt"]
    assert len(empty) == 1 and empty[0].eof and empty[0].data == b""
    assert manager.write_chunks("ckpt-6", chunks) == sizes(FILES)
    with manager.restore_path("ckpt-6") as restored:
        assert read_files(restored) == FILES


def test_out_of_order_chunk_stream_changes_nothing(manager: StorageManager) -> None:
    chunks = [
        FileChunk("complete.txt", 0, b"whole", eof=True),
        FileChunk("gap.bin", 0, b"abc"),
        FileChunk("gap.bin", 5, b"def", eof=True),
    ]
    with pytest.raises(ChunkStreamError, match=r"file\.offset: 5 for gap\.bin, expected 3"):
        manager.write_chunks("ckpt-7", chunks)
    assert not manager.exists("ckpt-7")
    with pytest.raises(
        ChunkStreamError, match=r"file\.eof: the stream ended before the last chunk of open\.bin"
    ):
        manager.write_chunks("ckpt-7", [FileChunk("open.bin", 0, b"x")])
    assert not manager.exists("ckpt-7")


def test_uploads_to_one_checkpoint_add_up(manager: StorageManager) -> None:
    """Sharded uploads: each rank sends its own files to the same checkpoint."""
    manager.write_chunks("ckpt-8", [FileChunk("rank0.pt", 0, b"0", eof=True)])
    manager.write_chunks("ckpt-8", [FileChunk("rank1.pt", 0, b"11", eof=True)])
    assert manager.list_files("ckpt-8") == {"rank0.pt": 1, "rank1.pt": 2}


def test_check_writable_leaves_no_probe_behind(storage_section: dict[str, Any]) -> None:
    storage_manager_from_config(storage_section).check_writable()
    if storage_section["type"] == "s3":
        listed = s3_client(storage_section).list_objects_v2(Bucket=storage_section["bucket"])
        assert listed.get("KeyCount", 0) == 0
    else:
        root = Path(storage_section.get("host_path") or storage_section["container_path"])
        assert [path.name for path in root.rglob("*") if path.is_file()] == []


def test_filesystem_check_creates_the_storage_path(tmp_path: Path) -> None:
    manager = storage_manager_from_config(
        {"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "new/dir"}
    )
    manager.check_writable()
    assert (tmp_path / "new" / "dir").is_dir()
    assert list((tmp_path / "new" / "dir").iterdir()) == []


def test_filesystem_check_reports_an_unwritable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    manager = storage_manager_from_config({"type": "directory", "container_path": str(blocker)})
    with pytest.raises(StorageError, match="not writable"):
        manager.check_writable()


def test_filesystem_delete_refuses_a_missing_root(tmp_path: Path) -> None:
    """A missing host_path looks like an unmounted share: reporting "deleted" would leak files."""
    manager = storage_manager_from_config({"type": "shared_fs", "host_path": str(tmp_path / "unmounted")})
    with pytest.raises(
        StorageError, match=r"^checkpoint_storage\.host_path: .* does not exist \(not mounted\?\)"
    ):
        manager.delete("ckpt")


def test_filesystem_layout_matches_determined(tmp_path: Path) -> None:
    manager = storage_manager_from_config(
        {"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "sp"}
    )
    manager.write_chunks("abc-123", [FileChunk("a/b.txt", 0, b"hi", mode=0o755, eof=True)])
    stored = tmp_path / "sp" / "abc-123" / "a" / "b.txt"
    assert stored.read_bytes() == b"hi"
    assert stored.stat().st_mode & 0o777 == 0o755


def test_s3_keys_are_prefix_uuid_path(s3_section: dict[str, Any]) -> None:
    manager = storage_manager_from_config(s3_section)
    manager.write_chunks("abc-123", [FileChunk("a/b.txt", 0, b"hi", eof=True)])
    listed = s3_client(s3_section).list_objects_v2(Bucket=s3_section["bucket"])
    assert [item["Key"] for item in listed.get("Contents", [])] == ["experiments/ckpts/abc-123/a/b.txt"]


def test_s3_missing_bucket_is_an_error_not_a_deletion(s3_section: dict[str, Any]) -> None:
    manager = storage_manager_from_config({**s3_section, "bucket": "no-such-bucket-here"})
    with pytest.raises(
        StorageError, match=r"^checkpoint_storage\.bucket: bucket 'no-such-bucket-here' does not"
    ):
        manager.delete("ckpt")
    with pytest.raises(
        StorageError, match=r"^checkpoint_storage\.bucket: bucket 'no-such-bucket-here' does not"
    ):
        manager.check_writable()


def test_config_errors_come_before_any_io() -> None:
    with pytest.raises(StorageConfigError):
        storage_manager_from_config({"type": "s3", "prefix": "x"})
