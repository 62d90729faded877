"""A batch of metric reports as one JSON document (ReportTrialMetricsBatchRequest.reports_json):
read into reports exactly, and refused by the field that is wrong — whether the batch takes the
whole-document fast path (flat reports, no NUL escape anywhere) or the per-report checks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from services.master.domain.kernel.errors import InvalidArgument
from services.master.servicers.api.metrics_wire import MAX_DEPTH, reports_from_json

AT = 1795750000.5


def entry(seq: int, metrics: dict[str, Any], batches: list[Any] | None = None) -> list[Any]:
    return [seq, "training", seq * 10, AT + seq, metrics, batches]


def test_a_flat_batch_reads_back_as_it_was_sent() -> None:
    sent = [entry(n, {"loss": 1.0 / n, "step": n, "ok": True, "note": "a", "none": None}) for n in (1, 2, 3)]

    reports = reports_from_json(orjson.dumps(sent))

    assert [(r.seq, r.group, r.steps_completed, r.metrics) for r in reports] == [
        (e[0], e[1], e[2], e[4]) for e in sent
    ]
    assert reports[0].report_time == datetime.fromtimestamp(AT + 1, UTC)
    assert all(r.plain and r.batch_metrics is None for r in reports)


def test_brackets_and_braces_inside_strings_only_take_the_careful_way() -> None:
    sent = [entry(1, {"note": "a {curly} [square] note"}), entry(2, {"loss": 0.5})]

    reports = reports_from_json(orjson.dumps(sent))

    assert [r.metrics for r in reports] == [e[4] for e in sent]


def test_batch_metrics_and_nested_values_within_the_limit_are_kept() -> None:
    nested: Any = {"leaf": 1.0}
    for _ in range(MAX_DEPTH - 2):
        nested = {"inner": nested}
    sent = [entry(1, {"loss": 0.5, "deep": nested}, [{"loss": 0.7}, {"loss": 0.6}])]

    (report,) = reports_from_json(orjson.dumps(sent))

    assert report.metrics == sent[0][4]
    assert report.batch_metrics == [{"loss": 0.7}, {"loss": 0.6}]


@pytest.mark.parametrize(
    ("metrics", "named"),
    [
        ({"lo\u0000ss": 1.0}, "reports_json[1].metrics: a key holds a NUL character"),
        ({"note": "a\u0000b"}, "reports_json[1].metrics['note']: must not contain NUL characters"),
        ({"list": ["ok", "a\u0000"]}, "reports_json[1].metrics: a string holds a NUL character"),
    ],
)
def test_a_nul_anywhere_is_refused_by_where_it_is(metrics: dict[str, Any], named: str) -> None:
    sent = [entry(1, {"loss": 1.0}), entry(2, metrics)]

    with pytest.raises(InvalidArgument) as refused:
        reports_from_json(orjson.dumps(sent))

    assert str(refused.value).startswith(named)


def test_metrics_nested_past_the_limit_are_refused_by_report() -> None:
    deep: Any = 1.0
    for _ in range(MAX_DEPTH + 1):
        deep = {"inner": deep}
    sent = [entry(1, {"loss": 1.0}), entry(2, {"deep": deep})]

    with pytest.raises(InvalidArgument, match=r"reports_json\[1\]\.metrics: nested more than"):
        reports_from_json(orjson.dumps(sent))


def test_an_escaped_backslash_before_u0000_is_text_not_a_nul() -> None:
    # The characters \u0000 as text (JSON "\\u0000"): no NUL, kept as written.
    sent = [entry(1, {"note": "\\u0000"})]

    (report,) = reports_from_json(orjson.dumps(sent))

    assert report.metrics == {"note": "\\u0000"}
