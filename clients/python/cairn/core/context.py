"""`cairn.core.init()` and the Context it returns: the same training script runs on a cluster
(real contexts talking to the master) and on a laptop (local contexts that log and store
checkpoints in a local directory)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from cairn.core import exit_notice
from cairn.core.checkpoint import CheckpointContext
from cairn.core.checkpoint_records import LocalCheckpointRecords, MasterCheckpointRecords
from cairn.core.checkpoint_storage import StorageSpec, cluster_storage, local_storage
from cairn.core.cluster_info import ClusterInfo, get_cluster_info, local_info
from cairn.core.distributed import DistributedContext
from cairn.core.errors import InvalidHP
from cairn.core.master_session import MasterSession
from cairn.core.preempt import ClusterPreemptContext, LocalPreemptContext, PreemptContext, PreemptMode
from cairn.core.searcher import (
    ClusterSearcherContext,
    LocalSearcherContext,
    SearcherContext,
    local_searcher_length,
)
from cairn.core.settings import CoreSettings
from cairn.core.tensorboard import TensorboardFiles, TensorboardMode, default_path
from cairn.core.train import ClusterTrainContext, EarlyExitReason, LocalTrainContext, TrainContext
from cairn.tensorboard.uploader import TensorboardUploader

log = logging.getLogger(__name__)


class Context:
    """The Core API for one trial process: `.train`, `.checkpoint`, `.preempt`, `.searcher`,
    `.distributed` and `.info`. Use it as `with cairn.core.init() as core:`."""

    def __init__(
        self,
        *,
        checkpoint: CheckpointContext,
        distributed: DistributedContext,
        preempt: PreemptContext,
        train: TrainContext,
        searcher: SearcherContext,
        info: ClusterInfo,
        session: MasterSession | None = None,
        settings: CoreSettings | None = None,
        exit_notice_for: str | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.distributed = distributed
        self.preempt = preempt
        self.train = train
        self.searcher = searcher
        self.info = info
        self._session = session
        self._settings = settings or CoreSettings()
        # The allocation to tell the master about as the process exits after a clean close (the
        # chief of a trial on a cluster; exit_notice.py).
        self._exit_notice_for = exit_notice_for
        self._started = False
        self._closed = False

    def start(self) -> None:
        """Start the background threads (metrics sender, preemption watcher)."""
        if self._started:
            return
        self._started = True
        exit_notice.cancel()
        self.train.start()
        self.preempt.start()

    def close(self, *, clean: bool = True) -> None:
        """Send queued metrics and stop the background threads. After a clean run, waits for every
        metric to be stored and raises if that failed; otherwise gives them a bounded time."""
        if self._closed:
            return
        self._closed = True
        stored_all = False
        try:
            self.train.close(None if clean else self._settings.flush_on_error_s)
            stored_all = clean
        finally:
            self.preempt.close()
            self.distributed.close()
            if self._session is not None:
                if stored_all and self._exit_notice_for:
                    exit_notice.arrange(self._session, self._exit_notice_for)
                else:
                    self._session.close()

    def _close_after_error(self) -> None:
        # The training code's own exception is what the user needs to see; a failure to send
        # metrics on top of it is only logged.
        try:
            self.close(clean=False)
        except Exception as close_error:
            log.error("closing the Core API after an error failed too: %s", close_error)

    def __enter__(self) -> Context:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        invalid_hp = isinstance(exc_val, InvalidHP)
        clean = (
            exc_val is None or invalid_hp or (isinstance(exc_val, SystemExit) and exc_val.code in (0, None))
        )
        if invalid_hp and self.distributed.is_chief:
            try:
                self.train.report_early_exit(EarlyExitReason.INVALID_HP)
            except BaseException:
                self._close_after_error()
                raise
        if exc_val is not None and not clean:
            self._close_after_error()
            return
        self.close(clean=True)
        if invalid_hp:
            log.info("InvalidHP raised: early exit reported, exiting with code 0")
            sys.exit(0)


def local_context(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: StorageSpec | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    hparams: Mapping[str, Any] | None = None,
    searcher_length: int | None = None,
) -> Context:
    """The off-cluster context: reports are logged, checkpoints go to a local directory."""
    distributed = distributed or DistributedContext.single()
    storage = local_storage(checkpoint_storage)
    return Context(
        checkpoint=CheckpointContext(distributed, storage, LocalCheckpointRecords(storage)),
        distributed=distributed,
        preempt=LocalPreemptContext(preempt_mode),
        train=LocalTrainContext(),
        searcher=LocalSearcherContext(local_searcher_length(searcher_length), is_chief=distributed.is_chief),
        info=local_info(hparams),
    )


# What torchrun (and cairn.launch.torch_distributed through it) sets for each worker.
TORCH_DISTRIBUTED_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
)


def cluster_distributed(info: ClusterInfo) -> DistributedContext:
    """The distributed context of a process on a cluster when the caller gave none: a worker that a
    launcher started (torchrun's variables), one process per container when the allocation spans
    several and runs its entrypoint as is, else rank 0 of 1."""
    if all(name in os.environ for name in TORCH_DISTRIBUTED_ENV):
        return DistributedContext.from_torch_distributed(chief_ip=info.chief_ip)
    if info.num_containers > 1:
        return DistributedContext(
            rank=info.container_rank,
            size=info.num_containers,
            local_rank=0,
            local_size=1,
            cross_rank=info.container_rank,
            cross_size=info.num_containers,
            chief_ip=info.chief_ip,
        )
    if len(info.slot_ids) > 1:
        log.info(
            "trial has %d slots in one container and no launcher; running as one process (rank 0 of 1): "
            "use python3 -m cairn.launch.torch_distributed to run one process per slot",
            len(info.slot_ids),
        )
    return DistributedContext.single()


def trial_tensorboard(info: ClusterInfo, rank: int, mode: TensorboardMode) -> TensorboardFiles:
    """The trial's TensorBoard directory, uploaded to the experiment's checkpoint storage (the
    experiment's own: the master deletes these files with it, wherever the checkpoints went)."""
    path = default_path(info.allocation_id, rank)
    storage = info.trial.config.get("checkpoint_storage")
    if not info.cluster_id or not isinstance(storage, Mapping):
        log.warning(
            "the trial environment names no cluster id or storage: TensorBoard files stay in %s", path
        )
        return TensorboardFiles(TensorboardMode(mode), path, None)
    uploader = TensorboardUploader.for_trial(
        storage, info.cluster_id, info.trial.experiment_id, info.trial.trial_id, path, rank
    )
    return TensorboardFiles(TensorboardMode(mode), path, uploader)


def cluster_context(
    info: ClusterInfo,
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: StorageSpec | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    settings: CoreSettings | None = None,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> Context:
    """The on-cluster context, talking to the master at `info.master_address`."""
    settings = settings or CoreSettings()
    if distributed is None:
        distributed = cluster_distributed(info)
    trial = info.trial
    storage = cluster_storage(checkpoint_storage, trial.config)
    session = MasterSession(info.master_address, info.allocation_token, settings)
    train = ClusterTrainContext(
        session,
        trial_id=trial.trial_id,
        trial_run_id=trial.trial_run_id,
        experiment_id=trial.experiment_id,
        allocation_id=info.allocation_id,
        is_chief=distributed.is_chief,
        tensorboard=trial_tensorboard(info, distributed.rank, tensorboard_mode),
    )
    records = MasterCheckpointRecords(
        session, task_id=info.task_id, allocation_id=info.allocation_id, flush_metrics=train.before_checkpoint
    )
    return Context(
        checkpoint=CheckpointContext(distributed, storage, records),
        distributed=distributed,
        preempt=ClusterPreemptContext(session, info.allocation_id, distributed, preempt_mode),
        train=train,
        searcher=ClusterSearcherContext(
            session,
            trial_id=trial.trial_id,
            allocation_id=info.allocation_id,
            config=trial.config,
            report_progress=train.report_progress,
            flush_reports=train.flush,
            distributed=distributed,
        ),
        info=info,
        session=session,
        settings=settings,
        exit_notice_for=info.allocation_id if distributed.is_chief else None,
    )


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: StorageSpec | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
    hparams: Mapping[str, Any] | None = None,
    searcher_length: int | None = None,
) -> Context:
    """Build the Core API context for this process; use it as `with cairn.core.init() as core:`.

    On a cluster (the master set CAIRN_ALLOCATION_ID) the contexts talk to the master and
    checkpoints go to the experiment's checkpoint_storage. Off cluster, reports are logged,
    preemption never comes, checkpoints go to `checkpoint_storage` (a path, s3://bucket/prefix,
    or a checkpoint_storage dict; default $CAIRN_LOCAL_CHECKPOINT_DIR or
    ~/.local/share/cairn/local-checkpoints), `info.trial.hparams` is `hparams`, and the searcher
    gives one operation of `searcher_length` (or $CAIRN_SEARCHER_LENGTH). `hparams` and
    `searcher_length` are ignored on a cluster, where the master decides them.
    """
    tensorboard_mode = TensorboardMode(tensorboard_mode)
    info = get_cluster_info()
    if info is None:
        return local_context(
            distributed=distributed,
            checkpoint_storage=checkpoint_storage,
            preempt_mode=preempt_mode,
            hparams=hparams,
            searcher_length=searcher_length,
        )
    return cluster_context(
        info,
        distributed=distributed,
        checkpoint_storage=checkpoint_storage,
        preempt_mode=preempt_mode,
        tensorboard_mode=tensorboard_mode,
    )
