"""The audit trail's storage (domain/audit/): records queued by the edge are stored in batches and
read back by admins, newest first, filtered by user, time, method, outcome and target, a page at a
time; bad filters are refused naming the field; a full queue drops (and counts) instead of
waiting; retention prunes by age and by rows in bounded batches. On both databases: the filters
are LIKE and OR over indexes, the pruning DELETE ... IN (SELECT ... LIMIT)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from services.master.domain.audit import events, queries, retention
from services.master.domain.audit.events import AuditRecord
from services.master.domain.audit.queries import AuditFilter
from services.master.domain.audit.recorder import AuditRecorder
from services.master.domain.kernel.errors import InvalidArgument, PermissionDenied
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _at(minutes: float) -> float:
    return (T0 + timedelta(minutes=minutes)).timestamp()


def _record(minutes: float, method: str, **fields: object) -> AuditRecord:
    values: dict[str, object] = {
        "outcome": events.OK,
        "actor": events.USER,
        "username": "admin",
        "user_id": 1,
    }
    values.update(fields)
    return AuditRecord(at=_at(minutes), method=method, **values)  # type: ignore[arg-type]


def _store(master: Master, *records: AuditRecord) -> AuditRecorder:
    recorder = AuditRecorder(master.ctx.db, master.ctx.telemetry)
    for record in records:
        recorder.record(record)
    assert recorder.flush() == len(records)
    return recorder


def _methods(master: Master, **filters: object) -> list[str]:
    page = queries.list_events(master.ctx, master.admin, AuditFilter(**filters))  # type: ignore[arg-type]
    return [row.method for row in page.events]


def test_recorded_calls_read_back_newest_first_with_who_what_where(master: Master) -> None:
    recorder = _store(
        master,
        _record(
            0,
            "CreateExperiment",
            targets=(("project_id", "1"), ("experiment_id", "7")),
            address="10.1.2.3",
            transport="rest",
            duration_ms=12.3456,
        ),
        _record(1, "KillExperiment", targets=(("experiment_id", "7"),), address="10.1.2.3", transport="rest"),
    )
    page = queries.list_events(master.ctx, master.admin, AuditFilter())
    assert [r.method for r in page.events] == ["KillExperiment", "CreateExperiment"]
    created = page.events[1]
    assert created.at == T0 and created.username == "admin" and created.user_id == 1
    assert (created.actor, created.address, created.transport, created.outcome) == (
        "user",
        "10.1.2.3",
        "rest",
        "OK",
    )
    assert created.duration_ms == pytest.approx(12.346)
    assert created.targets == " project_id=1 experiment_id=7 "
    assert page.next_before_id == 0
    assert master.ctx.telemetry.audit_events_written.value == 2
    assert recorder.flush() == 0  # nothing left queued


def test_filters_by_user_time_method_outcome_and_target(master: Master) -> None:
    alice = master.add_user("alice")
    _store(
        master,
        _record(
            0, "Login", actor=events.ANONYMOUS, user_id=None, username="alice", outcome="UNAUTHENTICATED"
        ),
        _record(1, "Login", user_id=alice.user_id, username="alice"),
        _record(2, "KillExperiment", user_id=alice.user_id, username="alice", outcome="PERMISSION_DENIED"),
        _record(3, "PostUser", targets=(("username", "bob smith"), ("user_id", "9"))),
        _record(4, "KillExperiments", targets=(("experiment_ids", "3"), ("experiment_ids", "41"))),
        _record(5, "PatchModel", targets=(("model_name", "a_b%c"),)),
    )
    # alice: her failed login under the name, and her calls.
    assert _methods(master, username="alice") == ["KillExperiment", "Login", "Login"]
    # A renamed user's earlier calls are still hers (by id); the name as recorded still finds them.
    with master.ctx.unit_of_work() as w:
        w.session.execute(
            update(models.User).where(models.User.id == alice.user_id).values(username="alicia")
        )
    assert _methods(master, username="alicia") == ["KillExperiment", "Login"]
    assert _methods(master, username="alice") == ["KillExperiment", "Login", "Login"]

    assert _methods(master, since=T0 + timedelta(minutes=3), until=T0 + timedelta(minutes=5)) == [
        "KillExperiments",
        "PostUser",
    ]
    assert _methods(master, method="kill") == ["KillExperiments", "KillExperiment"]
    assert _methods(master, outcome="failed") == ["KillExperiment", "Login"]
    assert _methods(master, outcome="permission_denied") == ["KillExperiment"]
    assert len(_methods(master, outcome="ok")) == 4
    # A target matches a whole value: one of a repeated field's, or one with spaces and wildcards.
    assert _methods(master, target="experiment_ids=41") == ["KillExperiments"]
    assert _methods(master, target="experiment_ids=4") == []
    assert _methods(master, target="username=bob smith") == ["PostUser"]
    assert _methods(master, target="model_name=a_b%c") == ["PatchModel"]
    assert _methods(master, target="model_name=aXb%c") == []


def test_pages_go_back_by_id(master: Master) -> None:
    _store(master, *(_record(i, f"Call{i}") for i in range(5)))
    first = queries.list_events(master.ctx, master.admin, AuditFilter(limit=2))
    assert [r.method for r in first.events] == ["Call4", "Call3"]
    second = queries.list_events(
        master.ctx, master.admin, AuditFilter(limit=2, before_id=first.next_before_id)
    )
    assert [r.method for r in second.events] == ["Call2", "Call1"]
    last = queries.list_events(
        master.ctx, master.admin, AuditFilter(limit=2, before_id=second.next_before_id)
    )
    assert [r.method for r in last.events] == ["Call0"] and last.next_before_id == 0


def test_only_admins_read_it_and_bad_filters_name_their_field(master: Master) -> None:
    alice = master.add_user("alice")
    with pytest.raises(PermissionDenied, match="only an admin may read the audit trail"):
        queries.list_events(master.ctx, alice, AuditFilter())
    for bad, field in (
        (AuditFilter(limit=5000), "limit"),
        (AuditFilter(limit=-1), "limit"),
        (AuditFilter(before_id=-3), "before_id"),
        (AuditFilter(outcome="sideways"), "outcome"),
        (AuditFilter(target="experiment 7"), "target"),
        (AuditFilter(target="x" * 600), "target"),
        (AuditFilter(username="u" * 200), "username"),
        (AuditFilter(since=T0, until=T0 - timedelta(days=1)), "since"),
    ):
        with pytest.raises(InvalidArgument, match=f"^{field}:"):
            queries.list_events(master.ctx, master.admin, bad)


def test_a_full_queue_drops_and_counts_instead_of_waiting(master: Master) -> None:
    recorder = AuditRecorder(master.ctx.db, master.ctx.telemetry, capacity=3)
    for i in range(5):
        recorder.record(_record(i, f"Call{i}"))
    assert recorder.pending == 3
    assert master.ctx.telemetry.audit_events_dropped.value == 2
    recorder.close()  # stores what is queued
    assert _methods(master) == ["Call2", "Call1", "Call0"]


def test_the_writer_stores_in_the_background(master: Master) -> None:
    recorder = AuditRecorder(master.ctx.db, master.ctx.telemetry, batch_rows=2, interval_s=30.0)
    recorder.start()
    try:
        recorder.record(_record(0, "A"))
        recorder.record(_record(1, "B"))  # a batch's worth wakes the writer before its interval
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while _methods(master) != ["B", "A"] and datetime.now(UTC) < deadline:
            time.sleep(0.05)
        assert _methods(master) == ["B", "A"]
    finally:
        recorder.close()


def _count(master: Master) -> int:
    with master.ctx.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(models.AuditEvent)) or 0)


def test_retention_prunes_by_age_and_by_rows_in_bounded_batches(master: Master) -> None:
    day = 24 * 60
    # 10 old rows (10 and more days ago), 6 recent ones.
    _store(master, *(_record(-(10 + i) * day, f"Old{i}") for i in range(10)))
    _store(master, *(_record(-i, f"New{i}") for i in range(6)))
    keep = retention.Retention(days=7, max_rows=0)
    # Bounded: two batches of three this pass, the rest the next.
    assert retention.prune(master.ctx.db, keep, T0, batch_rows=3, max_batches=2) == 6
    assert _count(master) == 10
    assert retention.prune(master.ctx.db, keep, T0, batch_rows=3, max_batches=5) == 4
    assert _count(master) == 6
    assert retention.prune(master.ctx.db, keep, T0) == 0

    # Rows: the newest 4 stay.
    assert retention.prune(master.ctx.db, retention.Retention(days=0, max_rows=4), T0, batch_rows=1) == 2
    assert sorted(_methods(master)) == ["New2", "New3", "New4", "New5"]  # the newest ids
    assert retention.prune(master.ctx.db, retention.Retention(days=0, max_rows=0), T0) == 0
