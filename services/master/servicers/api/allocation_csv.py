"""Determined's CSV forms of allocation accounting, column for column: the allocations CSV
(/resources/allocation/allocations-csv), the raw CSV (/resources/allocation/raw) and the aggregated
CSV (/resources/allocation/aggregated). Numbers are written as Determined's master writes them
(Go's %f; a zero duration as 0.0), times as RFC 3339 with their fraction."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from datetime import UTC, datetime

from cairn.api.v1 import resources_pb2 as rpb
from services.master.domain.reads.allocation_usage import AllocationUsage

ALLOCATIONS_HEADER = (
    "allocation_id",
    "task_type",
    "username",
    "workspace_name",
    "experiment_id",
    "slots",
    "start_time",
    "end_time",
    "imagepulling_time",
    "slot_hours",
    "resource_pool",
)
RAW_HEADER = ("experiment_id", "kind", "username", "labels", "slots", "start_time", "end_time", "seconds")
AGGREGATED_HEADER = ("aggregation_type", "aggregation_key", "date", "seconds")


def _time(value: datetime | None) -> str:
    return "" if value is None else value.isoformat().replace("+00:00", "Z")


def _duration(value: float) -> str:
    return "0.0" if value == 0 else f"{value:f}"


def _write(header: tuple[str, ...], rows: Iterable[list[str]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue().encode()


def allocations_csv(usages: list[AllocationUsage], after: datetime, before: datetime, now: datetime) -> bytes:
    """One row per allocation; slot_hours counts its part inside [after, before) only. Cairn does
    not time image pulls apart from the start of the container, so imagepulling_time is 0.0."""
    return _write(
        ALLOCATIONS_HEADER,
        (
            [
                u.allocation_id,
                u.task_type,
                u.username,
                u.workspace_name,
                str(u.experiment_id),
                str(u.slots),
                _time(u.start_time),
                _time(u.end_time),
                _duration(0.0),
                _duration(u.seconds_within(after, before, now) * u.slots / 3600.0),
                u.resource_pool,
            ]
            for u in usages
        ),
    )


def _labels(labels: Iterable[str]) -> str:
    # Determined escapes backslashes and commas in each label, then joins them with commas.
    return ",".join(label.replace("\\", "\\\\").replace(",", "\\,") for label in labels)


def raw_csv(response: rpb.ResourceAllocationRawResponse) -> bytes:
    return _write(
        RAW_HEADER,
        (
            [
                str(e.experiment_id),
                e.kind,
                e.username,
                _labels(e.labels),
                str(e.slots),
                _time(e.start_time.ToDatetime(UTC) if e.HasField("start_time") else None),
                _time(e.end_time.ToDatetime(UTC) if e.HasField("end_time") else None),
                f"{e.seconds:f}",
            ]
            for e in response.resource_entries
        ),
    )


def aggregated_csv(response: rpb.ResourceAllocationAggregatedResponse) -> bytes:
    rows: list[list[str]] = []
    for entry in response.resource_entries:
        groups = (
            ("experiment_label", entry.by_experiment_label),
            ("username", entry.by_username),
            ("resource_pool", entry.by_resource_pool),
            ("agent_label", entry.by_agent_label),
            ("total", {"total": entry.seconds}),
        )
        for kind, values in groups:
            rows.extend(
                [kind, key, entry.period_start, f"{seconds:f}"] for key, seconds in sorted(values.items())
            )
    return _write(AGGREGATED_HEADER, rows)
