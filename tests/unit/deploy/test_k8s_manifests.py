"""deploy/k8s, checked without a cluster: every overlay renders (`kubectl kustomize`), every object
is valid against the Kubernetes schemas with no unknown field and no deprecated API, a broken
object is rejected (so the check can fail), and every container's command, flags and environment
are what the Cairn program it runs accepts (read with that program's own parser)."""

from __future__ import annotations

import argparse
import base64
import copy
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cairn import service_image
from services.agent.settings import parse_settings as parse_agent
from services.common.args import add_common_flags
from services.master.configuration.settings import parse_settings as parse_master
from services.master.migrate import parse_args as parse_migrate
from tests.support.k8s_manifests import (
    K8S_DIR,
    OVERLAYS,
    REPO_ROOT,
    PodFacts,
    container_argv,
    container_env,
    kubectl,
    render,
    service_link_env,
    workloads,
)

pytestmark = pytest.mark.skipif(kubectl() is None, reason="kubectl is not installed (it renders deploy/k8s)")

# The oldest Kubernetes the manifests are for (kubectl's on the machine image) and the newest schema
# kubernetes-validate holds: an API removed in between fails the second.
SCHEMA_VERSIONS = ("1.32.0", kubernetes_validate.latest_version())
# Stable APIs only: a beta or alpha version is deprecated or on its way there.
STABLE_API = re.compile(r"^([a-z0-9.-]+/)?v[0-9]+$")
DIRECTORIES = {"base": K8S_DIR / "base", **{name: K8S_DIR / "overlays" / name for name in OVERLAYS}}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: render(path) for name, path in DIRECTORIES.items()}


def containers(objects: list[dict[str, Any]]) -> Iterator[tuple[dict, dict, dict]]:
    """(workload, pod spec, container) for every container, init containers included."""
    for workload in workloads(objects):
        spec = workload["spec"]["template"]["spec"]
        for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
            yield workload, spec, container


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("directory", sorted(DIRECTORIES))
def test_every_object_is_valid_strictly_and_on_a_stable_api(
    rendered: dict[str, list[dict[str, Any]]], directory: str, version: str
) -> None:
    objects = rendered[directory]
    assert len(objects) >= 20
    for obj in objects:
        where = f"{directory}: {obj['kind']} {obj['metadata']['name']}"
        assert STABLE_API.match(obj["apiVersion"]), f"{where}: {obj['apiVersion']} is not a stable API"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where} is not a valid Kubernetes {version} object: {exc.message}")


def test_a_broken_object_is_rejected(rendered: dict[str, list[dict[str, Any]]]) -> None:
    master = next(w for w in workloads(rendered["dev"]) if w["metadata"]["name"] == "cairn-master")
    kubernetes_validate.validate(master, SCHEMA_VERSIONS[0], strict=True)
    unknown_field = copy.deepcopy(master)
    unknown_field["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    wrong_type = copy.deepcopy(master)
    wrong_type["spec"]["replicas"] = "two"
    removed_api = copy.deepcopy(master)
    removed_api["apiVersion"] = "extensions/v1beta1"
    for broken in (unknown_field, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, SCHEMA_VERSIONS[0], strict=True)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(removed_api, SCHEMA_VERSIONS[0], strict=True)


def _secret_free(env: dict[str, str], overlay: str) -> dict[str, str]:
    """prod's agents read the master's CA from a Secret volume that exists only in a cluster."""
    if overlay == "prod":
        env.pop("CAIRN_MASTER_CERT", None)
    return env


def _parse_common(program: str, argv: list[str]) -> argparse.Namespace:
    """The scheduler's, searcher's and checkpoint service's flags: the common ones and no other."""
    parser = argparse.ArgumentParser(prog=program)
    add_common_flags(parser, default_port=0)
    return parser.parse_args(argv)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_commands_flags_and_environment_are_what_the_programs_accept(
    rendered: dict[str, list[dict[str, Any]]], overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = copy.deepcopy(rendered[overlay])
    if overlay == "prod":
        # The operator creates prod's Secret (README); a stand-in with the keys the README names.
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "cairn-secrets"},
                "stringData": {
                    "db-url": "postgresql://cairn:secret@db.example.com:5432/cairn",
                    "initial-user-password": "Prod-admin-1",
                    "cluster-token": "prod-token",
                    "agent-enrolment-secret": "prod-enrolment-secret",
                },
            }
        )
    links = service_link_env(objects, {"cairn-master": "10.96.0.10"})
    facts = PodFacts(node_name="node-1", host_ip="192.0.2.7", service_links=links)
    seen = set()
    for workload, spec, container in containers(objects):
        if workload["kind"] == "StatefulSet":
            continue  # PostgreSQL's own image
        env = _secret_free(container_env(objects, spec, container, facts), overlay)
        argv = container_argv(container, env)
        assert argv[0] in service_image.ENTRY_POINTS, f"{container['name']}: {argv[0]} is no entry point"
        assert not any("$(" in part for part in argv), f"{container['name']}: unexpanded {argv}"
        for name in list(os.environ):
            if name.startswith(("CAIRN_", "DET_")):
                monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        program, args = argv[0], argv[1:]
        seen.add(program)
        if program == "cairn-master":
            master = parse_master(args)
            assert (master.host, master.grpc_port, master.http_port) == ("0.0.0.0", 8090, 8080)
            assert master.db_url.startswith("postgresql://")
            assert master.initial_user_password and master.cluster_token
            # Agents enrol with the secret the master starts the cluster with.
            assert master.agent_auth == "credentials" and master.agent_enrolment_secret
            assert master.scheduler_addr == "cairn-scheduler:8091"
            assert master.searcher_addr == "cairn-searcher:8092"
            assert master.checkpoint_addr == "cairn-checkpoint:8093"
            assert str(master.checkpoint_dir) == "/var/lib/cairn/checkpoints"
            assert (master.tls_cert is not None) == (overlay == "prod")
            assert master.insecure_allow_plaintext == (overlay == "dev")
        elif program == "cairn-master-migrate":
            assert parse_migrate(args).db_url.startswith("postgresql://")
        elif program == "cairn-agent":
            agent = parse_agent(args)
            assert agent.agent_id == "node-1" and agent.advertise_address == "192.0.2.7"
            assert agent.runtime == "docker" and agent.port == 8094
            # Their own credentials, enrolled with the secret: not the control plane's token.
            assert agent.enrolment_secret and not agent.cluster_token
            expected = "10.96.0.10:8090" if overlay == "dev" else "cairn.example.com:8090"
            assert agent.master == expected
            assert agent.default_image.startswith(("cairn-task:", "registry.example.com/"))
        else:
            parsed = _parse_common(program, args)
            assert parsed.host == "0.0.0.0" and parsed.cluster_token
            ports = [p["containerPort"] for p in container["ports"]]
            assert ports == [parsed.port]
    assert {"cairn-master", "cairn-master-migrate", "cairn-agent", "cairn-scheduler"} <= seen
    assert {"cairn-searcher", "cairn-checkpoint"} <= seen


def _variables_programs_read() -> set[str]:
    found: set[str] = set()
    for top in (REPO_ROOT / "services", REPO_ROOT / "clients" / "python" / "cairn"):
        for path in top.rglob("*.py"):
            found.update(re.findall(r"[\"'](CAIRN_[A-Z0-9_]+)[\"']", path.read_text(errors="replace")))
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_cairn_variable_set_is_one_a_program_reads(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    objects = rendered[overlay]
    read = _variables_programs_read()
    config = next(
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("cairn-config")
    )
    names = set(config["data"])
    for _, _, container in containers(objects):
        names |= {item["name"] for item in container.get("env") or []}
    unknown = {n for n in names if n.startswith("CAIRN_") and n not in read}
    assert not unknown, f"{overlay}: variables no program reads (a typo?): {sorted(unknown)}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_are_bounded_unprivileged_and_probed_where_they_serve(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    objects = rendered[overlay]
    for workload, spec, container in containers(objects):
        where = f"{overlay}: {workload['kind']} {workload['metadata']['name']} {container['name']}"
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec.get("automountServiceAccountToken") is False, where
        assert spec["priorityClassName"] == "cairn-control-plane", where
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, where
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], where
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]) <= set(resources["limits"]), where
        if container in spec["containers"] and workload["kind"] != "StatefulSet":
            assert "readinessProbe" in container and "livenessProbe" in container, where
            served = {p["name"]: p["containerPort"] for p in container.get("ports") or []}
            for probe in (container["readinessProbe"], container["livenessProbe"]):
                if "grpc" in probe:
                    assert probe["grpc"]["port"] in served.values(), where
                if "httpGet" in probe:
                    assert probe["httpGet"]["port"] in served, where
    kinds = [o["kind"] for o in objects]
    assert kinds.count("NetworkPolicy") >= 3 and "PriorityClass" in kinds
    assert kinds.count("PodDisruptionBudget") >= 4
    assert not {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"} & set(kinds)
    migrate = next(w for w in workloads(objects) if w["metadata"]["name"] == "cairn-master")
    assert migrate["spec"]["strategy"]["type"] == "Recreate"
    assert [c["command"] for c in migrate["spec"]["template"]["spec"]["initContainers"]] == [
        ["cairn-master-migrate"]
    ]
    agents = list(workloads(objects, ("DaemonSet",)))
    assert agents and all(a["spec"]["template"]["spec"]["hostNetwork"] for a in agents)
    if overlay == "prod":
        gpu = next(a for a in agents if a["metadata"]["name"] == "cairn-agent-gpu")
        limits = gpu["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert int(limits["nvidia.com/gpu"]) >= 1
    else:
        assert any(o["kind"] == "StatefulSet" for o in objects)
        assert any(o["kind"] == "Service" and o["metadata"]["name"] == "cairn-postgres" for o in objects)


def test_the_readme_maps_determined_helm_values_to_overlay_patches() -> None:
    readme = (K8S_DIR / "README.md").read_text()
    for value in ("imageRegistry", "masterPort", "db.", "checkpointStorage", "taskContainerDefaults"):
        assert value in readme, f"deploy/k8s/README.md: no row for Helm's {value}"
    assert Path(K8S_DIR / "overlays" / "dev" / "kustomization.yaml").is_file()


def test_the_envoy_component_adds_a_valid_proxy_running_deploy_envoys_config(tmp_path: Path) -> None:
    """deploy/envoy as a Component of an overlay, with the descriptor set `make envoy` puts beside
    it (copied here, not into the checkout): valid objects, a ConfigMap holding envoy.yaml as it is
    and the descriptor set byte for byte, mounted where envoy.yaml reads them, an upstream that is
    the master's gRPC Service, and a port the component's NetworkPolicy opens."""
    descriptor = REPO_ROOT / "clients" / "python" / "cairn" / "gen" / "descriptor_set.binpb"
    assert descriptor.is_file(), "the descriptor set is generated by `make proto`"
    component = tmp_path / "envoy"
    component.mkdir()
    for name in ("kustomization.yaml", "k8s.yaml", "envoy.yaml"):
        shutil.copyfile(REPO_ROOT / "deploy" / "envoy" / name, component / name)
    shutil.copyfile(descriptor, component / "cairn_descriptor_set.binpb")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "cairn",
                "resources": [os.path.relpath(DIRECTORIES["dev"], overlay)],
                "components": ["../envoy"],
            }
        )
    )
    objects = render(overlay)
    added = [o for o in objects if "envoy" in o["metadata"]["name"]]
    assert sorted(o["kind"] for o in added) == [
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ]
    for obj in added:
        assert obj["metadata"]["namespace"] == "cairn"
        for version in SCHEMA_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    config_map = next(o for o in added if o["kind"] == "ConfigMap")
    envoy_yaml = (REPO_ROOT / "deploy" / "envoy" / "envoy.yaml").read_text()
    assert config_map["data"]["envoy.yaml"] == envoy_yaml
    assert base64.b64decode(config_map["binaryData"]["cairn_descriptor_set.binpb"]) == descriptor.read_bytes()

    deployment = next(o for o in added if o["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in spec["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]  # the generated, hashed name
    config = yaml.safe_load(envoy_yaml)
    assert container["args"][:2] == ["-c", f"{mount['mountPath']}/envoy.yaml"]
    assert f"{mount['mountPath']}/cairn_descriptor_set.binpb" in envoy_yaml
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True

    (listener,) = config["static_resources"]["listeners"]
    listen_port = listener["address"]["socket_address"]["port_value"]
    assert container["ports"][0]["containerPort"] == listen_port
    assert container["readinessProbe"]["tcpSocket"]["port"] == listen_port
    policy = next(o for o in added if o["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": listen_port}]
    (cluster,) = config["static_resources"]["clusters"]
    upstream = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    master_service = next(
        o
        for o in objects
        if o["kind"] == "Service" and o["metadata"]["name"] == upstream["socket_address"]["address"]
    )
    assert upstream["socket_address"]["port_value"] in [p["port"] for p in master_service["spec"]["ports"]]


def test_the_scheduler_is_one_replica_that_surges_on_a_rollout(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """It keeps each master's session between passes (services/master/remotes/scheduler.py): a
    second replica behind the Service would cost a whole-cluster pass at each switch."""
    for name, objects in rendered.items():
        (scheduler,) = [
            o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "cairn-scheduler"
        ]
        assert scheduler["spec"]["replicas"] == 1, name
        assert scheduler["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}, name
