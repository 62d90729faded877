"""Where checkpoints are recorded once their files are in storage: the master on a cluster, nothing
but the checkpoint's own metadata.json off it."""

from __future__ import annotations

import abc
import json
import logging
from collections.abc import Callable
from typing import Any

from google.protobuf import timestamp_pb2

from cairn.api.v1 import checkpoint_pb2
from cairn.core.json_values import JsonValue, from_struct, to_struct
from cairn.core.master_session import MasterSession
from cairn.storage import CheckpointNotFound, Resources, StorageManager

log = logging.getLogger(__name__)

METADATA_FILE = "metadata.json"


class CheckpointRecords(abc.ABC):
    @abc.abstractmethod
    def report(self, checkpoint_uuid: str, resources: Resources, metadata: dict[str, JsonValue]) -> None:
        """Record a checkpoint whose files are all in storage."""

    @abc.abstractmethod
    def metadata_of(self, checkpoint_uuid: str) -> dict[str, Any]: ...

    @abc.abstractmethod
    def files_changed(self, checkpoint_uuid: str, remaining: Resources) -> None:
        """Files of the checkpoint were deleted; `remaining` is what is left (empty: all gone)."""


class MasterCheckpointRecords(CheckpointRecords):
    def __init__(
        self,
        session: MasterSession,
        *,
        task_id: str,
        allocation_id: str,
        flush_metrics: Callable[[], object] | None = None,
    ) -> None:
        self._session = session
        self._task_id = task_id
        self._allocation_id = allocation_id
        self._flush_metrics = flush_metrics

    def report(self, checkpoint_uuid: str, resources: Resources, metadata: dict[str, JsonValue]) -> None:
        if self._flush_metrics is not None:
            # Metrics reported before the checkpoint are stored before it counts: a trial that
            # dies right after and resumes from it has no hole in its curves.
            self._flush_metrics()
        report_time = timestamp_pb2.Timestamp()
        report_time.GetCurrentTime()
        checkpoint = checkpoint_pb2.Checkpoint(
            task_id=self._task_id,
            allocation_id=self._allocation_id,
            uuid=checkpoint_uuid,
            report_time=report_time,
            resources=resources,
            metadata=to_struct(metadata),
            state=checkpoint_pb2.Checkpoint.STATE_COMPLETED,
        )
        self._session.call(
            self._session.stub.ReportCheckpoint,
            checkpoint_pb2.ReportCheckpointRequest(checkpoint=checkpoint),
            what=f"ReportCheckpoint {checkpoint_uuid}",
        )

    def metadata_of(self, checkpoint_uuid: str) -> dict[str, Any]:
        response = self._session.call(
            self._session.stub.GetCheckpoint,
            checkpoint_pb2.GetCheckpointRequest(checkpoint_uuid=checkpoint_uuid),
            what=f"GetCheckpoint {checkpoint_uuid}",
        )
        return from_struct(response.checkpoint.metadata)

    def files_changed(self, checkpoint_uuid: str, remaining: Resources) -> None:
        patch = checkpoint_pb2.PatchCheckpoint(uuid=checkpoint_uuid)
        # Presence matters: a set but empty `resources` tells the master the checkpoint is gone.
        patch.resources.SetInParent()
        patch.resources.resources.update(remaining)
        self._session.call(
            self._session.stub.PatchCheckpoints,
            checkpoint_pb2.PatchCheckpointsRequest(checkpoints=[patch]),
            what=f"PatchCheckpoints {checkpoint_uuid}",
        )


class LocalCheckpointRecords(CheckpointRecords):
    def __init__(self, storage: StorageManager) -> None:
        self._storage = storage

    def report(self, checkpoint_uuid: str, resources: Resources, metadata: dict[str, JsonValue]) -> None:
        log.info(
            "checkpoint stored: uuid=%s files=%d bytes=%d steps_completed=%s",
            checkpoint_uuid,
            len(resources),
            sum(resources.values()),
            metadata.get("steps_completed"),
        )

    def metadata_of(self, checkpoint_uuid: str) -> dict[str, Any]:
        with self._storage.restore_path(checkpoint_uuid, lambda path: path == METADATA_FILE) as directory:
            metadata_file = directory / METADATA_FILE
            if not metadata_file.is_file():
                if not self._storage.exists(checkpoint_uuid):
                    raise CheckpointNotFound(checkpoint_uuid, self._storage.description)
                return {}
            loaded = json.loads(metadata_file.read_text())
        return dict(loaded) if isinstance(loaded, dict) else {}

    def files_changed(self, checkpoint_uuid: str, remaining: Resources) -> None:
        log.info("checkpoint files deleted: uuid=%s files_left=%d", checkpoint_uuid, len(remaining))
