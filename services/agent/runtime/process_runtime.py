"""The process runtime, agent side: start a container's supervisor (shim.py), signal it, ask it to
kill, and learn how the command ended. Every call works the same whether this agent process
started the shim or found it again after a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from services.agent.runtime.jsonfile import read_json, write_json_atomic
from services.agent.runtime.processes import is_running, signal_group, signal_process, start_ticks
from services.agent.runtime.protocol import (
    CONTROL_SIGNALS,
    KILL_SIGNAL,
    ContainerPaths,
    ExitReport,
    LaunchSpec,
)
from services.agent.runtime.standbys import Standby, StandbyPool, standby_order
from services.agent.runtime.warm_starts import (
    PreloadError,
    WarmCommand,
    WarmKey,
    preload_modules,
    warm_command,
    warm_key,
)
from services.agent.runtime.zygotes import ZygotePool
from services.agent.system_metrics.proc import Selector

if TYPE_CHECKING:
    from services.agent.containers.record import ContainerRecord
    from services.agent.requests import StartRequest

# Writes a line about the container into its log: (message, level).
Note = Callable[[str, str], None]
# A start that waited this long for its standby (its kind's zygote importing) says so in its log.
NOTE_WAIT_S = 1.0


class ContainerSetupError(RuntimeError):
    """A runtime cannot make the container (the docker runtime: bad configuration, image not
    available); the container ends with this message."""


# The folder that holds the `services` package: the shim is started with it on PYTHONPATH so it
# runs from the same code as the agent, installed or not.
_CODE_ROOT = Path(__file__).resolve().parents[3]


# What the shim takes from the agent's environment: enough to run Python and reach dockerd, never
# the agent's credentials or settings (CAIRN_CLUSTER_TOKEN...): a task running as the agent's user
# could read them in /proc/<shim pid>/environ. The command's own environment is launch.json's.
_SHIM_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH")
_SHIM_PREFIXES = ("LC_", "DOCKER_")


def shim_environment(source: Mapping[str, str], code_root: Path) -> dict[str, str]:
    """The shim's environment: the basics of `source`, with `code_root` first on PYTHONPATH so the
    shim runs the agent's own code, installed or not."""
    env = {k: v for k, v in source.items() if k in _SHIM_VARIABLES or k.startswith(_SHIM_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(code_root), env.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class ShimHandle:
    pid: int
    start_ticks: int | None
    # Present when this agent process started the shim: it must reap it.
    popen: subprocess.Popen[bytes] | None = None


class ProcessRuntime:
    name = "process"
    # The supervisor every container gets (the docker runtime's differs, and speaks the same files).
    shim_module = "services.agent.runtime.shim"

    def __init__(self, python: str = sys.executable, standby_dir: Path | None = None, slots: int = 1) -> None:
        self._python = python
        # Warm starts (standbys.py): only where the agent gives the runtime a folder for standbys.
        self._standbys = (
            StandbyPool(
                standby_dir,
                slots,
                self._start_standby_shim,
                self._shim_invocation,
                # As many kinds as slots, as for the standbys: a GPU agent's slots differ in
                # CUDA_VISIBLE_DEVICES, so each slot is a kind of its own there.
                ZygotePool(standby_dir.parent / f"{standby_dir.name}-zygotes", capacity=slots),
            )
            if standby_dir is not None
            else None
        )

    def processes_of(self, record: ContainerRecord, paths: ContainerPaths) -> Selector | None:
        """How system metrics find a running container's processes: its command's process group
        (None until the shim has said which)."""
        return Selector("pgid", record.command_pgid) if record.command_pgid else None

    def before_start(self, request: StartRequest, note: Note, pulling: Callable[[], None]) -> None:
        """What must happen before a container starts (the docker runtime pulls its image): for the
        process runtime, a word in the container's log when its warm-start declaration is unusable."""
        if self._standbys is None:
            return
        try:
            preload_modules(request.container_config)
        except PreloadError as exc:
            note(f"warm starts off for this container: {exc}", "WARNING")

    def take_standby(
        self,
        request: StartRequest,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        aborted: Callable[[], bool],
        note: Note,
    ) -> Standby | None:
        """For a command that may start warm, its kind's standby, taken out of the pool (waiting,
        outside the container manager's lock, for one on its way or started now: the first of a kind
        waits for its zygote's imports); None when it starts cold. launch() hands it over, or the
        caller gives it back (give_back) when the container stops first."""
        warm = self._warm_plan(argv, env, cwd, request)
        if warm is None or self._standbys is None:
            return None
        key, command, modules = warm
        begun = time.monotonic()
        standby = self._standbys.take(
            key, lambda folder: standby_order(folder, command, modules, env, cwd), aborted
        )
        waited = time.monotonic() - begun
        if standby is not None and waited >= NOTE_WAIT_S:
            message = f"waited {waited:.1f} s for its prepared interpreter (its kind's modules imported once)"
            note(message, "INFO")
        return standby

    def give_back(self, standby: Standby) -> None:
        """A standby take_standby gave whose container did not launch."""
        if self._standbys is not None:
            self._standbys.give_back(standby)

    def launch(
        self,
        paths: ContainerPaths,
        spec: LaunchSpec,
        request: StartRequest | None = None,
        standby: Standby | None = None,
    ) -> ShimHandle:
        """Start the container's supervisor: `standby` (take_standby's) becomes it, else a cold one."""
        warm = self._warm_plan(spec.argv, spec.env, spec.cwd, request)
        if warm is not None and self._standbys is not None:
            key, command, modules = warm
            # The next container of this kind finds a standby ready (this one, if any, is spent).
            self._standbys.prepare_soon(
                key, lambda folder: standby_order(folder, command, modules, spec.env, spec.cwd)
            )
        if standby is not None:
            assert self._standbys is not None  # take_standby gave it
            write_json_atomic(paths.launch, spec.to_json())
            try:
                self._standbys.hand_over(standby, paths.meta)
            except OSError:
                standby.discard()  # it died while waiting: start cold
            else:
                return ShimHandle(pid=standby.pid, start_ticks=standby.start_ticks, popen=standby.popen)
        return self._start_shim(paths, spec, ())

    def _warm_plan(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str, request: StartRequest | None
    ) -> tuple[WarmKey, WarmCommand, tuple[str, ...]] | None:
        """(key, command, modules) when this command may start warm: the experiment declared preload
        modules and the command is a plain python run (warm_starts.py)."""
        if self._standbys is None or request is None:
            return None
        try:
            modules = preload_modules(request.container_config)
        except PreloadError:
            return None  # before_start said so in the container's log
        command = warm_command(argv, env) if modules else None
        if command is None:
            return None
        return warm_key(command, modules, env, cwd), command, modules

    def close(self) -> None:
        """The agent stops: discard the standbys (running containers are not touched)."""
        if self._standbys is not None:
            self._standbys.close()

    def _start_shim(
        self, paths: ContainerPaths, spec: LaunchSpec | None, extra: tuple[str, ...]
    ) -> ShimHandle:
        if spec is not None:
            write_json_atomic(paths.launch, spec.to_json())
        popen = self._spawn_shim(
            [str(paths.meta), *extra], paths.root, paths.shim_log, stdin=subprocess.DEVNULL
        )
        return ShimHandle(pid=popen.pid, start_ticks=start_ticks(popen.pid), popen=popen)

    def _start_standby_shim(self, extra: Sequence[str], cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
        return self._spawn_shim(list(extra), cwd, log_path, stdin=subprocess.PIPE)

    def _shim_invocation(self, args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """The shim's command line with `args`, and its environment."""
        return [self._python, "-m", self.shim_module, *args], shim_environment(os.environ, _CODE_ROOT)

    def _spawn_shim(self, args: list[str], cwd: Path, log_path: Path, stdin: int) -> subprocess.Popen[bytes]:
        argv, env = self._shim_invocation(args)
        with open(log_path, "ab") as log:
            # The shim inherits this thread's signal mask: with the control signals blocked, one
            # sent before the shim is ready stays pending instead of killing it (see shim.py).
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, CONTROL_SIGNALS)
            try:
                return subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=stdin,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,  # its own session: an agent crash or restart leaves it be
                    close_fds=True,
                )
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def attach(self, pid: int, ticks: int | None, paths: ContainerPaths | None = None) -> ShimHandle:
        return ShimHandle(pid=pid, start_ticks=ticks)

    def is_alive(self, handle: ShimHandle) -> bool:
        if handle.popen is not None:
            return handle.popen.poll() is None
        return is_running(handle.pid, handle.start_ticks)

    def send_signal(self, handle: ShimHandle, sig: signal.Signals) -> bool:
        """SIGTERM/SIGINT: the shim forwards it to the command's process group."""
        return self.is_alive(handle) and signal_process(handle.pid, sig)

    def request_kill(self, handle: ShimHandle, paths: ContainerPaths, grace_seconds: float) -> bool:
        write_json_atomic(paths.kill_request, {"grace_seconds": grace_seconds, "requested_at": time.time()})
        return self.is_alive(handle) and signal_process(handle.pid, KILL_SIGNAL)

    def kill_command_group(self, handle: ShimHandle | None, paths: ContainerPaths) -> None:
        """SIGKILL the command's process group, bypassing the shim."""
        child = read_json(paths.child_info)
        if not child:
            return
        shim_alive = handle is not None and self.is_alive(handle)
        # A shim that wrote exit.json swept the group itself, and after that the group id may be
        # reused; before that (alive, or died without a report) the group is still the command's.
        if shim_alive or not paths.exit_report.exists():
            signal_group(int(child["pgid"]), signal.SIGKILL)

    def force_kill(self, handle: ShimHandle | None, paths: ContainerPaths) -> None:
        """The last resort when the shim does not do its job: SIGKILL the command's group and the
        shim itself."""
        self.kill_command_group(handle, paths)
        if handle is not None and self.is_alive(handle):
            signal_process(handle.pid, signal.SIGKILL)
        if handle is not None and handle.popen is not None:
            try:
                handle.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def exit_report(self, paths: ContainerPaths) -> ExitReport | None:
        data = read_json(paths.exit_report)
        return ExitReport.from_json(data) if data is not None else None
