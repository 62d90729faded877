"""A trial's TensorBoard files (Determined's TensorboardMode).

AUTO: every training and validation report is also written as TensorBoard scalars (Determined's
tag names: "Determined/<metric>", validation metrics with a "val_" prefix unless they have one),
and the trial's TensorBoard directory is uploaded to checkpoint storage at most every
SYNC_INTERVAL_S while reports come, before each checkpoint counts, and when the context closes.
MANUAL: nothing is written for you; what you write to `core.train.get_tensorboard_path()` is
uploaded when you call `core.train.upload_tensorboard_files()`, and when the context closes.

Either way the files land at Determined's path in the experiment's checkpoint storage
(cairn.tensorboard.layout), where `det tensorboard start` finds them and experiment deletion
removes them. Event files are written by Cairn itself (cairn.tensorboard.event_file), so neither
TensorFlow nor PyTorch nor the tensorboard package is needed in the training environment.
"""

from __future__ import annotations

import enum
import functools
import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cairn.tensorboard.event_file import ScalarEventWriter
from cairn.tensorboard.uploader import Mangler, Selector, TensorboardUploader

log = logging.getLogger(__name__)

# How often reports upload the directory; the end of the trial always does.
SYNC_INTERVAL_S = 10.0
TRAINING = "training"
VALIDATION = "validation"


class TensorboardMode(enum.Enum):
    """AUTO: Cairn writes reported metrics as TensorBoard scalars and uploads them. MANUAL: you
    write to `core.train.get_tensorboard_path()` and call `upload_tensorboard_files()`."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


def default_path(allocation_id: str, rank: int) -> Path:
    """Determined's local TensorBoard directory: one per allocation and rank."""
    return Path(tempfile.gettempdir()) / f"tensorboard-{allocation_id}-{rank}"


@functools.lru_cache(maxsize=4096)
def metric_tag(group: str, name: str) -> str:
    if group == VALIDATION and not name.startswith("val"):
        name = f"val_{name}"
    return f"Determined/{name}"


# A report's tags are made once per name (reports repeat their names every step).
_TAGGERS = {
    group: functools.lru_cache(maxsize=4096)(functools.partial(metric_tag, group))
    for group in (TRAINING, VALIDATION)
}


class TensorboardFiles:
    """The trial process's TensorBoard directory and what becomes of it. `uploader` is None off
    cluster (nothing is uploaded)."""

    def __init__(
        self,
        mode: TensorboardMode,
        path: Path,
        uploader: TensorboardUploader | None,
        *,
        sync_interval_s: float = SYNC_INTERVAL_S,
    ) -> None:
        self.mode = TensorboardMode(mode)
        self.path = path
        self._uploader = uploader
        self._writer = ScalarEventWriter(path) if mode == TensorboardMode.AUTO and uploader else None
        self._sync_interval_s = sync_interval_s
        self._last_sync = time.monotonic()

    def on_report(
        self,
        group: str,
        steps_completed: int,
        metrics: Mapping[str, Any],
        batch_metrics: Sequence[Mapping[str, Any]] | None,
    ) -> None:
        """AUTO: write a report's scalars (batch metrics at their own steps, as Determined does)."""
        if self._writer is None or group not in (TRAINING, VALIDATION):
            return
        writer, now = self._writer, time.time()
        tag_of = _TAGGERS[group]
        if not batch_metrics:
            writer.add_step(steps_completed, now, metrics, tag_of)
        else:
            seen: set[str] = set()
            for index, batch in enumerate(batch_metrics):
                writer.add_step(steps_completed - len(batch_metrics) + index, now, batch, tag_of)
                seen.update(batch)
            writer.add_step(steps_completed, now, metrics, tag_of, seen)
        # Written out when the buffer fills and at each sync (which rolls the file): not per report.
        if time.monotonic() - self._last_sync >= self._sync_interval_s:
            self.sync()

    def sync(self) -> None:
        """Upload what changed; the current event file is closed first, so that no uploaded file
        changes afterwards."""
        if self._writer is not None:
            self._writer.roll()
        if self._uploader is not None:
            self._uploader.sync_logged()
        self._last_sync = time.monotonic()

    def upload(self, selector: Selector | None = None, mangler: Mangler | None = None) -> None:
        """Determined's upload_tensorboard_files: MANUAL mode only."""
        if self.mode == TensorboardMode.AUTO:
            raise RuntimeError("upload_tensorboard_files can only be used in TensorboardMode.MANUAL")
        if self._uploader is None:
            log.info("upload_tensorboard_files(): off cluster, %s stays where it is", self.path)
            return
        self._uploader.sync_logged(selector, mangler)

    def close(self) -> None:
        self.sync()
