"""Deleting an experiment's TensorBoard files with it, as Determined does: the folder
{cluster_id}/tensorboard/experiment/{id} of its checkpoint storage (cairn.tensorboard.layout),
deleted by the checkpoint service like a checkpoint (the subtree is a storage of its own whose one
"checkpoint" is named by the experiment id). Run as an experiment-deletion hook after its
checkpoints' files: a failure leaves the experiment DELETE_FAILED and the deletion retried, and
files already gone are not an error, so running it again is harmless."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from cairn.tensorboard.layout import experiments_dir, section_below
from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.config import config_view
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.ports import CheckpointService
from services.master.store import models

log = get_logger(__name__)


def _may_have_files(s: Session, experiment_id: int) -> bool:
    """Whether trial code of the experiment ever reported a metric or a checkpoint: TensorBoard
    files are written only by trials that report. One that never did may have left no storage
    root at all, which the checkpoint service must take for an unmounted share and refuse."""
    trial_ids = select(models.Trial.id).where(models.Trial.experiment_id == experiment_id)
    for table in (models.Metric, models.Checkpoint):
        if s.scalar(select(table.trial_id).where(table.trial_id.in_(trial_ids)).limit(1)) is not None:
            return True
    return False


class TensorboardFiles:
    def __init__(self, ctx: MasterContext, client: CheckpointService) -> None:
        self._ctx = ctx
        self._client = client

    def delete_for(self, principal: Principal, experiment_id: int) -> None:
        """A user's request (Determined's DeleteTensorboardFiles, `det e delete-tb-files`): the
        experiment stays, its TensorBoard files go. Its owner or an admin may."""
        with self._ctx.db.read() as s:
            exp = s.get(models.Experiment, experiment_id)
            if exp is None:
                raise NotFound(f"experiment {experiment_id} not found")
            access.check_experiment(s, principal, exp, Permission.DELETE_EXPERIMENT)
        self.delete_experiment_files(experiment_id)

    def delete_experiment_files(self, experiment_id: int) -> None:
        """Raises when the storage refused, so that the deletion is tried again."""
        with self._ctx.db.read() as s:
            exp = s.get(models.Experiment, experiment_id)
            if exp is None or not _may_have_files(s, experiment_id):
                return
            storage = config_view(exp.config).checkpoint_storage
        section = section_below(storage, experiments_dir(self._ctx.cluster_id))
        results = self._client.delete(section, [str(experiment_id)]).results
        errors = [result.error for result in results if result.error]
        if errors:
            raise RuntimeError(
                f"deleting experiment {experiment_id}'s TensorBoard files: {'; '.join(errors)}"
            )
        log.info("tensorboard files deleted", experiment_id=experiment_id)
