"""A zygote: `python3 -c <this file's text> <warm_interpreter.py's text> OPTIONS MODULE...`, started
by the agent (zygotes.py) once per kind of standby (warm_starts.WarmKey), with that kind's
environment (where it imports as root, only the part zygotes.import_environment keeps).

It imports MODULE... once (warm_interpreter.prepare: the Core API and the experiment's
`environment.preload_modules`) and then forks, on the agent's request, a standby per request,
instead of every standby importing them afresh: ~2.8 s of CPU with torch and torch._dynamo, which
on a machine whose cores all train is taken from training. Forked memory is shared copy-on-write.

Each request (a JSON message on fd 0, a Unix seqpacket socket, with two descriptors: the read end
of the standby's control pipe and its log file) makes a supervisor and its interpreter, as a
standby shim would have made them:

    zygote ──fork──▶ A: its own session, control signals blocked, the agent's pipe as stdin, the log
                     as stdout and stderr
                     ├──fork──▶ B: every other descriptor closed, its own process group; in a
                     │          mount namespace of its own (made from the agent's) with the standby's
                     │          private /tmp bound (as root), then the task user's groups, gid and
                     │          uid, dumpable again, the parent-death signal re-armed, no signal
                     │          blocked, the standby's environment and folder: then it waits for
                     │          its command on a pipe (warm_interpreter.serve)
                     └──exec──▶ the standby shim (`shim --standby-forked`), B's parent: it supervises
                                B as a standby shim supervises the interpreter it started itself

B tells A on a pipe that its namespace and user are in place before A becomes the shim, so the
shim never binds a container's folders into a namespace not yet B's own. The zygote answers
{"pid": A} (or {"error": ...}) and reaps A when it ends; a zygote that ends (its socket closed:
the agent stops) leaves running shims be, as an agent restart does.

What a fork shares that a fresh interpreter would not have: the state the imports made (numpy's
global random generator is seeded again in B; Python's `random` reseeds itself after a fork), the
hash seed of str and bytes, and no thread the imports started (OpenBLAS's and the like re-create
theirs through their fork handlers). The agent asks for a zygote only where it may import as the
agent's user what the trial would import as the task user (zygotes.py says when). A root zygote
(the trial drops to the task user) imports in a mount namespace of its own with an empty /tmp,
and through a finder that refuses any module file anyone but root could have changed.

Standard library only, and passed as `-c` text: the task's interpreter need not see the agent's code.
"""

import contextlib
import ctypes
import importlib.util
import json
import os
import pwd
import select
import signal
import socket
import stat
import sys
import time
from collections.abc import Iterator
from typing import Any

_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
# How long A waits for B to be set up (B looks up the task user's groups, makes its namespace).
_SETUP_SECONDS = 30.0
# How often the zygote looks for ended supervisors to reap when no request comes.
_REAP_SECONDS = 1.0
_MAX_MESSAGE = 1 << 20


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _private_namespace(binds: list[list[str]]) -> None:
    """unshare --mount --propagation private, then each SOURCE bound on TARGET (as root)."""
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare --mount")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    for source, target in binds:
        os.makedirs(target, exist_ok=True)
        _check(
            libc.mount(source.encode(), target.encode(), None, _MS_BIND, None),
            f"mount --bind {source} {target}",
        )


def _become_user(uid: int, gid: int) -> None:
    """What `setpriv --reuid --regid --init-groups` does."""
    os.initgroups(pwd.getpwuid(uid).pw_name, gid)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def _interpreter(order: dict[str, Any], shim_pid: int, fds: dict[str, int]) -> None:
    """B: set up as the standby's interpreter would have been started, then tell A."""
    os.close(fds["ready_r"])
    for name in ("command_w", "out_r", "err_r"):
        os.close(fds[name])
    os.dup2(fds["command_r"], 0)
    os.dup2(fds["out_w"], 1)
    os.dup2(fds["err_w"], 2)
    for name in ("command_r", "out_w", "err_w"):
        os.close(fds[name])
    root_zygote = bool(_HOST_NAMESPACE)
    _leave_zygote_namespace()
    if root_zygote:
        # Nothing the root zygote had open stays open in what becomes the trial (it refused to
        # serve if its imports left any: these are its own).
        for fd in _open_fds({fds["ready_w"]}):
            os.close(int(fd.split(" ", 1)[0]))
    os.setpgid(0, 0)
    # First: its folder may be under a path the private /tmp is about to cover (held by reference).
    os.chdir(order["cwd"])
    if order["binds"] is not None:  # a namespace of its own, even with nothing bound yet
        _private_namespace(order["binds"])
    site: Any = sys.modules.get("site")
    if site is not None:
        site.USER_BASE = site.USER_SITE = None  # worked out again from the trial's HOME if asked
    if order["ids"]:
        _become_user(*order["ids"])
        # A change of user without an exec leaves the process undumpable (no core dump, no
        # debugger, /proc/self owned by root); setpriv's exec would have reset it.
        _libc().prctl(_PR_SET_DUMPABLE, 1)
    for finder in [f for f in sys.meta_path if isinstance(f, _TrustedOrigins)]:
        sys.meta_path.remove(finder)  # what the trial imports is its own business, as the task user
    # The parent-death signal, which a change of credentials clears: SIGKILL if the shim dies.
    _libc().prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != shim_pid:
        os._exit(137)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # as a command the shim starts: nothing blocked
    os.environ.clear()
    os.environ.update(order["env"])
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            numpy.random.seed()  # the legacy global generator, seeded at import: each trial its own
        except Exception:
            pass
    os.write(fds["ready_w"], b"ok")
    os.close(fds["ready_w"])


def _supervisor(order: dict[str, Any], control: int, log: int) -> bool:
    """A: fork B, wait until it is set up, then exec the standby shim (B stays its child).
    Returns (True) only in B, once it is set up: it then serves as the standby's interpreter."""
    os.setsid()
    os.dup2(control, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(control)
    os.close(log)
    signals = [signal.Signals(n) for n in order["signals"]]
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    command_r, command_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ready_r, ready_w = os.pipe()
    fds = {
        "command_r": command_r,
        "command_w": command_w,
        "out_r": out_r,
        "out_w": out_w,
        "err_r": err_r,
        "err_w": err_w,
        "ready_r": ready_r,
        "ready_w": ready_w,
    }
    shim_pid = os.getpid()
    child = os.fork()
    if child == 0:
        try:
            _interpreter(order, shim_pid, fds)
        except BaseException as exc:
            try:
                os.write(fds["ready_w"], f"error: {exc}".encode(errors="replace")[:4000])
            finally:
                os._exit(1)
        return True
    for name in ("command_r", "out_w", "err_w", "ready_w"):
        os.close(fds[name])
    answer = _read_until_closed(ready_r, _SETUP_SECONDS)
    os.close(ready_r)
    if answer != b"ok":
        reason = answer.decode(errors="replace") or "it ended before it was ready"
        os.write(2, f"zygote: the standby's interpreter could not be set up: {reason}\n".encode())
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os._exit(1)
    for fd in (command_w, out_r, err_r):
        os.set_inheritable(fd, True)
    adopted = {
        "pid": child,
        "stdin": command_w,
        "stdout": out_r,
        "stderr": err_r,
        "python": order["python"],
        "unmount": order["unmount"],
    }
    shim = order["shim"]
    _leave_zygote_namespace()
    os.chdir(shim["cwd"])
    os.execve(shim["argv"][0], [*shim["argv"], json.dumps(adopted)], shim["env"])
    return False  # not reached: execve returns only by raising


def _read_until_closed(fd: int, timeout: float) -> bytes:
    """All `fd` gives until its writers close it; a note instead when that takes over `timeout`."""
    answer = b""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return f"not set up within {timeout:g} s".encode()
        chunk = os.read(fd, 4096)
        if not chunk:
            return answer
        answer += chunk


def _fork_standby(order: dict[str, Any], fds: list[int], server: socket.socket) -> int | None:
    """The supervisor's pid (in the zygote); None in the standby's interpreter, set up."""
    sys.stdout.flush()
    sys.stderr.flush()
    # Blocked before the fork: the agent may signal the supervisor as soon as it has its pid.
    signals = [signal.Signals(n) for n in order["signals"]]
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    pid = os.fork()
    if pid != 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return pid
    try:
        server.close()
        if _supervisor(order, fds[0], fds[1]):
            return None
    except BaseException as exc:
        try:
            os.write(2, f"zygote: cannot make the standby: {exc}\n".encode(errors="replace"))
        finally:
            os._exit(127)
    os._exit(127)


# The agent's mount namespace, where a root zygote's forks go back to (see _private_zygote).
_HOST_NAMESPACE: list[int] = []


def _private_zygote() -> None:
    """A root zygote imports in a mount namespace of its own with an empty /tmp of root's, the HOME
    it imports under: what the modules read or write there at import is neither the host's shared
    /tmp (anyone's files, read as root) nor left behind. Its forks return to the agent's namespace
    (the supervisor) or make theirs from it (the interpreter)."""
    _HOST_NAMESPACE.append(os.open("/proc/self/ns/mnt", os.O_RDONLY))
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare --mount")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b"mode=0700"), "mount -t tmpfs /tmp")
    # Only now: at the interpreter's start HOME was the zygote's own folder, so no user
    # site-packages could be found in the host's shared /tmp.
    os.environ["HOME"] = "/tmp"


def _leave_zygote_namespace() -> None:
    if _HOST_NAMESPACE:
        _check(_libc().setns(_HOST_NAMESPACE[0], _CLONE_NEWNS), "setns (the agent's mount namespace)")
        os.close(_HOST_NAMESPACE.pop())


def _open_fds(keep: set[int]) -> list[str]:
    """What this process holds open beyond stdin, stdout, stderr and `keep`: where each leads."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                found.append(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
            except OSError:
                pass  # the listing's own descriptor, closed meanwhile
    return found


def _untrusted(path: str) -> str | None:
    """As zygotes.py's check (this file cannot import it): `path`, what it leads to, and every
    folder above either must be root's and writable by root alone; the first that is not."""
    for start in dict.fromkeys([os.path.abspath(path), os.path.realpath(path)]):
        current = start
        while True:
            try:
                info = os.lstat(current)
            except FileNotFoundError:
                info = None
            except OSError as exc:
                return f"{current} ({exc.strerror})"
            if info is not None and not stat.S_ISLNK(info.st_mode):
                if info.st_uid != 0:
                    return f"{current} (owned by uid {info.st_uid})"
                if info.st_mode & 0o022:
                    return f"{current} (writable by group or others)"
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return None


def _untrusted_package_files(modules: list[str]) -> str | None:
    """Every file and folder of the preloaded packages, and of their `NAME.libs` folders beside
    them (numpy.libs: shared libraries their extensions load by path, out of any finder's sight),
    must be root's and writable by root alone; the first that is not. Found, not imported:
    nothing of theirs runs before this."""
    for top in dict.fromkeys(name.split(".")[0] for name in modules):
        try:
            # As the import will find it (an editable install's finder included); the finder
            # first in line vets where from.
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError) as exc:
            return str(exc)
        if spec is None:
            continue  # not installed: importing it fails, for the trial too
        roots = list(spec.submodule_search_locations or [])
        if spec.origin and not roots:
            roots = [spec.origin]
        roots += [os.path.join(os.path.dirname(root.rstrip("/")), f"{top}.libs") for root in roots]
        for root in roots:
            found = _untrusted(root)
            if found is not None:
                return found
            for folder, dirs, files in os.walk(root):
                for entry in (*dirs, *files):
                    path = os.path.join(folder, entry)
                    info = os.lstat(path)
                    if stat.S_ISLNK(info.st_mode):
                        found = _untrusted(path)
                        if found is not None:
                            return found
                    elif info.st_uid != 0 or info.st_mode & 0o022:
                        return f"{path} (not root's alone)"
    return None


class _TrustedOrigins:
    """A meta path finder, first in line while a root zygote imports: it asks the others where a
    module would come from and refuses (ImportError) any file or folder the task user, or anyone
    but root, could have changed — before the module's code runs as root. Refusals are kept."""

    def __init__(self) -> None:
        self.refused: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is None:
                continue
            places = [spec.origin, getattr(spec, "cached", None), *(spec.submodule_search_locations or ())]
            for place in places:
                if isinstance(place, str) and place not in ("built-in", "frozen"):
                    found = _untrusted(place)
                    if found is not None:
                        self.refused.append(f"{name} from {found}")
                        raise ImportError(f"not imported as root: {name} comes from {found}")
            return spec
        return None


@contextlib.contextmanager
def _recorded_lookups() -> Iterator[set[str]]:
    """The names os.environ is asked for meanwhile (os.getenv, environ.get, [], in: all of them go
    through os._Environ.__getitem__). Iterating the whole environment is not counted: it cannot
    say which names the caller wanted."""
    looked_up: set[str] = set()
    environ_type = type(os.environ)
    original = environ_type.__getitem__

    def recording(self: Any, key: Any) -> Any:
        if self is os.environ:
            looked_up.add(key)
        return original(self, key)

    environ_type.__getitem__ = recording  # type: ignore[method-assign]
    try:
        yield looked_up
    finally:
        environ_type.__getitem__ = original  # type: ignore[method-assign]


def _unreadable_modules(ids: list[int]) -> list[str]:
    """The files of the imported modules the task user (`ids`) may not read, asked by a child that
    is that user (its groups included): a zygote that imports as root must not give a trial code
    it could not have read itself."""
    files = sorted(
        {f for f in (getattr(m, "__file__", None) for m in list(sys.modules.values())) if isinstance(f, str)}
    )
    files.append(sys.executable)
    report_r, report_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(report_r)
            _become_user(*ids)
            denied = [f for f in files if os.path.exists(f) and not os.access(f, os.R_OK)]
            os.write(report_w, json.dumps(denied).encode())
        finally:
            os._exit(0)
    os.close(report_w)
    with os.fdopen(report_r, "rb") as report:
        data = report.read()
    os.waitpid(child, 0)
    return list(json.loads(data)) if data else ["(the check did not finish)"]


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _serve_requests(server: socket.socket) -> bool:
    """Fork standbys until the agent closes its end (False), or, in a forked interpreter, True."""
    while True:
        readable, _, _ = select.select([server], [], [], _REAP_SECONDS)
        _reap()
        if not readable:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(server, _MAX_MESSAGE, 2)
        except OSError:
            return False
        if not message:
            return False  # the agent closed its end: stop; running standbys and trials are not ours
        answer: dict[str, Any]
        try:
            order = json.loads(message)
            if len(fds) != 2:
                raise ValueError(f"expected 2 descriptors with the request, got {len(fds)}")
            pid = _fork_standby(order, fds, server)
            if pid is None:
                return True
            answer = {"pid": pid}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            answer = {"error": str(exc)}
        for fd in fds:
            os.close(fd)
        server.sendall(json.dumps(answer).encode())


def main() -> None:
    warm: dict[str, Any] = {"__name__": "cairn_warm_interpreter"}
    exec(compile(sys.argv[1], "<warm_interpreter>", "exec"), warm)
    # The socket moves off fd 0: a forked interpreter's stdin is its command pipe.
    server = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    options = json.loads(sys.argv[2])
    ids, withheld = options["ids"], set(options["withheld"])
    modules = sys.argv[3:]
    # As a standby's interpreter had them while importing: its modules, not the zygote's texts.
    sys.argv = ["-c", *modules]
    origins = _TrustedOrigins()
    untrusted_package = None
    if ids:
        _private_zygote()
        # Kept while the zygote lives (fork handlers run as root in each supervisor); B drops it.
        sys.meta_path.insert(0, origins)
        untrusted_package = _untrusted_package_files(modules)
    looked_up: set[str] = set()
    if untrusted_package is None:
        with _recorded_lookups() as looked_up:
            warm["prepare"](modules)
    refusal = ""
    read = sorted(withheld & looked_up)
    if untrusted_package is not None:
        refusal = f"a preloaded package holds what root alone does not decide: {untrusted_package}"
    elif origins.refused:
        refusal = f"a preloaded module comes from where root alone does not decide: {origins.refused[0]}"
    elif read:
        # The experiment's variables reach each fork, not the imports: these would have differed.
        refusal = f"the preloaded modules looked up the experiment's {', '.join(read[:5])} as they loaded"
    elif ids and _open_fds({server.fileno(), *_HOST_NAMESPACE}):
        # What a module opened as root would be open in every trial.
        leaked = _open_fds({server.fileno(), *_HOST_NAMESPACE})
        refusal = f"the preloaded modules left files open as root: {', '.join(leaked[:3])}"
    elif ids:
        unreadable = _unreadable_modules(ids)
        if unreadable:
            # The trial, as the task user, could not have imported these itself.
            refusal = f"the task user cannot read what the zygote imported: {', '.join(unreadable[:3])}"
    if refusal:
        server.sendall(json.dumps({"error": refusal}).encode())
        return
    server.sendall(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    if _serve_requests(server):
        # A forked standby's interpreter: from here on exactly what warm_interpreter.main does
        # after its imports, with nothing of the zygote's loop left on the stack to catch anything.
        warm["serve"]()


if __name__ == "__main__":  # so it is, run as `-c` text
    main()
