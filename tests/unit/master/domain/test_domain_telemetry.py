"""What /metrics says of the master's own work: scheduling passes timed, the queue per pool, metric
rows and their intake latency, and the searcher pump's backlog; and every metric the Grafana
dashboard in deploy/grafana queries is one the master serves."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import timedelta
from pathlib import Path

from services.master.domain.kernel.clock import utcnow
from services.master.domain.metrics import intake, summaries
from services.master.domain.metrics.reports import Report
from services.master.gateway import prometheus
from tests.unit.master.domain.harness import Master

DASHBOARD = Path(__file__).resolve().parents[4] / "deploy" / "grafana" / "cairn-dashboard.json"


def _value(scraped: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", scraped, re.MULTILINE)
    assert match, f"{series} not in:\n{scraped}"
    return float(match.group(1))


def test_passes_queue_and_intake_show_on_the_scrape(master: Master) -> None:
    master.add_agent("a1", slots=1)
    first = master.create(searcher={"name": "single", "metric": "loss", "max_length": {"batches": 10}})
    second = master.create(searcher={"name": "single", "metric": "loss", "max_length": {"batches": 10}})
    master.settle()
    scraped = prometheus.render(master.ctx)
    assert _value(scraped, "cairn_scheduling_pass_seconds_count") >= 1
    assert _value(scraped, 'cairn_scheduling_pass_seconds_bucket{le="+Inf"}') == _value(
        scraped, "cairn_scheduling_pass_seconds_count"
    )
    assert _value(scraped, 'cairn_pending_allocations{pool="default"}') == 1  # one slot, two trials
    assert _value(scraped, "cairn_metric_rows_total") == 0

    (trial,) = master.trials(first)
    master.run_containers(master.live(trial.id).id)
    sent = utcnow() - timedelta(seconds=2)
    stored = intake.report(
        master.ctx,
        master.admin,
        trial.id,
        1,
        [Report("training", step, {"loss": 1.0 / step}, report_time=sent, seq=step) for step in (1, 2, 3)],
    )
    assert stored.stored == 3
    scraped = prometheus.render(master.ctx)
    assert _value(scraped, "cairn_metric_rows_total") == 3
    assert _value(scraped, "cairn_metric_report_batches_total") == 1
    assert _value(scraped, "cairn_metric_intake_seconds_count") == 3
    assert _value(scraped, "cairn_metric_intake_seconds_sum") >= 6.0  # three reports, 2 s old each
    assert _value(scraped, 'cairn_metric_intake_seconds_bucket{le="1"}') == 0
    assert _value(scraped, "cairn_searcher_events_pending") >= 0
    assert _value(scraped, "cairn_searcher_pump_lag_seconds") >= 0
    assert second  # still queued behind the first


def test_every_metric_the_dashboard_queries_is_served(master: Master) -> None:
    master.add_agent("a1")
    master.create()
    master.settle()
    served = set()
    for line in prometheus.render(master.ctx).splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            served.add(name)
            if kind == "histogram":
                served |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(cairn_[a-z_]+)\b", target["expr"])
    }
    assert queried and queried <= served, f"the dashboard queries what /metrics lacks: {queried - served}"


def test_a_batch_folds_into_the_summary_as_its_reports_one_by_one() -> None:
    """Intake folds a whole batch into the trial's summary at once; the result is what folding
    each report in turn gives (numbers, strings, a metric missing from some reports, bools)."""
    reports = [
        Report("training", 1, {"loss": 4.0, "note": "a", "flag": True}),
        Report("training", 2, {"loss": 2, "acc": 0.5}),
        Report("validation", 2, {"loss": 1.5}),
        Report("training", 3, {"loss": "NaN", "acc": 0.75, "note": 7.0}),
    ]
    one_by_one: dict = {"avg_metrics": {"loss": {"count": 1, "sum": 1.0, "min": 1.0, "max": 1.0}}}
    batched = json.loads(json.dumps(one_by_one))
    for report in reports:
        summaries.fold_into_summary(one_by_one, report.group, report.metrics)
    summaries.fold_batch(batched, [(r, r.metrics) for r in reports])
    assert batched == one_by_one


def test_the_master_locks_waits_and_holds_show_on_the_scrape(master: Master) -> None:
    """Each unit of work under the process-wide lock counts its wait and its hold; a unit kept
    waiting by another holder shows that wait."""
    before = master.ctx.telemetry.master_lock_wait.snapshot()
    held = threading.Event()
    let_go = threading.Event()

    def hold() -> None:
        with master.ctx.unit_of_work():
            held.set()
            let_go.wait(10)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(10)
    threading.Timer(0.2, let_go.set).start()
    with master.ctx.unit_of_work():
        pass
    holder.join(10)
    after = master.ctx.telemetry.master_lock_wait.snapshot()
    assert after.count - before.count == 2
    # The second unit's wait for the first: most of the 0.2 s (it asks a moment after the timer
    # starts, on a busy machine up to milliseconds later).
    assert after.total - before.total >= 0.1
    scraped = prometheus.render(master.ctx)
    assert _value(scraped, "cairn_master_lock_wait_seconds_count") == after.count
    assert _value(scraped, "cairn_master_lock_held_seconds_sum") >= 0.2  # the first unit's hold
    assert _value(scraped, 'cairn_master_lock_held_seconds_bucket{le="+Inf"}') == _value(
        scraped, "cairn_master_lock_held_seconds_count"
    )


def test_a_unit_inside_a_unit_is_timed_once(master: Master) -> None:
    """The lock is reentrant: an inner unit neither waits nor holds beyond its outer one's hold,
    and counting it too would put the share of the time held past 1."""
    before = master.ctx.telemetry.master_lock_held.snapshot()
    began = time.perf_counter()
    with master.ctx.unit_of_work(), master.ctx.unit_of_work():
        time.sleep(0.1)
    took = time.perf_counter() - began
    after = master.ctx.telemetry.master_lock_held.snapshot()
    assert after.count - before.count == 1
    assert 0.1 <= after.total - before.total <= took


def test_the_locks_holds_are_counted_by_what_held_it(master: Master) -> None:
    """Each timed hold is also summed under what held the lock: the module that opened the unit
    (here an experiment's creation and this test), or the purpose a shared helper names, with the
    holding thread's own CPU time; the labelled sums add up to the histogram's, and the scrape
    serves them as counters."""
    master.add_agent("a1", slots=1)
    master.create(searcher={"name": "single", "metric": "loss", "max_length": {"batches": 10}})
    master.settle()
    with master.ctx.unit_of_work():
        time.sleep(0.05)  # a wait: no CPU
    with master.ctx.unit_of_work(purpose="a named batch"), master.ctx.unit_of_work(purpose="inner"):
        spin_until = time.thread_time() + 0.05
        while time.thread_time() < spin_until:  # work: CPU
            pass
    held_by = master.ctx.telemetry.master_lock_held_by.snapshot()
    seconds, cpu, count = held_by["experiments.creation"]
    assert count >= 1 and 0 < cpu <= seconds + 0.01
    seconds, cpu, count = held_by["a named batch"]
    assert count == 1 and seconds >= 0.05 and cpu >= 0.05
    assert "inner" not in held_by  # an inner unit is not timed: its outer one's hold covers it
    this_module = "tests.unit.master.domain.test_domain_telemetry"
    seconds, cpu, count = held_by[this_module]
    assert seconds >= 0.05 and cpu < 0.04
    histogram = master.ctx.telemetry.master_lock_held.snapshot()
    assert sum(count for _, _, count in held_by.values()) == histogram.count
    assert abs(sum(seconds for seconds, _, _ in held_by.values()) - histogram.total) < 1e-6
    scraped = prometheus.render(master.ctx)
    assert "# TYPE cairn_master_lock_held_by_seconds_total counter" in scraped
    assert _value(scraped, 'cairn_master_lock_held_by_seconds_total{unit="a named batch"}') >= 0.05
    assert _value(scraped, 'cairn_master_lock_held_by_cpu_seconds_total{unit="a named batch"}') >= 0.05
    assert _value(scraped, f'cairn_master_lock_holds_total{{unit="{this_module}"}}') == count
