"""The model registry: version numbering, Determined's name rules, refused requests that change
nothing, and registered checkpoints that garbage collection and deletion leave alone (with the
checkpoint service's own GC and deletion code in process, on a real directory)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from cairn.storage import storage_manager_from_config
from services.common.principal import Principal
from services.master.domain.checkpoints import checkpoints, model_registry
from services.master.domain.checkpoints.deletion_fence import CHECKPOINT_DELETIONS
from services.master.domain.deletion import workspace_deletion
from services.master.domain.experiments import experiment_projects, experiments
from services.master.domain.kernel.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from services.master.domain.reads import models as reads
from services.master.domain.workspaces import workspaces
from services.master.store import models
from tests.unit.master.domain.harness import InProcessCheckpoints, Master

# On each database: version numbers taken in SQL; a registration against a deletion under way (row locks).
pytestmark = pytest.mark.on_each_database


class Trial:
    """A running one-trial experiment whose checkpoints have real files."""

    def __init__(self, master: Master, storage_dir: Path) -> None:
        self.master = master
        self.storage = {"type": "shared_fs", "host_path": str(storage_dir)}
        master.add_agent("a1")
        self.experiment_id = master.create(checkpoint_storage=self.storage)
        (trial,) = master.trials(self.experiment_id)
        self.trial_id = trial.id
        self.allocation_id = master.live(trial.id).id
        (self.container,) = master.run_containers(self.allocation_id)
        self.files = storage_manager_from_config(self.storage)

    def checkpoint(self, steps: int) -> str:
        checkpoint_uuid = str(uuid.uuid4())
        with self.files.store_path(checkpoint_uuid) as path:
            (path / "state").write_text(str(steps))
        checkpoints.report(
            self.master.ctx,
            self.master.admin,
            checkpoints.ReportedCheckpoint(
                uuid=checkpoint_uuid,
                allocation_id=self.allocation_id,
                resources={"state": len(str(steps))},
                metadata={"steps_completed": steps},
            ),
        )
        return checkpoint_uuid

    def complete(self) -> None:
        self.master.report(self.trial_id, 1, "validation", 10, 1, loss=0.5)
        self.master.exit(self.container, 0)
        assert self.master.experiment(self.experiment_id).state == "COMPLETED"

    def kept(self, checkpoint_uuid: str) -> bool:
        """Row and files both there (the rule: a row is DELETED only after its files went)."""
        with self.master.db.read() as s:
            found = s.get(models.Checkpoint, checkpoint_uuid)
        row = found is not None and found.state != "DELETED"
        return row and self.files.exists(checkpoint_uuid)


@pytest.fixture
def trial(master: Master, tmp_path: Path) -> Trial:
    return Trial(master, tmp_path / "storage")


@pytest.fixture
def user(master: Master) -> Principal:
    """The built-in non-admin user."""
    with master.db.read() as s:
        found = s.scalar(select(models.User).where(models.User.username == "determined"))
    assert found is not None
    return Principal(user_id=found.id, username=found.username)


def create(master: Master, principal: Principal, name: str, **fields: Any) -> int:
    with master.ctx.unit_of_work() as w:
        return model_registry.create_model(
            master.ctx, w, principal, model_registry.NewModel(name=name, **fields)
        )


def register(master: Master, principal: Principal, model: str, checkpoint_uuid: str) -> int:
    _, number = model_registry.register_version(
        master.ctx, principal, model, model_registry.NewVersion(checkpoint_uuid=checkpoint_uuid)
    )
    return number


def versions(master: Master, model: str) -> list[tuple[int, str]]:
    with master.db.read() as s:
        _, rows, _ = reads.versions_page(s, model)
    return [(r.version.version, r.checkpoint.checkpoint.uuid) for r in rows]


def snapshot(master: Master) -> list[tuple[Any, ...]]:
    """Every registry row, as stored."""
    with master.db.read() as s:
        found: list[tuple[Any, ...]] = [
            (m.id, m.name, m.description, m.metadata_, m.labels, m.notes, m.archived, m.workspace_id)
            for m in s.scalars(select(models.RegisteredModel).order_by(models.RegisteredModel.id))
        ]
        found += [
            (v.model_id, v.version, v.checkpoint_uuid, v.name, v.labels)
            for v in s.scalars(select(models.ModelVersion).order_by(models.ModelVersion.id))
        ]
        return found


def test_versions_are_numbered_per_model_and_need_a_completed_checkpoint(
    master: Master, trial: Trial, user: Principal
) -> None:
    first, second = trial.checkpoint(2), trial.checkpoint(4)
    model_id = create(master, user, "mnist cnn", labels=["a", "b", "a"], metadata={"k": [1, 2]})
    create(master, user, "other")

    assert register(master, user, "mnist cnn", first) == 1
    assert register(master, user, str(model_id), second) == 2  # by id, as the CLI's --json sends it
    assert register(master, user, "other", first) == 1  # one checkpoint, two models
    assert versions(master, "mnist cnn") == [(1, first), (2, second)]

    with master.db.read() as s:
        row = reads.model(s, "mnist cnn")
        assert (row.num_versions, row.username, row.model.labels) == (2, "determined", ["a", "b"])
        assert reads.labels(s) == ["a", "b"]
        listed, page = reads.models_page(s, reads.ModelQuery(sort_by="num_versions", descending=True))
        assert [r.model.name for r in listed] == ["mnist cnn", "other"] and page.total == 2
        by_label, _ = reads.models_page(s, reads.ModelQuery(labels=["b", "a"], name="CNN"))
        assert [r.model.name for r in by_label] == ["mnist cnn"]
        last, page = reads.models_page(s, reads.ModelQuery(sort_by="name", offset=-1, limit=1))
        assert [r.model.name for r in last] == ["other"] and (page.start, page.end, page.total) == (1, 2, 2)

    # Determined's numbering: one above the highest that exists.
    with master.ctx.unit_of_work() as w:
        model_registry.delete_version(master.ctx, w, user, "mnist cnn", 1)
    assert register(master, user, "mnist cnn", first) == 3

    # Only a COMPLETED checkpoint that exists.
    before = snapshot(master)
    with pytest.raises(NotFound, match="checkpoint_uuid: checkpoint nope not found"):
        register(master, user, "mnist cnn", "nope")
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.Checkpoint, second).state = "PARTIALLY_DELETED"
    with pytest.raises(FailedPrecondition, match="only a COMPLETED checkpoint"):
        register(master, user, "other", second)
    assert snapshot(master) == before


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        ("   ", InvalidArgument, "cannot be blank"),
        ("two  spaces", InvalidArgument, "excessive spacing"),
        ("a/b", InvalidArgument, "slashes"),
        ("a\\b", InvalidArgument, "slashes"),
        ("12345", InvalidArgument, "only numbers"),
        ("tab\there", InvalidArgument, "control characters"),
        ("x" * 256, InvalidArgument, "at most 255"),
        ("MNIST", AlreadyExists, "already exists"),
    ],
)
def test_model_names_follow_determineds_rules(
    master: Master, user: Principal, name: str, error: type[Exception], message: str
) -> None:
    create(master, user, "mnist")
    create(master, user, "other")
    before = snapshot(master)
    with pytest.raises(error, match=message):
        create(master, user, name)
    with pytest.raises(error, match=message), master.ctx.unit_of_work() as w:
        model_registry.patch_model(master.ctx, w, user, "other", model_registry.ModelEdit(name=name))
    assert snapshot(master) == before


def test_refused_requests_change_nothing(master: Master, trial: Trial, user: Principal) -> None:
    ck = trial.checkpoint(2)
    create(master, master.admin, "admins", description="d")
    create(master, user, "mine")
    register(master, user, "mine", ck)
    before = snapshot(master)

    def patch(who: Principal, identifier: str, **fields: Any) -> None:
        with master.ctx.unit_of_work() as w:
            model_registry.patch_model(master.ctx, w, who, identifier, model_registry.ModelEdit(**fields))

    # Another user's model: every change refused, with the reason.
    with pytest.raises(PermissionDenied, match="belongs to another user"):
        patch(user, "admins", description="mine now")
    with pytest.raises(PermissionDenied), master.ctx.unit_of_work() as w:
        model_registry.delete_model(master.ctx, w, user, "admins")
    with pytest.raises(PermissionDenied), master.ctx.unit_of_work() as w:
        model_registry.set_archived(master.ctx, w, user, "admins", True)
    with pytest.raises(PermissionDenied):
        register(master, user, "admins", ck)
    # Bad fields: refused whole, even beside good ones.
    with pytest.raises(InvalidArgument, match=r"labels\[1\]: must be a non-empty string"):
        patch(user, "mine", description="changed", labels=["ok", 3])
    with pytest.raises(InvalidArgument, match="metadata: NaN"):
        patch(user, "mine", description="changed", metadata={"x": float("nan")})
    with pytest.raises(InvalidArgument, match="metadata: at most"):
        patch(user, "mine", metadata={"x": "y" * model_registry.MAX_METADATA_BYTES})
    with pytest.raises(NotFound, match="workspace_name: workspace 'nowhere' not found"):
        patch(user, "mine", description="changed", workspace_name="nowhere")
    with pytest.raises(NotFound, match="model 'missing' not found"):
        patch(user, "missing", description="x")
    assert snapshot(master) == before

    # An archived model takes no edits and no versions until it is unarchived.
    with master.ctx.unit_of_work() as w:
        model_registry.set_archived(master.ctx, w, user, "mine", True)
    with pytest.raises(FailedPrecondition, match="'mine' is archived"):
        patch(user, "mine", description="changed")
    with pytest.raises(FailedPrecondition, match="'mine' is archived"):
        register(master, user, "mine", ck)
    with master.ctx.unit_of_work() as w:
        model_registry.set_archived(master.ctx, w, master.admin, "mine", False)
    assert snapshot(master) == before

    # The owner and an admin may.
    patch(user, "mine", name="renamed", labels=["x"], metadata={"a": 1})
    patch(master.admin, "renamed", notes="by an admin")
    with master.db.read() as s:
        row = reads.model(s, "renamed").model
    assert (row.labels, row.metadata_, row.notes) == (["x"], {"a": 1}, "by an admin")


def test_gc_keeps_registered_checkpoints_and_deletion_is_refused(
    master: Master, trial: Trial, user: Principal
) -> None:
    at_2, at_4, at_6 = trial.checkpoint(2), trial.checkpoint(4), trial.checkpoint(6)
    create(master, master.admin, "keep")
    register(master, master.admin, "keep", at_2)
    trial.complete()

    # The policy (trial latest 1, no metric at these steps) lets 2 and 4 go; 2 is registered.
    assert master.run_deferred() == 1  # the GC its end owed
    assert master.experiment(trial.experiment_id).checkpoint_gc_done
    assert [trial.kept(ck) for ck in (at_2, at_4, at_6)] == [True, False, True]

    # Deleting a registered checkpoint, or its experiment, is refused naming the version.
    client = InProcessCheckpoints()
    with pytest.raises(FailedPrecondition, match=f"checkpoint {at_2} is model 'keep' version 1"):
        checkpoints.delete(master.ctx, client, master.admin, [at_6, at_2])
    assert trial.kept(at_6) and trial.kept(at_2)  # all of the request refused
    refused = "'keep' version 1; delete those model versions first"
    with pytest.raises(FailedPrecondition, match=refused), master.ctx.unit_of_work() as w:
        experiments.mark_deleting(master.ctx, w, experiments.load(w, trial.experiment_id))
    # ... and so is deleting the project or workspace that holds the experiment.
    with master.ctx.unit_of_work() as w:
        settings = workspaces.WorkspaceSettings()
        workspace_id = workspaces.create_workspace(master.ctx, w, master.admin, "w", settings)
        project_id = workspaces.create_project(w, master.admin, workspace_id, "p", None, None)
        experiment_projects.move_experiment(master.ctx, w, master.admin, trial.experiment_id, project_id)
    with pytest.raises(FailedPrecondition, match=refused):
        workspace_deletion.delete_project(master.ctx, master.admin, project_id)
    with pytest.raises(FailedPrecondition, match=refused):
        workspace_deletion.delete_workspace(master.ctx, master.admin, workspace_id)
    assert master.experiment(trial.experiment_id).state == "COMPLETED"

    # Once the version is gone, so may the checkpoint be.
    with master.ctx.unit_of_work() as w:
        model_registry.delete_version(master.ctx, w, master.admin, "keep", 1)
    checkpoints.delete(master.ctx, client, master.admin, [at_2])
    assert not trial.kept(at_2)


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(model_registry, "DELETION_WAIT_S", 0.3)
    yield


def test_a_registration_waits_for_a_deletion_under_way(
    master: Master, trial: Trial, user: Principal, short_wait: None
) -> None:
    ck = trial.checkpoint(2)
    create(master, user, "m")

    # The deleter holds on for longer than a registration waits: refused, nothing written.
    busy = "being garbage collected or deleted"
    with CHECKPOINT_DELETIONS.deleting([ck]), pytest.raises(FailedPrecondition, match=busy):
        register(master, user, "m", ck)
    assert versions(master, "m") == []

    # The deleter finishes (keeping the checkpoint) while the registration waits: it goes through.
    held = threading.Event()

    def deleter() -> None:
        with CHECKPOINT_DELETIONS.deleting([ck]):
            held.set()
            time.sleep(0.1)

    thread = threading.Thread(target=deleter)
    thread.start()
    held.wait(5)
    assert register(master, user, "m", ck) == 1
    thread.join(5)
    assert versions(master, "m") == [(1, ck)]
