"""Config templates in the master's domain: what is stored, who may change it, refusals that change
nothing, and experiments created with a template."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from services.common.principal import Principal
from services.master.domain.experiments import creation, templates
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.errors import (
    AlreadyExists,
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads import templates as reads
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks import tasks
from services.master.store import models
from tests.unit.master.domain.harness import Master, config_text

SHARED = {
    "description": "from the template",
    "max_restarts": 7,
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/team-ckpt", "save_trial_best": 2},
    "hyperparameters": {"batch_size": 32, "lr": 0.5},
    "labels": ["team"],
}


def _user(master: Master, username: str = "determined") -> Principal:
    with master.db.read() as s:
        user = s.scalar(select(models.User).where(models.User.username == username))
        assert user is not None
        return Principal(user_id=user.id, username=user.username, admin=user.admin)


def _stored(master: Master) -> dict[str, tuple[dict[str, Any], int, int | None]]:
    with master.db.read() as s:
        return {t.name: (t.config, t.workspace_id, t.user_id) for t in s.scalars(select(models.Template))}


def _in_unit(master: Master, change: Callable[[Any], Any]) -> Any:
    with master.ctx.unit_of_work() as w:
        return change(w)


def _create(master: Master, who: Principal, name: str, config: Any, workspace_id: int = 0) -> None:
    _in_unit(master, lambda w: templates.create(master.ctx, w, who, name, config, workspace_id))


def _experiment_count(master: Master) -> int:
    with master.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(models.Experiment)) or 0)


def _create_experiment(master: Master, template: str | None, **config: Any) -> int:
    created = creation.create(
        master.ctx,
        master.admin,
        creation.CreateRequest(
            config_text=config_text(**config),
            files=[ContextFile(path="train.py", type=ord("0"), content=b"pass\n", mtime=0, mode=0o644)],
            activate=True,
            validate_only=False,
            template=template,
        ),
    )
    assert created.experiment_id is not None
    return created.experiment_id


def test_a_template_is_stored_owned_in_the_default_workspace_and_listed(master: Master) -> None:
    user = _user(master)
    _create(master, user, "team", SHARED)
    _create(master, user, "Beta", {"max_restarts": 1})
    _create(master, master.admin, "alpha", {"debug": True}, workspace_id=1)
    stored = _stored(master)
    assert stored["team"] == (SHARED, 1, user.user_id)
    assert stored["alpha"][2] == master.admin.user_id

    with master.db.read() as s:
        rows, page = reads.templates(s, reads.TemplateFilter())
        assert [r.name for r in rows] == ["Beta", "alpha", "team"]  # by code point, as Determined
        assert (page.total, page.start, page.end) == (3, 0, 3)
        rows, _ = reads.templates(s, reads.TemplateFilter(name_contains="A", descending=True))
        assert [r.name for r in rows] == ["team", "alpha", "Beta"]
        rows, page = reads.templates(s, reads.TemplateFilter(offset=-2, limit=1))
        assert [r.name for r in rows] == ["alpha"] and page.total == 3
        assert reads.templates(s, reads.TemplateFilter(workspace_ids=(2,)))[0] == []
        assert reads.template(s, "team").config == SHARED
        with pytest.raises(NotFound, match=r"^template: no template named 'nope'"):
            reads.template(s, "nope")


@pytest.mark.parametrize(
    ("name", "config", "workspace_id", "error", "message"),
    [
        ("", {}, 0, InvalidArgument, "^name: must not be empty"),
        ("x" * 256, {}, 0, InvalidArgument, "^name: at most 255 characters"),
        ("a/b", {}, 0, InvalidArgument, "^name: must not contain '/'"),
        ("bad", None, 0, InvalidArgument, "^config: required"),
        ("bad", ["max_restarts: 1"], 0, InvalidArgument, "^config: must be a mapping .* not a list"),
        ("bad", {"max_restrats": 1}, 0, InvalidArgument, "^config.max_restrats: unknown field"),
        ("bad", {"searcher": {"name": "grid", "max_trials": "8"}}, 0, InvalidArgument, "^config.searcher"),
        ("bad", {"data": {"x": float("nan")}}, 0, InvalidArgument, "^config: numbers must be finite"),
        (
            "bad",
            {"data": {"blob": "x" * (1024 * 1024)}},
            0,
            InvalidArgument,
            "^config: at most 1048576 bytes",
        ),
        ("bad", {"max_restarts": 1}, 99, NotFound, "^workspace_id: no workspace 99"),
        ("taken", {"max_restarts": 2}, 0, AlreadyExists, "^name: a template named 'taken' already exists"),
    ],
)
def test_refused_creations_change_nothing(
    master: Master, name: str, config: Any, workspace_id: int, error: type[DomainError], message: str
) -> None:
    _create(master, _user(master), "taken", {"max_restarts": 1})
    before = _stored(master)
    with pytest.raises(error, match=message):
        _create(master, _user(master), name, config, workspace_id)
    assert _stored(master) == before


def test_deep_configs_are_refused_before_they_are_walked(master: Master) -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(templates.MAX_CONFIG_DEPTH + 5):
        node["d"] = {}
        node = node["d"]
    with pytest.raises(InvalidArgument, match=r"^config: nests deeper than 32 levels"):
        _create(master, master.admin, "deep", {"data": deep})
    assert _stored(master) == {}


def test_only_the_owner_or_an_admin_changes_a_template(master: Master) -> None:
    owner, admin = _user(master), master.admin
    _create(master, admin, "admins", {"max_restarts": 1})
    _create(master, owner, "mine", {"max_restarts": 1})
    before = _stored(master)
    for change in (
        lambda w: templates.replace_config(master.ctx, w, owner, "admins", {"max_restarts": 9}),
        lambda w: templates.put(master.ctx, w, owner, "admins", {"max_restarts": 9}),
        lambda w: templates.rename(master.ctx, w, owner, "admins", "stolen"),
        lambda w: templates.delete(master.ctx, w, owner, "admins"),
    ):
        with pytest.raises(PermissionDenied, match=r"template 'admins' belongs to another user"):
            _in_unit(master, change)
    assert _stored(master) == before

    _in_unit(master, lambda w: templates.replace_config(master.ctx, w, owner, "mine", {"max_restarts": 3}))
    _in_unit(master, lambda w: templates.replace_config(master.ctx, w, admin, "mine", {"debug": True}))
    assert _stored(master)["mine"] == ({"debug": True}, 1, owner.user_id)  # replaced whole
    _in_unit(master, lambda w: templates.delete(master.ctx, w, admin, "mine"))
    assert set(_stored(master)) == {"admins"}


def test_put_creates_then_replaces_and_cannot_pick_a_workspace(master: Master) -> None:
    user = _user(master)
    _in_unit(master, lambda w: templates.put(master.ctx, w, user, "t", {"max_restarts": 1}))
    _in_unit(master, lambda w: templates.put(master.ctx, w, user, "t", {"max_restarts": 2}))
    assert _stored(master) == {"t": ({"max_restarts": 2}, 1, user.user_id)}
    with pytest.raises(InvalidArgument, match=r"^workspace_id: cannot be set"):
        _in_unit(master, lambda w: templates.put(master.ctx, w, user, "t", {"max_restarts": 3}, 1))
    with pytest.raises(InvalidArgument, match=r"^config.max_restarts: must be an integer"):
        _in_unit(master, lambda w: templates.put(master.ctx, w, user, "t", {"max_restarts": "x"}))
    assert _stored(master) == {"t": ({"max_restarts": 2}, 1, user.user_id)}


def test_rename_moves_the_template_and_refuses_a_taken_name(master: Master) -> None:
    user = _user(master)
    _create(master, user, "old", {"max_restarts": 1})
    _create(master, user, "other", {"max_restarts": 2})
    with pytest.raises(AlreadyExists, match=r"^new_name: a template named 'other' already exists"):
        _in_unit(master, lambda w: templates.rename(master.ctx, w, user, "old", "other"))
    with pytest.raises(InvalidArgument, match=r"^new_name: must not be empty"):
        _in_unit(master, lambda w: templates.rename(master.ctx, w, user, "old", " "))
    with pytest.raises(NotFound, match=r"^template: no template named 'gone'"):
        _in_unit(master, lambda w: templates.rename(master.ctx, w, user, "gone", "new"))
    assert set(_stored(master)) == {"old", "other"}

    renamed = _in_unit(master, lambda w: templates.rename(master.ctx, w, user, "old", "new").name)
    assert renamed == "new"
    assert _stored(master)["new"] == ({"max_restarts": 1}, 1, user.user_id)
    assert set(_stored(master)) == {"new", "other"}


def test_an_experiment_takes_the_templates_fields_where_its_config_is_silent(master: Master) -> None:
    _create(master, master.admin, "team", SHARED)
    experiment_id = _create_experiment(
        master,
        "team",
        max_restarts=1,
        hyperparameters={"lr": 0.1},
        labels=["mine"],
    )
    config = master.experiment(experiment_id).config
    assert config["description"] == "from the template"
    assert config["max_restarts"] == 1  # the experiment's own
    assert config["checkpoint_storage"]["host_path"] == "/tmp/team-ckpt"
    assert config["checkpoint_storage"]["save_trial_best"] == 2
    assert config["hyperparameters"] == {
        "lr": {"type": "const", "val": 0.1},
        "batch_size": {"type": "const", "val": 32},
    }
    assert config["labels"] == ["mine", "team"]
    # The experiment's record keeps what the user wrote, not the merge.
    assert "team-ckpt" not in master.experiment(experiment_id).original_config
    assert len(master.trials(experiment_id)) == 1


def test_experiments_naming_an_unknown_or_unfitting_template_are_refused_whole(master: Master) -> None:
    _create(master, master.admin, "grid", {"searcher": {"name": "grid"}})
    with pytest.raises(NotFound, match=r"^template: no template named 'nope'"):
        _create_experiment(master, "nope")
    # The template's searcher name differs from the config's: only shared fields merge in.
    assert _create_experiment(master, "grid") == 1
    # A template whose fields make the experiment invalid: the merged config is checked whole.
    _create(
        master,
        master.admin,
        "needs-count",
        {"hyperparameters": {"x": {"type": "int", "minval": 1, "maxval": 3}}},
    )
    with pytest.raises(InvalidArgument, match=r"hyperparameters\.x\.count: grid search needs a count"):
        _create_experiment(
            master, "needs-count", searcher={"name": "grid", "metric": "loss", "max_length": {"batches": 1}}
        )
    assert _experiment_count(master) == 1


def test_a_stored_template_that_no_longer_fits_is_refused_by_name(master: Master) -> None:
    # As if written by an older master whose schema knew a key this one does not.
    with master.ctx.unit_of_work() as w:
        now = utcnow()
        w.session.add(
            models.Template(
                name="old", config={"gone_key": 1}, workspace_id=1, created_at=now, updated_at=now
            )
        )
    with pytest.raises(
        InvalidArgument, match=r"^template: template 'old' no longer fits.*gone_key: unknown field"
    ):
        _create_experiment(master, "old")
    assert _experiment_count(master) == 0


def test_a_template_goes_only_to_a_usable_workspace(master: Master) -> None:
    with master.ctx.unit_of_work() as w:
        for name, archived, state in (
            ("open", False, ""),
            ("shelved", True, ""),
            ("going", False, "DELETING"),
        ):
            w.session.add(models.Workspace(name=name, archived=archived, state=state, created_at=utcnow()))
    with master.db.read() as s:
        ids = {ws.name: ws.id for ws in s.scalars(select(models.Workspace))}
    with pytest.raises(FailedPrecondition, match=r"^workspace_id: workspace 'shelved' is archived"):
        _create(master, master.admin, "t", {}, ids["shelved"])
    with pytest.raises(NotFound, match=rf"^workspace_id: no workspace {ids['going']}"):
        _create(master, master.admin, "t", {}, ids["going"])
    assert _stored(master) == {}
    _create(master, master.admin, "t", {}, ids["open"])
    assert _stored(master) == {"t": ({}, ids["open"], master.admin.user_id)}


def test_commands_notebooks_and_shells_take_a_template_under_their_config(master: Master) -> None:
    # TensorBoards launch through the same tasks.create: one path for every kind.
    _create(
        master,
        master.admin,
        "env",
        {
            "environment": {"environment_variables": ["FROM_TEMPLATE=1", "BOTH=template"]},
            "resources": {"priority": 7},
            "description": "templated",
        },
    )
    for kind in (TaskKind.COMMAND, TaskKind.NOTEBOOK, TaskKind.SHELL):
        config: dict[str, Any] = {"environment": {"environment_variables": ["BOTH=config"]}}
        if kind == TaskKind.COMMAND:
            config["entrypoint"] = ["true"]
        request = tasks.TaskRequest(kind=kind, config=config, template_name="env")
        task_id = tasks.create(master.ctx, master.admin, request)
        with master.db.read() as s:
            stored = s.get(models.Task, task_id)
            assert stored is not None
            variables = stored.config["environment"]["environment_variables"]
            # The template's variables first, the config's after (later assignments win).
            assert variables == ["FROM_TEMPLATE=1", "BOTH=template", "BOTH=config"], variables
            assert stored.priority == 7 and stored.description == "templated"
    with pytest.raises(NotFound, match=r"^template: no template named 'nope'"):
        tasks.create(
            master.ctx,
            master.admin,
            tasks.TaskRequest(kind=TaskKind.COMMAND, config={"entrypoint": ["true"]}, template_name="nope"),
        )
