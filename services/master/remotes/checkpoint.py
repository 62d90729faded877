"""Client of the CheckpointService."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from cairn.checkpoint.v1 import checkpoint_pb2 as pb
from cairn.checkpoint.v1 import checkpoint_pb2_grpc
from services.common.channels import internal_channel
from services.master.domain.kernel.ports import storage_struct
from services.master.remotes.errors import translate

CALL_TIMEOUT_S = 120.0


class CheckpointClient:
    def __init__(self, address: str, cluster_token: str | None) -> None:
        self.address = address
        self._channel = internal_channel(address, cluster_token)
        self._stub = checkpoint_pb2_grpc.CheckpointServiceStub(self._channel)

    def collect_garbage(self, request: pb.CollectGarbageRequest) -> pb.CollectGarbageResponse:
        try:
            return self._stub.CollectGarbage(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise translate("checkpoint", self.address, exc) from None

    def delete(
        self, storage: dict[str, Any], uuids: list[str], globs: list[str] | None = None
    ) -> pb.DeleteResponse:
        request = pb.DeleteRequest(storage=storage_struct(storage), checkpoint_uuids=uuids, globs=globs or [])
        try:
            return self._stub.Delete(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise translate("checkpoint", self.address, exc) from None

    def download(self, storage: dict[str, Any], uuid: str) -> Iterator[pb.DownloadChunk]:
        request = pb.DownloadRequest(storage=storage_struct(storage), checkpoint_uuid=uuid)
        try:
            yield from self._stub.Download(request, timeout=3600)
        except grpc.RpcError as exc:
            raise translate("checkpoint", self.address, exc) from None

    def list_files(self, storage: dict[str, Any], uuid: str) -> pb.ListFilesResponse:
        request = pb.ListFilesRequest(storage=storage_struct(storage), checkpoint_uuid=uuid)
        try:
            return self._stub.ListFiles(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise translate("checkpoint", self.address, exc) from None

    def shutdown(self) -> None:
        self._channel.close()
