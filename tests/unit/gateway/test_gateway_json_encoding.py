"""The compiled encoder prints what json_format prints (EmitDefaults, camelCase, enum names,
int64 as strings), with Go's whole numbers in Structs, for every message of the public API."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import threading
from typing import Any

import orjson
import pytest
from google.protobuf import json_format, message_factory, struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from cairn.api.v1 import api_pb2, experiment_pb2, trial_pb2
from services.common.local_calls import RenderedJson
from services.master.gateway.http_rules import HTTP_BODY, http_bindings
from services.master.gateway.json_encoding import MEMO_MIN_BYTES, JsonEncoder
from services.master.gateway.rest_gateway import RestGateway

CAIRN = api_pb2.DESCRIPTOR.services_by_name["Cairn"]


def _api_messages() -> list[Descriptor]:
    found: dict[str, Descriptor] = {}

    def visit(descriptor: Descriptor) -> None:
        if descriptor.full_name in found or descriptor.full_name.startswith("google.protobuf."):
            return
        if descriptor.full_name == HTTP_BODY:
            return  # answered as its bytes, never as JSON
        found[descriptor.full_name] = descriptor
        for field in descriptor.fields:
            if field.message_type is not None:
                visit(field.message_type)

    for method in CAIRN.methods:
        visit(method.input_type)
        visit(method.output_type)
    return sorted(found.values(), key=lambda d: d.full_name)


def _fill_struct(struct: struct_pb2.Struct, rng: random.Random, depth: int) -> None:
    for i in range(rng.randint(0, 4)):
        kind = rng.choice(["int", "float", "str", "bool", "null", "list", "struct"])
        key = f"k{i}"
        if kind == "int":
            struct[key] = rng.randint(-(10**6), 10**6)
        elif kind == "float":
            struct[key] = rng.uniform(-10, 10)
        elif kind == "str":
            struct[key] = rng.choice(["", "ü", "a b", "{}"])
        elif kind == "bool":
            struct[key] = rng.random() < 0.5
        elif kind == "null":
            struct[key] = None
        elif kind == "list" and depth < 2:
            struct[key] = [1, "x", 2.5, None, [True]]
        elif depth < 2:
            _fill_struct(struct.get_or_create_struct(key), rng, depth + 1)


def _scalar(field: Any, rng: random.Random) -> Any:
    if field.enum_type is not None:
        return rng.choice(field.enum_type.values).number
    kind = field.type
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice([0.0, 1.0, -2.5, 0.1, 1e300 if kind == FieldDescriptor.TYPE_DOUBLE else 3.5])
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind == FieldDescriptor.TYPE_STRING:
        return rng.choice(["", "name", "ünïcode", 'quote"'])
    if kind == FieldDescriptor.TYPE_BYTES:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 5)))
    if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return rng.randint(0, 2**32 - 1)
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return rng.randint(0, 2**64 - 1)
    if kind in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return rng.randint(-(2**63), 2**63 - 1)
    return rng.randint(-(2**31), 2**31 - 1)


def _fill(message: Message, rng: random.Random, depth: int = 0) -> None:
    for field in message.DESCRIPTOR.fields:
        if rng.random() < 0.3:
            continue  # leave unset: defaults must print too
        sub = field.message_type
        if sub is not None and sub.GetOptions().map_entry:
            target = getattr(message, field.name)
            value_field = sub.fields_by_name["value"]
            for i in range(rng.randint(0, 2)):
                key = str(i) if sub.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING else i
                if value_field.message_type is not None:
                    if depth < 3:
                        _fill(target[key], rng, depth + 1)
                else:
                    target[key] = _scalar(value_field, rng)
        elif sub is not None and sub.full_name == "google.protobuf.Struct":
            items = getattr(message, field.name)
            if field.is_repeated:
                for _ in range(rng.randint(0, 2)):
                    _fill_struct(items.add(), rng, 0)
            else:
                items.Clear()
                _fill_struct(items, rng, 0)
                getattr(message, field.name).SetInParent()
        elif sub is not None and sub.full_name == "google.protobuf.Timestamp":
            if field.is_repeated:
                for _ in range(rng.randint(0, 3)):
                    getattr(message, field.name).add().FromSeconds(rng.randint(0, 2**33))
            else:
                getattr(message, field.name).FromSeconds(rng.randint(0, 2**33))
        elif sub is not None:
            if depth >= 3:
                continue
            if field.is_repeated:
                for _ in range(rng.randint(0, 2)):
                    _fill(getattr(message, field.name).add(), rng, depth + 1)
            else:
                getattr(message, field.name).SetInParent()
                _fill(getattr(message, field.name), rng, depth + 1)
        elif field.is_repeated:
            getattr(message, field.name).extend(_scalar(field, rng) for _ in range(rng.randint(0, 3)))
        else:
            setattr(message, field.name, _scalar(field, rng))


_WELL_KNOWN = ("google.protobuf.",)


def _unset_messages_as_null(message: Any, printed: Any) -> Any:
    """json_format's output with what Go's protojson adds under EmitUnpopulated (Determined's
    gateway): every unset singular message field outside a oneof as null, at every depth."""
    descriptor = message.DESCRIPTOR
    if descriptor.full_name.startswith(_WELL_KNOWN) or not isinstance(printed, dict):
        return printed
    for field in descriptor.fields:
        sub = field.message_type
        if sub is None:
            continue
        if sub.GetOptions().map_entry:
            if sub.fields_by_name["value"].message_type is not None:
                for key, value in getattr(message, field.name).items():
                    _unset_messages_as_null(value, printed[field.json_name][str(key)])
            continue
        if field.is_repeated:
            elements = getattr(message, field.name)
            for element, element_printed in zip(elements, printed[field.json_name], strict=True):
                _unset_messages_as_null(element, element_printed)
        elif message.HasField(field.name):
            _unset_messages_as_null(getattr(message, field.name), printed[field.json_name])
        elif field.containing_oneof is None:
            printed[field.json_name] = None
    return printed


@pytest.mark.parametrize("descriptor", _api_messages(), ids=lambda d: d.name)
def test_same_output_as_json_format(descriptor: Descriptor) -> None:
    cls = message_factory.GetMessageClass(descriptor)
    encoder = JsonEncoder()
    rng = random.Random(descriptor.full_name)
    for _ in range(25):
        message = cls()
        _fill(message, rng)
        expected = _unset_messages_as_null(
            message, json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
        )
        ours = encoder.to_object(message)
        # Whole numbers in Structs print as ints; Python's 3 == 3.0 keeps the comparison exact.
        assert ours == expected
        assert json.loads(json.dumps(ours)) == ours


def test_structs_print_whole_numbers_as_integers_and_survive_nan() -> None:
    exp = experiment_pb2.Experiment(id=3)
    exp.config.update({"searcher": {"max_length": {"batches": 100}}, "lr": 0.5, "big": 1e22})
    exp.hyperparameters.update({"bad": math.nan, "up": math.inf, "down": -math.inf})
    out = JsonEncoder().to_object(exp)
    batches = out["config"]["searcher"]["max_length"]["batches"]  # Struct keys stay as written
    assert batches == 100 and isinstance(batches, int)
    assert out["config"]["lr"] == 0.5 and isinstance(out["config"]["big"], float)
    assert out["hyperparameters"] == {"bad": "NaN", "up": "Infinity", "down": "-Infinity"}
    assert out["checkpointSize"] == "0" and out["state"] == "STATE_UNSPECIFIED"
    # Unset: an `optional` scalar is left out, a message prints as null (Go's EmitUnpopulated).
    assert "forkedFrom" not in out and out["startTime"] is None


def test_memoized_conversions_follow_the_message_content() -> None:
    encoder = JsonEncoder()
    trial = trial_pb2.Trial(id=1)
    trial.hparams.update({f"p{i}": "x" * 20 for i in range(20)})
    assert trial.ByteSize() >= MEMO_MIN_BYTES
    first = encoder.to_object(trial)
    again = encoder.to_object(trial)
    assert again == first
    # A hit is a copy of its own: what one response does to it no other sees.
    again["hparams"]["p1"] = "mutated"
    assert encoder.to_object(trial)["hparams"]["p1"] == "x" * 20
    trial.hparams["p0"] = "changed"
    trial.state = trial_pb2.Trial.STATE_COMPLETED
    second = encoder.to_object(trial)
    assert second["hparams"]["p0"] == "changed" and second["state"] == "STATE_COMPLETED"


def test_a_full_memo_evicts_the_oldest() -> None:
    encoder = JsonEncoder(memo_max_bytes=64 * 1024)
    for i in range(200):
        struct = struct_pb2.Struct()
        struct.update({"i": i, "pad": "y" * 400})
        assert encoder.to_object(struct) == {"i": i, "pad": "y" * 400}
    assert encoder._memo is not None and encoder._memo.bytes <= 64 * 1024


@pytest.mark.parametrize("descriptor", _api_messages(), ids=lambda d: d.name)
def test_fragments_write_the_same_json(descriptor: Descriptor) -> None:
    """Within `fragments`, memoized messages come as their stored JSON (orjson.Fragment), first
    time and again: orjson writes the same bytes as from the plain objects."""
    cls = message_factory.GetMessageClass(descriptor)
    encoder = JsonEncoder()
    rng = random.Random("fragments " + descriptor.full_name)
    for _ in range(10):
        message = cls()
        _fill(message, rng)
        plain = encoder.to_object(message)
        for _ in range(2):  # a miss the first time a message is seen in this mode, then hits
            with encoder.fragments():
                spliced = encoder.to_object(message)
            try:
                expected = orjson.dumps(plain)
            except orjson.JSONEncodeError:
                continue  # what orjson refuses the gateway writes from plain objects again
            assert orjson.dumps(spliced) == expected


def test_fragments_are_this_threads_only() -> None:
    encoder = JsonEncoder()
    trial = trial_pb2.Trial(id=1)
    trial.hparams.update({f"p{i}": "x" * 20 for i in range(20)})
    seen: list[Any] = []
    with encoder.fragments():
        worker = threading.Thread(target=lambda: seen.append(encoder.to_object(trial)))
        worker.start()
        worker.join()
        assert isinstance(encoder.to_object(trial), orjson.Fragment)
    assert isinstance(seen[0], dict) and isinstance(encoder.to_object(trial), dict)


def test_a_handlers_rendered_json_is_spliced_in_as_the_message_would_print() -> None:
    service = api_pb2.DESCRIPTOR.services_by_name["Cairn"]
    bindings = http_bindings(service)
    gateway = RestGateway(service, bindings, upstream=None)  # type: ignore[arg-type]  # nothing is called
    binding = next(b for b in bindings if b.rpc.name == "GetMetrics")
    struct = struct_pb2.Struct()
    struct.update({"avg_metrics": {"loss": 0.25, "epoch": 2}})
    message = trial_pb2.GetMetricsResponse(
        metrics=[trial_pb2.MetricsReport(trial_id=3, group="validation", metrics=struct, id=9)]
    )
    rendered = RenderedJson(orjson.dumps(JsonEncoder().to_object(message)))
    line = gateway._result_line(binding, rendered)
    assert line == gateway._result_line(binding, message) and line.endswith(b"}\n")
    one_field = dataclasses.replace(binding, response_body="metrics")
    assert gateway._result_line(one_field, rendered) == gateway._result_line(one_field, message)
