"""Where TensorBoard files live in checkpoint storage: Determined's layout, under the storage's
base directory (or s3 prefix), beside the checkpoints:

    {cluster_id}/tensorboard/experiment/{experiment_id}/trial/{trial_id}/<files>

Determined's own Core API (`determined.tensorboard.build`) writes to the same place, so files
from either client are found by the same TensorBoard task and deleted with the same experiment.

A subtree of the storage is itself a storage: the same section with its base moved down
(`section_below`). The storage managers then see a trial's directory as one "checkpoint" named by
the trial id, and an experiment's as one named by the experiment id, so uploading, listing,
downloading and deleting need nothing the checkpoint backends do not already do.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from cairn.storage.errors import StorageConfigError


def experiments_dir(cluster_id: str) -> str:
    """The directory holding every experiment's TensorBoard files, relative to the storage base."""
    if not cluster_id or "/" in cluster_id or cluster_id.startswith("."):
        raise ValueError(f"cluster_id: {cluster_id!r} is not a cluster id")
    return f"{cluster_id}/tensorboard/experiment"


def trials_dir(cluster_id: str, experiment_id: int) -> str:
    """The directory holding one experiment's trials' TensorBoard files (one folder per trial)."""
    return f"{experiments_dir(cluster_id)}/{int(experiment_id)}/trial"


def trial_dir(cluster_id: str, experiment_id: int, trial_id: int) -> str:
    """Determined's sync path of one trial, relative to the storage base."""
    return f"{trials_dir(cluster_id, experiment_id)}/{int(trial_id)}"


def run_name(experiment_id: int, trial_id: int) -> str:
    """The folder a TensorBoard task keeps a trial's files in: TensorBoard shows it as the run's
    name, so each trial is its own run."""
    return f"experiment_{int(experiment_id)}/trial_{int(trial_id)}"


def section_below(section: Mapping[str, Any], relative_dir: str) -> dict[str, Any]:
    """The checkpoint_storage section of the subtree `relative_dir` of `section`'s storage."""
    relative_dir = relative_dir.strip("/")
    if not relative_dir or any(part in ("", ".", "..") for part in relative_dir.split("/")):
        raise ValueError(f"relative_dir: {relative_dir!r} must be a plain relative path")
    storage_type = section.get("type")
    below = dict(section)
    if storage_type == "shared_fs":
        base = section.get("storage_path") or section.get("checkpoint_path") or ""
        below.pop("checkpoint_path", None)
        below["storage_path"] = posixpath.join(str(base), relative_dir)
        return below
    if storage_type == "directory":
        # As shared_fs rooted at the same directory: the root must exist before a deletion counts,
        # the subtree need not.
        root = section.get("container_path")
        if not isinstance(root, str) or not root:
            raise StorageConfigError("checkpoint_storage.container_path", "required for type directory")
        below.pop("container_path")
        below.update(type="shared_fs", host_path=root, storage_path=relative_dir)
        return below
    if storage_type == "s3":
        prefix = str(section.get("prefix") or "").strip("/")
        below["prefix"] = f"{prefix}/{relative_dir}" if prefix else relative_dir
        return below
    raise StorageConfigError(
        "checkpoint_storage.type", f"{storage_type!r} holds no TensorBoard files in Cairn"
    )
