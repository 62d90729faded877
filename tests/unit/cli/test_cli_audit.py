"""`cairn audit list`'s times: an age back from now or an ISO 8601 date or time, refused naming
the forms it takes otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click
import pytest

from cairn.cli.audit import parse_moment

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", NOW - timedelta(minutes=30)),
        ("2h", NOW - timedelta(hours=2)),
        ("1.5d", NOW - timedelta(days=1.5)),
        ("1w", NOW - timedelta(weeks=1)),
        ("2026-12-01T08:00:00Z", datetime(2026, 12, 1, 8, 0, tzinfo=UTC)),
        ("2026-12-01T08:00:00+02:00", datetime(2026, 12, 1, 6, 0, tzinfo=UTC)),
    ],
)
def test_ages_and_times(text: str, expected: datetime) -> None:
    assert parse_moment(text, now=NOW) == expected


def test_a_time_without_a_zone_is_this_machines() -> None:
    assert parse_moment("2026-12-01T08:00:00") == datetime(2026, 12, 1, 8, 0).astimezone().astimezone(UTC)


@pytest.mark.parametrize("text", ["yesterday", "5 parsecs", "2026-13-40", ""])
def test_other_text_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(click.BadParameter, match="expected an age"):
        parse_moment(text, now=NOW)
