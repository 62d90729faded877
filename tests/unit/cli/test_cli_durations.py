"""The CLI's one duration grammar (cairn/cli/durations.py), as `cairn audit list --since` and
`cairn agent join-token create --expires` read it."""

from __future__ import annotations

import click
import pytest

from cairn.cli.agent_credentials import parse_expiry
from cairn.cli.durations import seconds_of


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("7d", 604800),
        ("2w", 1209600),
        (" 2 h ", 7200),
    ],
)
def test_durations_read_in_every_unit_and_combined(text: str, seconds: float) -> None:
    assert seconds_of(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "30", "30x", "1h-5m", "5 parsecs", "1" * 70 + "s"])
def test_other_text_is_no_duration(text: str) -> None:
    assert seconds_of(text) is None


def test_an_expiry_takes_bare_seconds_too_and_names_the_forms_otherwise() -> None:
    assert parse_expiry("3600") == 3600 and parse_expiry("24h") == 86400
    with pytest.raises(click.BadParameter, match="write it like 30m, 24h or 7d"):
        parse_expiry("soon")
