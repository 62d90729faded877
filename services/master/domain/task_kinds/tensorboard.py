"""TensorBoards: tasks that show the TensorBoard files of experiments or trials. The launch names
the experiments or trials (checked to exist, at most MAX_IDS of each); the task's entrypoint is
Cairn's launcher (cairn.tensorboard_server, in the task environment), which syncs the trials'
files from their experiments' checkpoint storage (Determined's layout, cairn.tensorboard.layout)
and serves TensorBoard on the task's service port under /proxy/{task_id}/, through the master.
It runs on no slot unless the user asks for some.

Which trials it shows is decided when each allocation starts (tensorboard_sources.py).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

import cairn.task_environment as tenv
from cairn.agent.v1 import agent_pb2 as apb
from cairn.storage.errors import StorageError
from cairn.tensorboard.layout import section_below
from services.common.principal import Principal
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import InvalidArgument, NotFound
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads.experiments import GONE
from services.master.domain.reads.tasks import TaskRow
from services.master.domain.task_kinds import tensorboard_sources
from services.master.domain.task_kinds.kind import Arguments, KindDescription, Proxy, proxy_path
from services.master.store import models

TENSORBOARD_ENTRYPOINT = ("python", "-m", "cairn.tensorboard_server")
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


def _check_arguments(s: Session, arguments: Arguments) -> Arguments:
    experiment_ids = _ids(list(arguments.get("experiment_ids") or []), "experiment_ids")
    trial_ids = _ids(list(arguments.get("trial_ids") or []), "trial_ids")
    check_sources(s, experiment_ids, trial_ids)
    return {"experiment_ids": experiment_ids, "trial_ids": trial_ids}


def _description(experiment_ids: list[int], trial_ids: list[int]) -> str:
    if experiment_ids:
        return f"TensorBoard (Experiment {', '.join(str(i) for i in experiment_ids[:10])})"
    return f"TensorBoard (Trial {', '.join(str(i) for i in trial_ids[:10])})"


def _complete_config(config: dict[str, Any], arguments: Arguments) -> None:
    """No slot unless the user asked for some, and what it shows (set by the master only)."""
    experiment_ids, trial_ids = list(arguments["experiment_ids"]), list(arguments["trial_ids"])
    resources = config.get("resources")
    resources = dict(resources) if isinstance(resources, dict) else {}
    resources.setdefault("slots", 0)
    config["resources"] = resources
    if not config.get("description"):
        config["description"] = _description(experiment_ids, trial_ids)
    config[tensorboard_sources.SOURCES_KEY] = {"experiment_ids": experiment_ids, "trial_ids": trial_ids}


def _environment(w: Work, task: models.Task, port: str) -> dict[str, str]:
    sources = tensorboard_sources.sources(w, task)
    return {
        "TENSORBOARD_PORT": port,  # Determined's name for the service port
        tenv.TENSORBOARD_SOURCES: json.dumps(sources, separators=(",", ":")),
    }


def _mounts(w: Work, task: models.Task) -> list[apb.Mount]:
    """Its trials' shared_fs checkpoint storage, read-only, at the host's path (as trials see it)."""
    host_paths = {
        str(source["storage"]["host_path"])
        for source in tensorboard_sources.sources(w, task)
        if source["storage"].get("type") == "shared_fs" and source["storage"].get("host_path")
    }
    return [apb.Mount(host_path=path, container_path=path, read_only=True) for path in sorted(host_paths)]


def _shows(s: Session, principal: Principal, row: TaskRow, secrets: bool) -> dict[str, Any]:
    experiment_ids, trial_ids = tensorboard_sources.shown_ids(row.task.config)
    return {
        "service_address": proxy_path(row.task.id),
        "experiment_ids": experiment_ids,
        "trial_ids": trial_ids,
    }


TENSORBOARD = KindDescription(
    kind=TaskKind.TENSORBOARD,
    launcher=TENSORBOARD_ENTRYPOINT,
    runs="a TensorBoard runs TensorBoard",
    check_arguments=_check_arguments,
    complete_config=_complete_config,
    proxy=Proxy.HTTP,
    environment=_environment,
    mounts=_mounts,
    shows=_shows,
)
