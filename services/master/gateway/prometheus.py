"""Cluster gauges in Prometheus' text format, read from the database on each scrape."""

from __future__ import annotations

from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.telemetry import Histogram
from services.master.domain.reads.cluster import cluster_counts, queue_counts
from services.master.domain.reads.deferred_work import owed_work
from services.master.domain.reads.provisioning import provisioning_counts
from services.master.domain.workspaces.pool_shares import quota_use


def _escaped(value: str) -> str:
    """A label value as Prometheus' text format writes it (names people chose may hold anything)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _gauge(
    lines: list[str],
    name: str,
    help_text: str,
    samples: list[tuple[dict[str, str], float]],
    kind: str = "gauge",
) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        label_text = ",".join(f'{k}="{_escaped(str(v))}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{label_text}}} {value}" if label_text else f"{name} {value}")


def _histogram(lines: list[str], name: str, help_text: str, histogram: Histogram) -> None:
    snapshot = histogram.snapshot()
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} histogram")
    for bound, count in zip(snapshot.bounds, snapshot.cumulative, strict=False):
        lines.append(f'{name}_bucket{{le="{bound:g}"}} {count}')
    lines.append(f'{name}_bucket{{le="+Inf"}} {snapshot.count}')
    lines.append(f"{name}_sum {snapshot.total:.6f}")
    lines.append(f"{name}_count {snapshot.count}")


def render(ctx: MasterContext) -> str:
    lines: list[str] = []
    now = utcnow()
    with ctx.db.read() as s:
        counts = cluster_counts(s)
        queue = queue_counts(s, now)
        owed = owed_work(s)
        provisioned = provisioning_counts(s, now)
        quotas = quota_use(s)
    telemetry = ctx.telemetry
    _histogram(
        lines,
        "cairn_scheduling_pass_seconds",
        "Scheduling passes with something to place: the changes (or the cluster) read, sent and decided on.",
        telemetry.scheduling_pass,
    )
    _histogram(
        lines,
        "cairn_scheduling_pass_cpu_seconds",
        "The same passes in the scheduling thread's CPU time (wall time less waits for locks and the GIL).",
        telemetry.scheduling_pass_cpu,
    )
    _histogram(
        lines,
        "cairn_scheduling_start_seconds",
        "Starting what a pass placed: allocations assigned, containers recorded, start commands sent.",
        telemetry.scheduling_start,
    )
    _histogram(
        lines,
        "cairn_master_lock_wait_seconds",
        "Each unit of work's wait for the master's process-wide lock (all state changes take it).",
        telemetry.master_lock_wait,
    )
    _histogram(
        lines,
        "cairn_master_lock_held_seconds",
        "Each unit of work's hold of that lock: the rate of the sum is the share of the time it is held.",
        telemetry.master_lock_held,
    )
    held_by = telemetry.master_lock_held_by.snapshot()
    # One snapshot's three sums per holder: (seconds, CPU seconds, holds).
    for name, index, help_text in (
        (
            "cairn_master_lock_held_by_seconds_total",
            0,
            "Seconds the master's lock was held, by what held it (the module that opened the unit of "
            "work, or the purpose it named): which work the master's capacity goes to.",
        ),
        (
            "cairn_master_lock_held_by_cpu_seconds_total",
            1,
            "The holding threads' own CPU seconds in those holds: the rest of a hold is time off the "
            "CPU (waits for a core, the GIL, the database).",
        ),
        ("cairn_master_lock_holds_total", 2, "Units of work that held the master's lock, by what held it."),
    ):
        _gauge(
            lines,
            name,
            help_text,
            [({"unit": unit}, round(sums[index], 6)) for unit, sums in held_by.items()],
            kind="counter",
        )
    divisions = ctx.fair_shares.all()
    for name, field, help_text in (
        (
            "cairn_fair_share_entitled_slots",
            "entitled",
            "Slots a workspace's fair share gives it now, by pool.",
        ),
        ("cairn_fair_share_held_slots", "held", "Slots a workspace holds in a fair-share pool."),
        ("cairn_fair_share_wanted_slots", "wanted", "Slots a workspace wants (runs and waits for)."),
        ("cairn_fair_share_borrowed_slots", "borrowed", "Slots a workspace holds beyond its nominal share."),
    ):
        _gauge(
            lines,
            name,
            help_text,
            [
                (
                    {
                        "pool": d.pool,
                        "workspace_id": g.key,
                        "workspace": g.name.removeprefix("workspace '").removesuffix("'"),
                    },
                    getattr(g, field),
                )
                for d in divisions
                for g in d.workspaces
            ],
        )
    # Quotas of every kind of pool (priority pools too), each set one with its group's use.
    for name, field, help_text in (
        (
            "cairn_quota_guaranteed_slots",
            "guaranteed_slots",
            "Slots a quota guarantees, by pool, workspace and user.",
        ),
        (
            "cairn_quota_max_slots",
            "max_slots",
            "A quota's maximum slots (0: none), by pool, workspace and user.",
        ),
        (
            "cairn_quota_slots_in_use",
            "slots_in_use",
            "Slots a group with a quota holds now, by pool, workspace and user.",
        ),
    ):
        _gauge(
            lines,
            name,
            help_text,
            [
                (
                    {
                        "pool": q.pool,
                        "workspace_id": str(q.workspace_id),
                        "workspace": q.workspace,
                        "user": q.username,
                    },
                    getattr(q, field),
                )
                for q in quotas
            ],
        )
    _gauge(
        lines,
        "cairn_pending_allocations",
        "Allocations waiting for slots, by resource pool.",
        [({"pool": pool}, n) for pool, n in queue.pending_by_pool],
    )
    _gauge(
        lines,
        "cairn_metric_rows_total",
        "Metric reports stored (one row each).",
        [({}, telemetry.metric_rows.value)],
        kind="counter",
    )
    _gauge(
        lines,
        "cairn_metric_report_batches_total",
        "Batches of metric reports stored (one transaction each).",
        [({}, telemetry.metric_batches.value)],
        kind="counter",
    )
    _histogram(
        lines,
        "cairn_metric_intake_seconds",
        "From a metric report's time (the trial's clock) to the commit that made it readable.",
        telemetry.metric_intake_latency,
    )
    _gauge(
        lines,
        "cairn_audit_events_written_total",
        "Audit trail records stored (domain/audit/recorder.py).",
        [({}, telemetry.audit_events_written.value)],
        kind="counter",
    )
    _gauge(
        lines,
        "cairn_audit_events_dropped_total",
        "Audit trail records dropped because the writer's queue was full: a gap in the trail.",
        [({}, telemetry.audit_events_dropped.value)],
        kind="counter",
    )
    _gauge(
        lines,
        "cairn_searcher_events_pending",
        "Searcher events written but not yet applied.",
        [({}, queue.searcher_events)],
    )
    _gauge(
        lines,
        "cairn_searcher_pump_lag_seconds",
        "Age of the oldest searcher event not yet applied (0 when none waits).",
        [({}, round(queue.searcher_lag_s, 3))],
    )
    _gauge(
        lines,
        "cairn_experiments",
        "Experiments by state.",
        [({"state": st}, n) for st, n in counts.experiments_by_state],
    )
    _gauge(
        lines, "cairn_trials", "Trials by state.", [({"state": st}, n) for st, n in counts.trials_by_state]
    )
    _gauge(
        lines,
        "cairn_allocations",
        "Live allocations by state.",
        [({"state": st}, n) for st, n in counts.live_allocations_by_state],
    )
    _gauge(lines, "cairn_agents", "Registered agents.", [({}, counts.agents)])
    _gauge(
        lines, "cairn_agents_connected", "Agents with a live stream.", [({}, len(ctx.hub.connected_ids()))]
    )
    _gauge(lines, "cairn_slots", "Slots registered by agents.", [({}, counts.slots)])
    _gauge(
        lines,
        "cairn_slots_unhealthy",
        "Slots out of service because their device failed (a GPU's critical Xid or ECC error).",
        [({}, counts.slots_unhealthy)],
    )
    _gauge(
        lines,
        "cairn_deferred_work",
        "Work the master owes (checkpoint GC, deletions), by kind.",
        [({"kind": o.kind}, o.owed) for o in owed],
    )
    _gauge(
        lines,
        "cairn_deferred_work_failing",
        "Owed work whose last attempt failed (retried with backoff), by kind.",
        [({"kind": o.kind}, o.failing) for o in owed],
    )
    _gauge(
        lines,
        "cairn_provisioned_instances",
        "Instances the provisioner runs, by pool and phase.",
        [({"pool": pool, "phase": phase}, n) for pool, phase, n in provisioned.by_phase],
    )
    _gauge(
        lines,
        "cairn_provisioner_launches_total",
        "Instances the provisioner has launched, by pool.",
        [({"pool": pool}, n) for pool, n in provisioned.launched],
        kind="counter",
    )
    _gauge(
        lines,
        "cairn_provisioner_terminations_total",
        "Instances the provisioner has retired (terminated, or found gone), by pool.",
        [({"pool": pool}, n) for pool, n in provisioned.retired],
        kind="counter",
    )
    _gauge(
        lines,
        "cairn_provisioned_idle_seconds",
        "Seconds the pool's running instances have been idle, summed, by pool.",
        [({"pool": pool}, round(seconds, 1)) for pool, seconds in provisioned.idle_seconds],
    )
    return "\n".join(lines) + "\n"
