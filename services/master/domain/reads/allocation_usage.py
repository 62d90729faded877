"""Allocation accounting (Determined's historical cluster usage): which allocations held slots
during a period, for how long, and the slot-seconds of each day or month split by owner, experiment
label and resource pool. Read from the allocations the master stores (their start, end, slots and
pool, their task's kind and owner, a trial's experiment); nothing is aggregated ahead of time, so
every period asked for is bounded first (MAX_RAW_RANGE, MAX_DAYS, MAX_MONTHS)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import InvalidArgument
from services.master.store import models

# A year and a day: a year's report from any hour of the day. Each allocation that overlaps the
# period is one row of the answer, so the period bounds the answer as well as the query.
MAX_RAW_RANGE = timedelta(days=366)
MAX_DAYS = 366
MAX_MONTHS = 60


@dataclass(frozen=True)
class AllocationUsage:
    """One allocation that held slots during the period asked about."""

    allocation_id: str
    # The task's kind, as Determined names task types (TRIAL, COMMAND, NOTEBOOK, ...).
    task_type: str
    username: str
    user_id: int
    workspace_name: str
    # 0 for a task that is not an experiment's trial (Determined's CSV writes 0 too).
    experiment_id: int
    labels: tuple[str, ...]
    slots: int
    resource_pool: str
    start_time: datetime
    # None while it still runs.
    end_time: datetime | None

    def seconds_within(self, after: datetime, before: datetime, now: datetime) -> float:
        """Seconds of the allocation inside [after, before); a running one counts until `now`."""
        end = self.end_time if self.end_time is not None else max(now, self.start_time)
        return max(0.0, (min(end, before) - max(self.start_time, after)).total_seconds())


@dataclass
class PeriodUsage:
    """Slot-seconds held during one day or month."""

    start: date
    seconds: float = 0.0
    by_username: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_experiment_label: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_resource_pool: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def parse_timestamp(text: str, name: str) -> datetime:
    """An RFC 3339 time ("2024-05-01T00:00:00Z"); UTC when it names no zone."""
    if not text:
        raise InvalidArgument(f"{name}: required (an RFC 3339 time, e.g. 2024-05-01T00:00:00Z)")
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgument(
            f"{name}: {text[:64]!r} is not an RFC 3339 time (e.g. 2024-05-01T00:00:00Z)"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def raw_range(after_text: str, before_text: str) -> tuple[datetime, datetime]:
    after = parse_timestamp(after_text, "timestamp_after")
    before = parse_timestamp(before_text, "timestamp_before")
    if after > before:
        raise InvalidArgument("timestamp_before: before timestamp_after")
    if before - after > MAX_RAW_RANGE:
        raise InvalidArgument(f"timestamp_before: more than {MAX_RAW_RANGE.days} days after timestamp_after")
    return after, before


def _parse_date(text: str, name: str, monthly: bool) -> date:
    form = "%Y-%m" if monthly else "%Y-%m-%d"
    example = "2024-05" if monthly else "2024-05-01"
    try:
        return datetime.strptime(text.strip(), form).date()
    except ValueError:
        raise InvalidArgument(
            f"{name}: {text[:64]!r} is not a {'month' if monthly else 'date'} like {example}"
        ) from None


def _next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def period_starts(start_text: str, end_text: str, monthly: bool) -> list[date]:
    """The first day of every day (or month) from start to end, both included."""
    start = _parse_date(start_text, "start_date", monthly)
    end = _parse_date(end_text, "end_date", monthly)
    if start > end:
        raise InvalidArgument("end_date: before start_date")
    if monthly:
        count = (end.year - start.year) * 12 + end.month - start.month + 1
        if count > MAX_MONTHS:
            raise InvalidArgument(f"end_date: more than {MAX_MONTHS} months after start_date")
        starts = [start]
        while len(starts) < count:
            starts.append(_next_month(starts[-1]))
        return starts
    count = (end - start).days + 1
    if count > MAX_DAYS:
        raise InvalidArgument(f"end_date: more than {MAX_DAYS} days after start_date")
    return [start + timedelta(days=i) for i in range(count)]


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def allocations_between(s: Session, after: datetime, before: datetime) -> list[AllocationUsage]:
    """Allocations that started before `before` and had not ended by `after`, oldest first. An
    allocation that never started (it waited, then was cancelled) held no slots and is left out."""
    a, t = models.Allocation, models.Task
    rows = s.execute(
        select(
            a.id,
            t.kind,
            models.User.username,
            models.User.id,
            models.Workspace.name,
            models.Experiment.id,
            models.Experiment.labels,
            a.slots,
            a.resource_pool,
            a.start_time,
            a.end_time,
        )
        .join(t, t.id == a.task_id)
        .join(models.User, models.User.id == t.owner_id)
        .outerjoin(models.Workspace, models.Workspace.id == t.workspace_id)
        .outerjoin(models.Experiment, models.Experiment.id == t.experiment_id)
        .where(
            a.start_time.is_not(None), a.start_time < before, or_(a.end_time.is_(None), a.end_time > after)
        )
        .order_by(a.start_time, a.id)
    ).all()
    return [
        AllocationUsage(
            allocation_id=allocation_id,
            task_type=kind,
            username=username,
            user_id=user_id,
            workspace_name=workspace_name or "",
            experiment_id=experiment_id or 0,
            labels=tuple(str(label) for label in labels or ()),
            slots=slots,
            resource_pool=pool,
            start_time=start,
            end_time=end,
        )
        for (
            allocation_id,
            kind,
            username,
            user_id,
            workspace_name,
            experiment_id,
            labels,
            slots,
            pool,
            start,
            end,
        ) in rows
    ]


def aggregated(s: Session, starts: list[date], monthly: bool, now: datetime) -> list[PeriodUsage]:
    """Slot-seconds of each period in `starts` (from period_starts) that has begun by `now`; a
    period still going counts until `now`."""
    begun = [start for start in starts if _midnight(start) <= now]
    if not begun:
        return []
    ends = [_next_month(start) if monthly else start + timedelta(days=1) for start in begun]
    periods = [PeriodUsage(start=start) for start in begun]
    bounds = [(_midnight(start), _midnight(end)) for start, end in zip(begun, ends, strict=True)]
    for usage in allocations_between(s, bounds[0][0], bounds[-1][1]):
        for period, (lower, upper) in zip(periods, bounds, strict=True):
            if usage.start_time >= upper or (usage.end_time is not None and usage.end_time <= lower):
                continue
            slot_seconds = usage.seconds_within(lower, upper, now) * usage.slots
            if slot_seconds <= 0:
                continue
            period.seconds += slot_seconds
            period.by_username[usage.username] += slot_seconds
            period.by_resource_pool[usage.resource_pool] += slot_seconds
            for label in usage.labels:
                period.by_experiment_label[label] += slot_seconds
    return periods
