"""TensorBoards: tasks that show the TensorBoard files of experiments or trials. The launch names
the experiments or trials (checked to exist, at most MAX_IDS of each); the task's entrypoint is
Cairn's launcher (cairn.tensorboard_server, in the task environment), which syncs the trials'
files from their experiments' checkpoint storage (Determined's layout, cairn.tensorboard.layout)
and serves TensorBoard on the task's service port under /proxy/{task_id}/, through the master.

Which trials it shows is decided when each allocation starts (tensorboard_sources.py).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cairn.storage.errors import StorageError
from cairn.tensorboard.layout import section_below
from services.common.principal import Principal
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument, NotFound
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads.experiments import GONE
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.task_kinds.tensorboard_sources import SOURCES_KEY
from services.master.domain.tasks import tasks
from services.master.store import models

TENSORBOARD_ENTRYPOINT = ["python", "-m", "cairn.tensorboard_server"]
# Determined's limit on ids per request.
MAX_IDS = 100


def _ids(values: list[int], field: str) -> list[int]:
    if len(values) > MAX_IDS:
        raise InvalidArgument(f"{field}: {len(values)} ids; at most {MAX_IDS} per TensorBoard")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidArgument(f"{field}: {value!r} is not an id")
    return sorted(set(values))


def _check_storage(exp: models.Experiment, field: str) -> None:
    storage = (exp.config or {}).get("checkpoint_storage") or {}
    try:
        section_below(storage, "tensorboard")
    except (ValueError, StorageError) as exc:
        raise InvalidArgument(
            f"{field}: experiment {exp.id}'s checkpoint_storage holds no TensorBoard files ({exc})"
        ) from None


def _live_experiment(s: Session, experiment_id: int, field: str) -> models.Experiment:
    exp = s.get(models.Experiment, experiment_id)
    if exp is None or exp.state in GONE:
        raise NotFound(f"{field}: experiment {experiment_id} not found")
    _check_storage(exp, field)
    return exp


def check_sources(s: Session, experiment_ids: list[int], trial_ids: list[int]) -> None:
    """Every named experiment and trial exists (and its experiment is not being deleted)."""
    if not experiment_ids and not trial_ids:
        raise InvalidArgument("experiment_ids: name experiments or trial_ids to show in TensorBoard")
    for experiment_id in experiment_ids:
        _live_experiment(s, experiment_id, "experiment_ids")
    if trial_ids:
        rows = s.execute(
            select(models.Trial.id, models.Trial.experiment_id).where(models.Trial.id.in_(trial_ids))
        )
        found = {int(trial_id): int(experiment_id) for trial_id, experiment_id in rows}
        missing = [trial_id for trial_id in trial_ids if trial_id not in found]
        if missing:
            raise NotFound(f"trial_ids: trial {missing[0]} not found")
        for experiment_id in sorted(set(found.values())):
            _live_experiment(s, experiment_id, "trial_ids")


def _description(experiment_ids: list[int], trial_ids: list[int]) -> str:
    if experiment_ids:
        return f"TensorBoard (Experiment {', '.join(str(i) for i in experiment_ids[:10])})"
    return f"TensorBoard (Trial {', '.join(str(i) for i in trial_ids[:10])})"


def tensorboard_config(
    config: dict[str, Any], experiment_ids: list[int], trial_ids: list[int]
) -> dict[str, Any]:
    """The config a TensorBoard runs with: the user's, with Cairn's entrypoint, no slot unless the
    user asked for some, and what it shows."""
    if "entrypoint" in config and config["entrypoint"] not in (None, TENSORBOARD_ENTRYPOINT):
        raise InvalidArgument(
            "config.entrypoint: a TensorBoard runs TensorBoard; its entrypoint cannot be set"
        )
    result = dict(config)
    result["entrypoint"] = list(TENSORBOARD_ENTRYPOINT)
    resources = result.get("resources")
    resources = dict(resources) if isinstance(resources, dict) else {}
    resources.setdefault("slots", 0)
    result["resources"] = resources
    if not result.get("description"):
        result["description"] = _description(experiment_ids, trial_ids)
    result[SOURCES_KEY] = {"experiment_ids": experiment_ids, "trial_ids": trial_ids}
    return result


def start(
    ctx: MasterContext,
    principal: Principal,
    experiment_ids: list[int],
    trial_ids: list[int],
    config: dict[str, Any],
    files: list[ContextFile],
    workspace_id: int | None,
) -> str:
    """A new TensorBoard task; its id."""
    experiment_ids = _ids(experiment_ids, "experiment_ids")
    trial_ids = _ids(trial_ids, "trial_ids")
    with ctx.db.read() as s:
        check_sources(s, experiment_ids, trial_ids)
    return tasks.create(
        ctx,
        principal,
        tasks.TaskRequest(
            kind=TaskKind.TENSORBOARD,
            config=tensorboard_config(config, experiment_ids, trial_ids),
            files=files,
            workspace_id=workspace_id,
        ),
    )
