"""`core.checkpoint`: store and restore checkpoints (Determined's CheckpointContext).

Files go to checkpoint storage through `cairn.storage`; a checkpoint is recorded (reported to the
master) only once all of its files, metadata.json included, are there. A checkpoint whose writing
failed is removed from storage and never recorded.

In a multi-process trial a checkpoint is the chief's alone (the default), or sharded: every rank
calls store_path/upload with shard=True at the same point, writes its own files into a private
staging folder, and one checkpoint is recorded holding every rank's files once all of them are in
storage. Two ranks writing the same file, or any rank failing, fails the checkpoint on every rank.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cairn.core.checkpoint_records import METADATA_FILE, CheckpointRecords
from cairn.core.distributed import DistributedContext
from cairn.core.json_values import JsonValue, plain_count, plain_mapping
from cairn.storage import Selector, StorageManager
from cairn.storage.local_tree import read_tree
from cairn.storage.paths import normalize_relative_path

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


class DownloadMode(enum.Enum):
    """Who downloads in a multi-process trial; with one process, it does."""

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


def checked_metadata(metadata: Any) -> dict[str, JsonValue]:
    """The metadata as plain JSON; like Determined, it must say how far training got."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata: must be a dict, not {type(metadata).__name__}")
    if "steps_completed" not in metadata:
        raise ValueError(
            "metadata: must contain 'steps_completed' (the batches trained so far), "
            "e.g. store_path({'steps_completed': 100})"
        )
    plain = plain_mapping(metadata, "metadata")
    plain["steps_completed"] = plain_count(metadata["steps_completed"], "metadata['steps_completed']")
    return plain


def write_metadata_file(directory: Path, metadata: dict[str, JsonValue]) -> None:
    (directory / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")


class CheckpointContext:
    def __init__(
        self, distributed: DistributedContext, storage: StorageManager, records: CheckpointRecords
    ) -> None:
        self._distributed = distributed
        self._storage = storage
        self._records = records

    @property
    def storage(self) -> StorageManager:
        return self._storage

    def _check_writer(self, shard: bool) -> None:
        if not shard and not self._distributed.is_chief:
            raise RuntimeError("only the chief (rank 0) may store a checkpoint unless shard=True")

    def _sharded(self, shard: bool) -> bool:
        return shard and self._distributed.size > 1

    @contextlib.contextmanager
    def store_path(self, metadata: Mapping[str, Any], *, shard: bool = False) -> Iterator[tuple[Path, str]]:
        """A directory to write a new checkpoint into, and its storage id.

        When the block ends without an exception, the files (with a metadata.json) are in storage
        and the checkpoint is reported; when it raises, the partial checkpoint is removed and
        nothing is reported. With shard=True every rank calls it and writes its own files.
        """
        self._check_writer(shard)
        plain = checked_metadata(metadata)
        if self._sharded(shard):
            with self._sharded_store_path(plain) as found:
                yield found
            return
        storage_id = str(uuid.uuid4())
        try:
            with self._storage.store_path(storage_id) as path:
                yield path, storage_id
                write_metadata_file(path, plain)
        except BaseException:
            self._discard(storage_id)
            raise
        self._record(storage_id, plain)

    def upload(
        self,
        ckpt_dir: PathLike,
        metadata: Mapping[str, Any],
        *,
        shard: bool = False,
        selector: Selector | None = None,
    ) -> str:
        """Store the files of `ckpt_dir` (those `selector` accepts, when given) as a new checkpoint
        and report it; returns its storage id. `ckpt_dir` itself is left as it was."""
        self._check_writer(shard)
        plain = checked_metadata(metadata)
        source = Path(ckpt_dir)
        paths = None
        if selector is not None:
            paths = [file.relative_path for file in read_tree(source) if selector(file.relative_path)]
        if self._sharded(shard):
            return self._sharded_upload(source, paths, plain)
        storage_id = str(uuid.uuid4())
        try:
            self._storage.upload(source, storage_id, paths)
            with self._storage.staging_dir(storage_id) as staging:
                write_metadata_file(staging, plain)
                self._storage.upload(staging, storage_id, [METADATA_FILE], move=True)
        except BaseException:
            self._discard(storage_id)
            raise
        self._record(storage_id, plain)
        return storage_id

    # -- sharded checkpoints ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _sharded_store_path(self, metadata: dict[str, JsonValue]) -> Iterator[tuple[Path, str]]:
        dist = self._distributed
        storage_id = dist.broadcast(str(uuid.uuid4()) if dist.is_chief else None)
        with self._storage.staging_dir(storage_id) as staging:
            try:
                yield staging, storage_id
            except BaseException as exc:
                # The others must hear of it, or they would wait for this rank's shard forever.
                try:
                    self._finish_shards(storage_id, None, None, metadata, f"{type(exc).__name__}: {exc}")
                except RuntimeError:
                    pass
                raise
            files = [file.relative_path for file in read_tree(staging)]
            self._finish_shards(storage_id, staging, files, metadata, "")

    def _sharded_upload(self, source: Path, paths: list[str] | None, metadata: dict[str, JsonValue]) -> str:
        dist = self._distributed
        storage_id: str = dist.broadcast(str(uuid.uuid4()) if dist.is_chief else None)
        files = (
            [file.relative_path for file in read_tree(source)]
            if paths is None
            else [normalize_relative_path(p) for p in paths if not p.endswith("/")]
        )
        self._finish_shards(storage_id, source, files, metadata, "", move=False)
        return storage_id

    def _finish_shards(
        self,
        storage_id: str,
        source: Path | None,
        files: list[str] | None,
        metadata: dict[str, JsonValue],
        error: str,
        *,
        move: bool = True,
    ) -> None:
        """Every rank: agree that each shard is sound, upload it, and let the chief record the whole.
        Raises on every rank when any rank's shard failed."""
        dist = self._distributed
        shards = dist.allgather((error, files or [], metadata))
        problem = _shard_problem(shards)
        if not problem:
            try:
                assert source is not None
                self._storage.upload(source, storage_id, files, move=move)
            except Exception as exc:
                problem = f"rank {dist.rank} could not upload its shard: {exc}"
            uploads = dist.allgather(problem)
            problem = next((p for p in uploads if p), "")
        if not problem and dist.is_chief:
            try:
                merged: dict[str, JsonValue] = {}
                for _, _, shard_metadata in shards:
                    merged.update(shard_metadata)
                with self._storage.staging_dir(storage_id) as staging:
                    write_metadata_file(staging, merged)
                    self._storage.upload(staging, storage_id, [METADATA_FILE], move=True)
                self._record(storage_id, merged)
            except Exception as exc:
                problem = f"the chief could not record the checkpoint: {exc}"
        outcome = dist.broadcast(problem if dist.is_chief else None)
        if outcome:
            if dist.is_chief:
                self._discard(storage_id)
            raise RuntimeError(f"sharded checkpoint {storage_id} failed: {outcome}")

    # -- restoring -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> Iterator[Path]:
        """A local directory with the checkpoint's files (read-only use: on shared storage it is
        the checkpoint itself). In the default mode every process of a node calls it and the
        node's local chief downloads once for all of them."""
        mode = DownloadMode(download_mode)
        dist = self._distributed
        if mode == DownloadMode.NoSharedDownload or dist.local_size == 1:
            with self._storage.restore_path(storage_id, selector) as path:
                yield path
            return
        if not dist.is_local_chief:
            kind, value = dist.broadcast_local(None)
            if kind == "error":
                raise RuntimeError(f"the local chief could not restore checkpoint {storage_id}: {value}")
            try:
                yield Path(value)
            finally:
                dist.allgather_local(None)  # the local chief keeps the files until all are done
            return
        try:
            restoring = self._storage.restore_path(storage_id, selector)
            path = restoring.__enter__()
        except Exception as exc:
            dist.broadcast_local(("error", f"{type(exc).__name__}: {exc}"))
            raise
        dist.broadcast_local(("path", str(path)))
        try:
            yield path
        finally:
            dist.allgather_local(None)
            restoring.__exit__(None, None, None)

    def download(
        self,
        storage_id: str,
        ckpt_dir: PathLike,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> None:
        """Copy the checkpoint's files into `ckpt_dir`."""
        DownloadMode(download_mode)
        target = Path(ckpt_dir)
        target.mkdir(parents=True, exist_ok=True)
        self._storage.download(storage_id, target, selector)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        return self._records.metadata_of(storage_id)

    def delete(self, storage_id: str, globs: list[str] | None = None) -> None:
        """Delete the checkpoint's files (only those matching `globs`, when given), then tell the
        master what is left."""
        remaining = self._storage.delete(storage_id, globs or ())
        self._records.files_changed(storage_id, remaining)

    def _record(self, storage_id: str, metadata: dict[str, JsonValue]) -> None:
        resources = self._storage.list_files(storage_id)
        self._records.report(storage_id, resources, metadata)

    def _discard(self, storage_id: str) -> None:
        try:
            self._storage.delete(storage_id)
        except Exception as exc:
            log.error("could not remove the partial checkpoint %s: %s", storage_id, exc)


def _shard_problem(shards: list[tuple[str, list[str], dict[str, Any]]]) -> str:
    """Why the ranks' shards cannot form one checkpoint; empty when they can."""
    for rank, (error, _, _) in enumerate(shards):
        if error:
            return f"rank {rank} failed writing its shard: {error}"
    owner: dict[str, int] = {}
    for rank, (_, files, _) in enumerate(shards):
        for name in files:
            if name == METADATA_FILE:
                return f"rank {rank} wrote {METADATA_FILE}, which the checkpoint writes itself"
            if name in owner:
                return f"{name!r} was written by rank {owner[name]} and rank {rank}"
            owner[name] = rank
    merged: dict[str, Any] = {}
    for rank, (_, _, metadata) in enumerate(shards):
        for key, value in metadata.items():
            if key in merged and merged[key] != value:
                return f"metadata {key!r} differs between ranks ({merged[key]!r} and rank {rank}'s {value!r})"
            merged[key] = value
    return ""
