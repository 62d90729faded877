"""GetMetrics' replies written as the REST gateway's JSON straight from the rows, for the gateway's
in-process calls (services/common/local_calls.RenderedJson).

A trial's learning curve is the WebUI's and the Determined SDK's most frequent read
(`/api/v1/trials/metrics/trial_metrics`). Through protobuf, each report's values went into two
Structs (Struct.update, one Value per number) only for the gateway to walk them back out, and
those two steps were half of what a read cost the master. Here the same JSON is made from the
plain values: what `JsonEncoder` prints for the message GetMetrics would have built (the same
fields in the same order, whole numbers in a Struct as integers, NaN and infinities as strings,
Timestamps as protobuf writes them), checked against it in
tests/unit/master/domain/test_domain_metric_reads.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from services.common.json_numbers import struct_number


def struct_json(value: Any) -> Any:
    """`value` as a google.protobuf.Value holding it would print: numbers are doubles (a whole one
    prints as an integer), mappings are Structs, sequences ListValues. Raises TypeError for what
    Struct.update refuses, as building the message would."""
    kind = type(value)
    if kind is float:
        return struct_number(value)
    if kind is str or value is None or kind is bool:
        return value
    if kind is int:
        return struct_number(float(value))  # a Struct holds doubles: past 2^53 it rounds, as here
    if kind is dict:
        return {_key(k): struct_json(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [struct_json(v) for v in value]
    raise TypeError(f"a metric value of type {kind.__name__} cannot be a google.protobuf.Value")


def _key(key: Any) -> str:
    if type(key) is not str:
        raise TypeError(f"a metrics key must be a string, not {type(key).__name__}")
    return key


def _flat_floats(values: dict[str, Any]) -> dict[str, Any] | None:
    """The values as printed when every one is a finite, fractional float (a training loop's
    losses and accuracies): no walk needed. None when any is not."""
    for v in values.values():
        if type(v) is not float or v.is_integer() or v - v != 0.0:
            return None
    return values


def timestamp_json(value: datetime) -> str:
    """A datetime as google.protobuf.Timestamp's JSON (what Timestamp.ToJsonString gives for the
    Timestamp convert.ts makes): UTC with "Z", and 0, 3 or 6 fraction digits, as few as exact.
    (Arithmetic on the offset, not astimezone: a third of the cost, for every report read.)"""
    offset = value.utcoffset()
    if offset is not None:
        value = value.replace(tzinfo=None)
        if offset:
            value -= offset
    micros = value.microsecond
    whole = value.isoformat(timespec="seconds")
    if micros == 0:
        return whole + "Z"
    if micros % 1000 == 0:
        return f"{whole}.{micros // 1000:03d}Z"
    return f"{whole}.{micros:06d}Z"


def _metrics(group: str, values: Any, batch_metrics: Any) -> dict[str, Any]:
    """What servicers.api.metrics.report_metrics gives, printed: the same keys, each a Struct's JSON."""
    printed = _flat_floats(values) if type(values) is dict else None
    if printed is None:
        printed = struct_json(values)
    result = {"avg_metrics": printed, "batch_metrics": struct_json(batch_metrics)}
    if group == "validation":
        result["validation_metrics"] = printed
    return result


def response_json(rows: Sequence[Any]) -> bytes:
    """A GetMetricsResponse of `rows` (reports_of_trial's) as compact JSON: its fields in the
    message's order, as the gateway's JsonEncoder writes them."""
    return orjson.dumps(
        {
            "metrics": [
                {
                    "trialId": row.trial_id,
                    "endTime": timestamp_json(row.report_time),
                    "metrics": _metrics(row.group_name, row.metrics, row.batch_metrics),
                    "totalBatches": int(row.steps_completed),
                    "archived": row.archived,
                    "id": int(row.id),
                    "trialRunId": row.trial_run_id,
                    "group": row.group_name,
                }
                for row in rows
            ]
        }
    )
