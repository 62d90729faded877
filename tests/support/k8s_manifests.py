"""deploy/k8s rendered and read the way the kubelet reads it: `kubectl kustomize` renders an overlay;
a container's environment is resolved from its env and envFrom (ConfigMaps, Secrets, field
references, the Service links Kubernetes adds) and $(VAR) references are expanded in env values,
command and args as the kubelet does. The unit tests validate what is rendered; the e2e test starts
the same containers with docker."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = REPO_ROOT / "deploy" / "k8s"
OVERLAYS = ("dev", "prod")
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")
# The most a rendered overlay may hold: it is parsed in full.
MAX_RENDERED_BYTES = 4 << 20
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ManifestError(AssertionError):
    """A rendered object that cannot be read as the kubelet would; the message names it."""


def kubectl() -> str | None:
    return shutil.which("kubectl")


def render(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIRECTORY`, every object parsed."""
    binary = kubectl()
    if binary is None:
        raise ManifestError("kubectl is not installed: it renders deploy/k8s (kubectl kustomize)")
    done = subprocess.run(
        [binary, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise ManifestError(f"kubectl kustomize {directory} failed: {done.stderr.strip()[-2000:]}")
    if len(done.stdout) > MAX_RENDERED_BYTES:
        raise ManifestError(f"kubectl kustomize {directory}: over {MAX_RENDERED_BYTES} bytes")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objects:
        if obj.get("kind") == kind and obj.get("metadata", {}).get("name") == name:
            return obj
    raise ManifestError(f"no {kind} {name} in the rendered objects")


def workloads(objects: list[dict[str, Any]], kinds: tuple[str, ...] = WORKLOAD_KINDS) -> Iterator[dict]:
    yield from (obj for obj in objects if obj.get("kind") in kinds)


def service_link_env(objects: list[dict[str, Any]], hosts: Mapping[str, str]) -> dict[str, str]:
    """The variables Kubernetes gives pods for each Service of their namespace
    ({NAME}_SERVICE_HOST, {NAME}_SERVICE_PORT), a Service's address taken from HOSTS."""
    env: dict[str, str] = {}
    for service in (o for o in objects if o.get("kind") == "Service"):
        name = service["metadata"]["name"]
        if service["spec"].get("clusterIP") == "None":
            continue  # headless: no links
        prefix = name.upper().replace("-", "_")
        env[f"{prefix}_SERVICE_HOST"] = hosts.get(name, "")
        env[f"{prefix}_SERVICE_PORT"] = str(service["spec"]["ports"][0]["port"])
    return env


def expand(text: str, env: Mapping[str, str]) -> str:
    """$(VAR) references expanded as the kubelet does: a defined VAR is replaced, an undefined one
    is left as written, $$ is a literal $."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(replace, text)


def object_data(obj: dict[str, Any]) -> dict[str, str]:
    """A ConfigMap's or Secret's keys and values (a Secret's decoded)."""
    if obj["kind"] == "Secret":
        values = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        values.update(obj.get("stringData") or {})
        return values
    return dict(obj.get("data") or {})


@dataclass(frozen=True)
class PodFacts:
    """What the kubelet would know of the pod: its node's name and address, Service links."""

    node_name: str = "node-1"
    host_ip: str = "127.0.0.1"
    pod_ip: str = "127.0.0.1"
    service_links: Mapping[str, str] | None = None


def container_env(
    objects: list[dict[str, Any]], pod_spec: dict[str, Any], container: dict[str, Any], facts: PodFacts
) -> dict[str, str]:
    """The container's environment as the kubelet builds it: Service links (unless the pod turns
    them off), then envFrom, then env in order, each value expanded over what came before."""
    env: dict[str, str] = {}
    if pod_spec.get("enableServiceLinks", True) and facts.service_links:
        env.update(facts.service_links)
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef") or source.get("secretRef")
        kind = "ConfigMap" if "configMapRef" in source else "Secret"
        values = object_data(find(objects, kind, ref["name"]))
        env.update({source.get("prefix", "") + k: v for k, v in values.items()})
    fields = {
        "spec.nodeName": facts.node_name,
        "status.hostIP": facts.host_ip,
        "status.podIP": facts.pod_ip,
        "metadata.namespace": "cairn",
    }
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
            continue
        source = item.get("valueFrom") or {}
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if path not in fields:
                raise ManifestError(f"env {name}: fieldRef {path} is not one this reader knows")
            env[name] = fields[path]
            continue
        ref = source.get("secretKeyRef") or source.get("configMapKeyRef")
        if ref is None:
            raise ManifestError(f"env {name}: no value and no reference this reader knows")
        kind = "Secret" if "secretKeyRef" in source else "ConfigMap"
        values = object_data(find(objects, kind, ref["name"]))
        if ref["key"] not in values:
            raise ManifestError(f"env {name}: {kind} {ref['name']} has no key {ref['key']!r}")
        env[name] = values[ref["key"]]
    return env


def container_argv(container: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """command + args with $(VAR) expanded (the image's entry point when command is absent is not
    used by deploy/k8s: every container names its command)."""
    if not container.get("command"):
        raise ManifestError(f"container {container['name']}: no command (every Cairn container names one)")
    return [expand(str(part), env) for part in [*container["command"], *(container.get("args") or [])]]
