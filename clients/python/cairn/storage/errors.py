"""Errors of the storage library. Messages go to users as they are, so each names what is wrong:
the config field, the checkpoint, the file."""

from __future__ import annotations


class StorageError(Exception):
    """A storage operation failed (the backend refused, the disk is full, the bucket is gone)."""


class StorageConfigError(StorageError):
    """A `checkpoint_storage` section is invalid; the message starts with the field's path."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class UnsafePathError(StorageError):
    """A path would reach outside a checkpoint: absolute, with "..", or through a symlink."""


class CheckpointNotFound(StorageError):
    """The checkpoint has no files in storage."""

    def __init__(self, checkpoint_uuid: str, where: str) -> None:
        super().__init__(f"checkpoint {checkpoint_uuid} not found in {where}")
        self.checkpoint_uuid = checkpoint_uuid


class ChunkStreamError(StorageError):
    """A stream of file chunks is out of order: a gap, an overlap, a chunk after the file's end."""
