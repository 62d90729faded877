"""Allocation tokens (domain/identity/allocation_access.py): a token opens only its own trial, and dies with
its allocation. The two searcher-operation calls issue 15 found unchecked are covered by name, and
a refused call changes nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import event

from services.common.principal import Principal
from services.master.domain.experiments import experiments
from services.master.domain.identity import allocation_access
from services.master.domain.identity.auth import AuthService, hash_token
from services.master.domain.kernel.errors import NotFound, PermissionDenied, Unauthenticated
from services.master.domain.metrics import intake, signals
from services.master.domain.metrics.reports import Report
from services.master.store import models
from tests.unit.master.domain.harness import Master


def _two_running_trials(master: Master) -> tuple[models.Trial, models.Trial]:
    master.add_agent("a1", slots=2)
    (first,) = master.trials(master.create())
    (second,) = master.trials(master.create())
    for trial in (first, second):
        master.run_containers(master.live(trial.id).id)
    return first, second


def _trial_code(master: Master, trial: models.Trial) -> Principal:
    return Principal(allocation_id=master.live(trial.id).id)


def test_a_token_cannot_read_or_complete_another_trials_searcher_operation(master: Master) -> None:
    first, second = _two_running_trials(master)
    code = _trial_code(master, first)

    assert signals.current_operation(master.ctx, code, first.id, wait_s=0).length > 0
    with pytest.raises(
        PermissionDenied, match=f"trial_id: allocation .* belongs to trial {first.id}, not trial {second.id}"
    ):
        signals.current_operation(master.ctx, code, second.id, wait_s=0)

    before = master.trials(second.experiment_id)[0].searcher_completed_length
    with pytest.raises(PermissionDenied, match=f"not trial {second.id}"):
        signals.complete_operation(master.ctx, code, second.id, 5, 0.5)
    assert master.trials(second.experiment_id)[0].searcher_completed_length == before  # nothing changed
    # Naming a trial that does not exist says so, without revealing more.
    with pytest.raises(NotFound):
        signals.current_operation(master.ctx, code, 10_000, wait_s=0)


def test_a_token_reports_only_for_its_own_trial(master: Master) -> None:
    first, second = _two_running_trials(master)
    code = _trial_code(master, first)
    report = [Report("training", 1, {"loss": 1.0}, seq=1)]
    assert intake.report(master.ctx, code, first.id, first.run_id, report).stored == 1
    with pytest.raises(PermissionDenied, match=f"not trial {second.id}"):
        intake.report(master.ctx, code, second.id, second.run_id, report)
    assert master.stored_steps(second.id) == []
    with pytest.raises(PermissionDenied, match="allocation_id: the token belongs to allocation"):
        signals.ack_preemption(master.ctx, code, master.live(second.id).id)
    # A user's session is not trial code: the same calls are open to it.
    assert intake.report(master.ctx, master.admin, second.id, second.run_id, report).stored == 1


def test_a_canceled_trials_token_is_refused(master: Master) -> None:
    first, _ = _two_running_trials(master)
    alloc = master.live(first.id)
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.Allocation, alloc.id).token_hash = hash_token("first-token")
    auth = AuthService(master.db, 3600)
    code = auth.authenticate_allocation_token("first-token")
    assert code.allocation_id == alloc.id

    with master.ctx.unit_of_work() as w:
        experiments.cancel(master.ctx, w, experiments.load(w, first.experiment_id))
    (container,) = master.containers(alloc.id)
    master.exit(container.id, 0)
    assert master.allocations(first.id)[-1].state == "TERMINATED"

    with pytest.raises(Unauthenticated, match=f"allocation {alloc.id} has ended"):
        auth.authenticate_allocation_token("first-token")
    # A call already past authentication is refused too: the check reads the allocation again.
    with pytest.raises(Unauthenticated, match="has ended"):
        intake.report(master.ctx, code, first.id, first.run_id, [Report("training", 9, {"loss": 1.0}, seq=9)])
    assert 9 not in master.stored_steps(first.id)
    with pytest.raises(Unauthenticated, match="invalid allocation token"):
        auth.authenticate_allocation_token("never-issued")


def test_a_check_reads_the_allocation_by_columns_or_not_at_all_when_its_session_holds_it(
    master: Master,
) -> None:
    """Every call trial code makes is checked (allocation_access._live_row): by a read of four
    columns, or, where the unit already loaded the allocation (metric intake reads it with its
    trial), by that object with no query; an ended allocation is refused either way."""
    first, _ = _two_running_trials(master)
    code = _trial_code(master, first)
    statements: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement)

    with master.ctx.unit_of_work() as w:
        engine = w.session.get_bind()
        event.listen(engine, "before_cursor_execute", seen)
        try:
            assert allocation_access.own_trial(w.session, code) == first.id
            (read,) = statements
            assert "placements" not in read and "FROM allocations" in read
            loaded = w.session.get_one(models.Allocation, code.allocation_id)
            statements.clear()
            assert allocation_access.own_trial(w.session, code) == first.id
            allocation_access.check_allocation(w.session, code, loaded.id)
            assert statements == []
            loaded.state = "TERMINATED"  # unflushed: the object the session holds is what counts
            with pytest.raises(Unauthenticated, match="has ended"):
                allocation_access.own_trial(w.session, code)
            w.session.rollback()
        finally:
            event.remove(engine, "before_cursor_execute", seen)
