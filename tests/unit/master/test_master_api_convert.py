"""Rows to API messages: timestamps are built by arithmetic and must equal what protobuf's own
Timestamp.FromDatetime gives, for naive (UTC), UTC and offset datetimes, before and after 1970."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from services.master.servicers.api.convert import ts


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 1, 1, 12, 3, 4, 567891),
        datetime(2026, 1, 1, 12, 3, 4, 567891, tzinfo=UTC),
        datetime(2026, 1, 1, 12, 3, 4, 567891, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        datetime(1960, 5, 6, 7, 8, 9, 1, tzinfo=UTC),
        datetime(1970, 1, 1),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_timestamps_match_protobufs_own_conversion(value: datetime) -> None:
    expected = Timestamp()
    expected.FromDatetime(value)
    assert ts(value) == expected


def test_no_datetime_gives_no_timestamp() -> None:
    assert ts(None) is None
