"""Checkpoint storage: where a checkpoint's files live and how they get there and back.

Built from an experiment's `checkpoint_storage` section (Determined's format) with
`storage_manager_from_config`; backends shared_fs, directory and s3. Used by the checkpoint
service and by trial code through the Core API. Knows nothing of gRPC or of GC policy.
"""

from cairn.storage.base import Resources, StorageManager
from cairn.storage.chunks import DEFAULT_CHUNK_BYTES, ChunkWriter, FileChunk, chunks_of
from cairn.storage.config import (
    NOT_YET_SUPPORTED_TYPES,
    SUPPORTED_TYPES,
    FilesystemStorageConfig,
    S3StorageConfig,
    StorageConfig,
    parse_storage_config,
)
from cairn.storage.errors import (
    CheckpointNotFound,
    ChunkStreamError,
    StorageConfigError,
    StorageError,
    UnsafePathError,
)
from cairn.storage.factory import storage_manager_from_config
from cairn.storage.globs import Selector, check_globs, glob_selector

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "NOT_YET_SUPPORTED_TYPES",
    "SUPPORTED_TYPES",
    "CheckpointNotFound",
    "ChunkStreamError",
    "ChunkWriter",
    "FileChunk",
    "FilesystemStorageConfig",
    "Resources",
    "S3StorageConfig",
    "Selector",
    "StorageConfig",
    "StorageConfigError",
    "StorageError",
    "StorageManager",
    "UnsafePathError",
    "check_globs",
    "chunks_of",
    "glob_selector",
    "parse_storage_config",
    "storage_manager_from_config",
]
