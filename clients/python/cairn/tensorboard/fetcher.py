"""A TensorBoard task's copy of its trials' files: fetched from checkpoint storage into one local
folder per trial (layout.run_name), so TensorBoard shows each trial as a run.

A file that grew in storage is rewritten in place, never replaced by a rename: TensorBoard keeps
event files open and reads on from where it stopped, which it could not do in a new inode.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.storage import StorageManager, storage_manager_from_config
from cairn.storage.paths import normalize_relative_path
from cairn.tensorboard.layout import run_name, section_below, trials_dir


@dataclass(frozen=True)
class TrialSource:
    """One trial to show, with its experiment's checkpoint_storage section."""

    experiment_id: int
    trial_id: int
    storage: Mapping[str, Any] = field(hash=False, compare=False)


def write_in_place(source: Path, target: Path) -> None:
    """Make `target`'s content `source`'s, keeping `target`'s inode when it exists."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as reader, open(target, "r+b" if target.exists() else "wb") as writer:
        shutil.copyfileobj(reader, writer)
        writer.truncate()


class TensorboardFetcher:
    def __init__(self, cluster_id: str, sources: Iterable[TrialSource], local_root: Path) -> None:
        self._cluster_id = cluster_id
        self._sources = list(sources)
        self._local_root = local_root
        self._managers: dict[int, StorageManager] = {}
        # (experiment id, trial id, relative path) → size as fetched.
        self._fetched: dict[tuple[int, int, str], int] = {}

    def _storage(self, source: TrialSource) -> StorageManager:
        if source.experiment_id not in self._managers:
            section = section_below(source.storage, trials_dir(self._cluster_id, source.experiment_id))
            self._managers[source.experiment_id] = storage_manager_from_config(section)
        return self._managers[source.experiment_id]

    @property
    def files_fetched(self) -> int:
        return len(self._fetched)

    def fetch_once(self) -> int:
        """Fetch every file that is new or changed in size since the last pass; how many."""
        count = 0
        for source in self._sources:
            storage = self._storage(source)
            key = str(source.trial_id)
            listing = storage.list_files(key)
            changed = [
                path
                for path, size in sorted(listing.items())
                if self._fetched.get((source.experiment_id, source.trial_id, path)) != size
            ]
            if not changed:
                continue
            run_dir = self._local_root / run_name(source.experiment_id, source.trial_id)
            wanted = set(changed)
            with tempfile.TemporaryDirectory(prefix="cairn-tensorboard-") as scratch:
                fetched = storage.download(key, Path(scratch), selector=wanted.__contains__)
                for path, size in fetched.items():
                    write_in_place(Path(scratch) / path, run_dir / normalize_relative_path(path))
                    self._fetched[(source.experiment_id, source.trial_id, path)] = size
                    count += 1
        return count
