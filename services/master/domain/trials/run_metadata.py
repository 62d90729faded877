"""A run's metadata (Determined's core.train.set_metadata / get_metadata): a JSON object trial
code or the experiment's owner sets, replacing what was there; anyone may read it. Bounded in size
before it is stored."""

from __future__ import annotations

import json
from typing import Any

from services.common.principal import Principal
from services.master.domain.identity import access, allocation_access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument, NotFound
from services.master.store import models

MAX_METADATA_BYTES = 256 * 1024


def set_metadata(
    ctx: MasterContext, principal: Principal, run_id: int, metadata: dict[str, Any]
) -> dict[str, Any]:
    size = len(json.dumps(metadata, separators=(",", ":")).encode())
    if size > MAX_METADATA_BYTES:
        raise InvalidArgument(f"metadata: at most {MAX_METADATA_BYTES} bytes of JSON (got {size})")
    with ctx.unit_of_work() as w:
        allocation_access.check_trial(w.session, principal, run_id, field="runId")
        trial = w.session.get(models.Trial, run_id)
        if trial is None:
            raise NotFound(f"run {run_id} not found")
        if not allocation_access.is_trial_code(principal):
            exp = w.session.get_one(models.Experiment, trial.experiment_id)
            access.check_experiment(w.session, principal, exp, Permission.UPDATE_EXPERIMENT_METADATA)
        trial.run_metadata = metadata
    return metadata


def get_metadata(ctx: MasterContext, principal: Principal, run_id: int) -> dict[str, Any] | None:
    with ctx.db.read() as s:
        access.check_trial(s, principal, run_id, Permission.VIEW_EXPERIMENT_METADATA, field="runId")
        trial = s.get(models.Trial, run_id)
        if trial is None:
            raise NotFound(f"run {run_id} not found")
        return trial.run_metadata
