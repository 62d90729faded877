"""Conversions between checkpoint.proto messages and the domain's and storage library's types."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format, struct_pb2

from cairn.checkpoint.v1 import checkpoint_pb2 as pb
from cairn.storage import FileChunk
from services.checkpoint.domain.deletion import DeletionResult
from services.checkpoint.domain.errors import InvalidArgument
from services.checkpoint.domain.gc_policy import GcCandidate, GcPolicy


def storage_section(message: Any) -> dict[str, Any] | None:
    """The `storage` Struct of a request as a dict; None when the request has none."""
    if not message.HasField("storage"):
        return None
    struct: struct_pb2.Struct = message.storage
    return json_format.MessageToDict(struct)


def chunk_from_proto(message: pb.FileChunk) -> FileChunk:
    return FileChunk(
        path=message.path, offset=message.offset, data=message.data, mode=message.mode, eof=message.eof
    )


def chunk_to_proto(chunk: FileChunk) -> pb.FileChunk:
    return pb.FileChunk(path=chunk.path, offset=chunk.offset, data=chunk.data, mode=chunk.mode, eof=chunk.eof)


def split_upload_stream(messages: Iterator[pb.UploadChunk]) -> tuple[pb.UploadHeader, Iterator[FileChunk]]:
    """The header (the first message) and the file chunks after it. A stream that starts with a
    chunk, or has a second header, raises InvalidArgument (the chunks lazily, as they arrive)."""
    first = next(messages, None)
    if first is None:
        raise InvalidArgument("header: the stream is empty; its first message must be an UploadHeader")
    if first.WhichOneof("part") != "header":
        raise InvalidArgument("header: the first message must be an UploadHeader, not a file chunk")

    def chunks() -> Iterator[FileChunk]:
        for index, message in enumerate(messages, start=1):
            part = message.WhichOneof("part")
            if part == "header":
                raise InvalidArgument(
                    f"message {index}: a second UploadHeader; only the first message is one"
                )
            if part != "file":
                raise InvalidArgument(f"message {index}: empty UploadChunk (neither header nor file)")
            yield chunk_from_proto(message.file)

    return first.header, chunks()


def deletion_to_proto(result: DeletionResult) -> pb.DeletedCheckpoint:
    return pb.DeletedCheckpoint(
        checkpoint_uuid=result.checkpoint_uuid, remaining=result.remaining, error=result.error
    )


def candidate_from_proto(message: pb.GcCandidate) -> GcCandidate:
    return GcCandidate(
        checkpoint_uuid=message.checkpoint_uuid,
        trial_id=message.trial_id,
        steps_completed=message.steps_completed,
        searcher_metric=message.searcher_metric if message.HasField("searcher_metric") else None,
    )


def policy_from_request(request: pb.CollectGarbageRequest) -> GcPolicy:
    """The request's policy. It must be there: an absent one would read as all zeros, which keeps
    nothing. proto3 has no "unset" for the numbers, so the sender fills in the config's defaults."""
    if not request.HasField("policy"):
        raise InvalidArgument(
            "policy: required (the experiment's save_experiment_best, save_trial_best, save_trial_latest)"
        )
    message = request.policy
    return GcPolicy(
        save_experiment_best=message.save_experiment_best,
        save_trial_best=message.save_trial_best,
        save_trial_latest=message.save_trial_latest,
        smaller_is_better=message.smaller_is_better,
    )
