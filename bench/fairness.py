"""Fair share against the priority scheduler on a real cluster of simulated agents (issue 43).

A local cluster (real master, scheduler, searcher processes; SQLite or a scratch PostgreSQL) whose
one pool `default` schedules by `--scheduler` (`fair_share`, with `usage_half_life: --half-life`, or
`priority`), through the master's config file ($CAIRN_MASTER_CONFIG). In this process, --agents
simulated agents of --slots slots each (bench/sim_agents.py's agents on the real agent stream),
whose fake runtime plays a trial that honours graceful preemption as Cairn's Core API does:

- a run trains for what is left of its trial's --trial-seconds and checkpoints every
  --checkpoint-every seconds of it (the simulation keeps each trial's checkpointed progress, as
  checkpoint storage would);
- it watches its allocation's signals (WatchAllocationSignals, with the allocation token from its
  task spec, as trial code does); on a preemption it acknowledges it
  (AckAllocationPreemptionSignal) and exits 0 at once, losing what it trained since its last
  checkpoint; the master classifies that end as a preemption and queues the trial again, and its
  next run resumes from the checkpoint;
- a kill ends it at once (the work since its checkpoint is lost too).

An admin creates three workspaces through the API, `ws-a`, `ws-b`, `ws-c`, weighted 1:1:2 in the
pool (`PUT /api/v1/workspaces/{id}/pool-shares/default`; a priority pool has no weights, and its
run is judged against the same 1:1:2 entitlement); with --guarantee each is also guaranteed its
weighted part of the pool (16/16/32 of 64 slots), in either kind of pool. Then bursts of one-slot
and four-slot grid experiments arrive in them at scheduled moments (BURSTS, trial counts scaled to
--seconds). After --seconds the bench kills what is left and computes, from the simulated agents'
own log of starts and ends (bench/fairness_metrics.py says how): each workspace's share against its
entitlement while backlogged and Jain's index over them, time from a burst to its workspace's
entitlement (p50, p95), slot utilization while anything waits, and preemptions with the slot-seconds
they lost. The master's record (ResourceAllocationRaw: each allocation's slot-seconds in the
window) is read to check the agents' log against it.

Every FORECAST_EVERY_S it also reads the job listing (GetJobsV2) and keeps each waiting
experiment's predicted start, with when it asked and when the forecast was made (`forecast_time`);
afterwards each is compared with the experiment's actual next start (fairness_metrics.forecast_
errors says how: the error as a part of the wait from the forecast's moment to that start).

    .venv/bin/python -m bench.fairness --scheduler fair_share|priority [--seconds 180]
        [--agents 8] [--slots 8] [--trial-seconds 15] [--checkpoint-every 4] [--half-life 1h]
        [--guarantee] [--backend sqlite|postgres] [--json out.json]

Everything it starts is stopped and removed when it ends. Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import grpc.aio
from google.protobuf.timestamp_pb2 import Timestamp

from bench.cairn_cluster import Api, cairn_cluster
from bench.fairness_metrics import (
    Burst,
    Figures,
    ForecastSample,
    Run,
    figures,
    forecast_errors,
    lost_since_checkpoint,
    quantile,
)
from bench.sim_agents import DIAL_CONCURRENCY, MODEL_DIR, SimAgent, Tally, database, wait_until
from cairn.agent.v1 import agent_pb2 as apb
from cairn.api.v1 import (
    api_pb2_grpc,
    experiment_pb2,
    job_pb2,
    resources_pb2,
    task_pb2,
    trial_pb2,
    workspace_pb2,
)
from cairn.client.model_definition import build_model_definition
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.record import ClusterRecord, load_record
from cairn.metadata_keys import ALLOCATION_TOKEN_KEY
from cairn.task_environment import ALLOCATION_TOKEN

POOL = "default"
WEIGHTS = {"ws-a": 1.0, "ws-b": 1.0, "ws-c": 2.0}
# How often the job listing's forecasts are read (each read may make a forecast: a whole-state play).
FORECAST_EVERY_S = 5.0
# How often a simulated trial reports its progress, as trial code does.
PROGRESS_EVERY_S = 2.0
# (seconds into a 180 s run, workspace, trials, slots per trial): every workspace comes back more
# than once, one-slot and four-slot trials mixed, more work than the pool does in the run (about
# 12,500 slot-seconds of 15 s trials for 11,520 on 64 slots), so that some workspace always waits.
BURSTS = (
    (0, "ws-a", 128, 1),
    (20, "ws-b", 24, 4),
    (35, "ws-c", 160, 1),
    (70, "ws-a", 24, 4),
    (90, "ws-b", 128, 1),
    (110, "ws-c", 32, 4),
    (130, "ws-a", 96, 1),
)
BURSTS_SPAN_S = 180.0
CONFIG = """
name: fairness-{workspace}-{index}
entrypoint: python3 sleep_trial.py
searcher:
  name: grid
  metric: loss
  smaller_is_better: true
  max_length: 1
  max_concurrent_trials: 0
max_restarts: 0
resources:
  slots_per_trial: {slots}
hyperparameters:
  seconds: {seconds}
  checkpoint_every: {checkpoint_every}
  x:
    type: int
    minval: 0
    maxval: {top}
    count: {trials}
"""


def master_config(scheduler: str, half_life: str) -> str:
    if scheduler == "fair_share":
        kind = f"{{type: fair_share, fair_share: {{usage_half_life: {half_life}}}}}"
    else:
        kind = "{type: priority}"
    return f"resource_pools:\n  - pool_name: {POOL}\n    scheduler: {kind}\n"


# -- the simulated trial ---------------------------------------------------------------------------
@dataclass
class _Live:
    trial_id: int
    experiment_id: int
    slots: int
    started: float
    # Seconds of training its checkpoint held when it started.
    resumed_at: float
    checkpoint_every: float
    watch: asyncio.Task[None] | None = None
    reporter: asyncio.Task[None] | None = None


class Simulation:
    """What every simulated agent shares: the clock, the trials' checkpointed progress, the log of
    runs, and which workspace each experiment belongs to."""

    def __init__(self, trial_seconds: float) -> None:
        self.t0 = time.monotonic()
        self.trial_seconds = trial_seconds
        self.progress: dict[int, float] = {}
        self.runs: list[Run] = []
        self.workspace_of: dict[int, str] = {}
        self.signal_errors = 0

    def now(self) -> float:
        return time.monotonic() - self.t0


class PreemptibleAgent(SimAgent):
    """A simulated agent whose runtime plays a checkpointing trial that honours preemption."""

    def __init__(self, agent_id: str, slots: int, address: str, token: str, tally: Tally, sim: Simulation):
        super().__init__(agent_id, slots, address, token, sim.trial_seconds, tally)
        self.sim = sim
        self.live: dict[str, _Live] = {}

    def start(self, start: apb.StartContainer) -> None:
        self.command_done(start.command_id)
        self.tally.started += 1
        self.tally.peak_running = max(self.tally.peak_running, self.tally.started - self.tally.ended)
        env = start.spec.environment
        hparams = json.loads(env["DET_HPARAMS"])
        trial_id = int(env["DET_TRIAL_ID"])
        container_id, allocation_id = start.container_id, start.allocation_id
        run = _Live(
            trial_id=trial_id,
            experiment_id=int(env["DET_EXPERIMENT_ID"]),
            slots=len(start.slot_ids),
            started=self.sim.now(),
            resumed_at=self.sim.progress.get(trial_id, 0.0),
            checkpoint_every=float(hparams["checkpoint_every"]),
        )
        self.live[container_id] = run
        self.allocations[container_id] = allocation_id
        self.report(container_id, allocation_id, apb.CONTAINER_STATE_RUNNING)
        left = max(0.0, float(hparams["seconds"]) - run.resumed_at)
        loop = asyncio.get_running_loop()
        self.timers[container_id] = loop.call_later(left, self.complete, container_id)
        run.watch = asyncio.create_task(self.watch(container_id, allocation_id, env[ALLOCATION_TOKEN]))
        run.reporter = asyncio.create_task(
            self.report_progress(container_id, float(hparams["seconds"]), env[ALLOCATION_TOKEN])
        )

    def _end(self, container_id: str, *, completed: bool, preempted: bool) -> _Live | None:
        """Log the run's end and keep its trial's checkpointed progress; None if it had ended."""
        run = self.live.pop(container_id, None)
        timer = self.timers.get(container_id)
        if run is None or timer is None:
            return None
        timer.cancel()
        end = self.sim.now()
        elapsed = end - run.started
        lost = 0.0 if completed else lost_since_checkpoint(elapsed, run.checkpoint_every)
        self.sim.progress[run.trial_id] = run.resumed_at + elapsed - lost
        self.sim.runs.append(
            Run(
                workspace=self.sim.workspace_of.get(run.experiment_id, "?"),
                experiment_id=run.experiment_id,
                trial_id=run.trial_id,
                slots=run.slots,
                start=run.started,
                end=end,
                completed=completed,
                preempted=preempted,
                lost_slot_seconds=lost * run.slots,
                allocation_id=self.allocations.get(container_id, ""),
            )
        )
        if run.watch is not None and run.watch is not asyncio.current_task():
            run.watch.cancel()
        if run.reporter is not None:
            run.reporter.cancel()
        return run

    def complete(self, container_id: str) -> None:
        if self._end(container_id, completed=True, preempted=False) is not None:
            self.exit(container_id, self.allocations[container_id], 0)

    def terminate(self, container_id: str, exit_code: int) -> None:
        if self._end(container_id, completed=False, preempted=False) is not None:
            self.exit(container_id, self.allocations[container_id], exit_code, apb.FAILURE_TYPE_KILLED)

    async def report_progress(self, container_id: str, seconds: float, allocation_token: str) -> None:
        """Trial code's progress reports (core.train.report_progress): the part of the trial's
        length done, every PROGRESS_EVERY_S while the run lasts (bounded by its length)."""
        assert self.channel is not None
        stub = api_pb2_grpc.CairnStub(self.channel)
        metadata = ((ALLOCATION_TOKEN_KEY, f"Bearer {allocation_token}"),)
        for _ in range(int(seconds / PROGRESS_EVERY_S) + 1):
            run = self.live.get(container_id)
            if run is None:
                return
            done = min(1.0, (run.resumed_at + self.sim.now() - run.started) / seconds)
            try:
                await stub.ReportTrialProgress(
                    trial_pb2.ReportTrialProgressRequest(trial_id=run.trial_id, progress=done),
                    metadata=metadata,
                    timeout=30,
                )
            except grpc.aio.AioRpcError:
                self.sim.signal_errors += 1
            await asyncio.sleep(PROGRESS_EVERY_S)

    async def watch(self, container_id: str, allocation_id: str, allocation_token: str) -> None:
        """Trial code's part of graceful preemption: watch the allocation's signals; on a
        preemption, stop training (its checkpoint is what it keeps), acknowledge and exit 0."""
        assert self.channel is not None
        stub = api_pb2_grpc.CairnStub(self.channel)
        metadata = ((ALLOCATION_TOKEN_KEY, f"Bearer {allocation_token}"),)
        try:
            call = stub.WatchAllocationSignals(
                task_pb2.WatchAllocationSignalsRequest(allocation_id=allocation_id), metadata=metadata
            )
            async for signal in call:
                if not signal.preempt:
                    continue
                # Stop first: a completion while the ack travels would be taken for a preempted end.
                run = self.live.get(container_id)
                if run is None or container_id not in self.timers:
                    return
                self.timers[container_id].cancel()
                await stub.AckAllocationPreemptionSignal(
                    task_pb2.AckAllocationPreemptionSignalRequest(allocation_id=allocation_id),
                    metadata=metadata,
                    timeout=30,
                )
                if self._end(container_id, completed=False, preempted=True) is not None:
                    self.exit(container_id, allocation_id, 0)
                return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.sim.signal_errors += 1


# -- the workload ----------------------------------------------------------------------------------
def guarantees(capacity: int) -> dict[str, int]:
    """Each workspace's weighted part of the pool, in whole slots (--guarantee)."""
    total = sum(WEIGHTS.values())
    return {name: int(capacity * weight // total) for name, weight in WEIGHTS.items()}


def setup_workspaces(api: Api, scheduler: str, guaranteed: dict[str, int]) -> dict[str, int]:
    """Each workspace with one project; weights (and guarantees) set by the admin in a
    fair-share pool, guarantees alone in a priority pool. The projects' ids by workspace."""
    projects = {}
    for name, weight in WEIGHTS.items():
        workspace = api.PostWorkspace(workspace_pb2.PostWorkspaceRequest(name=name)).workspace
        project = api.PostProject(workspace_pb2.PostProjectRequest(name="p", workspace_id=workspace.id))
        projects[name] = int(project.project.id)
        if scheduler == "fair_share" or guaranteed:
            api.SetWorkspacePoolShare(
                workspace_pb2.SetWorkspacePoolShareRequest(
                    workspace_id=workspace.id,
                    resource_pool=POOL,
                    weight=weight if scheduler == "fair_share" else 1.0,
                    guaranteed_slots=guaranteed.get(name, 0),
                )
            )
    return projects


def burst_plan(seconds: float) -> list[tuple[float, str, int, int]]:
    """BURSTS within `seconds`, their trial counts scaled by seconds / BURSTS_SPAN_S."""
    scale = seconds / BURSTS_SPAN_S
    return [
        (at * scale, workspace, max(1, round(trials * scale)), slots)
        for at, workspace, trials, slots in BURSTS
        if at * scale < seconds
    ]


async def drive(args: argparse.Namespace, api: Api, projects: dict[str, int], sim: Simulation) -> list[Burst]:
    """Create each burst's experiment at its moment (bounded: one create per planned burst)."""
    bursts = []
    for index, (at, workspace, trials, slots) in enumerate(burst_plan(args.seconds)):
        await asyncio.sleep(max(0.0, at - sim.now()))
        config = CONFIG.format(
            workspace=workspace,
            index=index,
            slots=slots,
            seconds=args.trial_seconds,
            checkpoint_every=args.checkpoint_every,
            top=trials - 1,
            trials=trials,
        )
        created_at = sim.now()
        request = experiment_pb2.CreateExperimentRequest(
            config=config,
            activate=True,
            project_id=projects[workspace],
            model_definition=build_model_definition(MODEL_DIR),
        )
        reply = await asyncio.to_thread(api.CreateExperiment, request)
        experiment_id = int(reply.experiment.id)
        sim.workspace_of[experiment_id] = workspace
        bursts.append(Burst(workspace, experiment_id, created_at, trials, slots))
        print(
            f"  {created_at:6.1f} s: {workspace} +{trials} x {slots}-slot (experiment {experiment_id})",
            flush=True,
        )
    return bursts


async def probe_forecasts(
    api: Api, sim: Simulation, wall_start: datetime, seconds: float
) -> list[ForecastSample]:
    """Every FORECAST_EVERY_S, each waiting experiment's forecast start from the job listing, with
    when it was asked for and when the forecast was made (bounded: one read per period)."""
    samples: list[ForecastSample] = []

    def seconds_in(stamp: Timestamp) -> float:
        return (stamp.ToDatetime(UTC) - wall_start).total_seconds()

    for _ in range(int(seconds / FORECAST_EVERY_S)):
        await asyncio.sleep(FORECAST_EVERY_S)
        asked = sim.now()
        reply = await asyncio.to_thread(
            api.GetJobsV2, job_pb2.GetJobsV2Request(resource_pool="default", limit=-1)
        )
        for job in reply.jobs:
            full = job.full
            if full.type == job_pb2.Job.TYPE_EXPERIMENT and full.HasField("predicted_start"):
                made = seconds_in(full.forecast_time) if full.HasField("forecast_time") else None
                samples.append(
                    ForecastSample(
                        asked,
                        int(full.entity_id),
                        seconds_in(full.predicted_start),
                        after=full.predicted_after,
                        made=made,
                    )
                )
    return samples


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def master_slot_seconds(
    api: Api, started: datetime, seconds: float, experiments: set[int]
) -> tuple[float, int]:
    """The master's record of the window: slot-seconds its allocations of our experiments held in
    it, and how many allocations."""
    reply = api.ResourceAllocationRaw(
        resources_pb2.ResourceAllocationRawRequest(
            timestamp_after=_stamp(started), timestamp_before=_stamp(started + timedelta(seconds=seconds))
        )
    )
    ours = [e for e in reply.resource_entries if e.experiment_id in experiments]
    return sum(e.seconds * e.slots for e in ours), len(ours)


async def measure(args: argparse.Namespace, api: Api, record: ClusterRecord) -> dict[str, object]:
    assert record.master_grpc_address
    admin = Api(record.master_grpc_address, "admin")
    try:
        guaranteed = guarantees(args.agents * args.slots) if args.guarantee else {}
        projects = await asyncio.to_thread(setup_workspaces, admin, args.scheduler, guaranteed)
    finally:
        admin.channel.close()
    tally = Tally()
    sim = Simulation(args.trial_seconds)
    agents = [
        PreemptibleAgent(
            f"sim-{i:04d}", args.slots, record.master_grpc_address, record.cluster_token, tally, sim
        )
        for i in range(args.agents)
    ]
    dial = asyncio.Semaphore(DIAL_CONCURRENCY)
    tasks = [asyncio.create_task(agent.run(dial)) for agent in agents]
    experiments: list[int] = []
    try:
        await wait_until(lambda: tally.welcomed == args.agents, 60, "agents welcomed", tasks, tally)
        sim.t0 = time.monotonic()
        wall_start = datetime.now(UTC)
        driver = asyncio.create_task(drive(args, api, projects, sim))
        prober = asyncio.create_task(probe_forecasts(api, sim, wall_start, args.seconds))
        deadline = sim.t0 + args.seconds + 60  # the driver's creates, even on a slow master
        while sim.now() < args.seconds:
            failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
            if failed:
                raise RuntimeError(f"an agent failed: {failed[0].exception()!r}")
            if driver.done() and driver.exception() is not None:
                raise RuntimeError(f"creating the bursts failed: {driver.exception()!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("the run did not end in time")
            await asyncio.sleep(0.5)
        bursts = await asyncio.wait_for(driver, timeout=60)
        samples = await asyncio.wait_for(prober, timeout=60)
        experiments = [b.experiment_id for b in bursts]
        window_end = sim.now()
        # What still runs at the window's end: logged as running past it (neither ended nor lost).
        runs = list(sim.runs) + [
            Run(
                sim.workspace_of.get(live.experiment_id, "?"),
                live.experiment_id,
                live.trial_id,
                live.slots,
                live.started,
                window_end + 1.0,
                completed=False,
                allocation_id=agent.allocations.get(container_id, ""),
            )
            for agent in agents
            for container_id, live in agent.live.items()
        ]
        master_s, master_allocations = await asyncio.to_thread(
            master_slot_seconds, api, wall_start, args.seconds, set(experiments)
        )
    finally:
        for experiment_id in experiments:
            await asyncio.to_thread(_kill, api, experiment_id)
        await asyncio.sleep(1.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    result = figures(runs, bursts, WEIGHTS, args.agents * args.slots, args.seconds)
    agent_s = sum(
        max(0.0, min(r.end, args.seconds) - max(0.0, r.start)) * r.slots
        for r in runs
        if r.start < args.seconds
    )
    return {
        "figures": result,
        "runs": runs,
        "bursts": bursts,
        "runs_started": len([r for r in runs if r.start < args.seconds]),
        "agent_slot_seconds": agent_s,
        "master_slot_seconds": master_s,
        "master_allocations": master_allocations,
        "signal_errors": sim.signal_errors,
        "forecast_errors": forecast_errors(samples, runs),
        "forecast_samples": samples,
        "wall_start": wall_start.timestamp(),
    }


def _kill(api: Api, experiment_id: int) -> None:
    try:
        api.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:  # already ended
            raise


def run(args: argparse.Namespace) -> dict[str, object]:
    with (
        database(args.backend) as db_url,
        tempfile.TemporaryDirectory(prefix="cairn-fairness-") as tmp,
    ):
        config = Path(tmp) / "master.yaml"
        config.write_text(master_config(args.scheduler, args.half_life))
        state = Path(tmp) / "cluster"
        with cairn_cluster(
            state, agents=0, slots=args.slots, db_url=db_url, extra_env={"CAIRN_MASTER_CONFIG": str(config)}
        ) as api:
            record = load_record(ClusterPaths(state).record_file)
            assert record is not None, "the local cluster keeps no record"
            return asyncio.run(measure(args, api, record))


def report(args: argparse.Namespace, out: dict[str, object]) -> str:
    f = out["figures"]
    assert isinstance(f, Figures)
    lines = [
        f"{args.scheduler} ({args.backend}; {args.agents} agents x {args.slots} slots; {args.seconds:g} s; "
        f"trials of {args.trial_seconds:g} s checkpointing every {args.checkpoint_every:g} s"
        + (f"; usage half-life {args.half_life}" if args.scheduler == "fair_share" else "")
        + (
            "; guaranteed " + "/".join(str(n) for n in guarantees(args.agents * args.slots).values())
            if args.guarantee
            else ""
        )
        + ")",
        f"{'workspace':10} {'weight':>6} {'backlogged s':>12} {'held/entitled':>13} "
        f"{'to entitlement s (each burst)':>30}",
    ]
    for name, w in f.workspaces.items():
        delays = ", ".join("never" if math.isinf(d) else f"{d:.1f}" for d in w.to_entitlement_s)
        lines.append(
            f"{name:10} {WEIGHTS[name]:6g} {w.backlogged_s:12.1f} {w.share_ratio:13.2f} {delays:>30}"
        )
    lines += [
        f"Jain's index over backlogged workspaces (held/entitled): {f.jain:.3f}",
        f"time to entitlement: p50 {f.to_entitlement_p50_s:.1f} s, p95 {f.to_entitlement_p95_s:.1f} s "
        f"({f.never_entitled} bursts never within the window)",
        f"utilization while anything waits: {f.utilization_while_waiting * 100:.1f} % "
        f"(over {f.any_backlogged_s:.1f} s)",
        f"preemptions: {f.preemptions}, work lost: {f.lost_slot_seconds:.1f} slot-s",
        f"preempted runs by workspace: {preempted_by_workspace(out)}; trials preempted more than once: "
        f"{preempted_twice(out)}",
        forecast_line(out),
        f"runs started: {out['runs_started']}; slot-s in the window: agents {out['agent_slot_seconds']:.0f}, "
        f"master {out['master_slot_seconds']:.0f} ({out['master_allocations']} allocations); "
        f"signal stream errors: {out['signal_errors']}",
    ]
    return "\n".join(lines)


# Waits by length, for the forecast's error (a second's error is a large part of a short wait).
WAIT_BANDS = ((1.0, 5.0), (5.0, 15.0), (15.0, math.inf))


def forecast_line(out: dict[str, object]) -> str:
    errors = out["forecast_errors"]
    assert isinstance(errors, list)
    if not errors:
        return "predicted start: no forecast of a wait of 1 s or more was read"
    relative = [e.relative for e in errors]
    bands = []
    for low, high in WAIT_BANDS:
        within = [e.relative for e in errors if low <= e.wait < high]
        name = f"{low:g}-{high:g} s" if math.isfinite(high) else f">= {low:g} s"
        if within:
            bands.append(f"{name}: {len(within)}, median {quantile(within, 0.5) * 100:.0f} %")
    return (
        f"predicted start: {len(errors)} forecasts, absolute error as a part of the wait: median "
        f"{quantile(relative, 0.5) * 100:.0f} %, p90 {quantile(relative, 0.9) * 100:.0f} %; in seconds: "
        f"median {quantile([e.absolute_s for e in errors], 0.5):.1f} s; by wait: " + "; ".join(bands)
    )


def _preempted(out: dict[str, object]) -> list[Run]:
    runs = out["runs"]
    assert isinstance(runs, list)
    return [r for r in runs if r.preempted]


def preempted_by_workspace(out: dict[str, object]) -> str:
    counts = Counter(r.workspace for r in _preempted(out))
    return ", ".join(f"{w} {counts[w]}" for w in WEIGHTS) or "none"


def preempted_twice(out: dict[str, object]) -> int:
    return sum(1 for n in Counter(r.trial_id for r in _preempted(out)).values() if n > 1)


def held_over_time(out: dict[str, object], step: float, seconds: float) -> dict[str, list[int]]:
    """Slots each workspace held every `step` seconds (evidence for the README)."""
    runs = out["runs"]
    assert isinstance(runs, list)
    moments = [i * step for i in range(int(seconds / step) + 1)]
    return {
        w: [sum(r.slots for r in runs if r.workspace == w and r.start <= t < r.end) for t in moments]
        for w in WEIGHTS
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scheduler", required=True, choices=("fair_share", "priority"))
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--trial-seconds", type=float, default=15.0)
    parser.add_argument("--checkpoint-every", type=float, default=4.0)
    parser.add_argument("--half-life", default="1h", help="fair share's usage_half_life")
    parser.add_argument("--backend", default="sqlite", choices=("sqlite", "postgres"))
    parser.add_argument(
        "--guarantee",
        action="store_true",
        help="also guarantee each workspace its weighted part of the pool (16/16/32)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    if not 10 <= args.seconds <= 600 or not 1 <= args.agents <= 64 or not 1 <= args.slots <= 64:
        raise SystemExit("--seconds 10..600, --agents 1..64, --slots 1..64")
    out = run(args)
    print(report(args, out), flush=True)
    if args.json:
        f = out["figures"]
        assert isinstance(f, Figures)
        out["held_every_5s"] = held_over_time(out, 5.0, args.seconds)
        out["runs"] = [asdict(r) for r in out["runs"]]  # type: ignore[attr-defined]
        out["bursts"] = [asdict(b) for b in out["bursts"]]  # type: ignore[attr-defined]
        out["forecast_samples"] = [asdict(x) for x in out["forecast_samples"]]  # type: ignore[attr-defined]
        out["forecast_errors"] = [asdict(x) for x in out["forecast_errors"]]  # type: ignore[attr-defined]
        args.json.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, **out, "figures": asdict(f)}, indent=1
            )
        )


if __name__ == "__main__":
    main()
