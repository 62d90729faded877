"""The files an agent keeps in its work directory: ONE definition, imported by the agent that writes
them (services/agent) and by what reads them without the agent (`cairn cluster down`'s sweep of
trial processes that a dead agent left behind, cairn.localcluster.sweep).

    <work dir>/agent.lock                   held (flock) by the running agent; holds its pid
    <work dir>/containers/<id>/             one folder per container: the command's working dir
                                            (with --task-user: <task root>/<id>, outside the work dir)
    <work dir>/containers/<id>/.cairn-agent/
        state.json    the agent's record of the container (pids, state, acknowledged seq)
        launch.json   what the shim runs: argv, environment, cwd, first seq
        shim.json     written by the shim once it can take signals: {"pid", "start_ticks"}
        child.json    written by the shim once the command runs: {"pid", "pgid"} (pid = pgid)
        events.jsonl  the container's events (state changes and log lines), one JSON per line
        kill.json     the agent's kill request (grace seconds), read by the shim on its signal
        exit.json     written by the shim when the command has ended and every line is written
        shim.log      the shim's own stderr, for debugging
        docker.json   (docker runtime) the container to create: image, command, mounts, devices...

With the docker runtime the shim supervises a Docker container instead of a process; the container
carries the DOCKER_LABEL_* labels, by which a restarted agent and the sweep find it again.

The shim (the container's supervisor) runs in a session of its own, so its pid is also its
process group; the command runs in another group, whose id is its pid.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# The bookkeeping folder inside a container's working directory. A model definition may not
# contain it (the agent's unpacker refuses), so user files never collide with it.
META_DIR_NAME = ".cairn-agent"
CONTAINERS_DIR_NAME = "containers"
LOCK_FILE_NAME = "agent.lock"

# The labels of the Docker containers an agent creates (docker runtime).
DOCKER_LABEL_AGENT_ID = "cairn.agent-id"
DOCKER_LABEL_CONTAINER_ID = "cairn.container-id"
DOCKER_LABEL_ALLOCATION_ID = "cairn.allocation-id"
# The agent's work dir: what `cairn cluster down` knows of its (possibly dead) agents.
DOCKER_LABEL_WORK_DIR = "cairn.agent-work-dir"
DOCKER_LABEL_DESCRIPTION = "cairn.description"
# An agent container the master's docker provider started (services/master/provisioners/docker.py):
# its pool, its instance id, the master's cluster id, and its work dir (a folder of the master's
# state dir, which `cairn cluster down` finds it by).
PROVISIONER_LABEL_POOL = "cairn.provisioner.pool"
PROVISIONER_LABEL_INSTANCE = "cairn.provisioner.instance"
PROVISIONER_LABEL_CLUSTER = "cairn.provisioner.cluster"
PROVISIONER_LABEL_WORK_DIR = "cairn.provisioner.work-dir"
DOCKER_LABELS = (
    DOCKER_LABEL_AGENT_ID,
    DOCKER_LABEL_CONTAINER_ID,
    DOCKER_LABEL_ALLOCATION_ID,
    DOCKER_LABEL_WORK_DIR,
    DOCKER_LABEL_DESCRIPTION,
)


@dataclass(frozen=True)
class ContainerPaths:
    root: Path

    @property
    def meta(self) -> Path:
        return self.root / META_DIR_NAME

    @property
    def state(self) -> Path:
        return self.meta / "state.json"

    @property
    def launch(self) -> Path:
        return self.meta / "launch.json"

    @property
    def shim_info(self) -> Path:
        return self.meta / "shim.json"

    @property
    def child_info(self) -> Path:
        return self.meta / "child.json"

    @property
    def events(self) -> Path:
        return self.meta / "events.jsonl"

    @property
    def kill_request(self) -> Path:
        return self.meta / "kill.json"

    @property
    def exit_report(self) -> Path:
        return self.meta / "exit.json"

    @property
    def shim_log(self) -> Path:
        return self.meta / "shim.log"

    @property
    def run_determined(self) -> Path:
        """What the task sees at /run/determined (info files, the model's pristine copy)."""
        return self.meta / "run-determined"

    @property
    def docker_spec(self) -> Path:
        return self.meta / "docker.json"

    @property
    def context_archive(self) -> Path:
        return self.meta / "context.tar.gz"


@dataclass(frozen=True)
class WorkDirPaths:
    root: Path

    @property
    def containers(self) -> Path:
        return self.root / CONTAINERS_DIR_NAME

    @property
    def lock_file(self) -> Path:
        return self.root / LOCK_FILE_NAME

    def container(self, container_id: str) -> ContainerPaths:
        return ContainerPaths(self.containers / container_id)

    def all_containers(self) -> Iterator[ContainerPaths]:
        """Every container folder, in name order (none when the work dir does not exist yet)."""
        if not self.containers.is_dir():
            return
        for folder in sorted(self.containers.iterdir()):
            if folder.is_dir():
                yield ContainerPaths(folder)
