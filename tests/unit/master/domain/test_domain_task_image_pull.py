"""Image pull settings on tasks (Determined's environment.force_pull_image and registry_auth),
checked at launch as Determined checks them: accepted in Docker's shape on every kind (a
TensorBoard's included), refused naming the field otherwise, with nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import TaskKind
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_models import Trial


def tasks_stored(master: Master) -> int:
    with master.db.read() as s:
        return int(
            s.scalar(select(func.count()).select_from(models.Task).where(models.Task.kind != "TRIAL")) or 0
        )


def test_a_tensorboard_takes_docker_shaped_pull_settings(master: Master, tmp_path: Any) -> None:
    trial = Trial(master, tmp_path / "storage")
    environment = {
        "force_pull_image": True,
        "registry_auth": {"username": "u", "password": "p", "serveraddress": "registry.example"},
    }
    task_id = master.launch(
        TaskKind.TENSORBOARD, {"environment": environment}, experiment_ids=[trial.experiment_id]
    )
    with master.db.read() as s:
        stored = s.get_one(models.Task, task_id).config or {}
    assert stored["environment"]["force_pull_image"] is True
    assert stored["environment"]["registry_auth"]["serveraddress"] == "registry.example"


@pytest.mark.parametrize(
    ("environment", "field"),
    [
        ({"force_pull_image": "yes"}, "config.environment.force_pull_image"),
        ({"registry_auth": "user:pass"}, "config.environment.registry_auth"),
        ({"registry_auth": {"user": "u"}}, "config.environment.registry_auth.user"),
        ({"registry_auth": {"password": 3}}, "config.environment.registry_auth.password"),
    ],
)
def test_bad_pull_settings_are_refused_naming_the_field(
    master: Master, environment: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        master.launch(TaskKind.COMMAND, {"entrypoint": "true", "environment": environment})
    assert tasks_stored(master) == 0
