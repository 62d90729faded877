"""Tasks' system metrics (domain/metrics/system_metrics.py): a batch from an agent is checked whole
and refused naming the field (nothing of it stored), a sample of another agent's container is
dropped, stored samples read back as series per metric (and GPU), and rows past the
full-resolution window are thinned to one per container and period."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import func, select

from cairn.agent.v1 import agent_pb2 as apb
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.metrics import system_metrics
from services.master.domain.metrics.logs import LogStore
from services.master.domain.metrics.system_metrics import SystemMetricsStore
from services.master.domain.scheduling.agent_hub import AgentLink
from services.master.servicers.agent_stream import AgentStreamServicer
from services.master.store import models, system_metric_rows
from tests.unit.master.domain.harness import Master


def _stamp(at: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(at)
    return stamp


def _sample(container: str, at: datetime, cpu: float = 50.0, **more: object) -> apb.SystemSample:
    return apb.SystemSample(
        container_id=container, time=_stamp(at), cpu_util=cpu, memory_bytes=1 << 20, processes=1, **more
    )


def _running(master: Master, agent: str = "a1") -> tuple[str, int]:
    master.add_agent(agent, slots=1)
    experiment_id = master.create(searcher={"name": "single", "metric": "loss", "max_length": {"batches": 1}})
    (trial,) = master.trials(experiment_id)
    (container,) = master.run_containers(master.live(trial.id).id)
    return container, trial.id


def _rows(master: Master) -> int:
    with master.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(models.TaskSystemMetric)) or 0)


def test_samples_are_stored_and_read_as_series(master_on_each_database: Master) -> None:
    master = master_on_each_database
    container, trial_id = _running(master)
    store = SystemMetricsStore(master.ctx)
    now = datetime.now(UTC)
    gpu = apb.GpuSample(uuid="GPU-1", util=90.0, memory_used_bytes=3 << 30, power_watts=250.0)
    first = _sample(container, now - timedelta(seconds=10), cpu=25.0, net_recv_bytes_per_s=100.0)
    second = _sample(container, now, cpu=75.0, gpus=[gpu])
    assert store.store("a1", apb.SystemMetrics(samples=[first, second])).stored == 2

    with master.db.read() as s:
        series, last = system_metrics.series_of(s, trial_id=trial_id)
        by_task, _ = system_metrics.series_of(s, task_id=master.live(trial_id).task_id)
        latest, _ = system_metrics.series_of(s, trial_id=trial_id, limit=1)
    found = {(x.name, x.gpu_uuid): x for x in series}
    assert found[("container_cpu_util", "")].values == [25.0, 75.0]
    assert found[("container_cpu_util", "")].unit == "percent"
    assert found[("container_memory_used", "")].values == [1 << 20, 1 << 20]
    # A rate the agent did not measure is no reading, not a zero.
    assert found[("container_net_throughput_recv", "")].values == [100.0]
    assert ("container_disk_throughput_read", "") not in found
    assert found[("container_gpu_util", "GPU-1")].values == [90.0]
    assert found[("container_gpu_power", "GPU-1")].unit == "watts"
    assert {x.agent_id for x in series} == {"a1"}
    assert last > 0
    assert [(x.name, x.values) for x in by_task] == [(x.name, x.values) for x in series]
    assert {x.name: x.values for x in latest}["container_cpu_util"] == [75.0]

    # A live chart's next poll: what was stored after the last row it read, a late reading of an
    # earlier time included; nothing new, nothing read, and its place kept.
    late = _sample(container, now - timedelta(seconds=5), cpu=40.0)
    assert store.store("a1", apb.SystemMetrics(samples=[late])).stored == 1
    with master.db.read() as s:
        newer, after = system_metrics.series_of(s, trial_id=trial_id, after_id=last, limit=100)
        none, same = system_metrics.series_of(s, trial_id=trial_id, after_id=after)
    assert {x.name: x.values for x in newer}["container_cpu_util"] == [40.0] and after > last
    assert (none, same) == ([], after)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b.samples.extend([b.samples[0]] * 600), "system_metrics.samples: 601 samples"),
        (lambda b: setattr(b.samples[0], "cpu_util", math.nan), "system_metrics.samples[0].cpu_util"),
        (lambda b: setattr(b.samples[0], "memory_bytes", -5), "system_metrics.samples[0].memory_bytes"),
        (lambda b: b.samples[0].ClearField("time"), "system_metrics.samples[0].time: required"),
        (
            lambda b: setattr(b.samples[0], "container_id", "x" * 200),
            "system_metrics.samples[0].container_id",
        ),
        (
            lambda b: b.samples[0].time.CopyFrom(_stamp(datetime.now(UTC) + timedelta(days=3))),
            "more than a day from the master's clock",
        ),
        (
            lambda b: b.samples[0].gpus.add(uuid="G", util=150.0),
            "system_metrics.samples[0].gpus[0].util",
        ),
        (
            lambda b: setattr(b.samples[0], "disk_read_bytes_per_s", math.inf),
            "system_metrics.samples[0].disk_read_bytes_per_s",
        ),
    ],
)
def test_a_bad_batch_is_refused_whole_naming_the_field(master: Master, change: object, field: str) -> None:
    container, _ = _running(master)
    store = SystemMetricsStore(master.ctx)
    batch = apb.SystemMetrics(samples=[_sample(container, datetime.now(UTC))])
    change(batch)  # type: ignore[operator]
    with pytest.raises(InvalidArgument, match=field.replace("[", r"\[").replace("]", r"\]")):
        store.store("a1", batch)
    assert _rows(master) == 0


def test_a_sample_of_another_agents_container_is_dropped(master: Master) -> None:
    container, _ = _running(master)
    store = SystemMetricsStore(master.ctx)
    now = datetime.now(UTC)
    intake = store.store(
        "a2", apb.SystemMetrics(samples=[_sample(container, now), _sample("no-such-container", now)])
    )
    assert (intake.stored, intake.dropped) == (0, 2)
    assert _rows(master) == 0


def test_old_rows_are_thinned_to_one_per_container_and_period(master_on_each_database: Master) -> None:
    master = master_on_each_database
    container, trial_id = _running(master)
    store = SystemMetricsStore(master.ctx)
    now = datetime.now(UTC).replace(microsecond=0)
    period = system_metrics.THIN_PERIOD
    base = datetime.fromtimestamp(
        (now - timedelta(hours=3)).timestamp() // period.total_seconds() * period.total_seconds(), UTC
    )
    # Two old periods of 30 samples each (10 s apart), then recent samples kept as they are.
    old = [_sample(container, base + timedelta(seconds=10 * i), cpu=float(i)) for i in range(60)]
    recent = [_sample(container, now - timedelta(seconds=10 * i)) for i in range(5)]
    store.store("a1", apb.SystemMetrics(samples=old + recent))
    deleted = system_metrics.thin(master.db, timedelta(hours=1), now)
    assert deleted == 58
    assert _rows(master) == 7
    with master.db.read() as s:
        series, _ = system_metrics.series_of(s, trial_id=trial_id)
        thinned = s.scalar(select(func.count()).where(models.TaskSystemMetric.thinned.is_(True)))
    # The first sample of each old period stands for it.
    assert {x.name: x.values for x in series}["container_cpu_util"][:2] == [0.0, 30.0]
    assert thinned == 2
    # Thinning again changes nothing.
    assert system_metrics.thin(master.db, timedelta(hours=1), now) == 0


def test_a_refused_batch_leaves_the_agents_stream_open(master: Master) -> None:
    """On the agent's stream (servicers/agent_stream.py): the master reads on past a malformed and
    an oversized batch, and stores the good one after them."""
    container, _ = _running(master)
    servicer = AgentStreamServicer(master.ctx, LogStore(master.ctx), max_agents=4)
    now = datetime.now(UTC)
    good = _sample(container, now)
    bad = _sample(container, now, cpu=-1.0)
    sent = [
        apb.AgentMessage(system_metrics=apb.SystemMetrics(samples=[bad])),
        apb.AgentMessage(system_metrics=apb.SystemMetrics(samples=[good] * 513)),
        apb.AgentMessage(system_metrics=apb.SystemMetrics(samples=[good])),
        apb.AgentMessage(heartbeat=apb.Heartbeat(seq=1)),
    ]

    async def messages() -> AsyncIterator[apb.AgentMessage]:
        for message in sent:
            yield message

    link = AgentLink("a1")
    asyncio.run(servicer._read(link, messages()))
    assert _rows(master) == 1


def test_the_fast_insert_names_every_column_of_the_model() -> None:
    assert {*system_metric_rows.COLUMNS, "id", "thinned"} == set(
        models.TaskSystemMetric.__table__.columns.keys()
    )
