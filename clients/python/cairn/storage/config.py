"""An experiment's `checkpoint_storage` section (a dict, as in Determined's configs) read into typed
settings for one backend. Every error names the field it is about."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.storage.errors import StorageConfigError

SECTION = "checkpoint_storage"

SUPPORTED_TYPES = ("directory", "s3", "shared_fs")
# Types Determined knows that Cairn does not serve yet: named apart so the error says so.
NOT_YET_SUPPORTED_TYPES = ("azure", "gcs")

# GC policy fields exist on every type; the master applies them, the backends ignore them.
GC_FIELDS = frozenset({"save_experiment_best", "save_trial_best", "save_trial_latest"})

_SHARED_FS_FIELDS = frozenset(
    {"host_path", "storage_path", "checkpoint_path", "tensorboard_path", "container_path", "propagation"}
)
_DIRECTORY_FIELDS = frozenset({"container_path"})
_S3_FIELDS = frozenset({"bucket", "prefix", "endpoint_url", "access_key", "secret_key"})


@dataclass(frozen=True)
class FilesystemStorageConfig:
    """shared_fs and directory: checkpoints are directories `<base_dir>/<uuid>/`.

    `root` is the directory the user named (host_path or container_path). It must exist before a
    deletion counts as done: a missing root looks the same as an unmounted share.
    """

    type: str
    root: str
    base_dir: str


@dataclass(frozen=True)
class S3StorageConfig:
    bucket: str
    # Normalized: no leading or trailing "/", "" when there is none.
    prefix: str = ""
    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)


StorageConfig = FilesystemStorageConfig | S3StorageConfig


def _field(name: str) -> str:
    return f"{SECTION}.{name}"


def _optional_str(section: Mapping[str, Any], name: str) -> str | None:
    value = section.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise StorageConfigError(_field(name), f"must be a string, not {type(value).__name__}")
    return value


def _required_str(section: Mapping[str, Any], name: str, storage_type: str) -> str:
    value = _optional_str(section, name)
    if not value:
        raise StorageConfigError(_field(name), f"required for type {storage_type}")
    return value


def _absolute_dir(section: Mapping[str, Any], name: str, storage_type: str) -> str:
    value = _required_str(section, name, storage_type)
    if not posixpath.isabs(value):
        raise StorageConfigError(_field(name), f"must be an absolute path, not {value!r}")
    return posixpath.normpath(value)


def _check_gc_fields(section: Mapping[str, Any]) -> None:
    for name in sorted(GC_FIELDS & section.keys()):
        value = section[name]
        if value is None:
            continue
        # Values that crossed a protobuf Struct arrive as floats.
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise StorageConfigError(_field(name), f"must be an integer, not {value!r}")
        if value < 0:
            raise StorageConfigError(_field(name), f"must be >= 0, not {value!r}")


def _check_known_fields(section: Mapping[str, Any], storage_type: str, known: frozenset[str]) -> None:
    allowed = known | GC_FIELDS | {"type"}
    for name in sorted(section.keys()):
        if name not in allowed:
            raise StorageConfigError(
                _field(str(name)),
                f"unknown field for type {storage_type} (known: {', '.join(sorted(allowed))})",
            )


def _shared_fs(section: Mapping[str, Any]) -> FilesystemStorageConfig:
    host_path = _absolute_dir(section, "host_path", "shared_fs")
    storage_path = _optional_str(section, "storage_path")
    name = "storage_path"
    if storage_path is None:
        # Before storage_path existed, Determined configs named the subdirectory checkpoint_path.
        storage_path = _optional_str(section, "checkpoint_path")
        name = "checkpoint_path"
    if not storage_path:
        return FilesystemStorageConfig(type="shared_fs", root=host_path, base_dir=host_path)
    # join() keeps an absolute storage_path as is; either way it must land under host_path.
    base_dir = posixpath.normpath(posixpath.join(host_path, storage_path))
    if posixpath.commonpath([base_dir, host_path]) != host_path:
        raise StorageConfigError(
            _field(name), f"must be a relative path or a subdirectory of host_path ({host_path})"
        )
    return FilesystemStorageConfig(type="shared_fs", root=host_path, base_dir=base_dir)


def _directory(section: Mapping[str, Any]) -> FilesystemStorageConfig:
    container_path = _absolute_dir(section, "container_path", "directory")
    return FilesystemStorageConfig(type="directory", root=container_path, base_dir=container_path)


def _s3(section: Mapping[str, Any]) -> S3StorageConfig:
    bucket = _required_str(section, "bucket", "s3")
    prefix = (_optional_str(section, "prefix") or "").strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise StorageConfigError(_field("prefix"), f"must not contain empty, '.' or '..' parts: {prefix!r}")
    access_key = _optional_str(section, "access_key") or None
    secret_key = _optional_str(section, "secret_key") or None
    if access_key and not secret_key:
        raise StorageConfigError(_field("secret_key"), "required when access_key is set")
    if secret_key and not access_key:
        raise StorageConfigError(_field("access_key"), "required when secret_key is set")
    return S3StorageConfig(
        bucket=bucket,
        prefix=prefix,
        endpoint_url=_optional_str(section, "endpoint_url") or None,
        access_key=access_key,
        secret_key=secret_key,
    )


_PARSERS: dict[str, tuple[frozenset[str], Callable[[Mapping[str, Any]], StorageConfig]]] = {
    "shared_fs": (_SHARED_FS_FIELDS, _shared_fs),
    "directory": (_DIRECTORY_FIELDS, _directory),
    "s3": (_S3_FIELDS, _s3),
}


def parse_storage_config(section: Mapping[str, Any] | None) -> StorageConfig:
    """Read a `checkpoint_storage` section; raises StorageConfigError naming the bad field."""
    if not isinstance(section, Mapping):
        raise StorageConfigError(SECTION, "required: a mapping with a `type` field")
    storage_type = section.get("type")
    if storage_type is None or storage_type == "":
        raise StorageConfigError(_field("type"), f"required (one of {', '.join(SUPPORTED_TYPES)})")
    if storage_type in NOT_YET_SUPPORTED_TYPES:
        raise StorageConfigError(
            _field("type"),
            f"{storage_type} is not supported by Cairn yet (supported: {', '.join(SUPPORTED_TYPES)})",
        )
    if not isinstance(storage_type, str) or storage_type not in _PARSERS:
        raise StorageConfigError(
            _field("type"), f"unknown type {storage_type!r} (supported: {', '.join(SUPPORTED_TYPES)})"
        )
    known, parse = _PARSERS[storage_type]
    _check_known_fields(section, storage_type, known)
    _check_gc_fields(section)
    return parse(section)
