"""Deleting checkpoints' files, one result per checkpoint: one that fails does not stop the rest,
and a checkpoint counts as gone only when storage says nothing of it is left."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cairn.storage import Resources, StorageManager, check_globs
from services.common.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class DeletionResult:
    checkpoint_uuid: str
    # What is left; empty means the checkpoint is gone (when `error` is empty).
    remaining: Resources = field(default_factory=dict)
    # Set when deletion failed; the checkpoint's files may be partly there.
    error: str = ""


def delete_checkpoints(
    manager: StorageManager, checkpoint_uuids: Iterable[str], globs: Sequence[str] = ()
) -> list[DeletionResult]:
    """Delete each checkpoint (only files matching `globs` when given). Deleting what is already
    gone succeeds. Bad globs raise UnsafePathError before anything is deleted."""
    globs = check_globs(globs)
    results: list[DeletionResult] = []
    # A uuid named twice is deleted (and reported) once.
    for checkpoint_uuid in dict.fromkeys(checkpoint_uuids):
        try:
            remaining = manager.delete(checkpoint_uuid, globs)
        except Exception as exc:
            # One checkpoint's failure is its own result; the caller retries it later.
            log.warning(
                "checkpoint deletion failed",
                checkpoint_uuid=checkpoint_uuid,
                storage=manager.description,
                error=str(exc),
                error_type=type(exc).__name__,
            )
            results.append(DeletionResult(checkpoint_uuid, error=str(exc) or type(exc).__name__))
            continue
        log.info(
            "checkpoint deleted" if not remaining else "checkpoint files deleted",
            checkpoint_uuid=checkpoint_uuid,
            storage=manager.description,
            globs=globs or None,
            remaining_files=len(remaining),
        )
        results.append(DeletionResult(checkpoint_uuid, remaining=remaining))
    return results
