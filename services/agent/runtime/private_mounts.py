"""Starting a task in a mount namespace of its own, with some of its folders bound over fixed paths.

A Determined container has its own /run/determined and its own /tmp; the process runtime gives a
task the same with `unshare --mount --propagation private`: inside, each of the task's folders is
bound on its path, visible to that process tree only (other tasks and the host see theirs). That
takes root (the agent's privilege drop to the task user comes after, innermost in the command).

Why /tmp: tasks of different users must not share it, and Determined's harness itself writes fixed
names there (its DeepSpeed launcher's /tmp/pid_server-<allocation>), so two tasks on one machine
collide in a shared /tmp.

Why /dev/shm: a Docker container has a /dev/shm tmpfs of its own, of the config's
`resources.shm_size` (Determined's default 4 GiB); a task here gets the same, a tmpfs mounted in
its namespace (a "bind" whose source is TMPFS_SOURCE_PREFIX and the size: no real source is a
relative path). Its size is a cap, not memory set aside.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

# Runs inside the new namespace: "$@" is SOURCE TARGET pairs, then "--", then the task's command.
# unshare and sh both exec, so the task's process keeps the pid and process group the shim gave it.
# A source "tmpfs:size=N" is a new tmpfs of N bytes, with Docker's /dev/shm options; a source
# "ro:PATH" is PATH bound read-only (a bind, then its remount read-only). No real source is a
# relative path, so neither mark can be taken for one.
TMPFS_SOURCE_PREFIX = "tmpfs:size="
TMPFS_OPTIONS = "mode=1777,nosuid,nodev,noexec"
READ_ONLY_PREFIX = "ro:"
_BIND_ALL_AND_EXEC = (
    'set -e; while [ "$1" != -- ]; do [ -e "$2" ] || mkdir -p "$2"; case "$1" in '
    f"{TMPFS_SOURCE_PREFIX}*) "
    f'mount -t tmpfs -o "size=${{1#{TMPFS_SOURCE_PREFIX}}},{TMPFS_OPTIONS}" tmpfs "$2";; '
    f'{READ_ONLY_PREFIX}*) mount --bind "${{1#{READ_ONLY_PREFIX}}}" "$2"; mount -o remount,bind,ro "$2";; '
    '*) mount --bind "$1" "$2";; esac; shift 2; done; shift; exec "$@"'
)
_UNSHARE = ("unshare", "--mount", "--propagation", "private", "--")
_BIND_ALL_AND_EXEC_ARGV = ("sh", "-c", _BIND_ALL_AND_EXEC, "sh")


@dataclass(frozen=True)
class Bind:
    source: Path  # the task's own folder, or file (its /etc/passwd, task_accounts.py), or a tmpfs (see tmpfs)
    target: str  # the path the task sees it at (a missing one is made a folder)

    @property
    def read_only(self) -> bool:
        return str(self.source).startswith(READ_ONLY_PREFIX)

    @property
    def folder(self) -> str:
        """The folder bound (without the read-only mark)."""
        return str(self.source).removeprefix(READ_ONLY_PREFIX)

    @property
    def tmpfs_bytes(self) -> int | None:
        """The size of the new tmpfs this mount is; None for a bind of a folder."""
        text = str(self.source)
        return int(text.removeprefix(TMPFS_SOURCE_PREFIX)) if text.startswith(TMPFS_SOURCE_PREFIX) else None


def read_only(source: Path, target: str) -> Bind:
    """`source` bound on `target` read-only."""
    return Bind(Path(f"{READ_ONLY_PREFIX}{source}"), target)


def tmpfs(target: str, size_bytes: int) -> Bind:
    """A new tmpfs of `size_bytes` on `target` (the task's own /dev/shm)."""
    if size_bytes <= 0:
        raise ValueError(f"a tmpfs needs a positive size, not {size_bytes}")
    return Bind(Path(f"{TMPFS_SOURCE_PREFIX}{size_bytes}"), target)


def supported() -> bool:
    """Whether this agent can start tasks in private mount namespaces (root, unshare and mount)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("mount"):
        return False
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--", "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def in_private_mounts(argv: list[str], binds: Sequence[Bind]) -> list[str]:
    """`argv` started in its own mount namespace with each bind in place (in order)."""
    if not binds:
        return argv
    return in_private_namespace(argv, binds)


def in_private_namespace(argv: list[str], binds: Sequence[Bind]) -> list[str]:
    """As in_private_mounts, but in a namespace of its own even without binds: a standby
    interpreter gets its container's binds later (bind_in_namespace)."""
    pairs = [part for bind in binds for part in (str(bind.source), bind.target)]
    return [*_UNSHARE, *_BIND_ALL_AND_EXEC_ARGV, *pairs, "--", *argv]


def split_private_mounts(argv: Sequence[str]) -> tuple[list[Bind], list[str]]:
    """(binds, command) of a command line in_private_mounts made; ([], argv) for any other."""
    head = [*_UNSHARE, *_BIND_ALL_AND_EXEC_ARGV]
    if list(argv[: len(head)]) != head:
        return [], list(argv)
    rest = list(argv[len(head) :])
    binds = []
    while len(rest) >= 2 and rest[0] != "--":
        binds.append(Bind(Path(rest[0]), rest[1]))
        rest = rest[2:]
    if not rest or rest[0] != "--":
        return [], list(argv)
    return binds, rest[1:]


def bind_in_namespace(pid: int, binds: Sequence[Bind], unmount: Sequence[str] = ()) -> None:
    """As root, make process `pid`'s mount namespace what in_private_mounts would have made it:
    first lazily unmount `unmount` (what the standby had there meanwhile), then bind in order (a
    source under the host's /tmp must be found before a private /tmp hides it). Done by a forked
    child that enters the namespace (setns) and makes the system calls itself: `nsenter ... sh -c
    'mkdir; mount; ...'` spawned a process per step, ~20 ms of a warm start. OSError when it fails.
    The caller must not have gRPC loaded (its fork handlers start threads in the child, and a
    process with threads cannot enter a mount namespace: EINVAL); the shim has not."""
    binder = NamespaceBinder(pid)
    binder.bind(binds, unmount)


class NamespaceBinder:
    """bind_in_namespace in two steps: made, it forks a child that enters process `pid`'s mount
    namespace and waits; `bind` hands that child the binds to make. A standby's shim makes one while
    it waits for its container, so that the container's start pays only the mounts themselves: the
    fork of the shim, the child's first turn on a core and its setns took 2-5 ms of each warm start
    on a busy machine. OSError when `pid` has no namespace of its own. Use once: `bind` or
    `discard`, either ends the child. Same caveat as bind_in_namespace: no gRPC in the caller."""

    def __init__(self, pid: int) -> None:
        self._target = pid
        namespace = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._namespace_ino = os.fstat(namespace).st_ino
            if self._namespace_ino == os.stat("/proc/self/ns/mnt").st_ino:
                # Not in a namespace of its own (yet): binding would change this machine's mounts.
                raise OSError(f"process {pid} shares this process's mount namespace")
            pipes: list[int] = []
            try:
                pipes += os.pipe2(os.O_CLOEXEC)
                pipes += os.pipe2(os.O_CLOEXEC)
                child = os.fork()
            except OSError:
                for fd in pipes:
                    os.close(fd)
                raise
            orders_r, orders_w, errors_r, errors_w = pipes
            if child == 0:  # pragma: no cover - the child's outcome is reported through the pipe
                _binder_child(namespace, orders_r, errors_w)
            os.close(orders_r)
            os.close(errors_w)
        finally:
            os.close(namespace)
        self._pid: int | None = child
        self._orders: int | None = orders_w
        self._errors = errors_r

    def still_current(self) -> bool:
        """Whether the process is still in the namespace the child entered (a process may move to
        another one meanwhile, and binds belong where it is at the hand-over)."""
        try:
            return os.stat(f"/proc/{self._target}/ns/mnt").st_ino == self._namespace_ino
        except OSError:
            return False

    def bind(self, binds: Sequence[Bind], unmount: Sequence[str] = ()) -> None:
        """Unmount, then bind (as bind_in_namespace); OSError when it fails."""
        order = json.dumps({"binds": [[str(b.source), b.target] for b in binds], "unmount": list(unmount)})
        try:
            self._send(order.encode())
        except OSError:
            pass  # the child ended already (its setns failed): its error follows
        status, error = self._end()
        if status != 0:
            raise OSError(
                error or f"binding in the namespace of process {self._target} failed (status {status})"
            )

    def discard(self) -> None:
        """Not needed: the child leaves without binding anything."""
        if self._pid is not None:
            self._end()

    def _send(self, data: bytes) -> None:
        assert self._orders is not None, "a binder binds once"
        view = memoryview(data)
        while view:
            view = view[os.write(self._orders, view) :]

    def _end(self) -> tuple[int, str]:
        """Close the orders (end of input: the child binds what it read, or nothing) and wait."""
        if self._orders is not None:
            os.close(self._orders)
            self._orders = None
        with os.fdopen(self._errors, "rb") as errors:
            error = errors.read().decode(errors="replace")
        assert self._pid is not None
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        return status, error


def _binder_child(namespace: int, orders: int, errors: int) -> NoReturn:  # pragma: no cover
    """NamespaceBinder's child: enter the namespace, read the order to its end, carry it out; any
    failure goes back on `errors`. It keeps no other descriptor: a pipe's write end held here (the
    interpreter's stdin) would keep its reader from ever seeing the end of it."""
    code = 0
    try:
        keep = {namespace, orders, errors}
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        libc = _enter(namespace)
        data = b""
        while chunk := os.read(orders, 65536):
            data += chunk
        if data:
            order = json.loads(data)
            binds = [Bind(Path(source), target) for source, target in order["binds"]]
            _bind_all(libc, binds, order["unmount"])
    except BaseException as exc:  # everything goes back to the parent, which raises it
        with contextlib.suppress(OSError):
            os.write(errors, str(exc).encode(errors="replace")[:4000])
        code = 1
    os._exit(code)


_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MNT_DETACH = 2


def _check(libc: Any, result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _enter(namespace: int) -> Any:
    """Enter the mount namespace (which also moves this process's root and working directory to
    its root); the C library, for the mounts."""
    libc = ctypes.CDLL(None, use_errno=True)
    _check(libc, libc.setns(namespace, _CLONE_NEWNS), "setns")
    return libc


def _bind_all(libc: Any, binds: Sequence[Bind], unmount: Sequence[str]) -> None:
    for target in unmount:
        _check(libc, libc.umount2(target.encode(), _MNT_DETACH), f"umount -l {target}")
    for bind in binds:
        if not os.path.exists(bind.target):
            os.makedirs(bind.target)
        size = bind.tmpfs_bytes
        if size is not None:
            _check(
                libc,
                libc.mount(
                    b"tmpfs",
                    bind.target.encode(),
                    b"tmpfs",
                    _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                    f"size={size},mode=1777".encode(),
                ),
                f"mount -t tmpfs (size {size}) {bind.target}",
            )
            continue
        _check(
            libc,
            libc.mount(bind.folder.encode(), bind.target.encode(), None, _MS_BIND, None),
            f"mount --bind {bind.folder} {bind.target}",
        )
        if bind.read_only:
            flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY
            _check(
                libc,
                libc.mount(None, bind.target.encode(), None, flags, None),
                f"mount -o remount,bind,ro {bind.target}",
            )
