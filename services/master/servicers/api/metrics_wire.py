"""Metric reports as they arrive: Struct messages (any client) or one JSON document per batch
(Cairn's Core API, `reports_json`), made into the domain's reports.

The JSON form is checked here as strictly as the messages are by their types, and bounded before
anything walks it: its size is the gRPC message's, its nesting at most MAX_DEPTH levels (checked
without recursion), no NUL in any text (PostgreSQL refuses them). Its values need no sanitizing:
JSON cannot hold NaN or infinities, which the Core API sends as the strings Cairn stores for them.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

import orjson

from cairn.api.v1 import trial_pb2 as tpb
from cairn.wire import struct_to_python
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.metrics.metric_columns import FlatBatch
from services.master.domain.metrics.reports import Report

# As deep as a config may nest (and far from Python's recursion limit, which the summary's and
# the store's walks must never reach).
MAX_DEPTH = 32
# The fields of one report in the JSON form, in order.
REPORT_FIELDS = ("seq", "group", "steps_completed", "report_time", "metrics", "batch_metrics")


def batch_of(request: tpb.ReportTrialMetricsBatchRequest) -> list[Report] | FlatBatch:
    """The request's reports: held by column where they allow it (metric_columns), else one
    Report each."""
    if request.reports_json and request.reports:
        raise InvalidArgument("reports_json: give the reports either as messages or as JSON, not both")
    if request.reports_json:
        document = _document(request.reports_json)
        return _flat_batch(document, request.reports_json) or _reports_of_document(
            document, request.reports_json
        )
    return _reports_of_messages(request)


def _reports_of_messages(request: tpb.ReportTrialMetricsBatchRequest) -> list[Report]:
    return [
        Report(
            group=r.group,
            steps_completed=r.steps_completed,
            metrics=struct_to_python(r.metrics),
            report_time=r.report_time.ToDatetime(UTC) if r.HasField("report_time") else None,
            batch_metrics=[struct_to_python(b) for b in r.batch_metrics] or None,
            seq=r.seq,
        )
        for r in request.reports
    ]


def _check_nesting(value: Any, where: str) -> None:
    """Nesting within MAX_DEPTH and no NUL in keys or strings, walked with a stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > MAX_DEPTH:
                raise InvalidArgument(f"{where}: nested more than {MAX_DEPTH} levels deep")
            for key, inner in item.items():
                if "\x00" in key:
                    raise InvalidArgument(f"{where}: a key holds a NUL character")
                if isinstance(inner, (dict, list)):
                    stack.append((inner, depth + 1))
                elif isinstance(inner, str) and "\x00" in inner:
                    raise InvalidArgument(f"{where}[{key[:40]!r}]: must not contain NUL characters")
        elif isinstance(item, list):
            if depth > MAX_DEPTH:
                raise InvalidArgument(f"{where}: nested more than {MAX_DEPTH} levels deep")
            for inner in item:
                if isinstance(inner, (dict, list)):
                    stack.append((inner, depth + 1))
                elif isinstance(inner, str) and "\x00" in inner:
                    raise InvalidArgument(f"{where}: a string holds a NUL character")


def _integer(value: Any, where: str, minimum: int) -> int:
    if type(value) is not int or not minimum <= value < 2**63:
        raise InvalidArgument(f"{where}: must be an integer from {minimum} to 2^63-1")
    return value


def _flat_and_clean(values: dict[str, Any]) -> bool:
    """True for the common report: numbers and NUL-free strings under NUL-free keys, nothing nested.
    Anything else gets the full walk (_check_nesting), which names what is wrong."""
    for key, value in values.items():
        if "\x00" in key:
            return False
        kind = type(value)
        if kind is float or kind is int or kind is bool or value is None:
            continue
        if kind is not str or "\x00" in value:
            return False
    return True


def _document(data: bytes) -> list[Any]:
    try:
        # orjson refuses documents nested past its own limit (1024) before building anything.
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"reports_json: not valid JSON ({exc})") from None
    if not isinstance(document, list):
        raise InvalidArgument("reports_json: must be a JSON array of reports")
    return document


# One report's metrics object in a document whose every `{` and `}` opens or closes one.
_OBJECT = re.compile(rb"\{[^}]*\}")


def _flat_batch(document: list[Any], data: bytes) -> FlatBatch | None:
    """The document as a FlatBatch, when it is one (else None, and it is read report by report,
    which also names what is wrong with it): every report well formed, of one group, without batch
    metrics, with the same metric names, every value a float. Checked by builtins over columns.

    Each report's metrics JSON text is cut from the document itself (it was just parsed, so it is
    valid JSON) when every `{` and `}` in it is one of those objects' own: one of each per report,
    so none can be inside a string. Otherwise it is encoded again."""
    count = len(document)
    if not count or b"\\u0000" in data or set(map(type, document)) != {list}:
        return None
    if set(map(len, document)) != {len(REPORT_FIELDS)}:
        return None
    seqs, groups, steps, times, values, batches = zip(*document, strict=True)
    if (
        set(map(type, seqs)) != {int}
        or set(map(type, steps)) != {int}
        or set(map(type, groups)) != {str}
        or not set(map(type, times)) <= {int, float}
        or set(map(type, values)) != {dict}
        or batches.count(None) != count
    ):
        return None
    if min(seqs) < 1 or max(seqs) >= 2**63 or min(steps) < 0 or max(steps) >= 2**63:
        return None
    if min(times) < 0 or max(times) >= 32503680000 or len(set(groups)) != 1:
        return None
    if len(set(map(tuple, values))) != 1:
        return None
    columns = list(zip(*map(dict.values, values), strict=True))
    if any(set(map(type, column)) != {float} for column in columns):
        return None
    if data.count(b"{") == count and data.count(b"}") == count:
        texts = _OBJECT.findall(data)
    else:
        texts = [orjson.dumps(v) for v in values]
    return FlatBatch(
        group=groups[0],
        names=tuple(values[0]),
        seqs=list(seqs),
        steps=list(steps),
        times=list(times),
        values=list(values),
        texts=texts,
        columns=columns,
    )


def reports_from_json(data: bytes) -> list[Report]:
    return _reports_of_document(_document(data), data)


def _reports_of_document(document: list[Any], data: bytes) -> list[Report]:
    # The common batch at once, in C: a NUL can only be written \u0000 in JSON, and a document
    # with one `[` per report (and the outer one) and one `{` per report has every report's metrics
    # flat and no batch metrics. Either count is thrown off by such characters in strings, which
    # only sends the batch the per-report way.
    flat = (
        b"\\u0000" not in data and data.count(b"{") == len(document) and data.count(b"[") == len(document) + 1
    )
    reports = []
    for index, entry in enumerate(document):
        if type(entry) is not list or len(entry) != len(REPORT_FIELDS):
            raise InvalidArgument(f"reports_json[{index}]: must be an array [{', '.join(REPORT_FIELDS)}]")
        seq, group, steps, at, values, batches = entry
        if (
            type(seq) is not int
            or not 1 <= seq < 2**63
            or type(steps) is not int
            or not 0 <= steps < 2**63
            or type(group) is not str
            or type(at) not in (int, float)
            or not 0 <= at < 32503680000
            or type(values) is not dict
            or not (batches is None or type(batches) is list)
        ):
            _refuse_entry(index, entry)
        if not flat and not _flat_and_clean(values):
            _check_nesting(values, f"reports_json[{index}].metrics")
        if batches:
            if not all(type(b) is dict for b in batches):
                raise InvalidArgument(
                    f"reports_json[{index}].batch_metrics: must be an array of objects, or null"
                )
            _check_nesting(batches, f"reports_json[{index}].batch_metrics")
        reports.append(
            Report(
                group=group,
                steps_completed=steps,
                metrics=values,
                report_time=datetime.fromtimestamp(at, UTC),
                batch_metrics=batches or None,
                seq=seq,
                plain=True,
            )
        )
    return reports


def _refuse_entry(index: int, entry: list[Any]) -> None:
    """Which field of a malformed report is wrong, as an InvalidArgument naming it."""
    where = f"reports_json[{index}]"
    seq, group, steps, at, values, _batches = entry
    _integer(seq, f"{where}.seq", 1)
    _integer(steps, f"{where}.steps_completed", 0)
    if not isinstance(group, str):
        raise InvalidArgument(f"{where}.group: must be a string")
    if type(at) not in (int, float) or not math.isfinite(at) or not 0 <= at < 32503680000:
        raise InvalidArgument(f"{where}.report_time: must be seconds since the epoch")
    if not isinstance(values, dict):
        raise InvalidArgument(f"{where}.metrics: must be an object")
    raise InvalidArgument(f"{where}.batch_metrics: must be an array of objects, or null")
