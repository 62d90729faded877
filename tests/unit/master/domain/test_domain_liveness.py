"""The liveness loop gives up the containers of an agent that stayed away past its reconnect wait;
an agent that registered again meanwhile (and was told to keep its containers) is left alone, even
when it came back between the loop's read and its unit of work."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.scheduling import agents, liveness
from services.master.domain.scheduling.liveness import LivenessLoop
from services.master.store import models
from services.master.store.db import Database
from tests.unit.master.domain.harness import Master


def _away_with_a_running_container(master: Master) -> tuple[str, str]:
    master.add_agent("a1")
    (trial,) = master.trials(master.create())
    allocation_id = master.live(trial.id).id
    (container,) = master.run_containers(allocation_id)
    master.hub.connected.discard("a1")
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.Agent, "a1").last_seen = utcnow() - timedelta(hours=1)
    return allocation_id, container


def _state(master: Master, allocation_id: str) -> str:
    with master.ctx.db.read() as s:
        return s.get_one(models.Allocation, allocation_id).state


def test_an_agent_that_stays_away_loses_its_containers(master: Master) -> None:
    allocation_id, _ = _away_with_a_running_container(master)
    LivenessLoop(master.ctx)._give_up_on_absent_agents()
    assert _state(master, allocation_id) == A.TERMINATED


def test_an_agent_back_between_the_read_and_the_unit_of_work_keeps_its_containers(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocation_id, container = _away_with_a_running_container(master)
    unit_of_work = master.ctx.unit_of_work
    came_back: list[agents.Registration] = []

    @contextlib.contextmanager
    def back_first(*args: object, **kwargs: object) -> Iterator[object]:
        if not came_back:  # the agent reconnects right after the loop read it as absent
            monkeypatch.setattr(master.ctx, "unit_of_work", unit_of_work)
            came_back.append(
                master.add_agent(
                    "a1", containers=[apb.RunningContainer(container_id=container)], reconnect=True
                )
            )
            monkeypatch.setattr(master.ctx, "unit_of_work", back_first)
        with unit_of_work(*args, **kwargs) as w:  # type: ignore[arg-type]
            yield w

    monkeypatch.setattr(master.ctx, "unit_of_work", back_first)
    LivenessLoop(master.ctx)._give_up_on_absent_agents()
    assert came_back and came_back[0].keep_container_ids == [container]
    assert _state(master, allocation_id) == A.RUNNING


def test_the_loops_reads_find_live_allocations_by_the_states_index(tmp_path: Path) -> None:
    """Each read the loop makes every second asks for the live states by name, which the state's
    index answers: `state != TERMINATED` read every allocation the cluster ever ran."""
    db = Database(f"sqlite:///{tmp_path / 'cairn.db'}")
    db.migrate()
    ran: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        ran.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", seen)
    with db.read() as s:
        s.execute(liveness.EXPIRED_PREEMPTIONS, {"now": utcnow()}).all()
        s.execute(liveness.KILLS_OWED).all()
    event.remove(db.engine, "before_cursor_execute", seen)
    with db.engine.connect() as connection:
        raw = connection.connection.driver_connection
        assert raw is not None
        plans = [
            raw.execute("EXPLAIN QUERY PLAN " + statement, parameters).fetchall()
            for statement, parameters in ran
        ]
    db.engine.dispose()
    assert len(plans) == 2
    for plan in plans:
        assert any("INDEX ix_allocations_state" in step[-1] for step in plan), plan
