"""Reading `checkpoint_storage` sections: Determined's fields, and errors that name the field."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from cairn.storage import (
    FilesystemStorageConfig,
    S3StorageConfig,
    StorageConfigError,
    StorageError,
    parse_storage_config,
    storage_manager_from_config,
)


def test_shared_fs_without_storage_path_stores_under_host_path() -> None:
    config = parse_storage_config({"type": "shared_fs", "host_path": "/mnt/ckpt"})
    assert config == FilesystemStorageConfig(type="shared_fs", root="/mnt/ckpt", base_dir="/mnt/ckpt")


@pytest.mark.parametrize(
    ("storage_path", "base_dir"),
    [("sub/dir", "/mnt/ckpt/sub/dir"), ("/mnt/ckpt/abs", "/mnt/ckpt/abs"), ("./x/../y", "/mnt/ckpt/y")],
)
def test_shared_fs_storage_path_relative_or_under_host_path(storage_path: str, base_dir: str) -> None:
    config = parse_storage_config(
        {"type": "shared_fs", "host_path": "/mnt/ckpt", "storage_path": storage_path}
    )
    assert isinstance(config, FilesystemStorageConfig)
    assert config.base_dir == base_dir


@pytest.mark.parametrize("storage_path", ["/elsewhere", "../outside", "/mnt/ckpt-sibling"])
def test_shared_fs_storage_path_outside_host_path_is_refused(storage_path: str) -> None:
    with pytest.raises(
        StorageConfigError, match=r"^checkpoint_storage\.storage_path: must be a relative path"
    ):
        parse_storage_config({"type": "shared_fs", "host_path": "/mnt/ckpt", "storage_path": storage_path})


def test_shared_fs_legacy_checkpoint_path_is_the_storage_path() -> None:
    config = parse_storage_config(
        {"type": "shared_fs", "host_path": "/mnt/ckpt", "checkpoint_path": "old", "tensorboard_path": "tb"}
    )
    assert isinstance(config, FilesystemStorageConfig)
    assert config.base_dir == "/mnt/ckpt/old"


def test_shared_fs_needs_an_absolute_host_path() -> None:
    with pytest.raises(StorageConfigError) as missing:
        parse_storage_config({"type": "shared_fs"})
    assert str(missing.value) == "checkpoint_storage.host_path: required for type shared_fs"
    with pytest.raises(StorageConfigError, match=r"^checkpoint_storage\.host_path: must be an absolute path"):
        parse_storage_config({"type": "shared_fs", "host_path": "relative/dir"})


def test_directory_needs_container_path() -> None:
    with pytest.raises(StorageConfigError) as missing:
        parse_storage_config({"type": "directory"})
    assert str(missing.value) == "checkpoint_storage.container_path: required for type directory"
    config = parse_storage_config({"type": "directory", "container_path": "/data/ckpts/"})
    assert config == FilesystemStorageConfig(type="directory", root="/data/ckpts", base_dir="/data/ckpts")


def test_s3_fields() -> None:
    config = parse_storage_config(
        {
            "type": "s3",
            "bucket": "b",
            "prefix": "/team/runs/",
            "endpoint_url": "http://minio:9000",
            "access_key": "ak",
            "secret_key": "sk",
        }
    )
    assert config == S3StorageConfig(
        bucket="b", prefix="team/runs", endpoint_url="http://minio:9000", access_key="ak", secret_key="sk"
    )
    assert "sk" not in repr(config)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"type": "s3"}, "checkpoint_storage.bucket: required for type s3"),
        ({"type": "s3", "bucket": "b", "prefix": "a/../b"}, "checkpoint_storage.prefix: must not contain"),
        ({"type": "s3", "bucket": "b", "access_key": "ak"}, "checkpoint_storage.secret_key: required when"),
        ({"type": "s3", "bucket": 7}, "checkpoint_storage.bucket: must be a string, not int"),
    ],
)
def test_s3_errors_name_the_field(section: dict[str, Any], message: str) -> None:
    with pytest.raises(StorageConfigError, match="^" + message.replace(".", r"\.")):
        parse_storage_config(section)


def test_gc_fields_are_accepted_and_checked() -> None:
    section = {
        "type": "shared_fs",
        "host_path": "/x",
        "save_experiment_best": 2,
        "save_trial_best": 1.0,  # through a protobuf Struct every number is a float
        "save_trial_latest": None,
    }
    assert parse_storage_config(section) == FilesystemStorageConfig("shared_fs", "/x", "/x")
    with pytest.raises(StorageConfigError, match=r"^checkpoint_storage\.save_trial_latest: must be >= 0"):
        parse_storage_config({"type": "shared_fs", "host_path": "/x", "save_trial_latest": -1})
    with pytest.raises(StorageConfigError, match=r"^checkpoint_storage\.save_trial_best: must be an integer"):
        parse_storage_config({"type": "shared_fs", "host_path": "/x", "save_trial_best": 1.5})


@pytest.mark.parametrize("storage_type", ["gcs", "azure"])
def test_gcs_and_azure_are_not_supported_yet(storage_type: str) -> None:
    with pytest.raises(StorageConfigError) as error:
        parse_storage_config({"type": storage_type, "bucket": "b"})
    assert str(error.value) == (
        f"checkpoint_storage.type: {storage_type} is not supported by Cairn yet "
        "(supported: directory, s3, shared_fs)"
    )


def test_unknown_or_missing_type_lists_supported_ones() -> None:
    with pytest.raises(StorageConfigError) as unknown:
        parse_storage_config({"type": "ftp"})
    assert (
        str(unknown.value)
        == "checkpoint_storage.type: unknown type 'ftp' (supported: directory, s3, shared_fs)"
    )
    with pytest.raises(StorageConfigError, match=r"^checkpoint_storage\.type: required \(one of directory"):
        parse_storage_config({"host_path": "/x"})
    with pytest.raises(StorageConfigError, match=r"^checkpoint_storage: required"):
        parse_storage_config(None)


def test_unknown_field_is_named() -> None:
    with pytest.raises(
        StorageConfigError, match=r"^checkpoint_storage\.hostpath: unknown field for type shared_fs"
    ):
        parse_storage_config({"type": "shared_fs", "host_path": "/x", "hostpath": "/y"})


def test_s3_manager_is_built_without_touching_the_network() -> None:
    manager = storage_manager_from_config({"type": "s3", "bucket": "b", "endpoint_url": "http://127.0.0.1:9"})
    assert manager.description == "s3 storage at s3://b/"


def test_s3_without_boto3_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail, as if boto3 were not installed.
    monkeypatch.setitem(sys.modules, "boto3.exceptions", None)
    manager = storage_manager_from_config({"type": "s3", "bucket": "b"})
    with pytest.raises(StorageError, match=r"^checkpoint_storage\.type: s3 storage needs boto3"):
        manager.list_files("ckpt")
