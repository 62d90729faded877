"""Dynamic agents with the local provider (`cluster up --provision`): a pool with no agents,
min_instances 0 and max_instances 3; an experiment of six one-slot trials makes the master start
agents up to the maximum, completes on them, and the agents are retired once idle. Killing the
master mid-way launches nothing twice and leaks nothing: the restarted master finds its agents
by their records. One database backend is enough (nothing here depends on it)."""

from __future__ import annotations

import base64
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml

from cairn.agent_files import PROVISIONER_LABEL_WORK_DIR
from cairn.api.v1 import agent_pb2, resourcepool_pb2
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.plan import Provisioning, default_task_env
from cairn.localcluster.provisioning import provisioned_agent_pids
from tests.e2e.helpers import config, create, wait_state
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.docker_env import require_service_image, require_task_image
from tests.support.moto_ec2 import moto_server
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(420)
REGION = "us-west-2"


@pytest.fixture(params=["local", "docker"])
def provisioned_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestCluster]:
    """A cluster whose default pool has no agents: the master's provider starts them, as processes
    (local) or as containers of the service image running their trials in the task image (docker)."""
    docker = request.param == "docker"
    provision = Provisioning(
        min_agents=0,
        max_agents=3,
        max_idle_agent_period="6s",
        provider=request.param,
        agent_image=require_service_image() if docker else "cairn-service:latest",
    )
    with running_cluster(
        tmp_path / "cluster",
        None,
        agents=0,
        slots=1,
        provision=provision,
        runtime="docker" if docker else "process",
        default_image=require_task_image() if docker else None,
        extra_env={"CAIRN_PROVISIONER_PERIOD": "1"},
    ) as cluster:
        yield cluster


def agent_containers(cluster: TestCluster) -> list[str]:
    """The agent containers the docker provider started for this cluster that still exist."""
    root = str(ClusterPaths(cluster.state_dir).provisioned_agents_dir.resolve())
    listed = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label={PROVISIONER_LABEL_WORK_DIR}", "--format",
         f'{{{{.ID}}}} {{{{.Label "{PROVISIONER_LABEL_WORK_DIR}"}}}}'],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    return [line.split()[0] for line in listed.splitlines() if line.split()[-1].startswith(root + "/")]


def provisioner(api: AuthedStub) -> resourcepool_pb2.ProvisionerStatus:
    pools = api.GetResourcePools(resourcepool_pb2.GetResourcePoolsRequest()).resource_pools
    (pool,) = [p for p in pools if p.name == "default"]
    assert pool.HasField("provisioner") and pool.max_agents == 3
    return pool.provisioner


def connected_agents(api: AuthedStub) -> set[str]:
    return {a.id for a in api.GetAgents(agent_pb2.GetAgentsRequest()).agents if a.enabled or a.draining}


def test_agents_come_with_the_work_survive_a_master_kill_and_go_when_idle(
    provisioned_cluster: TestCluster,
) -> None:
    cluster = provisioned_cluster
    api = cluster.login()
    provider = "docker" if cluster.runtime == "docker" else "local"
    status = provisioner(api)
    assert (status.provider, status.min_instances, list(status.instances)) == (provider, 0, [])
    assert api.GetAgents(agent_pb2.GetAgentsRequest()).agents == []

    seeds = {"type": "categorical", "vals": [1, 2, 3, 4, 5, 6]}  # six one-slot trials
    text = config(
        hyperparameters={"steps": 20, "step_s": 0.25, "seed": seeds},
        searcher={"name": "grid", "metric": "validation_loss", "max_length": {"batches": 20}},
    )
    experiment_id = create(api, text)
    seen: set[str] = set()

    def three_running() -> bool:
        instances = provisioner(api).instances
        seen.update(i.id for i in instances)
        assert len(instances) <= 3, f"more than max_instances: {[i.id for i in instances]}"
        return sum(i.phase == "RUNNING" for i in instances) == 3

    wait_for(three_running, timeout=90, what="three provisioned agents running")
    if provider == "docker":
        assert len(agent_containers(cluster)) == 3
    launches = [e for e in provisioner(api).recent_events if e.action == "launch"]
    assert len(launches) == 3 and "pending request(s)" in launches[0].message

    # The master dies mid-way; the one that comes back finds the same agents (no new launch).
    cluster.kill("master")
    cluster.restart("master")
    api = cluster.login()
    wait_state(api, experiment_id, "COMPLETED", timeout=240)
    status = provisioner(api)
    assert {i.id for i in status.instances} <= seen and len(seen) == 3, "an agent was launched twice"
    assert sum(e.action == "launch" for e in status.recent_events) == 3

    # Idle for 6 s: drained, terminated, gone, processes and all.
    paths = ClusterPaths(cluster.state_dir)
    wait_for(lambda: list(provisioner(api).instances) == [], timeout=90, what="the idle agents retired")
    wait_for(lambda: provisioned_agent_pids(paths) == [], timeout=60, what="the agents' processes gone")
    wait_for(lambda: agent_containers(cluster) == [], timeout=90, what="the agents' containers gone")
    actions = [e.action for e in provisioner(api).recent_events]
    assert {"draining", "terminating", "gone"} <= set(actions)
    assert connected_agents(api) == set()


# ---- the aws provider against moto's EC2 ------------------------------------------------------


class BootingInstances:
    """Plays what an EC2 instance's start-up script does once it boots (no AWS is reachable from
    here): for each running instance of the pool in moto, an agent joins with the instance's id
    as its id; when the instance is terminated, its agent goes with it."""

    def __init__(self, endpoint: str, cluster: TestCluster, work: Path) -> None:
        self.ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
        self.cluster = cluster
        self.work = work
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.booted: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BootingInstances:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for agent in self.agents.values():
            agent.terminate()
        for agent in self.agents.values():
            agent.wait(30)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            found = self.ec2.describe_instances(Filters=[{"Name": "tag:cairn-pool", "Values": ["default"]}])
            for instance in (i for r in found["Reservations"] for i in r["Instances"]):
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                agent_id = tags.get("cairn-instance-id", "")
                running = instance["State"]["Name"] == "running"
                if running and agent_id not in self.agents:
                    self.agents[agent_id] = self._boot(agent_id, self._join_token(instance["InstanceId"]))
                    self.booted.add(agent_id)
                elif not running and agent_id in self.agents and self.agents[agent_id].poll() is None:
                    self.agents[agent_id].send_signal(signal.SIGTERM)

    def _join_token(self, ec2_id: str) -> str:
        """The join token the master wrote into the instance's user data for its agent."""
        answer = self.ec2.describe_instance_attribute(InstanceId=ec2_id, Attribute="userData")
        script = base64.b64decode(answer["UserData"]["Value"]).decode()
        for line in script.splitlines():
            words = shlex.split(line)
            if words[:1] == ["export"] and words[1].startswith("CAIRN_AGENT_JOIN_TOKEN="):
                return words[1].split("=", 1)[1]
        raise AssertionError(f"no join token in the user data:\n{script}")

    def _boot(self, agent_id: str, join_token: str) -> subprocess.Popen[bytes]:
        # As the instance's start-up script runs it: the agent enrols with its own join token.
        env = {k: v for k, v in os.environ.items() if k != "CAIRN_CLUSTER_TOKEN"}
        env["CAIRN_AGENT_JOIN_TOKEN"] = join_token
        command = [
            sys.executable, "-m", "services.agent", "--master", self.cluster.address,
            "--agent-id", agent_id, "--resource-pool", "default", "--slots", "1",
            "--host", "127.0.0.1", "--port", "0", "--work-dir", str(self.work / agent_id),
            "--advertise-address", "127.0.0.1", "--kill-containers-on-exit",
            "--task-env", f"cairn-task={default_task_env()}",
        ]  # fmt: skip
        log = open(self.work / f"{agent_id}.log", "ab")  # noqa: SIM115 (the agent's for its life)
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture
def ec2_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


def test_the_aws_provider_launches_from_its_template_retires_idle_instances_and_shows_errors(
    ec2_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = {"AWS_ACCESS_KEY_ID": "cairn-test", "AWS_SECRET_ACCESS_KEY": "cairn-test"}
    for key, value in creds.items():
        monkeypatch.setenv(key, value)
    boto3.client("ec2", region_name=REGION, endpoint_url=ec2_endpoint).create_launch_template(
        LaunchTemplateName="cairn-agents",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "c6i.large"},
    )
    aws = {"type": "aws", "region": REGION, "endpoint_url": ec2_endpoint}
    pools = {
        "resource_pools": [
            {
                "pool_name": "default",
                "provider": {
                    **aws,
                    "launch_template": {"name": "cairn-agents"},
                    "custom_tags": [{"key": "team", "value": "ml"}],
                    "max_instances": 2,
                    "max_idle_agent_period": "5s",
                    "max_agent_starting_period": "60s",
                },
            },
            {
                "pool_name": "broken",
                "provider": {
                    **aws,
                    "image_id": "ami-12c6146b",
                    "instance_type": "t3.micro",
                    "min_instances": 1,
                    "network_interface": {"subnet_id": "subnet-does-not-exist"},
                },
            },
        ]
    }
    master_yaml = tmp_path / "master.yaml"
    master_yaml.write_text(yaml.safe_dump(pools))
    env = {**creds, "CAIRN_MASTER_CONFIG": str(master_yaml), "CAIRN_PROVISIONER_PERIOD": "1"}
    with (
        running_cluster(tmp_path / "cluster", None, agents=0, extra_env=env) as cluster,
        BootingInstances(ec2_endpoint, cluster, tmp_path) as vms,
    ):
        api = cluster.login()
        seeds = {"type": "categorical", "vals": [1, 2, 3, 4]}
        text = config(
            hyperparameters={"steps": 8, "step_s": 0.1, "seed": seeds},
            searcher={"name": "grid", "metric": "validation_loss", "max_length": {"batches": 8}},
        )
        experiment_id = create(api, text)
        wait_state(api, experiment_id, "COMPLETED", timeout=240)
        assert len(vms.booted) == 2  # four trials on at most max_instances (2) instances
        made = boto3.client("ec2", region_name=REGION, endpoint_url=ec2_endpoint).describe_instances(
            Filters=[{"Name": "tag:cairn-pool", "Values": ["default"]}]
        )
        tags = [
            {t["Key"]: t["Value"] for t in i["Tags"]} for r in made["Reservations"] for i in r["Instances"]
        ]
        assert {t["team"] for t in tags} == {"ml"} and {t["cairn-instance-id"] for t in tags} == vms.booted

        def all_terminated() -> bool:
            found = boto3.client("ec2", region_name=REGION, endpoint_url=ec2_endpoint).describe_instances(
                Filters=[{"Name": "tag:cairn-pool", "Values": ["default"]}]
            )
            return {i["State"]["Name"] for r in found["Reservations"] for i in r["Instances"]} == {
                "terminated"
            }

        wait_for(all_terminated, timeout=90, what="the idle instances terminated in EC2")

        pools_now = {
            p.name: p for p in api.GetResourcePools(resourcepool_pb2.GetResourcePoolsRequest()).resource_pools
        }
        broken = pools_now["broken"].provisioner
        assert broken.provider == "aws" and "subnet" in broken.last_error.lower()
        assert pools_now["default"].type == resourcepool_pb2.ResourcePool.RESOURCE_POOL_TYPE_AWS
