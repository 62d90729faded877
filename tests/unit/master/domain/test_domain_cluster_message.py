"""The cluster-wide message (domain/operations/cluster_message.py): set by an admin with a start and
an optional end or duration, shown while it is between them, one at a time, kept across a restart,
and refused with the field named when the input is wrong."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.master.domain.kernel.errors import InvalidArgument, PermissionDenied
from services.master.domain.kernel.go_duration import parse_go_duration
from services.master.domain.operations import cluster_message as cm
from tests.unit.master.domain.harness import Master

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_a_message_shows_between_its_start_and_its_end(master: Master) -> None:
    cm.set_message(master.ctx, master.admin, "maintenance at noon", start_time=NOW, duration="1h30m", now=NOW)
    shown = cm.showing_message(master.ctx, now=NOW + timedelta(minutes=5))
    assert shown is not None and shown.message == "maintenance at noon"
    assert shown.end_time == NOW + timedelta(minutes=90)
    assert cm.showing_message(master.ctx, now=NOW - timedelta(seconds=1)) is None  # not started
    assert cm.showing_message(master.ctx, now=NOW + timedelta(minutes=90)) is None  # ended
    # The admin's view shows it before it starts, not once it has ended.
    assert cm.current_message(master.ctx, master.admin, now=NOW - timedelta(hours=1)) is not None
    assert cm.current_message(master.ctx, master.admin, now=NOW + timedelta(hours=2)) is None


def test_setting_a_message_ends_the_one_before_and_clear_ends_it(master: Master) -> None:
    cm.set_message(master.ctx, master.admin, "first", start_time=NOW, now=NOW)
    cm.set_message(master.ctx, master.admin, "second", start_time=NOW, now=NOW + timedelta(minutes=1))
    later = NOW + timedelta(minutes=2)
    shown = cm.showing_message(master.ctx, now=later)
    assert shown is not None and shown.message == "second" and shown.end_time is None
    cm.clear_message(master.ctx, master.admin, now=later)
    assert cm.showing_message(master.ctx, now=later + timedelta(seconds=1)) is None
    assert cm.current_message(master.ctx, master.admin, now=later + timedelta(seconds=1)) is None
    cm.clear_message(master.ctx, master.admin, now=later)  # nothing set: still fine


def test_the_message_outlives_a_restart(master: Master) -> None:
    cm.set_message(master.ctx, master.admin, "kept", start_time=NOW, now=NOW)
    master.close()
    again = master.restarted()
    try:
        shown = cm.showing_message(again.ctx, now=NOW + timedelta(days=3))
        assert shown is not None and shown.message == "kept"
    finally:
        again.close()


def test_only_an_admin_sets_clears_or_reads_it(master: Master) -> None:
    user = master.add_user("alice")
    with pytest.raises(PermissionDenied):
        cm.set_message(master.ctx, user, "hello", start_time=NOW, now=NOW)
    with pytest.raises(PermissionDenied):
        cm.clear_message(master.ctx, user, now=NOW)
    with pytest.raises(PermissionDenied):
        cm.current_message(master.ctx, user, now=NOW)
    assert cm.showing_message(master.ctx, now=NOW) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"message": "x" * 251}, "message: at most 250 characters; got 251"),
        ({"message": "  "}, "message: required"),
        ({"message": "a\x00b"}, "message: must not contain NUL"),
        ({"end_time": NOW - timedelta(minutes=1)}, "end_time: must be after the start time"),
        (
            {"start_time": NOW - timedelta(hours=2), "end_time": NOW - timedelta(hours=1)},
            "end_time: must be after the current",
        ),
        ({"end_time": NOW + timedelta(hours=1), "duration": "1h"}, "end_time, duration"),
        ({"duration": "5d"}, "duration: '5d' is not a duration"),
        ({"duration": "-1h"}, "duration: must not be negative"),
        ({"duration": "1" * 65 + "h"}, "duration: at most 64 characters"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(
    master: Master, kwargs: dict[str, object], field: str
) -> None:
    args: dict[str, object] = {"message": "hello", "start_time": NOW, **kwargs}
    message = args.pop("message")
    assert isinstance(message, str)
    with pytest.raises(InvalidArgument, match=field.replace("(", r"\(")):
        cm.set_message(master.ctx, master.admin, message, now=NOW, **args)  # type: ignore[arg-type]
    assert cm.current_message(master.ctx, master.admin, now=NOW) is None


def test_a_message_of_250_characters_is_accepted(master: Master) -> None:
    text = "é" * 250  # characters, not bytes
    cm.set_message(master.ctx, master.admin, text, start_time=None, now=NOW)
    shown = cm.showing_message(master.ctx, now=NOW)
    assert shown is not None and shown.message == text and shown.start_time == NOW


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("90m", 5400),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("300ms", 0.3),
        ("2h45m10s", 9910),
        ("+1s", 1),
    ],
)
def test_go_durations_read_as_go_reads_them(text: str, seconds: float) -> None:
    assert parse_go_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "h", "1", "1x", "1h 30m", "2w", "1h-"])
def test_what_go_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)
