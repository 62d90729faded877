"""Which checkpoint storage a context uses: the experiment's `checkpoint_storage` on a cluster, a
local directory off it, or what the caller passed to `cairn.core.init(checkpoint_storage=...)`."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cairn.task_environment as tenv
from cairn.storage import StorageManager, storage_manager_from_config

log = logging.getLogger(__name__)

LOCAL_DIR_ENV = tenv.LOCAL_CHECKPOINT_DIR

StorageSpec = str | os.PathLike[str] | Mapping[str, Any]


def default_local_dir() -> Path:
    """$CAIRN_LOCAL_CHECKPOINT_DIR, else <XDG data home>/cairn/local-checkpoints."""
    override = os.environ.get(LOCAL_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser().resolve()
    data_home = os.environ.get("XDG_DATA_HOME", "").strip() or os.path.join("~", ".local", "share")
    return (Path(data_home).expanduser() / "cairn" / "local-checkpoints").resolve()


def storage_section(spec: StorageSpec) -> dict[str, Any]:
    """A `checkpoint_storage` section from a path, an `s3://bucket/prefix` address, or a section."""
    if isinstance(spec, Mapping):
        return dict(spec)
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError(
            f"checkpoint_storage: must be a path, an s3:// address or a dict, not {type(spec).__name__}"
        )
    text = os.fspath(spec)
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme.lower() != "s3":
            raise ValueError(
                f"checkpoint_storage: {scheme}:// storage is not supported (use a path, s3://bucket/prefix "
                "or a checkpoint_storage dict)"
            )
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise ValueError(f"checkpoint_storage: {text!r} names no bucket (expected s3://bucket[/prefix])")
        section: dict[str, Any] = {"type": "s3", "bucket": bucket}
        if prefix.strip("/"):
            section["prefix"] = prefix.strip("/")
        return section
    if not text.strip():
        raise ValueError("checkpoint_storage: must not be an empty path")
    return {"type": "shared_fs", "host_path": str(Path(text).expanduser().resolve())}


def local_storage(spec: StorageSpec | None) -> StorageManager:
    section = storage_section(spec if spec is not None else default_local_dir())
    storage = storage_manager_from_config(section)
    log.info("checkpoints are stored in %s", storage.description)
    return storage


def cluster_storage(spec: StorageSpec | None, config: Mapping[str, Any]) -> StorageManager:
    if spec is not None:
        # Determined lets the caller override; the master still garbage-collects and serves
        # downloads from the experiment's own storage, which will not see these checkpoints.
        storage = storage_manager_from_config(storage_section(spec))
        log.warning(
            "checkpoint_storage given to cairn.core.init() overrides the experiment's; the master's "
            "checkpoint GC and downloads will not find checkpoints in %s",
            storage.description,
        )
        return storage
    return storage_manager_from_config(config.get("checkpoint_storage"))
