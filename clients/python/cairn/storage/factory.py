"""A StorageManager from an experiment's `checkpoint_storage` section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.storage.base import StorageManager
from cairn.storage.config import S3StorageConfig, parse_storage_config
from cairn.storage.filesystem import FilesystemStorageManager


def storage_manager_from_config(section: Mapping[str, Any] | None) -> StorageManager:
    """Raises StorageConfigError (naming the field) when the section is not usable."""
    config = parse_storage_config(section)
    if isinstance(config, S3StorageConfig):
        # Imported here: the s3 backend is the one with optional dependencies.
        from cairn.storage.s3 import S3StorageManager

        return S3StorageManager(config)
    return FilesystemStorageManager(config)
