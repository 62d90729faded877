"""The REST API: HTTP requests under /api/ transcoded to the public gRPC service and back.

Per request: route (most specific template) → request message (path, query, body) → gRPC call
through the master's own port with the caller's credentials → JSON answer. Unary answers are one
JSON document (`?pretty` indents it); server streams are chunked NDJSON, one `{"result": ...}`
line per message, flushed as it comes, and a failure after the first message ends the stream
with one `{"error": {...}}` line. A failure before the first message is an ordinary error
answer, with the HTTP status of the gRPC code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

import grpc
import orjson
from google.api.httpbody_pb2 import HttpBody  # type: ignore[import-untyped]
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message

from cairn.metadata_keys import GATEWAY_KEY_KEY
from services.common.local_calls import HTTP_PEER_PREFIX, LocalCalls, RenderedJson
from services.common.logging import get_logger
from services.common.request_decoding import REFUSED_REQUEST_KEY
from services.master.gateway import credentials
from services.master.gateway.errors import (
    GatewayError,
    error_body,
    http_status,
    rpc_error_parts,
    stream_error_line,
)
from services.master.gateway.http_answers import (
    MAX_BODY_BYTES,
    MAX_REQUEST_BODY_BYTES,
    BodyError,
    PlainRoute,
    Response,
    StreamingResponse,
)
from services.master.gateway.http_request import HttpRequest
from services.master.gateway.http_rules import HTTP_BODY, HttpBinding, RpcMethod, http_bindings
from services.master.gateway.json_encoding import JsonEncoder
from services.master.gateway.openapi import openapi_document
from services.master.gateway.reply_cache import ReplyCache
from services.master.gateway.request_builder import MAX_QUERY_PARAMS, RequestBuilder
from services.master.gateway.router import MethodNotAllowed, NoRoute, Router
from services.master.gateway.upstream import StreamCall, Upstream, dial_address

log = get_logger(__name__)

API_PREFIX = "/api/"
# Paths outside /api/ that Determined's master answers from its own handlers and Cairn from proto
# rules all the same: the CSV files of allocation accounting.
OTHER_PREFIXES = ("/resources/",)
# The calls whose bodies may exceed MAX_REQUEST_BODY_BYTES: those that carry a model definition.
LARGE_BODY_RPCS = {"CreateExperiment": MAX_BODY_BYTES}
# Where the OpenAPI document is served: Cairn's name and Determined's.
OPENAPI_PATHS = ("/api/v1/openapi.json", "/api/v1/api.swagger.json")

# After these calls succeed the gateway sets or clears the session cookie (Determined's response
# hook does the same for its WebUI).
_SETS_COOKIE = "Login"
_CLEARS_COOKIE = "Logout"


# Streams that end on their own, without waiting for events (unless followed, which the HTTP layer
# sees in the query): short ones may be read ahead and answered whole (StreamingResponse.read_ahead).
# TrialsSample and WatchAllocationSignals wait, and are not here.
ENDING_STREAMS = frozenset({"GetMetrics", "TrialLogs", "TaskLogs", "MasterLogs", "DownloadCheckpoint"})


def _split_target(target: str) -> tuple[str, str]:
    """Path and query of a request target; the path stays percent-encoded for matching."""
    if target.startswith(("http://", "https://")):  # absolute form, as sent to proxies
        url = urlsplit(target)
        return url.path or "/", url.query
    path, _, query = target.partition("?")
    return path, query.partition("#")[0]


def _compact(obj: Any) -> bytes:
    # orjson writes a page of a hundred experiments in a tenth of the time json does. What it
    # refuses (integers past 64 bits, non-string keys) the standard library still writes.
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _pretty(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj, option=orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:
        return json.dumps(obj, ensure_ascii=False, indent=2).encode()


class RestGateway:
    def __init__(
        self,
        service: ServiceDescriptor,
        bindings: list[HttpBinding],
        upstream: Upstream,
        gateway_key: str = "",
    ) -> None:
        self.router = Router(bindings)
        # A worker process's per-boot key, sent with every call so that the master believes the
        # client address it forwards (servicers/audit_interceptor.py); "" in the master's process,
        # whose calls carry the client's address as their peer.
        self.gateway_key = gateway_key
        # Determined's few routes outside /api/ (the stock log shipper's /task-logs), by exact path.
        self.outside_api = frozenset(b.template for b in bindings if not b.template.startswith(API_PREFIX))
        self.builders: dict[tuple[str, str], RequestBuilder] = {
            (b.http_method, b.template): RequestBuilder(b) for b in bindings
        }
        self.upstream = upstream
        self.encoder = JsonEncoder()
        # Compile every response converter now, not during the first requests.
        for binding in bindings:
            self.encoder.converter(binding.rpc.response_descriptor)
        self.openapi_json = _compact(openapi_document(service, bindings))
        self.replies = ReplyCache()

    def handle(self, req: HttpRequest) -> Response | StreamingResponse | None:
        path, raw_query = _split_target(req.path)
        if not path.startswith(API_PREFIX):
            if not (path.startswith(OTHER_PREFIXES) or path in self.outside_api):
                return None
            if "text/html" in (req.headers.get("Accept") or ""):
                # A browser opening the WebUI's page of the same name (/tasks): Determined's
                # routes outside /api/ answer only clients that ask for data.
                return None
        try:
            return self._handle(req, path, raw_query)
        except Exception:
            # A bug here must still answer in the error format clients parse.
            log.exception("rest gateway failed", path=path, method=req.command)
            return self._error(GatewayError(grpc.StatusCode.INTERNAL, "internal error in the REST gateway"))

    def _handle(self, req: HttpRequest, path: str, raw_query: str) -> Response | StreamingResponse:
        refusal: GatewayError | None = None
        try:
            query = parse_qsl(raw_query, keep_blank_values=True, max_num_fields=MAX_QUERY_PARAMS)
        except ValueError as exc:
            query, refusal = [], GatewayError(grpc.StatusCode.INVALID_ARGUMENT, f"bad query string: {exc}")
        pretty = any(key == "pretty" for key, _ in query)
        if path in OPENAPI_PATHS and req.command in ("GET", "HEAD"):
            return Response(HTTPStatus.OK, self.openapi_json)
        try:
            match = self.router.match(req.command, path)
        except NoRoute:
            return self._error(GatewayError(grpc.StatusCode.NOT_FOUND, f"no API route for {path}"))
        except MethodNotAllowed as exc:
            response = self._error(
                GatewayError(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"{req.command} is not allowed on {path}; allowed: {', '.join(exc.allowed)}",
                    http_status_override=HTTPStatus.METHOD_NOT_ALLOWED,
                )
            )
            response.headers = {"Allow": ", ".join(exc.allowed)}
            return response
        binding = match.binding
        try:
            metadata = credentials.forwarded_metadata(req.headers, req.client_address[0])
            if self.gateway_key:
                metadata = [(k, v) for k, v in metadata if k != GATEWAY_KEY_KEY]
                metadata.append((GATEWAY_KEY_KEY, self.gateway_key))
        except GatewayError as exc:
            return self._error(exc)
        peer = HTTP_PEER_PREFIX + req.client_address[0]
        request: Message | None = None
        if refusal is None:
            try:
                limit = LARGE_BODY_RPCS.get(binding.rpc.name, MAX_REQUEST_BODY_BYTES)
                body = req.read_body(limit) if binding.body else b""
                request = self.builders[(binding.http_method, binding.template)].build(
                    match.path_params, query, body
                )
            except BodyError as exc:
                code = grpc.StatusCode.INVALID_ARGUMENT
                refusal = GatewayError(code, exc.message, http_status_override=exc.status)
            except GatewayError as exc:
                refusal = exc
        if refusal is not None or request is None:
            return self._refused(binding, metadata, peer, refusal)
        if binding.rpc.server_streaming:
            # A stream may wait long for its first message (a followed log): not in a turn.
            req.leave_turns()
            return self._stream(binding, request, metadata, peer)
        return self._unary(binding, request, metadata, pretty, peer)

    def _refused(
        self, binding: HttpBinding, metadata: list[tuple[str, str]], peer: str, refusal: GatewayError | None
    ) -> Response:
        """A request the gateway could not build (its body, query or path) is answered only once
        its caller is known, as every call is: the call goes on with an empty message and the mark
        of a refused request, which the server refuses after its interceptors have established the
        caller (services/common/request_decoding.py). A caller without credentials hears 401 (or
        403), whatever its body; one with them hears what was wrong with the request."""
        refusal = refusal or GatewayError(grpc.StatusCode.INVALID_ARGUMENT, "request: could not be built")
        rpc = binding.rpc
        marked = [*metadata, (REFUSED_REQUEST_KEY, "1")]
        try:
            if rpc.server_streaming:
                call = self.upstream.call_stream(rpc, rpc.request_type(), marked, peer)
                try:
                    next(iter(call), None)
                finally:
                    call.close()
            else:
                self.upstream.call_unary(rpc, rpc.request_type(), marked, peer)
        except grpc.RpcError as exc:
            code, message = rpc_error_parts(exc)
            if code != grpc.StatusCode.INVALID_ARGUMENT:
                return self._rpc_error(rpc, code, message)
        return self._error(refusal)

    def _unary(
        self,
        binding: HttpBinding,
        request: Message,
        metadata: list[tuple[str, str]],
        pretty: bool,
        peer: str,
    ) -> Response:
        rpc = binding.rpc
        try:
            reply = self.upstream.call_unary(rpc, request, metadata, peer)
        except grpc.RpcError as exc:
            code, message = rpc_error_parts(exc)
            return self._rpc_error(rpc, code, message)
        if rpc.response_descriptor.full_name == HTTP_BODY:
            body: HttpBody = reply
            return Response(HTTPStatus.OK, body.data, body.content_type or "application/octet-stream")
        cacheable = rpc.name not in (_SETS_COOKIE, _CLEARS_COOKIE)
        key = ReplyCache.key_of(rpc.full_path, pretty, reply) if cacheable else None
        body = self.replies.get(key) if key is not None else None
        if body is not None:
            return Response(HTTPStatus.OK, body)
        if pretty:
            body = _pretty(self._payload(binding, reply))
        else:
            body = self._compact_json(lambda: self._payload(binding, reply))
        response = Response(HTTPStatus.OK, body)
        if key is not None:
            self.replies.put(key, response.body)
        token = getattr(reply, "token", "") if rpc.name == _SETS_COOKIE else ""
        if token:
            response.headers = {"Set-Cookie": credentials.login_cookie(str(token))}
        elif rpc.name == _CLEARS_COOKIE:
            response.headers = {"Set-Cookie": credentials.logout_cookie()}
        return response

    def _result_line(self, binding: HttpBinding, message: Message | RenderedJson) -> bytes:
        if isinstance(message, RenderedJson):
            # Already the message's JSON (a local handler's): spliced in as written.
            if not binding.response_body:
                return b'{"result":' + message.json + b"}\n"
            field = binding.rpc.response_descriptor.fields_by_name[binding.response_body].json_name
            return _compact({"result": orjson.loads(message.json).get(field)}) + b"\n"
        return self._compact_json(lambda: {"result": self._payload(binding, message)}) + b"\n"

    def _compact_json(self, build: Callable[[], Any]) -> bytes:
        """`build()`'s object as compact JSON, its memoized messages spliced in as stored."""
        with self.encoder.fragments():
            obj = build()
        try:
            return orjson.dumps(obj)
        except orjson.JSONEncodeError:
            return _compact(build())  # what orjson refuses, built again as plain objects

    def _payload(self, binding: HttpBinding, reply: Message) -> Any:
        if not binding.response_body:
            return self.encoder.to_object(reply)
        # `response_body: "field"` answers with that field alone.
        whole = self.encoder.to_object(reply)
        field = reply.DESCRIPTOR.fields_by_name[binding.response_body]
        return whole.get(field.json_name)

    def _stream(
        self, binding: HttpBinding, request: Message, metadata: list[tuple[str, str]], peer: str
    ) -> Response | StreamingResponse:
        rpc = binding.rpc
        try:
            call = self.upstream.call_stream(rpc, request, metadata, peer)
        except grpc.RpcError as exc:
            code, message = rpc_error_parts(exc)
            return self._rpc_error(rpc, code, message)
        messages = iter(call)
        try:
            first = next(messages)
        except StopIteration:
            return Response(HTTPStatus.OK, b"")
        except grpc.RpcError as exc:
            code, message = rpc_error_parts(exc)
            return self._rpc_error(rpc, code, message)
        lines = self._lines(binding, call, first, messages)
        return StreamingResponse(HTTPStatus.OK, lines, call.cancel, read_ahead=rpc.name in ENDING_STREAMS)

    def _lines(
        self, binding: HttpBinding, call: StreamCall, first: Message, rest: Iterator[Message]
    ) -> Iterator[bytes]:
        try:
            yield self._result_line(binding, first)
            for message in rest:
                yield self._result_line(binding, message)
        except grpc.RpcError as exc:
            code, message_text = rpc_error_parts(exc)
            if code != grpc.StatusCode.CANCELLED:
                log.info("rest stream failed", method=binding.rpc.name, code=code.name, error=message_text)
            yield _compact(stream_error_line(code, message_text)) + b"\n"
        except Exception:
            log.exception("rest stream failed in the gateway", method=binding.rpc.name)
            yield (
                _compact(stream_error_line(grpc.StatusCode.INTERNAL, "internal error in the REST gateway"))
                + b"\n"
            )
        finally:
            call.close()  # a no-op once the stream has ended; stops it when the answer was cut short

    def _rpc_error(self, rpc: RpcMethod, code: grpc.StatusCode, message: str) -> Response:
        status = http_status(code)
        if status >= 500:
            log.warning("rest call failed", method=rpc.name, code=code.name, error=message)
        return Response(status, _compact(error_body(code, message)))

    @staticmethod
    def _error(error: GatewayError) -> Response:
        return Response(error.status, _compact(error_body(error.code, error.message)))


class ClosesWithServer(Protocol):
    close_hooks: list[Callable[[], None]]


def rest_routes(
    server: ClosesWithServer,
    service: ServiceDescriptor,
    grpc_host: str,
    grpc_port: int,
    local: LocalCalls | None = None,
    gateway_key: str = "",
) -> list[PlainRoute]:
    """The REST gateway for `service` as routes of `server`. Calls run through `local` (the
    master's own handlers, in-process) when given; everything without `local` dials the gRPC
    server at grpc_host:grpc_port, presenting `gateway_key` (a worker process's) with each call.
    The channel closes with the HTTP server."""
    bindings = http_bindings(service)
    upstream = Upstream(
        dial_address(grpc_host, grpc_port), {b.rpc.full_path: b.rpc for b in bindings}.values(), local=local
    )
    server.close_hooks.append(upstream.close)
    gateway = RestGateway(service, bindings, upstream, gateway_key)
    log.info(
        "rest gateway ready", routes=len(bindings), grpc=upstream.address, in_process=upstream.in_process
    )
    return [gateway.handle]
