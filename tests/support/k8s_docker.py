"""A rendered pod run with docker, as the kubelet would run it on one node with host networking:
the same image, command, args and environment (tests/support/k8s_manifests.py resolves it), the
same volumes (hostPath: the node's path; emptyDir: a fresh folder; ConfigMap and Secret: their
files), the same user, groups, capabilities, read-only root and limits; init containers run to
completion first; Service names resolve to the node (every Service here is on host networking);
probes are asked the way the kubelet asks them. Every container carries RUN_LABEL=<run id> so that
the test removes exactly what it started."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.localcluster.readiness import SERVING, health_status
from tests.support.k8s_manifests import (
    PodFacts,
    container_argv,
    container_env,
    find,
    object_data,
)

RUN_LABEL = "ai.cairn.k8s-e2e.run"
NODE_ADDRESS = "127.0.0.1"
# The DNS names a Service has inside the namespace and the cluster.
_SERVICE_SUFFIXES = ("", ".cairn", ".cairn.svc", ".cairn.svc.cluster.local")


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])} ... failed: {done.stderr.strip()[-2000:]}")
    return done


def _cpus(quantity: str) -> str:
    return str(int(quantity[:-1]) / 1000) if quantity.endswith("m") else quantity


def _memory(quantity: str) -> str:
    units = {"Ki": "k", "Mi": "m", "Gi": "g"}
    return next((quantity[:-2] + short for unit, short in units.items() if quantity.endswith(unit)), quantity)


@dataclass
class PodRunner:
    objects: list[dict[str, Any]]
    run_id: str
    scratch: Path
    facts: PodFacts
    started: list[str] = field(default_factory=list)

    def host_args(self) -> list[str]:
        names = [o["metadata"]["name"] for o in self.objects if o.get("kind") == "Service"]
        return [f"--add-host={name}{suffix}:{NODE_ADDRESS}" for name in names for suffix in _SERVICE_SUFFIXES]

    def _volume_source(self, pod: str, volume: dict[str, Any]) -> Path:
        """Where a volume's files lie on this node."""
        if "hostPath" in volume:
            path = Path(volume["hostPath"]["path"])
            kind = volume["hostPath"].get("type", "")
            if kind == "DirectoryOrCreate":
                path.mkdir(mode=0o755, parents=True, exist_ok=True)
            elif kind == "Directory":
                assert path.is_dir(), f"hostPath {path}: not a directory on the node"
            elif kind == "Socket":
                assert path.is_socket(), f"hostPath {path}: not a socket on the node"
            return path
        folder = self.scratch / pod / volume["name"]
        folder.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in volume:
            folder.chmod(0o777)
            return folder
        source = volume.get("configMap") or volume.get("secret")
        if source is None:
            raise AssertionError(f"volume {volume['name']}: a kind this runner does not know")
        kind = "ConfigMap" if "configMap" in volume else "Secret"
        name = source.get("name") or source.get("secretName")
        mode = source.get("defaultMode", 0o644)
        for key, value in object_data(find(self.objects, kind, name)).items():
            file = folder / key
            file.write_text(value)
            file.chmod(mode)
        return folder

    def run_pod(self, workload: dict[str, Any]) -> list[str]:
        """Starts WORKLOAD's pod: init containers to completion, then its containers; their names."""
        name = workload["metadata"]["name"]
        spec = workload["spec"]["template"]["spec"]
        sources = {v["name"]: self._volume_source(name, v) for v in spec.get("volumes") or []}
        for init in spec.get("initContainers") or []:
            container = self._start(name, spec, init, sources, detach=False)
            state = docker("inspect", "--format", "{{.State.ExitCode}}", container).stdout.strip()
            logs = docker("logs", container, check=False)
            assert state == "0", f"init container {init['name']} exited {state}:\n{logs.stdout}{logs.stderr}"
        return [self._start(name, spec, c, sources, detach=True) for c in spec["containers"]]

    def _start(
        self,
        pod: str,
        spec: dict[str, Any],
        container: dict[str, Any],
        sources: dict[str, Path],
        detach: bool,
    ) -> str:
        env = container_env(self.objects, spec, container, self.facts)
        argv = container_argv(container, env)
        name = f"k8s-e2e-{self.run_id}-{pod}-{container['name']}"
        pod_security = spec.get("securityContext") or {}
        security = container.get("securityContext") or {}
        args = ["run", "--name", name, "--label", f"{RUN_LABEL}={self.run_id}", "--network", "host"]
        args += self.host_args()
        user = security.get("runAsUser", pod_security.get("runAsUser"))
        group = security.get("runAsGroup", pod_security.get("runAsGroup"))
        if user is not None:
            args += ["--user", f"{user}:{group}" if group is not None else str(user)]
        for extra in [*pod_security.get("supplementalGroups", []), pod_security.get("fsGroup")]:
            if extra is not None:
                args += ["--group-add", str(extra)]
        if security.get("readOnlyRootFilesystem"):
            args.append("--read-only")
        if security.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        for cap in (security.get("capabilities") or {}).get("drop", []):
            args += ["--cap-drop", cap]
        if spec.get("shareProcessNamespace"):
            args.append("--init")  # the pod's pause process reaps orphans; docker's init does here
        limits = (container.get("resources") or {}).get("limits") or {}
        if "cpu" in limits:
            args += ["--cpus", _cpus(str(limits["cpu"]))]
        if "memory" in limits:
            args += ["--memory", _memory(str(limits["memory"]))]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            # ConfigMap and Secret volumes are read-only whatever the mount says.
            read_only = mount.get("readOnly") or "configMap" in volume or "secret" in volume
            args += ["-v", f"{sources[mount['name']]}:{mount['mountPath']}{':ro' if read_only else ''}"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        args += ["--entrypoint", argv[0]]
        if detach:
            args.append("--detach")
        args += [container["image"], *argv[1:]]
        self.started.append(name)
        docker(*args, timeout=600, check=detach)
        return name

    def remove_all(self) -> None:
        """Every container this run started, stopped (SIGTERM first) and removed."""
        listed = docker("ps", "--all", "--quiet", "--filter", f"label={RUN_LABEL}={self.run_id}", check=False)
        for container in listed.stdout.split():
            docker("rm", "--force", container, check=False)


def probe_passes(
    runner: PodRunner, container_name: str, container: dict[str, Any], probe: dict[str, Any]
) -> bool:
    """One attempt of PROBE as the kubelet makes it (on host networking, at the node's address)."""
    ports = {p["name"]: p["containerPort"] for p in container.get("ports") or []}
    timeout = float(probe.get("timeoutSeconds", 1))
    if "grpc" in probe:
        return health_status(f"{NODE_ADDRESS}:{probe['grpc']['port']}", timeout_s=timeout) == SERVING
    if "httpGet" in probe:
        get = probe["httpGet"]
        port = ports.get(get["port"], get["port"])
        url = f"{get.get('scheme', 'HTTP').lower()}://{NODE_ADDRESS}:{port}{get['path']}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return 200 <= response.status < 400
        except (urllib.error.URLError, OSError):
            return False
    if "exec" in probe:
        done = docker("exec", container_name, *probe["exec"]["command"], timeout=timeout + 5, check=False)
        return done.returncode == 0
    raise AssertionError(f"a probe this runner does not know: {probe}")
