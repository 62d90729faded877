"""gRPC edge of CheckpointService: check input, convert messages, call the domain, map errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc

from cairn.checkpoint.v1 import checkpoint_pb2 as pb
from cairn.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from cairn.storage import (
    CheckpointNotFound,
    ChunkStreamError,
    StorageConfigError,
    StorageError,
    UnsafePathError,
)
from services.checkpoint import convert
from services.checkpoint.domain.deletion import delete_checkpoints
from services.checkpoint.domain.errors import InvalidArgument
from services.checkpoint.domain.garbage_collection import collect_garbage
from services.checkpoint.domain.storage_check import check_storage
from services.checkpoint.domain.storage_managers import StorageManagers
from services.checkpoint.domain.transfer import receive_checkpoint, send_checkpoint
from services.common.status import STATUS_OF_KIND

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CheckpointService"].full_name

# The storage library's errors by kind (services/common/status.py maps kinds to statuses). First
# match wins: more specific classes before their bases.
_KIND_BY_ERROR: tuple[tuple[type[BaseException], str], ...] = (
    (InvalidArgument, "INVALID_ARGUMENT"),
    (StorageConfigError, "INVALID_ARGUMENT"),
    (UnsafePathError, "INVALID_ARGUMENT"),
    (ChunkStreamError, "INVALID_ARGUMENT"),
    (CheckpointNotFound, "NOT_FOUND"),
    # The storage refused or failed (permissions, a full disk, a missing bucket).
    (StorageError, "FAILED_PRECONDITION"),
    (OSError, "FAILED_PRECONDITION"),
)
_MAPPED = tuple(error for error, _kind in _KIND_BY_ERROR)


@contextlib.contextmanager
def _answer_errors(context: grpc.ServicerContext) -> Iterator[None]:
    try:
        yield
    except _MAPPED as exc:
        kind = next(kind for error, kind in _KIND_BY_ERROR if isinstance(exc, error))
        context.abort(STATUS_OF_KIND[kind], str(exc) or type(exc).__name__)


class CheckpointServicer(pb_grpc.CheckpointServiceServicer):
    def __init__(self, managers: StorageManagers | None = None) -> None:
        self._managers = managers or StorageManagers()

    def Upload(
        self, request_iterator: Iterator[pb.UploadChunk], context: grpc.ServicerContext
    ) -> pb.UploadResponse:
        with _answer_errors(context):
            header, chunks = convert.split_upload_stream(request_iterator)
            manager = self._managers.get(convert.storage_section(header))
            resources = receive_checkpoint(manager, header.checkpoint_uuid, chunks)
            return pb.UploadResponse(resources=resources)

    def Download(
        self, request: pb.DownloadRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.DownloadChunk]:
        with _answer_errors(context):
            manager = self._managers.get(convert.storage_section(request))
            for chunk in send_checkpoint(manager, request.checkpoint_uuid, list(request.globs)):
                yield pb.DownloadChunk(file=convert.chunk_to_proto(chunk))

    def ListFiles(self, request: pb.ListFilesRequest, context: grpc.ServicerContext) -> pb.ListFilesResponse:
        with _answer_errors(context):
            manager = self._managers.get(convert.storage_section(request))
            if not manager.exists(request.checkpoint_uuid):
                return pb.ListFilesResponse(exists=False)
            return pb.ListFilesResponse(resources=manager.list_files(request.checkpoint_uuid), exists=True)

    def Delete(self, request: pb.DeleteRequest, context: grpc.ServicerContext) -> pb.DeleteResponse:
        with _answer_errors(context):
            manager = self._managers.get(convert.storage_section(request))
            results = delete_checkpoints(manager, list(request.checkpoint_uuids), list(request.globs))
            return pb.DeleteResponse(results=[convert.deletion_to_proto(result) for result in results])

    def CollectGarbage(
        self, request: pb.CollectGarbageRequest, context: grpc.ServicerContext
    ) -> pb.CollectGarbageResponse:
        with _answer_errors(context):
            policy = convert.policy_from_request(request)
            manager = self._managers.get(convert.storage_section(request))
            outcome = collect_garbage(
                manager,
                [convert.candidate_from_proto(candidate) for candidate in request.checkpoints],
                policy,
                set(request.protected_uuids),
            )
            return pb.CollectGarbageResponse(
                kept=list(outcome.kept),
                deleted=[convert.deletion_to_proto(result) for result in outcome.deleted],
            )

    def CheckStorage(
        self, request: pb.CheckStorageRequest, context: grpc.ServicerContext
    ) -> pb.CheckStorageResponse:
        result = check_storage(self._managers, convert.storage_section(request))
        return pb.CheckStorageResponse(ok=result.ok, error=result.error)
