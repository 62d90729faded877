"""An HTTP request (path variables, query string, JSON body) to the gRPC request message, with
grpc-gateway v1's rules:

- `body: "*"`: the JSON body is the whole request; the query string is not read.
- `body: "field"`: the JSON body is that field; other fields may come from the query string.
- no body: every field not bound by the path may come from the query string.
- Path variables are applied after the body, so they win over the same field in the body.
- Query keys are field paths, each part the proto name or the JSON name (`order_by`, `orderBy`,
  `metrics.trial_id`); a repeated field takes the key once per value (`states=A&states=B`);
  enums take names or numbers, bools true/false (and Go's other spellings: 1, t, T, TRUE, ...),
  Timestamps RFC 3339, 64-bit integers decimal text. Keys naming no field are ignored, keys
  naming a path-bound or body field too, as grpc-gateway v1 does.

Malformed input raises GatewayError(INVALID_ARGUMENT) naming the parameter or field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from google.protobuf import duration_pb2, json_format, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from services.master.gateway.errors import bad_request
from services.master.gateway.http_rules import HttpBinding
from services.master.gateway.path_template import parse_template

_INT_RANGES: dict[int, tuple[int, int]] = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_INTEGER = re.compile(r"[+-]?[0-9]+")
# strconv.ParseBool's spellings, which grpc-gateway accepts.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_WRAPPERS = frozenset(
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)
# Query parameters the gateway itself reads; never request fields.
RESERVED_QUERY_KEYS = frozenset({"pretty"})
# More query parameters than this is not a real client.
MAX_QUERY_PARAMS = 1000
# protobuf's ParseDict looks for unpaired surrogates in every string with a regular expression:
# ~56 ms per million characters, holding the GIL, so a 100 MB config stalled the whole master (its
# /healthz with it) for over 5 s before the config's own size check refused it. orjson refuses
# unpaired surrogates itself, so a decoded body's strings need no second look: those this long
# are set on the message directly (what ParseDict would do after its check).
LONG_STRING_CHARS = 64 * 1024


def _fields_by_any_name(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    names: dict[str, FieldDescriptor] = {}
    for field in descriptor.fields:
        names[field.json_name] = field
        names[field.name] = field
    return names


def is_scalar_like(field: FieldDescriptor) -> bool:
    """Whether one value of the field can be written as one query-string or path value."""
    if field.message_type is None:
        return True
    name = field.message_type.full_name
    return name in _WRAPPERS or name in (
        "google.protobuf.Timestamp",
        "google.protobuf.Duration",
        "google.protobuf.FieldMask",
    )


def is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def text_to_json_value(field: FieldDescriptor, text: str, name: str) -> Any:
    """One textual value of a scalar-like field as the JSON value json_format reads."""
    if field.message_type is not None:
        wkt = field.message_type.full_name
        if wkt == "google.protobuf.Timestamp":
            try:
                timestamp_pb2.Timestamp().FromJsonString(text)
            except ValueError as exc:
                raise bad_request(f"{name}: not an RFC 3339 timestamp: {text!r} ({exc})") from None
            return text
        if wkt == "google.protobuf.Duration":
            try:
                duration_pb2.Duration().FromJsonString(text)
            except ValueError as exc:
                raise bad_request(f"{name}: not a duration like '1.5s': {text!r} ({exc})") from None
            return text
        if wkt == "google.protobuf.FieldMask":
            return text
        return text_to_json_value(field.message_type.fields_by_name["value"], text, name)
    if field.enum_type is not None:
        values = field.enum_type.values_by_name
        if text in values:
            return text
        if _INTEGER.fullmatch(text) and int(text) in field.enum_type.values_by_number:
            return int(text)
        raise bad_request(f"{name}: {text!r} is not one of {', '.join(values)}")
    kind = field.type
    if kind == FieldDescriptor.TYPE_BOOL:
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise bad_request(f"{name}: {text!r} is not a boolean (true or false)")
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        if not _INTEGER.fullmatch(text):
            raise bad_request(f"{name}: {text!r} is not an integer")
        number = int(text)
        if not low <= number <= high:
            raise bad_request(f"{name}: {number} is out of range [{low}, {high}]")
        return number
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        try:
            float(text)
        except ValueError:
            raise bad_request(f"{name}: {text!r} is not a number") from None
        return text  # json_format reads numbers from text, NaN and Infinity included
    if kind == FieldDescriptor.TYPE_BYTES:
        return text  # base64; json_format checks it
    return text


@dataclass(frozen=True)
class _FieldPath:
    fields: tuple[FieldDescriptor, ...]

    @property
    def proto_path(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def leaf(self) -> FieldDescriptor:
        return self.fields[-1]


class RequestBuilder:
    """Builds requests for one binding; everything that depends only on the binding is done once."""

    def __init__(self, binding: HttpBinding) -> None:
        self.binding = binding
        self.request_type = binding.rpc.request_type
        descriptor = binding.rpc.request_descriptor
        self._names: dict[str, dict[str, FieldDescriptor]] = {}
        self.path_fields: dict[str, _FieldPath] = {}
        for variable in parse_template(binding.template).variables:
            path = self._resolve(descriptor, variable.split("."))
            if path is None or not is_scalar_like(path.leaf) or path.leaf.is_repeated:
                raise ValueError(f"{binding.rpc.name}: path variable {variable!r} is not a scalar field")
            self.path_fields[variable] = path
        self.body_field: FieldDescriptor | None = None
        if binding.body and binding.body != "*":
            self.body_field = descriptor.fields_by_name.get(binding.body)
            if self.body_field is None:
                raise ValueError(f"{binding.rpc.name}: body field {binding.body!r} does not exist")
        # Query keys under these proto paths are ignored (grpc-gateway's filter).
        self._query_filter = [p.proto_path for p in self.path_fields.values()]
        if self.body_field is not None:
            self._query_filter.append((self.body_field.name,))

    @property
    def reads_query(self) -> bool:
        return self.binding.body != "*"

    def _lookup(self, descriptor: Descriptor) -> dict[str, FieldDescriptor]:
        found = self._names.get(descriptor.full_name)
        if found is None:
            found = self._names[descriptor.full_name] = _fields_by_any_name(descriptor)
        return found

    def _resolve(self, descriptor: Descriptor, parts: list[str]) -> _FieldPath | None:
        fields: list[FieldDescriptor] = []
        current: Descriptor | None = descriptor
        for i, part in enumerate(parts):
            if current is None:
                return None
            field = self._lookup(current).get(part)
            if field is None:
                return None
            fields.append(field)
            last = i == len(parts) - 1
            if not last:
                if field.is_repeated or field.message_type is None or is_scalar_like(field):
                    return None
                current = field.message_type
        return _FieldPath(tuple(fields))

    def build(self, path_params: dict[str, str], query: Iterable[tuple[str, str]], body: bytes) -> Message:
        request = self.request_type()
        if self.binding.body:
            self._apply_body(request, body)
        if path_params:
            nested: dict[str, Any] = {}
            for variable, text in path_params.items():
                path = self.path_fields[variable]
                _put(nested, path.proto_path, text_to_json_value(path.leaf, text, variable))
            self._parse_dict(nested, request, "path")
        if self.reads_query:
            self._apply_query(request, query)
        return request

    def _apply_body(self, request: Message, body: bytes) -> None:
        if not body.strip():
            return  # grpc-gateway v1 reads an empty body as an empty message
        try:
            # orjson: it refuses nesting past 1,024 levels itself, without recursing in Python (the
            # json module raises RecursionError on deep bodies); protobuf refuses past 100 after.
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"request body is not valid JSON: {exc}") from None
        if self.body_field is None:
            if not isinstance(decoded, dict):
                raise bad_request("request body must be a JSON object")
            values = decoded
        else:
            values = {self.body_field.name: decoded}
        # Long strings skip ParseDict's scan: the request's own fields (which covers a string body
        # field), then, for a message body field, that message's own fields.
        lifted = self._lift_long_strings(values, self.binding.rpc.request_descriptor)
        inner: list[tuple[FieldDescriptor, str]] = []
        body_message = None if self.body_field is None else self.body_field.message_type
        if body_message is not None and isinstance(decoded, dict):
            inner = self._lift_long_strings(decoded, body_message)
        self._parse_dict(values, request, "body")
        _set_strings(request, lifted)
        if inner and self.body_field is not None:
            _set_strings(getattr(request, self.body_field.name), inner)

    def _lift_long_strings(
        self, values: dict[str, Any], descriptor: Descriptor
    ) -> list[tuple[FieldDescriptor, str]]:
        """Takes the long strings of a message's own plain string fields out of `values` (decoded
        by orjson), to be set after ParseDict (LONG_STRING_CHARS). A field named twice (proto and
        JSON name) or in a oneof stays for ParseDict, which settles those as it always did."""
        names = self._lookup(descriptor)
        lifted: list[tuple[FieldDescriptor, str]] = []
        for key, value in list(values.items()):
            if not isinstance(value, str) or len(value) < LONG_STRING_CHARS:
                continue
            field = names.get(key)
            if field is None or not _is_plain_string(field):
                continue
            if field.name != field.json_name and field.name in values and field.json_name in values:
                continue
            del values[key]
            lifted.append((field, value))
        return lifted

    def _apply_query(self, request: Message, query: Iterable[tuple[str, str]]) -> None:
        grouped: dict[tuple[str, ...], tuple[str, _FieldPath, list[str]]] = {}
        count = 0
        for key, text in query:
            count += 1
            if count > MAX_QUERY_PARAMS:
                raise bad_request(f"more than {MAX_QUERY_PARAMS} query parameters")
            if key in RESERVED_QUERY_KEYS:
                continue
            path = self._resolve(self.binding.rpc.request_descriptor, key.split("."))
            if path is None or not is_scalar_like(path.leaf) or is_map(path.leaf):
                continue
            proto_path = path.proto_path
            if any(proto_path[: len(f)] == f for f in self._query_filter):
                continue
            entry = grouped.setdefault(proto_path, (key, path, []))
            entry[2].append(text)
        if not grouped:
            return
        nested: dict[str, Any] = {}
        for proto_path, (key, path, texts) in grouped.items():
            leaf = path.leaf
            if leaf.is_repeated:
                _put(nested, proto_path, [text_to_json_value(leaf, t, key) for t in texts])
            elif len(texts) > 1:
                raise bad_request(f"{key}: given {len(texts)} times but takes one value")
            else:
                _put(nested, proto_path, text_to_json_value(leaf, texts[0], key))
        self._parse_dict(nested, request, "query")

    @staticmethod
    def _parse_dict(values: dict[str, Any], request: Message, where: str) -> None:
        try:
            json_format.ParseDict(values, request, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise bad_request(f"invalid {where}: {exc}") from None
        except (ValueError, TypeError, RecursionError) as exc:
            raise bad_request(f"invalid {where}: {exc}") from None


def _is_plain_string(field: FieldDescriptor) -> bool:
    """A singular string field outside any oneof: setting it directly is all ParseDict would do."""
    return (
        field.type == FieldDescriptor.TYPE_STRING and not field.is_repeated and field.containing_oneof is None
    )


def _set_strings(message: Message, lifted: list[tuple[FieldDescriptor, str]]) -> None:
    for field, value in lifted:
        setattr(message, field.name, value)


def _put(nested: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        nested = nested.setdefault(part, {})
    nested[path[-1]] = value
