"""Garbage collection against real storage: files go by policy, and running it again is harmless."""

from __future__ import annotations

from typing import Any

from cairn.storage import FileChunk, StorageManager, storage_manager_from_config
from services.checkpoint.domain.deletion import DeletionResult, delete_checkpoints
from services.checkpoint.domain.garbage_collection import collect_garbage
from services.checkpoint.domain.gc_policy import GcCandidate, GcPolicy

CANDIDATES = [
    GcCandidate("c1", trial_id=1, steps_completed=100, searcher_metric=0.5),
    GcCandidate("c2", trial_id=1, steps_completed=200, searcher_metric=0.3),
    GcCandidate("c3", trial_id=1, steps_completed=300, searcher_metric=0.4),
    GcCandidate("c4", trial_id=2, steps_completed=100, searcher_metric=None),
    GcCandidate("c5", trial_id=2, steps_completed=200, searcher_metric=None),
]
POLICY = GcPolicy(save_experiment_best=0, save_trial_best=1, save_trial_latest=1, smaller_is_better=True)


def store_all(manager: StorageManager) -> None:
    for candidate in CANDIDATES:
        manager.write_chunks(
            candidate.checkpoint_uuid,
            [
                FileChunk("metadata.json", 0, b"{}", eof=True),
                FileChunk("state/model.pt", 0, candidate.checkpoint_uuid.encode() * 100, eof=True),
            ],
        )


def test_collect_garbage_deletes_by_policy_and_is_idempotent(storage_section: dict[str, Any]) -> None:
    manager = storage_manager_from_config(storage_section)
    store_all(manager)
    first = collect_garbage(manager, CANDIDATES, POLICY)
    assert first.kept == ("c2", "c3", "c5")
    assert first.deleted == (DeletionResult("c1"), DeletionResult("c4"))
    assert [c.checkpoint_uuid for c in CANDIDATES if manager.exists(c.checkpoint_uuid)] == ["c2", "c3", "c5"]
    # Again, e.g. after the master died before recording the first answer: the same answer.
    second = collect_garbage(manager, CANDIDATES, POLICY)
    assert second == first


def test_collect_garbage_with_files_already_missing(storage_section: dict[str, Any]) -> None:
    manager = storage_manager_from_config(storage_section)
    # Nothing was ever stored (or someone removed it by hand): not an error.
    outcome = collect_garbage(manager, CANDIDATES, POLICY, protected_uuids={"c1"})
    assert outcome.kept == ("c1", "c2", "c3", "c5")
    assert outcome.deleted == (DeletionResult("c4"),)


def test_partly_deleted_checkpoint_is_finished(storage_section: dict[str, Any]) -> None:
    manager = storage_manager_from_config(storage_section)
    store_all(manager)
    assert manager.delete("c1", ["metadata.json"]) == {"state/model.pt": 200}
    outcome = collect_garbage(manager, CANDIDATES, POLICY)
    assert DeletionResult("c1") in outcome.deleted
    assert not manager.exists("c1")


def test_one_failing_checkpoint_does_not_stop_the_others(storage_section: dict[str, Any]) -> None:
    manager = storage_manager_from_config(storage_section)
    store_all(manager)
    results = delete_checkpoints(manager, ["c1", "../escape", "c2", "c1"])
    assert [r.checkpoint_uuid for r in results] == ["c1", "../escape", "c2"]
    assert results[0] == DeletionResult("c1") and results[2] == DeletionResult("c2")
    assert results[1].error.startswith("checkpoint_uuid: '../escape' must be a single path segment")
    assert not manager.exists("c1") and not manager.exists("c2") and manager.exists("c3")
