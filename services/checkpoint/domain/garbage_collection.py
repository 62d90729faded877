"""Applying an experiment's GC policy: decide (pure) what goes, then delete its files."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from cairn.storage import StorageManager
from services.checkpoint.domain.deletion import DeletionResult, delete_checkpoints
from services.checkpoint.domain.gc_policy import GcCandidate, GcPolicy, decide_garbage
from services.common.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class GcOutcome:
    kept: tuple[str, ...]
    # One result per checkpoint the policy let go; a failed one keeps its files and its error.
    deleted: tuple[DeletionResult, ...]


def collect_garbage(
    manager: StorageManager,
    candidates: Sequence[GcCandidate],
    policy: GcPolicy,
    protected_uuids: Collection[str] = (),
) -> GcOutcome:
    """Idempotent: running it again deletes nothing new and reports the same checkpoints gone."""
    decision = decide_garbage(candidates, policy, protected_uuids)
    results = delete_checkpoints(manager, decision.delete)
    failed = sum(1 for result in results if result.error)
    log.info(
        "garbage collected",
        storage=manager.description,
        candidates=len(candidates),
        kept=len(decision.keep),
        deleted=len(results) - failed,
        failed=failed,
    )
    return GcOutcome(kept=decision.keep, deleted=tuple(results))
