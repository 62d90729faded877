"""How soon a revoked agent's stream closes (issue 44: "within a second").

A local cluster (real master, scheduler, searcher processes, started as `cairn cluster up` starts
them) with no real agents, on SQLite (a temporary state directory) or PostgreSQL (a scratch
database). In this process, --agents simulated agents, each enrolled as the local cluster enrols
its agents (a join token made for it with the cluster token, then its own credential) and holding
its own AgentService.Connect stream (Hello, the Welcome, heartbeats). Then the admin revokes them
one after another (RevokeAgent); for each, the time from just before the call to the moment its
stream ends with PERMISSION_DENIED at the simulated agent, both on this process's monotonic clock.
The agents left connected keep heartbeating meanwhile, so the master is not idle.

    .venv/bin/python -m bench.agent_revocation [--agents 50] [--backend sqlite|postgres]

Reported: p50, p95 and max of the revocation-to-closed-stream time, and of the RevokeAgent call.
Everything it starts is stopped and removed when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import grpc.aio

from bench.cairn_cluster import Api, cairn_cluster
from bench.sim_agents import database
from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from cairn.api.v1 import agent_enrolment_pb2 as epb
from cairn.api.v1 import api_pb2_grpc
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.record import load_record
from cairn.metadata_keys import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY
from cairn.wire import CHANNEL_OPTIONS


class Agent:
    def __init__(self, agent_id: str, address: str, cluster_token: str) -> None:
        self.agent_id = agent_id
        self.address = address
        self.cluster_token = cluster_token
        self.welcomed = asyncio.Event()
        self.closed_at: float | None = None
        self.code: grpc.StatusCode | None = None

    async def run(self) -> None:
        async with grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS) as channel:
            made = await api_pb2_grpc.CairnStub(channel).CreateAgentJoinToken(
                epb.CreateAgentJoinTokenRequest(agent_id=self.agent_id),
                metadata=((CLUSTER_TOKEN_KEY, self.cluster_token),),
            )
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            enrolled = await stub.Enrol(apb.EnrolRequest(agent_id=self.agent_id, join_token=made.token))
            call = stub.Connect(metadata=((AGENT_CREDENTIAL_KEY, enrolled.credential),))
            hello = apb.Hello(
                agent_id=self.agent_id,
                resource_pool="default",
                hostname=self.agent_id,
                slots=[apb.Slot(id="0", type=apb.DEVICE_TYPE_CPU, uuid=f"{self.agent_id}-0")],
            )
            await call.write(apb.AgentMessage(hello=hello))
            first = await call.read()
            assert isinstance(first, apb.MasterMessage) and first.HasField("welcome"), first
            self.welcomed.set()
            heartbeats = asyncio.create_task(self._heartbeats(call, first.welcome.heartbeat_interval_ms))
            try:
                while True:
                    message = await call.read()
                    if message is grpc.aio.EOF:
                        break
            except grpc.aio.AioRpcError as exc:
                self.code = exc.code()
            finally:
                self.closed_at = time.monotonic()
                heartbeats.cancel()

    async def _heartbeats(self, call: grpc.aio.StreamStreamCall, interval_ms: int) -> None:
        seq = 0
        while True:
            await asyncio.sleep((interval_ms or 2000) / 1000)
            seq += 1
            await call.write(apb.AgentMessage(heartbeat=apb.Heartbeat(seq=seq)))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(args: argparse.Namespace, address: str, cluster_token: str, admin: Api) -> None:
    agents = [Agent(f"bench-{i:03d}", address, cluster_token) for i in range(args.agents)]
    tasks = [asyncio.create_task(agent.run()) for agent in agents]
    await asyncio.wait_for(asyncio.gather(*(a.welcomed.wait() for a in agents)), 120)
    closes, calls = [], []
    for agent in agents:
        started = time.monotonic()
        await asyncio.to_thread(admin.RevokeAgent, epb.RevokeAgentRequest(agent_id=agent.agent_id))
        called = time.monotonic()
        while agent.closed_at is None and time.monotonic() - started < 10:
            await asyncio.sleep(0.001)
        assert agent.closed_at is not None, f"{agent.agent_id}: the stream did not close within 10 s"
        assert agent.code == grpc.StatusCode.PERMISSION_DENIED, agent.code
        closes.append(agent.closed_at - started)
        calls.append(called - started)
    await asyncio.gather(*tasks, return_exceptions=True)
    ms = 1000.0
    print(
        f"{args.backend}, {args.agents} agents revoked one by one: revocation to closed stream p50 "
        f"{statistics.median(closes) * ms:.1f} ms, p95 {_quantile(closes, 0.95) * ms:.1f} ms, max "
        f"{max(closes) * ms:.1f} ms; the RevokeAgent call p50 {statistics.median(calls) * ms:.1f} ms, "
        f"p95 {_quantile(calls, 0.95) * ms:.1f} ms",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--backend", default="sqlite", choices=("sqlite", "postgres"))
    args = parser.parse_args()
    with (
        database(args.backend) as db_url,
        tempfile.TemporaryDirectory(prefix="cairn-revocation-") as tmp,
        cairn_cluster(Path(tmp), agents=0, slots=1, db_url=db_url) as api,
    ):
        record = load_record(ClusterPaths(Path(tmp)).record_file)
        assert record is not None and record.master_grpc_address
        admin = Api(record.master_grpc_address, "admin")
        try:
            asyncio.run(measure(args, record.master_grpc_address, record.cluster_token, admin))
        finally:
            admin.channel.close()
        del api


if __name__ == "__main__":
    main()
