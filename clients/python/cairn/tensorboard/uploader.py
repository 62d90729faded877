"""Uploading a trial's local TensorBoard directory to checkpoint storage: the files that are new
or changed since the last upload, nothing else, so a sync after every report stays cheap."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cairn.storage import StorageManager, storage_manager_from_config
from cairn.storage.errors import StorageError
from cairn.tensorboard.layout import section_below, trials_dir

log = logging.getLogger(__name__)

# The files TensorBoard reads (Determined's tb_file_types): event files and profiler traces.
TENSORBOARD_FILE_PATTERNS = (
    "*tfevents*",
    "*.trace.json.gz",
    "*.trace.json",
    "*.memory_profile.json.gz",
    "*.pb",
)

Selector = Callable[[Path], bool]
Mangler = Callable[[Path, int], Path]


def tensorboard_files(directory: Path) -> list[Path]:
    """TensorBoard's files under `directory`, relative to it, sorted."""
    if not directory.is_dir():
        return []
    found = {
        path.relative_to(directory)
        for pattern in TENSORBOARD_FILE_PATTERNS
        for path in directory.rglob(pattern)
        if path.is_file() and not path.is_symlink()
    }
    return sorted(found)


class TensorboardUploader:
    """Keeps one trial's folder in storage up to date with a local directory."""

    def __init__(self, storage: StorageManager, trial_id: int, local_dir: Path, rank: int = 0) -> None:
        self._storage = storage
        self._key = str(int(trial_id))
        self.local_dir = local_dir
        self._rank = rank
        # Relative path → (size, mtime_ns) as last uploaded.
        self._uploaded: dict[Path, tuple[int, int]] = {}

    @classmethod
    def for_trial(
        cls,
        checkpoint_storage: Mapping[str, Any],
        cluster_id: str,
        experiment_id: int,
        trial_id: int,
        local_dir: Path,
        rank: int = 0,
    ) -> TensorboardUploader:
        section = section_below(checkpoint_storage, trials_dir(cluster_id, experiment_id))
        return cls(storage_manager_from_config(section), trial_id, local_dir, rank)

    def changed_files(self, selector: Selector | None = None) -> list[Path]:
        changed = []
        for relative in tensorboard_files(self.local_dir):
            if selector is not None and not selector(self.local_dir / relative):
                continue
            stat = (self.local_dir / relative).stat()
            if self._uploaded.get(relative) != (stat.st_size, stat.st_mtime_ns):
                changed.append(relative)
        return changed

    def sync(self, selector: Selector | None = None, mangler: Mangler | None = None) -> int:
        """Upload the new and changed files (those `selector` takes, renamed by `mangler` as in
        Determined's upload_tensorboard_files); the number uploaded. Raises StorageError."""
        changed = self.changed_files(selector)
        if not changed:
            return 0
        stats = {relative: (self.local_dir / relative).stat() for relative in changed}
        if mangler is None:
            self._storage.upload(self.local_dir, self._key, [relative.as_posix() for relative in changed])
        else:
            with self._storage.staging_dir(self._key) as staging:
                for relative in changed:
                    target = staging / mangler(relative, self._rank)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(self.local_dir / relative, target)
                self._storage.upload(staging, self._key, move=True)
        for relative, stat in stats.items():
            self._uploaded[relative] = (stat.st_size, stat.st_mtime_ns)
        return len(changed)

    def sync_logged(self, selector: Selector | None = None, mangler: Mangler | None = None) -> None:
        """`sync`, with a failure logged rather than raised: TensorBoard files are never worth
        failing a trial over, and what failed is uploaded again at the next sync."""
        try:
            count = self.sync(selector, mangler)
        except (OSError, StorageError) as exc:
            log.warning("uploading TensorBoard files failed (tried again at the next sync): %s", exc)
            return
        if count:
            log.debug("uploaded %d TensorBoard file(s)", count)
