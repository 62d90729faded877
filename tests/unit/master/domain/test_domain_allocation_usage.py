"""Allocation accounting read from the allocations the master stores: which allocations held
slots during a period (a running one counts until now, one that never started not at all), the
slot-seconds of each day or month split by owner, label and pool, and the periods asked for refused
before any query when they are malformed or unbounded."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.reads import allocation_usage as usage
from services.master.store import models
from tests.unit.master.domain.harness import Master

# On both databases: aggregation by day and month in each database's date functions.
pytestmark = pytest.mark.on_each_database

T0 = datetime(2024, 5, 1, 22, 0, tzinfo=UTC)


def _ran(master: Master, experiment_id: int, start: datetime, end: datetime | None) -> str:
    """The experiment's trial's allocation, as having held its slot from `start` to `end`."""
    (trial,) = master.trials(experiment_id)
    (allocation,) = master.allocations(trial.id)
    with master.ctx.unit_of_work() as w:
        row = w.session.get_one(models.Allocation, allocation.id)
        row.start_time, row.end_time = start, end
    return allocation.id


def test_allocations_in_a_period_with_their_owner_experiment_and_seconds(master: Master) -> None:
    master.add_agent("a1", slots=2)
    first = master.create(labels=["vision", "nightly"])
    second = master.create()
    waiting = master.create()  # asked for slots and never started: held none
    master.settle()
    a1 = _ran(master, first, T0, T0 + timedelta(hours=4))  # crosses midnight
    a2 = _ran(master, second, T0 + timedelta(hours=1), None)  # still running
    with master.ctx.unit_of_work() as w:
        (trial,) = list(w.session.query(models.Trial).filter_by(experiment_id=waiting))
        for row in w.session.query(models.Allocation).filter_by(trial_id=trial.id):
            row.start_time = None

    after, before = T0 - timedelta(hours=1), T0 + timedelta(hours=2)
    with master.db.read() as s:
        rows = usage.allocations_between(s, after, before)
    assert [r.allocation_id for r in rows] == [a1, a2]
    one, two = rows
    assert (one.task_type, one.username, one.experiment_id, one.labels, one.slots) == (
        "TRIAL",
        "admin",
        first,
        ("vision", "nightly"),
        1,
    )
    assert one.workspace_name == "Uncategorized" and one.resource_pool == "default"
    now = T0 + timedelta(hours=3)
    assert one.seconds_within(after, before, now) == 2 * 3600  # only its part inside the period
    assert two.end_time is None and two.seconds_within(after, before, now) == 3600
    with master.db.read() as s:
        later = usage.allocations_between(s, T0 + timedelta(hours=5), T0 + timedelta(hours=6))
    assert [r.allocation_id for r in later] == [a2]  # a running one overlaps every later period


def test_daily_and_monthly_slot_seconds_by_user_label_and_pool(master: Master) -> None:
    master.add_agent("a1", slots=2)
    first = master.create(labels=["vision"])
    master.settle()
    _ran(master, first, T0, T0 + timedelta(hours=4))  # 2 h on May 1st, 2 h on May 2nd

    starts = usage.period_starts("2024-05-01", "2024-05-03", monthly=False)
    assert starts == [date(2024, 5, 1), date(2024, 5, 2), date(2024, 5, 3)]
    with master.db.read() as s:
        days = usage.aggregated(s, starts, monthly=False, now=T0 + timedelta(days=1))
    # May 3rd had not begun by `now`: not reported.
    assert [(d.start, d.seconds) for d in days] == [(date(2024, 5, 1), 7200.0), (date(2024, 5, 2), 7200.0)]
    assert dict(days[0].by_username) == {"admin": 7200.0}
    assert dict(days[0].by_experiment_label) == {"vision": 7200.0}
    assert dict(days[1].by_resource_pool) == {"default": 7200.0}

    months = usage.period_starts("2024-04", "2024-05", monthly=True)
    assert months == [date(2024, 4, 1), date(2024, 5, 1)]
    with master.db.read() as s:
        april, may = usage.aggregated(s, months, monthly=True, now=T0 + timedelta(days=40))
    assert (april.seconds, may.seconds) == (0.0, 4 * 3600.0)


@pytest.mark.parametrize(
    ("after", "before", "message"),
    [
        ("", "2024-05-01T00:00:00Z", "timestamp_after: required"),
        ("yesterday", "2024-05-01T00:00:00Z", "timestamp_after: 'yesterday' is not an RFC 3339 time"),
        ("2024-05-02T00:00:00Z", "2024-05-01T00:00:00Z", "timestamp_before: before timestamp_after"),
        ("2020-01-01T00:00:00Z", "2024-05-01T00:00:00Z", "timestamp_before: more than 366 days"),
    ],
)
def test_bad_time_ranges_are_refused_naming_the_field(after: str, before: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        usage.raw_range(after, before)


@pytest.mark.parametrize(
    ("start", "end", "monthly", "message"),
    [
        ("2024-5", "2024-05-02", False, "start_date: '2024-5' is not a date"),
        ("2024-05-01", "2024-05", False, "end_date: '2024-05' is not a date"),
        ("2024-05-01", "2024-06", True, "start_date: '2024-05-01' is not a month"),
        ("2024-05-03", "2024-05-01", False, "end_date: before start_date"),
        ("2020-01-01", "2024-01-01", False, "end_date: more than 366 days"),
        ("2000-01", "2024-01", True, "end_date: more than 60 months"),
    ],
)
def test_bad_periods_are_refused_naming_the_field(start: str, end: str, monthly: bool, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        usage.period_starts(start, end, monthly)
