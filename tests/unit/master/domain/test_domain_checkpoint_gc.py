"""Checkpoint GC as Determined keeps checkpoints (its e2e test_gc_checkpoints_lfs and fixtures
gc_checkpoints_decreasing/increasing.yaml): validate and checkpoint every 100 batches to 1000 with
save_experiment_best 3 and save_trial_latest 2 (save_trial_best 1 by default). What goes is marked
DELETED, its row kept as Determined keeps it, and its files gone; deleting a deleted checkpoint
again changes nothing."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from cairn.storage import storage_manager_from_config
from services.master.domain.checkpoints import checkpoints
from services.master.store import models
from tests.unit.master.domain.harness import Master

EXPECTED = {
    "decreasing": {800, 900, 1000},
    "increasing": {100, 200, 300, 900, 1000},
}


@pytest.mark.parametrize("progression", sorted(EXPECTED))
def test_gc_keeps_what_determined_keeps_and_marks_the_rest_deleted(
    master: Master, tmp_path: Path, progression: str
) -> None:
    storage = {
        "type": "shared_fs",
        "host_path": str(tmp_path),
        "save_experiment_best": 3,
        "save_trial_latest": 2,
    }
    files = storage_manager_from_config(storage)
    master.add_agent("a1")
    experiment_id = master.create(
        checkpoint_storage=storage,
        searcher={"name": "single", "metric": "validation_error", "max_length": {"batches": 1000}},
    )
    (trial,) = master.trials(experiment_id)
    allocation_id = master.live(trial.id).id
    (container,) = master.run_containers(allocation_id)
    by_steps: dict[int, str] = {}
    for seq, steps in enumerate(range(100, 1001, 100), 1):
        error = 1.0 / steps if progression == "decreasing" else float(steps)
        master.report(trial.id, 1, "validation", steps, seq, validation_error=error)
        by_steps[steps] = str(uuid.uuid4())
        with files.store_path(by_steps[steps]) as path:
            (path / "state").write_text(str(steps))
        checkpoints.report(
            master.ctx,
            master.admin,
            checkpoints.ReportedCheckpoint(
                uuid=by_steps[steps],
                allocation_id=allocation_id,
                resources={"state": len(str(steps))},
                metadata={"steps_completed": steps},
            ),
        )
    master.exit(container, 0)
    master.run_deferred()

    with master.db.read() as s:
        states = {
            int(ck.steps_completed): ck.state
            for ck in s.scalars(select(models.Checkpoint).where(models.Checkpoint.trial_id == trial.id))
        }
    kept = EXPECTED[progression]
    assert states == {steps: "COMPLETED" if steps in kept else "DELETED" for steps in range(100, 1001, 100)}
    assert {steps for steps, u in by_steps.items() if files.exists(u)} == kept

    # A deleted checkpoint deleted again (as Determined's core_api fixture does): nothing changes.
    deleted = [u for steps, u in by_steps.items() if steps not in kept]
    checkpoints.delete(master.ctx, master.checkpoints, master.admin, deleted)
    with master.db.read() as s:
        assert {s.get_one(models.Checkpoint, u).state for u in deleted} == {"DELETED"}
