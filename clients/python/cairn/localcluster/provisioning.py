"""`cairn cluster up --provision`: the master's config file that makes the default pool's agents
dynamic (its local provider launches them as processes on this machine, with the same runtime,
task environment, isolation and TLS as the agents `cluster up` starts itself), and what
`cluster down` needs to stop them: the agents the provider recorded.

The provider's record of each agent (instance.json: pid and the process's start time) is read here
by path, not by importing the master: the client and the services share no code.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from cairn.agent_files import PROVISIONER_LABEL_WORK_DIR
from cairn.client.token_store import write_private_file
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.plan import ClusterOptions, agent_runtime_flags
from cairn.localcluster.processes import process_start_ticks

INSTANCE_RECORD = "instance.json"
# An agent container's stop: its trials' kill grace, then SIGKILL.
AGENT_CONTAINER_STOP_S = 20


def master_config(options: ClusterOptions, paths: ClusterPaths) -> dict[str, object]:
    provision = options.provision
    assert provision is not None
    agent_args = []
    if options.tls:
        agent_args += ["--master-cert", str(paths.tls_cert_file)]
    tasks_root = options.isolation.tasks_root / "{agent_id}" if options.isolation is not None else None
    agent_args += agent_runtime_flags(options, str(tasks_root) if tasks_root is not None else None)
    provider: dict[str, object] = {
        "type": provision.provider,
        "min_instances": provision.min_agents,
        "max_instances": provision.max_agents,
        "instance_slots": options.slots_per_agent,
        "max_idle_agent_period": provision.max_idle_agent_period,
        "max_agent_starting_period": provision.max_agent_starting_period,
        "agent_args": agent_args,
    }
    if provision.provider == "docker":
        provider["agent_docker_image"] = provision.agent_image
    else:
        provider["python"] = options.python
    return {"resource_pools": [{"pool_name": "default", "provider": provider}]}


def write_master_config(options: ClusterOptions, paths: ClusterPaths) -> None:
    text = "# Written by `cairn cluster up --provision`; the master reads it at start.\n"
    text += yaml.safe_dump(master_config(options, paths), sort_keys=False)
    write_private_file(paths.master_config_file, text)


def provisioned_agent_pids(paths: ClusterPaths) -> list[int]:
    """The agents the master's local provider started that still run (pid and start time match)."""
    pids = []
    for record in sorted(paths.provisioned_agents_dir.glob(f"*/*/{INSTANCE_RECORD}")):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        pid = data.get("pid") if isinstance(data, dict) else None
        if isinstance(pid, int) and process_start_ticks(pid) == data.get("start_ticks"):
            pids.append(pid)
    return pids


def provisioned_work_dirs(paths: ClusterPaths) -> list[Path]:
    return sorted(p for p in paths.provisioned_agents_dir.glob("*/*/work") if p.is_dir())


def remove_provisioned_agent_containers(paths: ClusterPaths) -> list[str]:
    """Remove the agent containers the master's docker provider started for this cluster (found by
    their work dir, a folder of the master's state dir); their ids. The agents' own task containers
    are swept by their work dirs (provisioned_work_dirs) afterwards."""
    root = str(paths.provisioned_agents_dir.resolve())
    try:
        import docker  # optional: without it, no provider could have started containers here
        import docker.errors
    except ImportError:
        return []
    removed: list[str] = []
    try:
        client = docker.from_env(timeout=30)
    except docker.errors.DockerException:
        return []
    try:
        for container in client.api.containers(all=True, filters={"label": PROVISIONER_LABEL_WORK_DIR}):
            work_dir = str(container["Labels"].get(PROVISIONER_LABEL_WORK_DIR, ""))
            if work_dir.startswith(root + "/"):
                # SIGTERM first: the agent stops its trials' containers as its own shutdown.
                client.api.stop(container["Id"], timeout=int(AGENT_CONTAINER_STOP_S))
                client.api.remove_container(container["Id"], force=True, v=True)
                removed.append(str(container["Id"]))
    except docker.errors.DockerException:
        pass
    finally:
        client.close()
    return removed
