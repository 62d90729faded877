"""Cluster gauges in Prometheus' text format, read from the database on each scrape."""

from __future__ import annotations

from sqlalchemy import func, select

from services.master.domain.context import MasterContext
from services.master.store import models


def _gauge(lines: list[str], name: str, help_text: str, samples: list[tuple[dict[str, str], float]]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} gauge")
    for labels, value in samples:
        label_text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{label_text}}} {value}" if label_text else f"{name} {value}")


def render(ctx: MasterContext) -> str:
    lines: list[str] = []
    with ctx.db.read() as s:
        experiments = s.execute(
            select(models.Experiment.state, func.count()).group_by(models.Experiment.state)
        ).all()
        trials = s.execute(select(models.Trial.state, func.count()).group_by(models.Trial.state)).all()
        allocations = s.execute(
            select(models.Allocation.state, func.count())
            .where(models.Allocation.state != "TERMINATED")
            .group_by(models.Allocation.state)
        ).all()
        slots = int(s.scalar(select(func.count()).select_from(models.AgentSlot)) or 0)
        agents = int(s.scalar(select(func.count()).select_from(models.Agent)) or 0)
    _gauge(lines, "cairn_experiments", "Experiments by state.", [({"state": st}, n) for st, n in experiments])
    _gauge(lines, "cairn_trials", "Trials by state.", [({"state": st}, n) for st, n in trials])
    _gauge(
        lines,
        "cairn_allocations",
        "Live allocations by state.",
        [({"state": st}, n) for st, n in allocations],
    )
    _gauge(lines, "cairn_agents", "Registered agents.", [({}, agents)])
    _gauge(
        lines, "cairn_agents_connected", "Agents with a live stream.", [({}, len(ctx.hub.connected_ids()))]
    )
    _gauge(lines, "cairn_slots", "Slots registered by agents.", [({}, slots)])
    return "\n".join(lines) + "\n"
