"""Cairn's Core API for training code, shaped like Determined's `det.core`.

    import cairn.core

    with cairn.core.init() as core:
        for op in core.searcher.operations():
            ...
            core.train.report_training_metrics(steps_completed=steps, metrics={"loss": loss})
            if core.preempt.should_preempt():
                with core.checkpoint.store_path({"steps_completed": steps}) as (path, storage_id):
                    ...
                return

Modules: context (init, Context), train, checkpoint, preempt, searcher, distributed,
cluster_info; metrics_shipper and signal_watcher are the background threads.
"""

from cairn.core.checkpoint import CheckpointContext, DownloadMode
from cairn.core.cluster_info import ClusterInfo, TrialInfo, get_cluster_info
from cairn.core.context import Context, init
from cairn.core.distributed import DistributedContext, DummyDistributedContext
from cairn.core.errors import (
    ClusterInfoError,
    CoreApiError,
    InvalidHP,
    MasterCallError,
    MetricsReportError,
    SearcherNotConfiguredError,
)
from cairn.core.preempt import PreemptContext, PreemptMode
from cairn.core.searcher import SearcherContext, SearcherMode, SearcherOperation, Unit
from cairn.core.tensorboard import TensorboardMode
from cairn.core.train import EarlyExitReason, TrainContext

__all__ = [
    "CheckpointContext",
    "ClusterInfo",
    "ClusterInfoError",
    "Context",
    "CoreApiError",
    "DistributedContext",
    "DownloadMode",
    "DummyDistributedContext",
    "EarlyExitReason",
    "InvalidHP",
    "MasterCallError",
    "MetricsReportError",
    "PreemptContext",
    "PreemptMode",
    "SearcherContext",
    "SearcherMode",
    "SearcherNotConfiguredError",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "TrialInfo",
    "Unit",
    "get_cluster_info",
    "init",
]
