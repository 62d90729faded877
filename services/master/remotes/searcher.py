"""Client of a SearcherService: the built-in searcher, or a custom one named in an experiment."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher.v1 import searcher_pb2_grpc
from services.common.channels import internal_channel
from services.master.domain.kernel.errors import InvalidArgument
from services.master.remotes.errors import translate

CALL_TIMEOUT_S = 30.0


class SearcherClient:
    def __init__(self, address: str, cluster_token: str | None, replays_exactly: bool) -> None:
        self.address = address
        self.replays_exactly = replays_exactly
        self._channel = internal_channel(address, cluster_token)
        self._stub = searcher_pb2_grpc.SearcherServiceStub(self._channel)
        # Whether the server takes HandleEvents (a custom searcher may predate it).
        self._batches = True

    def _call(self, method: str, request: object) -> object:
        try:
            return getattr(self._stub, method)(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise translate("searcher", self.address, exc) from None

    def start(self, session_id: str, spec: pb.SearchSpec) -> pb.SearcherResponse:
        return self._call("StartSession", pb.StartSessionRequest(session_id=session_id, spec=spec))  # type: ignore[return-value]

    def handle(
        self, session_id: str, after_seq: int, event: pb.SearcherEvent, state_needed: bool = True
    ) -> pb.SearcherResponse:
        request = pb.HandleEventRequest(
            session_id=session_id, after_seq=after_seq, event=event, state_not_needed=not state_needed
        )
        return self._call("HandleEvent", request)  # type: ignore[return-value]

    def handle_many(
        self, session_id: str, after_seq: int, events: Sequence[pb.SearcherEvent], state_needed: bool = True
    ) -> pb.SearcherResponse:
        """Several events as one answer (HandleEvents); one at a time where the server predates it
        (UNIMPLEMENTED, remembered): then only the first event is sent, and the answer says so by
        its snapshot's seq (after_seq + 1). Without `state_needed` the answer may carry no state."""
        if len(events) > 1 and self._batches:
            request = pb.HandleEventsRequest(
                session_id=session_id, after_seq=after_seq, events=events, state_not_needed=not state_needed
            )
            try:
                return self._stub.HandleEvents(request, timeout=CALL_TIMEOUT_S)
            except grpc.RpcError as exc:
                if not (isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNIMPLEMENTED):
                    raise translate("searcher", self.address, exc) from None
                self._batches = False
        return self.handle(session_id, after_seq, events[0], state_needed)

    def restore(self, session_id: str, spec: pb.SearchSpec, snapshot: pb.Snapshot) -> None:
        self._call(
            "RestoreSession", pb.RestoreSessionRequest(session_id=session_id, spec=spec, snapshot=snapshot)
        )

    def close(self, session_id: str) -> None:
        self._call("CloseSession", pb.CloseSessionRequest(session_id=session_id))

    def preview(self, spec: pb.SearchSpec) -> pb.PreviewSearchResponse:
        return self._call("PreviewSearch", pb.PreviewSearchRequest(spec=spec))  # type: ignore[return-value]

    def shutdown(self) -> None:
        self._channel.close()


class SearcherDirectory:
    """Which searcher runs an experiment's search: the built-in one, a custom one at the address its
    config names, or a registered plug-in (`--searcher-plugin NAME=HOST:PORT`). Clients are made on
    first use and kept."""

    def __init__(
        self, default_address: str, cluster_token: str | None, plugins: Mapping[str, str] | None = None
    ) -> None:
        self._token = cluster_token
        self.default = SearcherClient(default_address, cluster_token, replays_exactly=True)
        self._plugins = dict(plugins or {})
        self._custom: dict[str, SearcherClient] = {}
        self._lock = threading.Lock()

    def for_config(self, config: Mapping[str, Any]) -> SearcherClient:
        """The searcher of an experiment config; InvalidArgument for an unknown plug-in name."""
        searcher = config.get("searcher") or {}
        if searcher.get("name") != "custom":
            return self.default
        if searcher.get("address"):
            return self._client(str(searcher["address"]))
        plugin = str(searcher.get("plugin") or "")
        if plugin not in self._plugins:
            known = ", ".join(sorted(self._plugins)) or "none"
            raise InvalidArgument(
                f"searcher.plugin: no searcher plug-in named '{plugin}' (registered: {known})"
            )
        return self._client(self._plugins[plugin])

    def _client(self, address: str) -> SearcherClient:
        with self._lock:
            client = self._custom.get(address)
            if client is None:
                # Custom searchers are the user's processes: they get no cluster token, and
                # nothing says their sessions are deterministic.
                client = self._custom[address] = SearcherClient(address, None, replays_exactly=False)
            return client

    def shutdown(self) -> None:
        self.default.shutdown()
        for client in self._custom.values():
            client.shutdown()
