"""The `google.api.http` rules of a gRPC service, read from its generated descriptors.

Nothing about the REST surface is written twice: paths, verbs and body fields come from the
`option (google.api.http)` of each method in proto/, as compiled into the `_pb2` modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from google.api import annotations_pb2, http_pb2  # type: ignore[import-untyped]
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message

# The verbs of HttpRule's `pattern` oneof that name an HTTP method directly.
_VERBS = ("get", "put", "post", "delete", "patch")

# An RPC answering this message is answered with its bytes and content type, not as JSON (as
# grpc-gateway answers google.api.HttpBody).
HTTP_BODY = "google.api.HttpBody"


@dataclass(frozen=True)
class HttpBinding:
    """One HTTP route of one RPC."""

    http_method: str  # "GET", "POST", ...
    template: str  # "/api/v1/trials/{trial_id}/logs"
    body: str  # "" (none), "*" (the whole request) or a top-level field name
    response_body: str  # "" (the whole response) or a top-level field name
    rpc: RpcMethod


@dataclass(frozen=True)
class RpcMethod:
    """An RPC as the gateway calls it."""

    name: str
    full_path: str  # "/cairn.api.v1.Cairn/GetExperiments"
    request_type: type[Message]
    response_type: type[Message]
    server_streaming: bool
    client_streaming: bool
    descriptor: MethodDescriptor

    @property
    def request_descriptor(self) -> Descriptor:
        return cast(Descriptor, self.request_type.DESCRIPTOR)

    @property
    def response_descriptor(self) -> Descriptor:
        return cast(Descriptor, self.response_type.DESCRIPTOR)


def rpc_method(method: MethodDescriptor) -> RpcMethod:
    return RpcMethod(
        name=method.name,
        full_path=f"/{method.containing_service.full_name}/{method.name}",
        request_type=message_factory.GetMessageClass(method.input_type),
        response_type=message_factory.GetMessageClass(method.output_type),
        server_streaming=method.server_streaming,
        client_streaming=method.client_streaming,
        descriptor=method,
    )


def _bindings_of_rule(rule: http_pb2.HttpRule, rpc: RpcMethod) -> list[HttpBinding]:
    kind = rule.WhichOneof("pattern")
    if kind is None:
        return []
    if kind == "custom":
        verb, template = rule.custom.kind.upper(), rule.custom.path
    else:
        if kind not in _VERBS:
            raise ValueError(f"{rpc.name}: unsupported http pattern {kind!r}")
        verb, template = kind.upper(), getattr(rule, kind)
    found = [HttpBinding(verb, template, rule.body, rule.response_body, rpc)]
    for extra in rule.additional_bindings:
        found.extend(_bindings_of_rule(extra, rpc))
    return found


def http_bindings(service: ServiceDescriptor) -> list[HttpBinding]:
    """Every HTTP binding of every method of `service`, in declaration order.

    Client-streaming methods cannot be expressed as one HTTP request, as in grpc-gateway v1.
    """
    bindings: list[HttpBinding] = []
    for method in service.methods:
        options = method.GetOptions()
        if not options.HasExtension(annotations_pb2.http):
            continue
        rpc = rpc_method(method)
        if rpc.client_streaming:
            raise ValueError(f"{rpc.name}: client-streaming methods cannot have an http rule")
        bindings.extend(_bindings_of_rule(options.Extensions[annotations_pb2.http], rpc))
    return bindings
