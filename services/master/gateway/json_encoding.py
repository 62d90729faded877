"""Protobuf messages to JSON-ready Python objects, the way grpc-gateway's marshaler writes them.

The output is what `json_format.MessageToDict(m, always_print_fields_with_no_presence=True)` gives
(lowerCamelCase names, every field without presence printed with its default, enums by name,
64-bit integers as strings, bytes as base64, Timestamps as RFC 3339), with three differences taken
from Go's protojson with EmitUnpopulated, which Determined's gateway uses:

- an unset singular message field outside any oneof prints as null (`"container": null` for a
  free slot): clients index these keys and read a KeyError where the key is missing;

- a whole number inside a Struct/Value prints as an integer (`"batches": 100`, not `100.0`):
  configs and hyperparameters go through Struct, which keeps only doubles, and clients compare
  these values with the integers they submitted;
- NaN and infinities inside a Struct/Value print as the strings "NaN", "Infinity", "-Infinity"
  (json_format refuses them; a diverging loss must not turn a metrics read into an error).

json_format walks descriptors on every call; listing 100 experiments with their configs spent
most of its time there. Here each message type is compiled once into a list of field plans, and
the larger messages that carry Structs (experiments, trials, configs) are memoized by their
serialized bytes: most of them never change once written, and the same bytes always print the
same JSON. Every call returns objects of its own (or, within `fragments`, the stored JSON itself).
"""

from __future__ import annotations

import base64
import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import orjson
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.internal import type_checkers
from google.protobuf.message import Message

from services.common.json_numbers import json_double as _double
from services.common.json_numbers import struct_number
from services.common.lru import BoundedLru

Converter = Callable[[Any], Any]

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)
_WRAPPERS = frozenset(
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)
_STRING_WKTS = frozenset(
    {"google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"}
)


def _int64(value: int) -> str:
    return str(value)


def _bytes(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _float(value: float) -> float | str:
    if math.isfinite(value):
        return type_checkers.ToShortestFloat(value)
    return _double(value)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return struct_number(value.number_value)
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return _struct(value.struct_value)
    if kind == "list_value":
        return [_value(v) for v in value.list_value.values]
    return None  # unset or null_value


def _struct(struct: Any) -> dict[str, Any]:
    return {key: _value(v) for key, v in struct.fields.items()}


def _list_value(lst: Any) -> list[Any]:
    return [_value(v) for v in lst.values]


def _to_json_string(message: Any) -> str:
    return str(message.ToJsonString())


class _Memo:
    """A bounded LRU from (type, deterministic serialization) to the converted object, kept as its
    JSON bytes and parsed again (orjson, in C) on a hit.

    Kept as Python objects, the memo held hundreds of thousands of dicts, and every full garbage
    collection walked them all: under load the master stopped for up to 190 ms at a time, which
    was the whole p99 of a REST read. Bytes are not tracked by the collector.
    """

    def __init__(self, max_bytes: int) -> None:
        self._entries: BoundedLru[tuple[str, bytes], bytes] = BoundedLru(
            max_bytes, cost=lambda key, encoded: len(key[1]) + len(encoded)
        )
        self._max_entry_bytes = min(MEMO_MAX_ENTRY_BYTES, max_bytes // 16)
        # Set in a thread while its output goes straight to orjson (JsonEncoder.fragments).
        self._local = threading.local()

    @contextlib.contextmanager
    def fragments(self) -> Iterator[None]:
        before = getattr(self._local, "on", False)
        self._local.on = True
        try:
            yield
        finally:
            self._local.on = before

    @property
    def bytes(self) -> int:
        """Keys and JSON values held, together."""
        return self._entries.total_cost

    def wrap(self, type_name: str, convert: Converter) -> Converter:
        def memoized(message: Any) -> Any:
            # Serialized once: the key, and its length the size (upb's ByteSize serializes too).
            serialized = message.SerializeToString(deterministic=True)
            if not MEMO_MIN_BYTES <= len(serialized) <= self._max_entry_bytes:
                return convert(message)
            key = (type_name, serialized)
            found = self._entries.get(key)
            fragments = getattr(self._local, "on", False)
            if found is not None:
                return orjson.Fragment(found) if fragments else orjson.loads(found)
            value = convert(message)
            try:
                encoded = orjson.dumps(value)
            except orjson.JSONEncodeError:
                return value  # what orjson cannot write (integers past 64 bits) is not kept
            self._entries.put(key, encoded)
            return orjson.Fragment(encoded) if fragments else value

        return memoized


# Below this, converting is about as cheap as serializing to look the result up.
MEMO_MIN_BYTES = 256
# Serialized keys and JSON values together.
MEMO_MAX_BYTES = 32 * 1024 * 1024
# Larger messages are whole replies (a page of a hundred experiments): rarely asked for twice with
# the same content, and serializing one only to look it up costs as much as a tenth of converting it.
MEMO_MAX_ENTRY_BYTES = 64 * 1024


def _carries_struct(descriptor: Descriptor) -> bool:
    """Whether a message holds a Struct of its own (a field of type Struct, or one reached through
    singular message fields): an entity worth memoizing (an experiment, a trial, a metrics report).

    A Struct reached only through a repeated field makes a container — a page of experiments, a
    batch of reports — which is not memoized itself: its elements are, and the container's
    content seldom repeats, so serializing it for a lookup would be wasted.
    """
    seen: set[str] = set()

    def walk(d: Descriptor) -> bool:
        if d.full_name in seen:
            return False
        seen.add(d.full_name)
        for field in d.fields:
            sub = field.message_type
            if sub is None or (field.is_repeated and not sub.GetOptions().map_entry):
                continue
            if sub.GetOptions().map_entry:
                sub = sub.fields_by_name["value"].message_type
                if sub is None:
                    continue
            if sub.full_name == "google.protobuf.Struct" or walk(sub):
                return True
        return False

    return walk(descriptor)


_ABSENT_UNLESS_SET = object()
_NULL_UNLESS_SET = object()


def _presence(field: FieldDescriptor) -> object:
    """How an unset field prints, as Go's protojson with EmitUnpopulated (Determined's gateway):
    a singular message outside any oneof as null, a member of a oneof (proto3 `optional` is a
    oneof of one) not at all; every field without presence always, with its default."""
    if not field.has_presence:
        return None
    if field.message_type is not None and field.containing_oneof is None:
        return _NULL_UNLESS_SET
    return _ABSENT_UNLESS_SET


def _map_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


class JsonEncoder:
    """Compiles and caches one converter per message type; safe to share between threads."""

    def __init__(self, memo_max_bytes: int = MEMO_MAX_BYTES) -> None:
        self._converters: dict[str, Converter] = {}
        self._lock = threading.RLock()
        self._memo = _Memo(memo_max_bytes) if memo_max_bytes > 0 else None

    def to_object(self, message: Message) -> Any:
        return self.converter(cast(Descriptor, message.DESCRIPTOR))(message)

    def fragments(self) -> contextlib.AbstractContextManager[None]:
        """Within it, this thread's to_object gives memoized messages as orjson.Fragment (their JSON
        as stored), not as objects parsed again: for output that orjson writes at once. A page of
        a hundred experiments spent a third of its time parsing what it then wrote back."""
        return self._memo.fragments() if self._memo is not None else contextlib.nullcontext()

    def converter(self, descriptor: Descriptor) -> Converter:
        found = self._converters.get(descriptor.full_name)
        if found is not None:
            return found
        with self._lock:
            return self._compile(descriptor)

    def _compile(self, descriptor: Descriptor) -> Converter:
        """Called with the lock held (nested message types compile from inside)."""
        name = descriptor.full_name
        if name in self._converters:
            return self._converters[name]
        # Recursive types refer to themselves: a forwarding entry breaks the cycle.
        self._converters[name] = lambda m: self._converters[name](m)  # noqa: PLW0108 (late lookup)
        converter = self._build(descriptor)
        self._converters[name] = converter
        return converter

    def _build(self, descriptor: Descriptor) -> Converter:
        name = descriptor.full_name
        if name == "google.protobuf.Struct":
            return self._memo.wrap(name, _struct) if self._memo else _struct
        if name == "google.protobuf.Value":
            return _value
        if name == "google.protobuf.ListValue":
            return _list_value
        if name in _STRING_WKTS:
            return _to_json_string
        if name in _WRAPPERS:
            inner = self._value_converter(descriptor.fields_by_name["value"])
            return (lambda m: m.value) if inner is None else (lambda m: inner(m.value))
        if name == "google.protobuf.Any":
            return lambda m: json_format.MessageToDict(m, always_print_fields_with_no_presence=True)
        regular = self._regular(descriptor)
        if self._memo is not None and _carries_struct(descriptor):
            return self._memo.wrap(name, regular)
        return regular

    def _regular(self, descriptor: Descriptor) -> Converter:
        # (attribute, json name, presence, converter or None for values printed as is); presence is
        # _ABSENT_UNLESS_SET, _NULL_UNLESS_SET or None (printed always).
        plans: list[tuple[str, str, object, Converter | None]] = []
        for field in descriptor.fields:
            plans.append((field.name, field.json_name, _presence(field), self._field_converter(field)))

        def convert(message: Any) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for attribute, json_name, presence, fn in plans:
                if presence is not None and not message.HasField(attribute):
                    if presence is _NULL_UNLESS_SET:
                        out[json_name] = None
                    continue
                value = getattr(message, attribute)
                out[json_name] = value if fn is None else fn(value)
            return out

        return convert

    def _field_converter(self, field: FieldDescriptor) -> Converter | None:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_converter = self._value_converter(field.message_type.fields_by_name["value"])
            if value_converter is None:
                return lambda m: {_map_key(k): v for k, v in m.items()}
            vc = value_converter
            return lambda m: {_map_key(k): vc(v) for k, v in m.items()}
        element = self._value_converter(field)
        if field.is_repeated:
            if element is None:
                return list
            el = element
            return lambda values: [el(v) for v in values]
        return element

    def _value_converter(self, field: FieldDescriptor) -> Converter | None:
        """How one value of `field` (an element, for repeated fields) prints; None: as it is."""
        if field.message_type is not None:
            return self._compile(field.message_type)
        if field.enum_type is not None:
            if field.enum_type.full_name == "google.protobuf.NullValue":
                return lambda _v: None
            names = {v.number: v.name for v in field.enum_type.values}
            return lambda v: names.get(v, v)
        if field.type in _INT64_TYPES:
            return _int64
        if field.type == FieldDescriptor.TYPE_BYTES:
            return _bytes
        if field.type == FieldDescriptor.TYPE_DOUBLE:
            return _double
        if field.type == FieldDescriptor.TYPE_FLOAT:
            return _float
        return None
