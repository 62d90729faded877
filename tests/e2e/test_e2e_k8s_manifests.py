"""The cluster deploy/k8s describes, started from its own manifests with docker (no Kubernetes API
server can run on these machines): the dev overlay is rendered, and its Deployments and DaemonSets
run as containers of the service image with the same commands, args, environment (ConfigMap,
Secrets, field references, Service links), volumes, users and limits, on host networking, with the
Service names resolving to this node (tests/support/k8s_docker.py). Their probes must pass, the
stock `det` client must run examples/digits/const.yaml to COMPLETED on it, and every service must
stop cleanly on SIGTERM.

Two things stand in for what only a cluster has. The dev overlay's PostgreSQL StatefulSet: its image
cannot be pulled here, so this machine's PostgreSQL 15 at 127.0.0.1:5432 serves as `cairn-postgres`,
with a role and a database of the test's own (a patch of the overlay's Secret, as an operator's
would be). And the images: the overlay is patched to the service image and task image this
checkout builds (`make images`, `make task-image`), as README's table says an operator pins them.
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from psycopg2 import sql

from cairn import service_image
from tests.e2e.determined_client import DET
from tests.support.docker_env import docker_available, require_service_image, require_task_image
from tests.support.k8s_docker import NODE_ADDRESS, PodRunner, docker, probe_passes
from tests.support.k8s_manifests import (
    K8S_DIR,
    PodFacts,
    find,
    object_data,
    render,
    service_link_env,
    workloads,
)
from tests.support.polling import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "digits"
# The node folders deploy/k8s/README.md has an operator make, owned by the services' user.
NODE_DIRS = (Path("/var/lib/cairn/agent"), Path("/var/lib/cairn/checkpoints"))
CHECKPOINTS = Path("/var/lib/cairn/checkpoints")
SERVICE_ORDER = ("cairn-scheduler", "cairn-searcher", "cairn-checkpoint", "cairn-master")


def ports_in_use(objects: list[dict[str, Any]]) -> list[int]:
    """The dev overlay's fixed ports (containers on host networking) that something holds already."""
    ports = {5432}
    for workload in workloads(objects, ("Deployment", "DaemonSet")):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            ports |= {p["containerPort"] for p in container.get("ports") or []}
    taken = []
    for port in sorted(ports - {5432}):
        with socket.socket() as s:
            if s.connect_ex((NODE_ADDRESS, port)) == 0:
                taken.append(port)
    return taken


def write_overlay(root: Path, service_tag: str, task_tag: str, db_url: str, docker_gid: int) -> Path:
    """The operator's overlay on dev: pinned images, this node's Docker group, the database."""
    overlay = root / "overlay"
    overlay.mkdir()
    name, tag = service_tag.split(":")
    (overlay / "kustomization.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(K8S_DIR / "overlays" / "dev", overlay)],
                "images": [{"name": "cairn-service", "newName": name, "newTag": tag}],
                "configMapGenerator": [
                    {
                        "name": "cairn-config",
                        "behavior": "merge",
                        "literals": [f"CAIRN_DEFAULT_IMAGE={task_tag}"],
                    }
                ],
                "secretGenerator": [
                    {"name": "cairn-secrets", "behavior": "merge", "literals": [f"db-url={db_url}"]}
                ],
                "patches": [
                    {
                        "target": {"kind": "DaemonSet", "name": "cairn-agent-cpu"},
                        "patch": json.dumps(
                            [
                                {
                                    "op": "replace",
                                    "path": "/spec/template/spec/securityContext/supplementalGroups",
                                    "value": [docker_gid],
                                }
                            ]
                        ),
                    }
                ],
            }
        )
    )
    return overlay


@pytest.fixture
def stand_in_postgres() -> Iterator[tuple[str, str]]:
    """(role, password) of a role and database of this test's own on this machine's PostgreSQL."""
    admin_url = os.environ.get("CAIRN_TEST_PG_URL") or "postgresql:///postgres"
    try:
        admin = psycopg2.connect(admin_url)
    except psycopg2.OperationalError as exc:
        pytest.fail(f"this machine's PostgreSQL stands in for the dev StatefulSet and is not up: {exc}")
    admin.autocommit = True
    role = f"cairn_k8s_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(18)
    try:
        with admin.cursor() as cursor:
            cursor.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
            cursor.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(role), sql.Identifier(role))
            )
        yield role, password
    finally:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(role)))
            cursor.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        admin.close()


@pytest.fixture
def node_dirs() -> Iterator[None]:
    """The node preparation README describes: the hostPath folders, owned by the services' user.
    Removed afterwards where this test made them."""
    made = [path for path in NODE_DIRS if not path.exists()]
    for path in NODE_DIRS:
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, service_image.USER_ID, service_image.USER_ID)
    yield
    for path in made:
        shutil.rmtree(path, ignore_errors=True)
    if made and Path("/var/lib/cairn").exists() and not any(Path("/var/lib/cairn").iterdir()):
        Path("/var/lib/cairn").rmdir()


def det(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(DET), *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, f"det {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def experiment_state(env: dict[str, str], experiment_id: int) -> str:
    described = json.loads(det(env, "experiment", "describe", str(experiment_id), "--json"))
    return str(described[0]["experiment"]["state"]).removeprefix("STATE_")


def test_the_dev_overlay_runs_from_its_manifests_and_completes_the_digits_example(
    stand_in_postgres: tuple[str, str], node_dirs: None, tmp_path: Path
) -> None:
    reason = docker_available()
    if reason is not None:
        pytest.skip(f"Docker tests skipped: {reason}")
    if not DET.exists():
        pytest.fail("the stock Determined client is missing: run `make install` (it builds .venv-task)")
    started = time.monotonic()
    task_tag = require_task_image()
    service_tag = require_service_image()
    role, password = stand_in_postgres
    dev = render(K8S_DIR / "overlays" / "dev")
    # The dev Secret's URL, on the stand-in's role and database: the same host name and port.
    dev_url = object_data(next(o for o in dev if o["metadata"]["name"].startswith("cairn-secrets")))["db-url"]
    assert "@cairn-postgres:5432/" in dev_url
    db_url = f"postgresql://{role}:{password}@cairn-postgres:5432/{role}"
    taken = ports_in_use(dev)
    assert not taken, f"the dev overlay's ports {taken} are in use on this machine: stop what holds them"

    overlay = write_overlay(tmp_path, service_tag, task_tag, db_url, os.stat("/var/run/docker.sock").st_gid)
    objects = render(overlay)
    links = service_link_env(
        objects, {find(objects, "Service", "cairn-master")["metadata"]["name"]: NODE_ADDRESS}
    )
    runner = PodRunner(
        objects,
        run_id=secrets.token_hex(4),
        scratch=tmp_path / "pods",
        facts=PodFacts(node_name=f"k8s-e2e-node-{secrets.token_hex(3)}", service_links=links),
    )
    checkpoints_before = set(os.listdir(CHECKPOINTS))
    secret = object_data(next(o for o in objects if o["metadata"]["name"].startswith("cairn-secrets")))
    try:
        pods: list[tuple[str, dict[str, Any]]] = []
        deployments = {w["metadata"]["name"]: w for w in workloads(objects, ("Deployment",))}
        assert sorted(deployments) == sorted(SERVICE_ORDER)
        daemonsets = list(workloads(objects, ("DaemonSet",)))
        assert [d["metadata"]["name"] for d in daemonsets] == ["cairn-agent-cpu"]
        for workload in [*(deployments[n] for n in SERVICE_ORDER), *daemonsets]:
            names = runner.run_pod(workload)
            pods += zip(names, workload["spec"]["template"]["spec"]["containers"], strict=True)
        for name, container in pods:
            for kind in ("readinessProbe", "livenessProbe"):
                wait_for(
                    lambda n=name, c=container, k=kind: probe_passes(runner, n, c, c[k]),
                    timeout=120,
                    interval=1.0,
                    what=f"{name}'s {kind}",
                )
        healthy_s = time.monotonic() - started
        # The image's own HEALTHCHECK (cairn-probe auto) agrees, for every service.
        for name, _ in pods:
            wait_for(
                lambda n=name: (
                    docker("inspect", "--format", "{{.State.Health.Status}}", n).stdout.strip() == "healthy"
                ),
                timeout=60,
                interval=2.0,
                what=f"docker's health check of {name}",
            )

        env = {
            **os.environ,
            "DET_MASTER": f"http://{NODE_ADDRESS}:8080",
            "DET_USER": "admin",
            "DET_PASS": secret["initial-user-password"],
            "HOME": str(tmp_path / "home"),
        }
        created = det(env, "experiment", "create", str(EXAMPLE / "const.yaml"), str(EXAMPLE))
        experiment_id = int(created.split("Created experiment")[1].split()[0])
        try:
            final = wait_for(
                lambda: (
                    (s := experiment_state(env, experiment_id)) in ("COMPLETED", "ERROR", "CANCELED") and s
                ),
                timeout=600,
                interval=3.0,
                what=f"experiment {experiment_id} to end",
            )
        except AssertionError as exc:
            final = f"not ended ({exc})"
        if final != "COMPLETED":
            said = [docker("logs", "--tail", "40", name, check=False) for name, _ in pods]
            trial_logs = subprocess.run(
                [str(DET), "trial", "logs", "1"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            pytest.fail(
                f"experiment {experiment_id} ended {final}; the trial's logs:\n{trial_logs.stdout[-3000:]}\n"
                + "\n".join(
                    f"--- {n}:\n{d.stdout[-1500:]}{d.stderr[-3000:]}"
                    for (n, _), d in zip(pods, said, strict=True)
                )
            )
        listing = det(env, "experiment", "list-trials", str(experiment_id), "--csv")
        rows = list(csv.DictReader(io.StringIO(listing)))
        assert [row["State"] for row in rows] == ["COMPLETED"], listing
        # Its checkpoints went through the hostPath every node shares (shared_fs at the master's
        # CAIRN_CHECKPOINT_DIR, bind-mounted into the trial's container by the agent).
        written = set(os.listdir(CHECKPOINTS)) - checkpoints_before
        assert written, f"no checkpoint was written to {CHECKPOINTS}"
        done_s = time.monotonic() - started

        # SIGTERM (docker stop, the pod's grace period) stops every service cleanly.
        for name, _ in reversed(pods):
            docker("stop", "--time", "60", name, timeout=90)
            code = docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
            logs = docker("logs", "--tail", "20", name, check=False)
            assert code == "0", f"{name} exited {code} on SIGTERM:\n{logs.stdout}{logs.stderr}"
        print(f"k8s e2e: healthy after {healthy_s:.0f} s, experiment COMPLETED after {done_s:.0f} s")
    finally:
        runner.remove_all()
        # The agent leaves trial containers running on SIGTERM (a restarted agent takes them over):
        # remove any it started for this run's node.
        leftover = docker(
            "ps",
            "--all",
            "--quiet",
            "--filter",
            f"label=cairn.agent-id={runner.facts.node_name}",
            check=False,
        )
        for container in leftover.stdout.split():
            docker("rm", "--force", container, check=False)
        shutil.rmtree(Path("/var/lib/cairn/agent/work"), ignore_errors=True)
        for entry in set(os.listdir(CHECKPOINTS)) - checkpoints_before:
            shutil.rmtree(CHECKPOINTS / entry, ignore_errors=True)
    assert not docker(
        "ps", "--all", "--quiet", "--filter", f"label=ai.cairn.k8s-e2e.run={runner.run_id}"
    ).stdout.strip()
