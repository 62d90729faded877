"""Scheduling passes on a real cluster of many simulated agents (issue 14).

A local cluster (real master, scheduler, searcher processes, started by the same supervisor as
`cairn cluster up`) with no real agents, on SQLite (a temporary state directory) or PostgreSQL (a
scratch database, dropped afterwards). In this process, --agents simulated agents of --slots CPU
slots each, on one asyncio loop, each holding its own AgentService.Connect stream over its own
socket, enrolled as the local cluster enrols its agents (a join token made with the cluster token
the local cluster keeps in its record, then the agent's own credential on its stream): Hello, the
Welcome, a heartbeat after each silence of the interval the Welcome asks for (as the agent's
session sends them), an ok for every command, and a fake process runtime (a start is RUNNING at
once and TERMINATED with exit code 0 after --trial-seconds, with a little jitter; a kill or
terminate signal ends it at once).

An experiment of --trials one-slot trials (a grid; its entrypoint never runs) then fills the
cluster, and turns over for --seconds after it is full: each trial that ends frees a slot and the
master places the next pending one. Reported:

- connected: from the first agent dialling to every agent welcomed;
- full: from the experiment's creation until the first --agents x --slots trials were started
  (placed and their StartContainer received; with short trials the first have ended by then);
- over the turnover window (a difference of two /metrics scrapes of the master's histograms):
  passes, the p50/p95 (interpolated within the histogram's buckets) and mean of their decisions in
  wall time (`cairn_scheduling_pass_seconds`) and in the scheduling thread's CPU time
  (`cairn_scheduling_pass_cpu_seconds`: the difference is waiting for the GIL and locks), and of
  starting what each placed (`cairn_scheduling_start_seconds`); trials ended and started per
  second (the window starts only the trials left after the first fill); the master's, the
  scheduler's and the searcher's CPU seconds (/proc/<pid>/stat);
- idle: the master's CPU, as a share of one core, over --idle-seconds with every agent connected
  and nothing to run (streams and heartbeats alone), from IDLE_SETTLE_S after the last Welcome;
- starts a second, sustained: every trial started, from the experiment's creation to its last
  trial's start (slots are free all along: the master places more slowly than trials end);
- the p99 from an allocation's request to its RUNNING over the first fill (the master's rows: every
  one of them requested and placed while slots were free; all requested at once, so the p99 is
  about the time the master takes to start the first fill).

The last line is one summary: `sim_agents: starts/s S, first N placed T s, p99 request-to-running
R s, passes p95 P ms, idle master CPU C %`.

With --paced RATE, trials are requested at a steady pace instead: an experiment of --paced-batch
trials every --paced-batch / RATE seconds for --seconds, then the run waits for every trial to
start. With RATE x --trial-seconds below the slots, every request is made while slots are free, so
the p99 from request to RUNNING over all of them is the master's latency at that load (the burst's
p99 is mostly the queue of the 7,999 requested with it). A request is stamped once its creation
holds the master's lock, so the line before the last also gives each creation call's time and the
wait from the call to RUNNING, what a user waits: a master that made creation wait for its lock
would look faster from the request alone. Its last line: `sim_agents paced: offered RATE/s,
starts/s S, p99 request-to-running R s, passes p95 P ms, idle master CPU C %`.

    .venv/bin/python -m bench.sim_agents [--agents 1000] [--slots 8] [--trials 10000] [--seconds 60]
        [--trial-seconds 2] [--backend sqlite|postgres] [--paced RATE [--paced-batch 100]]

Everything it starts is stopped and removed when it ends, Ctrl-C included. Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import text

from bench.cairn_cluster import Api, cairn_cluster
from bench.metric_intake import scratch_postgres
from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from cairn.api.v1 import agent_enrolment_pb2 as epb
from cairn.api.v1 import api_pb2_grpc, experiment_pb2
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.record import ClusterRecord, load_record
from cairn.metadata_keys import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY
from cairn.wire import CHANNEL_OPTIONS
from services.master.store.db import Database

HERE = Path(__file__).parent
# The windows of --paced's profile of the waits over the run.
PROFILE_WINDOW_S = 10.0
# How long --paced waits, once every trial started, for the master to acknowledge their RUNNING.
ACK_WAIT_S = 60.0
MODEL_DIR = HERE / "trials" / "sleep_trial"
CONFIG = """
name: sim-agents-{trials}
entrypoint: python3 sleep_trial.py
searcher:
  name: grid
  metric: loss
  smaller_is_better: true
  max_length: 1
  max_concurrent_trials: 0  # all at once (Determined: 0 is no limit)
max_restarts: 0  # a trial that exits without its searcher work ends once: one turnover each
resources:
  slots_per_trial: 1
hyperparameters:
  x:
    type: int
    minval: 0
    maxval: {top}
    count: {trials}
"""
# A pass's decision (wall and the scheduling thread's CPU) and the starting of what it placed; the
# units of work's waits for the master's lock and their holds (absent from a tree before them:
# their figures are then nan).
PASS_METRICS = {
    "pass": "cairn_scheduling_pass_seconds",
    "pass_cpu": "cairn_scheduling_pass_cpu_seconds",
    "start": "cairn_scheduling_start_seconds",
    "lock_wait": "cairn_master_lock_wait_seconds",
    "lock_held": "cairn_master_lock_held_seconds",
}
# Figures' keys for the share of the time each holder held the master's lock, and for the share
# of it that was the holding thread's own CPU (the rest: waits for the database and the GIL);
# the run's line names the largest few.
HELD_BY = "lock_held_by:"
HELD_CPU_BY = "lock_held_cpu_by:"
TOP_HOLDERS = 4
# Agents dialling at once while the cluster comes up: all of them at once would measure the
# listen backlog more than the master.
DIAL_CONCURRENCY = 100
# Seconds between the last Welcome and the idle window: the passes the registrations woke end.
IDLE_SETTLE_S = 5.0
# Threads for --paced's creations: enough that a creation never waits for a thread at the paces
# run here (asyncio's default executor has min(32, cores + 4): six on two cores, so creations
# that took over 1.2 s each at 500 trials a second held the next ones back).
CREATION_THREADS = 64
# A trial's end: the jitter (a fraction of --trial-seconds) keeps ends from arriving in waves.
JITTER = 0.2
SIGTERM_EXIT, SIGKILL_EXIT = 143, 137


@dataclass
class Tally:
    """What the simulated agents have seen, for the whole run."""

    welcomed: int = 0
    started: int = 0
    ended: int = 0
    # The most trials running at once.
    peak_running: int = 0
    # System-metric samples sent (--system-metrics-interval).
    samples_sent: int = 0
    # When the latest StartContainer came (time.perf_counter()).
    last_start_at: float = 0.0
    # Seconds from queueing each RUNNING and TERMINATED report to the master's acknowledgement of
    # it (sent once the report's batch committed): how long the agents' reports wait for the
    # master, beside how long their starts did.
    running_acked: list[float] = field(default_factory=list)
    ended_acked: list[float] = field(default_factory=list)


def now_timestamp() -> Timestamp:
    stamp = Timestamp()
    stamp.GetCurrentTime()
    return stamp


class SimAgent:
    """One simulated agent: its own channel and Connect stream, and a fake process runtime."""

    def __init__(
        self,
        agent_id: str,
        slots: int,
        address: str,
        token: str,
        trial_seconds: float,
        tally: Tally,
        system_metrics_s: float = 0.0,
        log_s: float = 0.0,
    ):
        self.agent_id = agent_id
        self.slots = slots
        self.address = address
        self.token = token
        self.trial_seconds = trial_seconds
        self.tally = tally
        self.system_metrics_s = system_metrics_s
        # Seconds between each running container's log lines (--log-interval; 0: none).
        self.log_s = log_s
        self.welcomed = asyncio.Event()
        # One writer per stream (grpc.aio allows no concurrent writes): everything goes through it.
        self.outgoing: asyncio.Queue[apb.AgentMessage] = asyncio.Queue()
        self.seq: dict[str, int] = {}
        # Reports not yet acknowledged, by container: seq -> (queued at, whether it ends it).
        self.unacked: dict[str, dict[int, tuple[float, bool]]] = {}
        # Running containers: their trial's end, and their allocation (for a kill's report).
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.allocations: dict[str, str] = {}
        self.channel: grpc.aio.Channel | None = None
        # When the stream last carried a message (heartbeats follow silence only).
        self.last_sent = time.monotonic()

    def hello(self) -> apb.Hello:
        slots = [
            apb.Slot(
                id=str(i),
                type=apb.DEVICE_TYPE_CPU,
                brand="simulated",
                uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.agent_id}/cpu/{i}")),
                index=i,
            )
            for i in range(self.slots)
        ]
        return apb.Hello(
            agent_id=self.agent_id,
            version="sim",
            resource_pool="default",
            hostname=self.agent_id,
            addresses=["127.0.0.1"],
            slots=slots,
            runtime="process",
            boot_time=now_timestamp(),
        )

    async def run(self, dial: asyncio.Semaphore) -> None:
        async with grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS) as channel:
            # Kept for what a subclass's runtime calls on the master (bench/fairness.py: the
            # trial's preemption signals).
            self.channel = channel
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            async with dial:
                # As the local cluster does for its agents: a join token made for it with the
                # cluster token, then its own credential, which it presents on its stream.
                made = await api_pb2_grpc.CairnStub(channel).CreateAgentJoinToken(
                    epb.CreateAgentJoinTokenRequest(agent_id=self.agent_id),
                    metadata=((CLUSTER_TOKEN_KEY, self.token),),
                )
                enrolled = await stub.Enrol(apb.EnrolRequest(agent_id=self.agent_id, join_token=made.token))
                call = stub.Connect(metadata=((AGENT_CREDENTIAL_KEY, enrolled.credential),))
                await call.write(apb.AgentMessage(hello=self.hello()))
                first = await call.read()
            if not isinstance(first, apb.MasterMessage) or first.WhichOneof("msg") != "welcome":
                raise RuntimeError(f"{self.agent_id}: the master's first message is not a welcome")
            heartbeat_s = (first.welcome.heartbeat_interval_ms or 5000) / 1000
            self.tally.welcomed += 1
            self.welcomed.set()
            tasks = [
                asyncio.create_task(self.write_loop(call)),
                asyncio.create_task(self.heartbeat_loop(heartbeat_s)),
            ]
            if self.system_metrics_s > 0:
                tasks.append(asyncio.create_task(self.system_metrics_loop(self.system_metrics_s)))
            try:
                await self.read_loop(call)
            finally:
                for task in tasks:
                    task.cancel()
                for timer in self.timers.values():
                    timer.cancel()
                call.cancel()

    async def write_loop(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            await call.write(await self.outgoing.get())
            self.last_sent = time.monotonic()

    async def heartbeat_loop(self, interval_s: float) -> None:
        """As the agent's session does (services/agent/session/session.py): a heartbeat only after
        an interval of silence, since whatever an agent sends tells the master it is alive (a busy
        agent's stream carries none)."""
        seq = 0
        self.last_sent = time.monotonic()
        while True:
            await asyncio.sleep(max(0.0, self.last_sent + interval_s - time.monotonic()))
            if time.monotonic() < self.last_sent + interval_s:
                continue  # something went out meanwhile
            seq += 1
            self.outgoing.put_nowait(
                apb.AgentMessage(heartbeat=apb.Heartbeat(seq=seq, sent_at=now_timestamp()))
            )
            # Counted as sent once queued: the writer's stamp follows when it goes out.
            self.last_sent = time.monotonic()

    async def system_metrics_loop(self, interval_s: float) -> None:
        """As the agent's collector does: every interval, one batch with a sample of each running
        container (the agents' intervals start at random offsets, as real agents' do)."""
        await asyncio.sleep(random.uniform(0, interval_s))
        while True:
            running = list(self.timers)
            if running:
                stamp = now_timestamp()
                samples = [
                    apb.SystemSample(
                        container_id=container_id,
                        time=stamp,
                        cpu_util=random.uniform(50, 100),
                        memory_bytes=random.randint(100, 400) << 20,
                        disk_read_bytes_per_s=0.0,
                        disk_write_bytes_per_s=4096.0,
                        net_recv_bytes_per_s=1024.0,
                        net_sent_bytes_per_s=1024.0,
                        processes=2,
                    )
                    for container_id in running
                ]
                self.outgoing.put_nowait(apb.AgentMessage(system_metrics=apb.SystemMetrics(samples=samples)))
                self.tally.samples_sent += len(samples)
            await asyncio.sleep(interval_s)

    async def read_loop(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            message = await call.read()
            if message is grpc.aio.EOF:
                return
            assert isinstance(message, apb.MasterMessage)
            kind = message.WhichOneof("msg")
            if kind == "start":
                self.start(message.start)
            elif kind == "kill":
                self.command_done(message.kill.command_id)
                self.terminate(message.kill.container_id, SIGKILL_EXIT)
            elif kind == "signal":
                self.command_done(message.signal.command_id)
                if message.signal.signal == apb.SignalContainer.SIGNAL_TERMINATE:
                    self.terminate(message.signal.container_id, SIGTERM_EXIT)
            elif kind == "shutdown":
                return
            elif kind == "log_ack":
                self.acknowledged(message.log_ack)

    def acknowledged(self, ack: apb.LogAck) -> None:
        """The master stored reports up to these seqs: each one's wait is over (nothing else is
        kept to forget: every state change is sent once, on a live stream). An acknowledgement
        covers the container's earlier reports too (the master acknowledges a batch's reports of
        one container in one seq, and a log batch's seq covers the reports before its lines)."""
        now = time.perf_counter()
        for container_id, seq in ack.acked_seq.items():
            waiting = self.unacked.get(container_id)
            if not waiting:
                continue
            for covered in [s for s in waiting if s <= seq]:
                queued_at, ends = waiting.pop(covered)
                (self.tally.ended_acked if ends else self.tally.running_acked).append(now - queued_at)
            if not waiting:
                del self.unacked[container_id]

    def command_done(self, command_id: str) -> None:
        self.outgoing.put_nowait(apb.AgentMessage(ack=apb.CommandAck(command_id=command_id, ok=True)))

    def start(self, start: apb.StartContainer) -> None:
        self.command_done(start.command_id)
        self.tally.started += 1
        self.tally.last_start_at = time.perf_counter()
        self.tally.peak_running = max(self.tally.peak_running, self.tally.started - self.tally.ended)
        container_id, allocation_id = start.container_id, start.allocation_id
        self.allocations[container_id] = allocation_id
        self.report(container_id, allocation_id, apb.CONTAINER_STATE_RUNNING)
        seconds = self.trial_seconds * random.uniform(1 - JITTER, 1 + JITTER)
        loop = asyncio.get_running_loop()
        self.timers[container_id] = loop.call_later(seconds, self.exit, container_id, allocation_id, 0)
        if self.log_s > 0:
            loop.call_later(self.log_s * random.uniform(0.5, 1.0), self.log_line, container_id, allocation_id)

    def log_line(self, container_id: str, allocation_id: str) -> None:
        """A line of the container's output, with its next sequence number (lines and state
        changes share them), then the next one after --log-interval, until the container ends."""
        if container_id not in self.timers:
            return  # ended
        seq = self.seq.get(container_id, 0) + 1
        self.seq[container_id] = seq
        entry = apb.LogEntry(
            container_id=container_id,
            allocation_id=allocation_id,
            seq=seq,
            timestamp=now_timestamp(),
            stdtype="stdout",
            message=f"step {seq}",
        )
        self.outgoing.put_nowait(apb.AgentMessage(log_batch=apb.LogBatch(entries=[entry])))
        asyncio.get_running_loop().call_later(self.log_s, self.log_line, container_id, allocation_id)

    def terminate(self, container_id: str, exit_code: int) -> None:
        timer = self.timers.get(container_id)
        if timer is None:
            return  # already ended (or never ours): the master has its TERMINATED
        timer.cancel()
        allocation_id = self.allocations[container_id]
        self.exit(container_id, allocation_id, exit_code, apb.FAILURE_TYPE_KILLED)

    def exit(
        self,
        container_id: str,
        allocation_id: str,
        exit_code: int,
        failure: int = apb.FAILURE_TYPE_UNSPECIFIED,
    ) -> None:
        self.report(container_id, allocation_id, apb.CONTAINER_STATE_TERMINATED, exit_code, failure)
        self.timers.pop(container_id, None)
        self.allocations.pop(container_id, None)
        self.seq.pop(container_id, None)
        self.tally.ended += 1

    def report(
        self,
        container_id: str,
        allocation_id: str,
        state: int,
        exit_code: int | None = None,
        failure: int = apb.FAILURE_TYPE_UNSPECIFIED,
    ) -> None:
        """A state change, with the container's next sequence number (the master applies each
        (container, seq) once and ignores one at or below what it stored)."""
        seq = self.seq.get(container_id, 0) + 1
        self.seq[container_id] = seq
        change = apb.ContainerStateChanged(
            container_id=container_id,
            allocation_id=allocation_id,
            state=state,  # type: ignore[arg-type]
            exit_code=exit_code,
            failure_type=failure,  # type: ignore[arg-type]
            time=now_timestamp(),
            seq=seq,
        )
        self.unacked.setdefault(container_id, {})[seq] = (
            time.perf_counter(),
            state == apb.CONTAINER_STATE_TERMINATED,
        )
        self.outgoing.put_nowait(apb.AgentMessage(container_state=change))


# -- the master's measurements ---------------------------------------------------------------------
@dataclass(frozen=True)
class Buckets:
    """A scrape of a Prometheus histogram: cumulative counts by upper bound (the last is +Inf)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float

    def minus(self, earlier: Buckets) -> Buckets:
        return Buckets(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.total - earlier.total,
        )

    @property
    def count(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0

    def quantile(self, q: float) -> float:
        """Interpolated linearly within the bucket it falls in, as Prometheus' histogram_quantile
        does; inf when it falls past the last finite bound."""
        if not self.count:
            return float("nan")
        target = q * self.count
        lower, below = 0.0, 0.0
        for bound, cumulative in zip(self.bounds, self.cumulative, strict=True):
            if cumulative >= target:
                if bound == float("inf"):
                    return bound
                share = (target - below) / (cumulative - below) if cumulative > below else 1.0
                return lower + (bound - lower) * share
            lower, below = bound, cumulative
        return float("inf")


def scrape(http_url: str) -> str:
    with urllib.request.urlopen(f"{http_url.rstrip('/')}/metrics", timeout=30) as reply:
        return str(reply.read().decode())


def histogram_buckets(text: str, metric: str) -> Buckets:
    pairs = [
        (float(bound), float(count))
        for bound, count in re.findall(rf'^{metric}_bucket{{le="([^"]+)"}} ([0-9.eE+-]+)$', text, re.M)
    ]
    pairs.sort()
    total = re.search(rf"^{metric}_sum ([0-9.eE+-]+)$", text, re.M)
    return Buckets(
        tuple(b for b, _ in pairs), tuple(c for _, c in pairs), float(total.group(1)) if total else 0.0
    )


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rpartition(")")[2].split()
    # After the command's closing parenthesis: state is field 3, utime 14 and stime 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Snapshot:
    at: float
    histograms: dict[str, Buckets]
    started: int
    ended: int
    cpu: dict[str, float]
    # Seconds the master's lock was held so far, and the holders' CPU seconds in those holds, by
    # what held it (absent from a tree before the counters: empty).
    held_by: dict[str, tuple[float, float]] = field(default_factory=dict)


# -- the run -----------------------------------------------------------------------------------------
async def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    agent_tasks: list[asyncio.Task[None]],
    tally: Tally,
) -> float:
    """Seconds until `predicate()` holds, polled every 50 ms; fails after `timeout` s or as soon as
    an agent's stream has failed."""
    started = time.perf_counter()
    deadline = started + timeout
    while not predicate():
        failed = [t for t in agent_tasks if t.done() and not t.cancelled() and t.exception() is not None]
        if failed:
            raise RuntimeError(
                f"while waiting for {what}: {len(failed)} agents failed, e.g. {failed[0].exception()!r}"
            )
        if time.perf_counter() > deadline:
            raise TimeoutError(
                f"{what}: not within {timeout:g} s ({tally.welcomed} agents welcomed, {tally.started} "
                f"trials started, {tally.ended} ended)"
            )
        await asyncio.sleep(0.05)
    return time.perf_counter() - started


def kill_unless_ended(api: Api, experiment_id: int) -> None:
    """Kill the experiment (so that the cluster stops with nothing left to place) unless every
    trial already ended."""
    try:
        api.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:  # already ended
            raise


async def snapshot(http_url: str, tally: Tally, pids: dict[str, int]) -> Snapshot:
    text = await asyncio.to_thread(scrape, http_url)
    cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
    cpu["bench"] = time.process_time()
    histograms = {name: histogram_buckets(text, metric) for name, metric in PASS_METRICS.items()}
    return Snapshot(time.perf_counter(), histograms, tally.started, tally.ended, cpu, held_by(text))


def held_by(text: str) -> dict[str, tuple[float, float]]:
    """The scrape's seconds of the master's lock held, and the holders' CPU seconds, by what held
    it."""

    def by_unit(metric: str) -> dict[str, float]:
        # The labels are module names and purposes the master's code names: nothing to unescape.
        return {
            unit: float(value)
            for unit, value in re.findall(rf'^{metric}{{unit="([^"]*)"}} ([0-9.eE+-]+)$', text, re.M)
        }

    cpu = by_unit("cairn_master_lock_held_by_cpu_seconds_total")
    return {
        unit: (seconds, cpu.get(unit, 0.0))
        for unit, seconds in by_unit("cairn_master_lock_held_by_seconds_total").items()
    }


async def turnover(
    args: argparse.Namespace, api: Api, record: ClusterRecord, called_at: dict[int, float]
) -> dict[str, float]:
    """The run's figures; with --paced, `called_at` gets each experiment's creation call's start
    (wall clock, as the master's rows)."""
    assert record.master_grpc_address and record.master_http_url
    pids = {
        name: p.pid for name in ("master", "scheduler", "searcher") if (p := record.by_name(name)) is not None
    }
    tally = Tally()
    agents = [
        SimAgent(
            f"sim-{i:04d}",
            args.slots,
            record.master_grpc_address,
            record.cluster_token,
            args.trial_seconds,
            tally,
            system_metrics_s=args.system_metrics_interval,
            log_s=args.log_interval,
        )
        for i in range(args.agents)
    ]
    dial = asyncio.Semaphore(DIAL_CONCURRENCY)
    tasks = [asyncio.create_task(agent.run(dial)) for agent in agents]
    try:
        connected = await wait_until(
            lambda: tally.welcomed == args.agents,
            60 + args.agents * 0.2,
            f"{args.agents} agents welcomed",
            tasks,
            tally,
        )
        print(f"{args.agents} agents connected in {connected:.2f} s", flush=True)
        # The connected cluster with nothing to run: what its streams and heartbeats alone cost,
        # once the last registrations' scheduling passes are over.
        await asyncio.sleep(IDLE_SETTLE_S)
        idle_from = (time.perf_counter(), cpu_seconds(pids["master"]))
        await asyncio.sleep(args.idle_seconds)
        idle_master = (cpu_seconds(pids["master"]) - idle_from[1]) / (time.perf_counter() - idle_from[0])
        print(f"idle, {args.agents} agents connected: the master at {idle_master:.1%} of a core", flush=True)
        if args.paced:
            figures = await paced_arrivals(args, api, record, tally, tasks, pids, called_at)
            figures["idle_master_cpu"] = idle_master
            figures["connected_s"] = connected
            return figures
        config = CONFIG.format(trials=args.trials, top=args.trials - 1)
        started = time.perf_counter()
        experiment_id = await asyncio.to_thread(api.create, config, MODEL_DIR)
        capacity = min(args.agents * args.slots, args.trials)
        await wait_until(lambda: tally.started >= capacity, 600, f"{capacity} trials started", tasks, tally)
        full = time.perf_counter() - started
        print(f"the first {capacity} trials placed {full:.2f} s after the experiment's creation", flush=True)
        before = await snapshot(record.master_http_url, tally, pids)
        samples_before = tally.samples_sent
        window_end = before.at + args.seconds
        while time.perf_counter() < window_end and tally.ended < args.trials:
            await asyncio.sleep(min(1.0, max(0.0, window_end - time.perf_counter())))
        after = await snapshot(record.master_http_url, tally, pids)
        await asyncio.to_thread(kill_unless_ended, api, experiment_id)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    window = after.at - before.at
    figures = {
        "connected_s": connected,
        "full_s": full,
        "window_s": window,
        "ended_per_s": (after.ended - before.ended) / window,
        # Sustained: every trial started, from the experiment's creation to the last start. The
        # cluster never runs out of free slots in between (the master places more slowly than
        # trials of seconds end), so this is how fast the master starts trials. The window's own
        # rate is not: it starts only the trials left after the first fill (--trials less the
        # capacity), however fast they go.
        "started_per_s": tally.started / (tally.last_start_at - started),
        "window_started_per_s": (after.started - before.started) / window,
        "idle_master_cpu": idle_master,
        "capacity": capacity,
        "peak_running": tally.peak_running,
        "samples_per_s": (tally.samples_sent - samples_before) / window,
    }
    return figures | window_figures(before, after)


def _lock_figures(figures: dict[str, float]) -> str:
    holders = sorted(
        ((name.removeprefix(HELD_BY), share) for name, share in figures.items() if name.startswith(HELD_BY)),
        key=lambda pair: -pair[1],
    )
    by = ", ".join(
        f"{unit} {share * 100:.0f} % [CPU {figures[HELD_CPU_BY + unit] * 100:.0f} %]"
        for unit, share in holders[:TOP_HOLDERS]
        if share >= 0.005
    )
    return (
        f"the master's lock held {figures['lock_held_share'] * 100:.0f} % of the time"
        + (f" ({by})" if by else "")
        + f", its waits p95 {figures['lock_wait_p95_ms']:.1f} ms"
    )


def window_figures(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """Between two snapshots: the master's histograms (count, p50, p95, mean), the share of the
    time its lock was held, and each process's CPU seconds."""
    figures: dict[str, float] = {}
    window = after.at - before.at
    held = after.histograms["lock_held"].minus(before.histograms["lock_held"])
    figures["lock_held_share"] = held.total / window if held.count and window > 0 else float("nan")
    for name in PASS_METRICS:
        seen = after.histograms[name].minus(before.histograms[name])
        figures[f"{name}_count"] = seen.count
        figures[f"{name}_p50_ms"] = seen.quantile(0.5) * 1000
        figures[f"{name}_p95_ms"] = seen.quantile(0.95) * 1000
        figures[f"{name}_mean_ms"] = seen.total / seen.count * 1000 if seen.count else float("nan")
    for name, cpu_s in after.cpu.items():
        figures[f"{name}_cpu_s"] = cpu_s - before.cpu[name]
    for unit, (total, cpu) in after.held_by.items():
        if window > 0:
            total_before, cpu_before = before.held_by.get(unit, (0.0, 0.0))
            figures[HELD_BY + unit] = (total - total_before) / window
            figures[HELD_CPU_BY + unit] = (cpu - cpu_before) / window
    return figures


async def paced_arrivals(
    args: argparse.Namespace,
    api: Api,
    record: ClusterRecord,
    tally: Tally,
    tasks: list[asyncio.Task[None]],
    pids: dict[str, int],
    called_at: dict[int, float],
) -> dict[str, float]:
    """--paced: trials requested at a steady pace instead of all at once. An experiment of
    --paced-batch trials is created every --paced-batch / --paced seconds for --seconds, each
    creation on a thread of its own when it falls due (a slow one does not delay the next; each
    call's time is reported); then the run waits for every trial to start. With --paced x
    --trial-seconds below the cluster's slots, every request is made while slots are free: the
    wait from request to RUNNING is the master's own latency at that load, which the one burst of
    the default run cannot show."""
    assert record.master_http_url
    interval = args.paced_batch / args.paced
    count = max(1, round(args.seconds / interval))
    total = count * args.paced_batch
    config = CONFIG.format(trials=args.paced_batch, top=args.paced_batch - 1)
    before = await snapshot(record.master_http_url, tally, pids)
    started_before = tally.started
    creations: list[asyncio.Future[tuple[int, float]]] = []

    def create() -> tuple[int, float]:
        began, wall = time.perf_counter(), time.time()
        experiment_id = api.create(config, MODEL_DIR)
        called_at[experiment_id] = wall
        return experiment_id, time.perf_counter() - began

    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=min(count, CREATION_THREADS)) as threads:
        for n in range(count):
            await asyncio.sleep(max(0.0, before.at + n * interval - time.perf_counter()))
            creations.append(loop.run_in_executor(threads, create))
        created = await asyncio.gather(*creations)
    created_s = time.perf_counter() - before.at
    experiment_ids = [experiment_id for experiment_id, _ in created]
    creation_s = sorted(took for _, took in created)
    await wait_until(
        lambda: tally.started - started_before >= total,
        120 + args.seconds,
        f"{total} trials started",
        tasks,
        tally,
    )
    after = await snapshot(record.master_http_url, tally, pids)
    # The last starts' RUNNING reports acknowledged too (bounded: a master far behind is reported
    # with what it acknowledged by then).
    deadline = time.perf_counter() + ACK_WAIT_S
    while len(tally.running_acked) < tally.started and time.perf_counter() < deadline:
        await asyncio.sleep(0.1)
    running_acked, ended_acked = sorted(tally.running_acked), sorted(tally.ended_acked)
    for experiment_id in experiment_ids:
        await asyncio.to_thread(kill_unless_ended, api, experiment_id)
    return {
        "running_acked_p50_s": quantile(running_acked, 0.5),
        "running_acked_p99_s": quantile(running_acked, 0.99),
        "ended_acked_p50_s": quantile(ended_acked, 0.5),
        "ended_acked_p99_s": quantile(ended_acked, 0.99),
        "paced_total": total,
        "paced_experiments": count,
        "created_per_s": total / created_s,
        "creation_p50_s": quantile(creation_s, 0.5),
        "creation_p99_s": quantile(creation_s, 0.99),
        "started_per_s": total / (tally.last_start_at - before.at),
        "window_s": after.at - before.at,
        "peak_running": tally.peak_running,
        "capacity": args.agents * args.slots,
    } | window_figures(before, after)


@contextlib.contextmanager
def database(backend: str) -> Iterator[str | None]:
    if backend == "postgres":
        with scratch_postgres() as url:
            yield url
    elif backend == "sqlite":
        yield None  # the master's own, in the temporary state directory
    else:
        raise SystemExit(f"--backend: no backend {backend!r} (sqlite, postgres)")


def _master_rows(db_url: str, sql: str, parameters: dict[str, Any] | None = None) -> list[Any]:
    """The rows of one statement on the master's database, opened as the master opens it (its own
    URL handling), once the run is over."""
    database = Database(db_url)
    try:
        with database.engine.connect() as connection:
            return list(connection.execute(text(sql), parameters or {}).all())
    finally:
        database.dispose()


def stored_samples(db_url: str) -> int:
    """System-metric samples the master stored, from its own table."""
    return int(_master_rows(db_url, "SELECT count(*) FROM task_system_metrics")[0][0] or 0)


def request_to_running(db_url: str, first: int) -> list[float]:
    """Request-to-RUNNING seconds, sorted, of the first `first` allocations to run, from the
    master's own rows. In the default run those of the first fill: every one of them requested and
    placed while slots were free (the later ones waited for slots in the queue by design). With
    --paced, every allocation of the run."""
    rows = _master_rows(
        db_url,
        "SELECT requested_at, start_time FROM allocations WHERE start_time IS NOT NULL "
        "ORDER BY start_time LIMIT :first",
        {"first": first},
    )
    return sorted(_seconds(started) - _seconds(requested) for requested, started in rows)


def waits_over_the_run(
    db_url: str, window_s: float = PROFILE_WINDOW_S
) -> list[tuple[float, int, float, float]]:
    """(window's start, allocations, p50 s, max s) of the request-to-RUNNING waits, by when each
    allocation was requested, in windows of `window_s` from the first request: whether a slow
    p99 is a backlog that grew through the run (a master short of capacity) or stalls at moments
    (a long pass, a burst of creations, a pause of the process)."""
    rows = _master_rows(
        db_url, "SELECT requested_at, start_time FROM allocations WHERE start_time IS NOT NULL"
    )
    pairs = sorted(
        (_seconds(requested), _seconds(started) - _seconds(requested)) for requested, started in rows
    )
    if not pairs:
        return []
    first = pairs[0][0]
    windows: dict[int, list[float]] = {}
    for requested, wait in pairs:
        windows.setdefault(int((requested - first) // window_s), []).append(wait)
    return [
        (index * window_s, len(waits), quantile(sorted(waits), 0.5), max(waits))
        for index, waits in sorted(windows.items())
    ]


def call_to_running(db_url: str, called_at: dict[int, float]) -> list[float]:
    """Seconds, sorted, from the start of each trial's experiment's creation call to its RUNNING:
    what the user waits. The request's own stamp is taken once creation holds the master's lock,
    so a wait for the lock before it shows here and not in request_to_running."""
    rows = _master_rows(
        db_url,
        "SELECT t.experiment_id, a.start_time FROM allocations a "
        "JOIN trials t ON t.id = a.trial_id WHERE a.start_time IS NOT NULL",
    )
    return sorted(_seconds(started) - called_at[int(e)] for e, started in rows if int(e) in called_at)


def quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))]


def _seconds(stamp: datetime | str) -> float:
    # SQLite hands the stored text back through a plain connection.
    moment = stamp if isinstance(stamp, datetime) else datetime.fromisoformat(stamp)
    return moment.replace(tzinfo=UTC).timestamp() if moment.tzinfo is None else moment.timestamp()


@dataclass
class RunResult:
    figures: dict[str, float]
    # --paced: waits_over_the_run's windows.
    profile: list[tuple[float, int, float, float]]


def run(args: argparse.Namespace) -> RunResult:
    with (
        database(args.backend) as db_url,
        tempfile.TemporaryDirectory(prefix="cairn-sim-agents-") as tmp,
        cairn_cluster(Path(tmp), agents=0, slots=args.slots, db_url=db_url, log_level=args.log_level) as api,
    ):
        paths = ClusterPaths(Path(tmp))
        record = load_record(paths.record_file)
        assert record is not None, "the local cluster keeps no record"
        try:
            called_at: dict[int, float] = {}
            profile: list[tuple[float, int, float, float]] = []
            figures = asyncio.run(turnover(args, api, record, called_at))
            own_url = db_url or f"sqlite:///{next(Path(tmp).rglob('cairn.db'))}"
            waits = request_to_running(own_url, int(figures.get("paced_total", figures["capacity"])))
            figures["request_to_running_p50_s"] = quantile(waits, 0.5)
            figures["request_to_running_p99_s"] = quantile(waits, 0.99)
            figures["request_to_running_max_s"] = quantile(waits, 1.0)
            if called_at:
                profile = waits_over_the_run(own_url)
                from_calls = call_to_running(own_url, called_at)
                figures["call_to_running_p50_s"] = quantile(from_calls, 0.5)
                figures["call_to_running_p99_s"] = quantile(from_calls, 0.99)
            figures["samples_stored"] = stored_samples(own_url)
            return RunResult(figures, profile)
        except Exception:
            if args.keep_logs:
                shutil.copytree(paths.logs_dir, args.keep_logs, dirs_exist_ok=True)
                print(f"the cluster's logs are in {args.keep_logs}", flush=True)
            raise


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="the turnover window, once the cluster is full"
    )
    parser.add_argument("--trial-seconds", type=float, default=2.0)
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=10.0,
        help="how long the connected cluster is watched idle before the experiment",
    )
    parser.add_argument("--backend", default="sqlite", choices=("sqlite", "postgres"))
    parser.add_argument(
        "--system-metrics-interval",
        type=float,
        default=0.0,
        help="seconds between each agent's batches of system-metric samples, one per running "
        "container, as the agent's collector sends them (0: none)",
    )
    parser.add_argument(
        "--log-interval",
        type=float,
        default=0.0,
        help="seconds between each running container's log lines, each in a batch of its own, "
        "as a trial that prints a line per step (0: none)",
    )
    parser.add_argument(
        "--keep-logs", type=Path, help="a folder to copy the cluster's logs to if the run fails"
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        help="the services' log level (INFO, as `cairn cluster up` runs them, adds about ten lines "
        "a trial to the master's work)",
    )
    parser.add_argument(
        "--paced",
        type=float,
        default=0.0,
        help="trials a second requested at a steady pace for --seconds, instead of --trials at once "
        "(0: the burst); reports the p99 from request to RUNNING over all of them",
    )
    parser.add_argument(
        "--paced-batch", type=int, default=100, help="with --paced: the trials of each experiment created"
    )
    args = parser.parse_args()
    if args.paced < 0 or args.paced_batch < 1:
        parser.error("--paced must be at least 0 and --paced-batch at least 1")
    result = run(args)
    figures = result.figures
    if args.paced:
        busy = args.paced * args.trial_seconds
        print(
            f"{args.backend}, {args.agents} agents x {args.slots} slots, {figures['paced_total']:.0f} trials "
            f"of {args.trial_seconds:g} s in {figures['paced_experiments']:.0f} experiments of "
            f"{args.paced_batch}, created at {figures['created_per_s']:.0f} trials/s (offered "
            f"{args.paced:g}/s; a creation's call p50 {figures['creation_p50_s']:.2f} s, p99 "
            f"{figures['creation_p99_s']:.2f} s; from the call to RUNNING p50 "
            f"{figures['call_to_running_p50_s']:.2f} s, p99 {figures['call_to_running_p99_s']:.2f} s; "
            f"about {busy:.0f} slots busy of {figures['capacity']:.0f}; at most "
            f"{figures['peak_running']:.0f} running); request to RUNNING p50 "
            f"{figures['request_to_running_p50_s']:.2f} s, max {figures['request_to_running_max_s']:.2f} s; "
            f"{figures['pass_count']:.0f} passes, decision p95 {figures['pass_p95_ms']:.0f} ms, its CPU p95 "
            f"{figures['pass_cpu_p95_ms']:.0f} ms, starting p95 {figures['start_p95_ms']:.0f} ms; "
            f"the agents' reports from sent to stored: RUNNING p50 {figures['running_acked_p50_s']:.2f} s, "
            f"p99 {figures['running_acked_p99_s']:.2f} s, "
            f"TERMINATED p50 {figures['ended_acked_p50_s']:.2f} s, p99 {figures['ended_acked_p99_s']:.2f} s; "
            f"{_lock_figures(figures)}; CPU s: "
            + ", ".join(
                f"{k.removesuffix('_cpu_s')} {v:.1f}" for k, v in figures.items() if k.endswith("_cpu_s")
            ),
            flush=True,
        )
        print(
            f"request to RUNNING by when requested ({PROFILE_WINDOW_S:g} s windows: trials, p50/max s): "
            + ", ".join(
                f"{start:.0f}s {count} {p50:.1f}/{top:.1f}" for start, count, p50, top in result.profile
            ),
            flush=True,
        )
        print(
            f"sim_agents paced: offered {args.paced:g}/s, starts/s {figures['started_per_s']:.0f}, "
            f"p99 request-to-running {figures['request_to_running_p99_s']:.2f} s, passes p95 "
            f"{figures['pass_p95_ms']:.0f} ms, idle master CPU {figures['idle_master_cpu'] * 100:.1f} %",
            flush=True,
        )
        return
    print(
        f"{args.backend}, {args.agents} agents x {args.slots} slots, {args.trials} trials of "
        f"{args.trial_seconds:g} s: over {figures['window_s']:.1f} s, {figures['pass_count']:.0f} passes; "
        f"{figures['samples_per_s']:.0f} system-metric samples/s sent ({figures['samples_stored']:.0f} "
        "stored in all); "
        + "; ".join(
            f"{label} p50 {figures[f'{name}_p50_ms']:.1f} ms, p95 {figures[f'{name}_p95_ms']:.1f} ms, "
            f"mean {figures[f'{name}_mean_ms']:.1f} ms"
            for name, label in (("pass", "decision"), ("pass_cpu", "its CPU"), ("start", "starting"))
        )
        + "; "
        f"{figures['ended_per_s']:.1f} trials ended/s, {figures['window_started_per_s']:.1f} started/s "
        f"(the {args.trials - figures['capacity']:.0f} left after the first fill), at most "
        f"{figures['peak_running']:.0f} running; "
        f"{_lock_figures(figures)}; CPU s: "
        + ", ".join(
            f"{k.removesuffix('_cpu_s')} {v:.1f}" for k, v in figures.items() if k.endswith("_cpu_s")
        ),
        flush=True,
    )
    idle_cpu = figures["idle_master_cpu"] * 100
    print(
        f"sim_agents: starts/s {figures['started_per_s']:.0f}, first {figures['capacity']:.0f} placed "
        f"{figures['full_s']:.1f} s, p99 request-to-running {figures['request_to_running_p99_s']:.2f} s, "
        f"passes p95 {figures['pass_p95_ms']:.0f} ms, idle master CPU {idle_cpu:.1f} %",
        flush=True,
    )


if __name__ == "__main__":
    main()
