"""Zygotes, the agent's part: one task-environment interpreter per kind of standby that imported
the Core API and the experiment's preload modules once, and forks the standbys (zygote.py).

Without them every standby imports afresh: ~2.8 s of CPU with torch and torch._dynamo, per trial.
On a machine whose cores all train that CPU is taken from training (bench/README.md, "Warm trial
starts"); forked, the import is paid once per kind and agent, and the standby is ready in
milliseconds instead of seconds.

When the agent may use one (`eligibility`): a zygote imports with the agent's privileges what the
trial will run with the task user's. Where they are the same (no --task-user) nothing changes
hands. Where the agent is root and the trial runs as the task user, the zygote imports as root, so
only what root would import anyway may reach it:
  * only modules of packages known to do nothing at import but define things (ZYGOTE_PACKAGES),
    never a __main__ or test module;
  * it imports under the variables known not to lead an import to code or files that could hold
    it (ZYGOTE_VARIABLES: PATH, locale and TZ not naming a path, the task environment's, thread
    and device knobs; no PYTHONPATH, LD_PRELOAD or TMPDIR but /tmp), not the experiment's others:
    those reach each forked interpreter only. So that the trial sees what a fresh interpreter
    would have, a kind whose variables take effect as a program loads (LD_*, PYTHON*, the C
    libraries' thread knobs not on the list) keeps its own standbys, and the zygote refuses to
    serve when its imports looked up one of the experiment's own variables by name (it records
    os.environ's lookups while importing);
  * every file and folder the interpreter starts from is root's and writable by root only, up to
    /: the interpreter, the standard library, the site-packages folders, their .pth files and the
    folders those name, and each folder of PATH (`untrusted_paths`, checked before the zygote
    starts, without running the site-packages' .pth files); and each module's file and folders as
    it is found, before its code runs (zygote.py's finder);
  * it imports in a mount namespace of its own, HOME its empty root-owned /tmp (zygote.py);
  * the trial gets nothing it could not have had: no file the imports left open (the zygote
    refuses), no module file the task user could not read (checked as that user, after the
    imports).
A kind that fails a check starts its standbys as before, each its own interpreter, importing as
the task user; the agent says why once in its log.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from services.agent.runtime.protocol import CONTROL_SIGNALS

log = structlog.get_logger(__name__)

_ZYGOTE = Path(__file__).with_name("zygote.py")
_WARM_INTERPRETER = Path(__file__).with_name("warm_interpreter.py")

# The environment a root zygote may import under (names; LC_* too): what a login sets, the task
# environment's own, and the thread and device knobs numeric libraries read at import.
ZYGOTE_VARIABLES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "VIRTUAL_ENV",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
    }
)
# The packages a root zygote imports (the top-level name of each preload module): libraries known
# to do nothing at import but define things. An experiment may name any module; where trials run
# as the task user, one outside these keeps standbys that import as the task user, as before.
ZYGOTE_PACKAGES = frozenset(
    {
        "cairn",
        "determined",
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "numpy",
        "scipy",
        "pandas",
        "sklearn",
        "tensorflow",
        "keras",
        "jax",
        "jaxlib",
        "flax",
        "optax",
        "transformers",
        "tokenizers",
        "datasets",
        "accelerate",
        "deepspeed",
        "lightning",
        "pytorch_lightning",
        "timm",
        "xgboost",
        "lightgbm",
        "PIL",
        "numba",
        "einops",
        "safetensors",
        "tqdm",
        "yaml",
    }
)
# Module names that run a program or tests when imported (unittest.__main__, test.autotest).
_RUNNABLE_PARTS = frozenset({"__main__", "test", "tests", "testing"})
# Variables allowed with these values only: a task in a private /tmp has TMPDIR=/tmp, the default.
ZYGOTE_SETTINGS = frozenset({("TMPDIR", "/tmp")})
# How long a standby waits for its kind's zygote to have imported (else: a standby of its own).
READY_SECONDS = 120.0
# A fork request's answer: the zygote forks and answers in milliseconds.
ANSWER_SECONDS = 30.0
# Zygotes kept at once by default (the least recently used ends first): each holds its modules in
# memory. The process runtime keeps one per slot at most, as many as its standbys.
CAPACITY = 2
_MAX_ANSWER = 65536

# Run with -I -S by the interpreter to be trusted: where it starts from, without running any .pth
# (site.venv would: it adds the site-packages folders). A virtualenv's own site-packages, and its
# base's where pyvenv.cfg includes the system's.
_PROBE = """
import json, os, site, sys
prefixes = [sys.prefix]
exe_dir = os.path.dirname(os.path.abspath(sys.executable))
venv = os.path.dirname(exe_dir)
for cfg_path in (os.path.join(exe_dir, "pyvenv.cfg"), os.path.join(venv, "pyvenv.cfg")):
    if os.path.isfile(cfg_path):
        prefixes = [venv]
        with open(cfg_path) as cfg:
            for line in cfg:
                key, _, value = line.partition("=")
                if key.strip().lower() == "include-system-site-packages" and value.strip().lower() == "true":
                    prefixes.append(sys.base_prefix)
        break
print(json.dumps({"executable": sys.executable, "path": sys.path, "site": site.getsitepackages(prefixes)}))
"""


# The experiment's own variables that no fork can honour the way a fresh interpreter would: the
# loader's and the interpreter's start (LD_PRELOAD, PYTHONPATH), and the C libraries' that read
# theirs with getenv() as they load (out of Python's sight). A kind that sets one keeps its own
# standbys (unless the zygote imports under it anyway: ZYGOTE_VARIABLES).
_READ_AT_LOAD_PREFIXES = ("LD_", "PYTHON", "GLIBC_", "MALLOC_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_")


def import_environment(env: Mapping[str, str], drops_privileges: bool) -> dict[str, str]:
    """What a zygote imports under: where it drops privileges for the trial (it imports as root),
    only the variables known not to lead an import to code or files (ZYGOTE_VARIABLES); the
    experiment's other variables reach each forked interpreter, not the imports. Otherwise `env`."""
    if not drops_privileges:
        return dict(env)
    return {
        n: v
        for n, v in env.items()
        if n in ZYGOTE_VARIABLES or n.startswith("LC_") or (n, v) in ZYGOTE_SETTINGS
    }


def eligibility(env: Mapping[str, str], drops_privileges: bool, modules: Sequence[str] = ()) -> str | None:
    """Why a zygote may not serve a kind whose interpreters start with `env` and preload
    `modules`; None when it may."""
    if not drops_privileges:
        return None
    for name in modules:
        parts = name.split(".")
        if parts[0] not in ZYGOTE_PACKAGES:
            return (
                f"it preloads {name}; a zygote imports as root only the packages it knows (ZYGOTE_PACKAGES)"
            )
        if any(part in _RUNNABLE_PARTS for part in parts):
            return f"it preloads {name}, a program or tests rather than a library"
    for name in ("LANG", "LANGUAGE", "TZ"):
        if "/" in env.get(name, ""):
            return f"its environment sets {name} to a path, which root would read as it starts"
    for name, value in env.items():
        if name.startswith("LC_") and "/" in value:
            return f"its environment sets {name} to a path, which root would read as it starts"
    imported = import_environment(env, drops_privileges)
    unfaithful = sorted(n for n in env if n not in imported and n.startswith(_READ_AT_LOAD_PREFIXES))
    if unfaithful:
        return (
            f"its environment sets {', '.join(unfaithful[:5])}, which takes effect as a program loads: "
            "a zygote imports without the experiment's variables"
        )
    return None


def _writable_by_others(path: Path) -> str | None:
    """The first component of `path` (it, then each folder up to /; then the same for what it
    leads to through symbolic links) that is not root's or that others than root may write; None
    when there is none. Missing components are skipped: their closest existing folder decides who
    may create them."""
    for start in dict.fromkeys([Path(os.path.abspath(path)), Path(os.path.realpath(path))]):
        found = _first_writable_by_others(start)
        if found is not None:
            return found
    return None


def _first_writable_by_others(path: Path) -> str | None:
    current = path
    while True:
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            return f"{current} ({exc.strerror})"
        if info is not None:
            if info.st_uid != 0:
                return f"{current} (owned by uid {info.st_uid})"
            if info.st_mode & 0o022 and not stat.S_ISLNK(info.st_mode):
                return f"{current} (writable by group or others)"
        if current.parent == current:
            return None
        current = current.parent


def untrusted_paths(python: str, env: Mapping[str, str]) -> str | None:
    """Where the interpreter `python` would start from something root does not own alone; None
    when every part is root's: the interpreter and what it reads as it starts (pyvenv.cfg, a
    ._pth file beside it), checked before it is run at all; then, from its answer to `-I -S`
    (no .pth run), the standard library's and the site-packages' every file and folder, the
    folders the .pth files name, and each folder of PATH."""
    before = [Path(python), Path(os.path.realpath(python))]
    for executable in list(before):
        before += [executable.parent / "pyvenv.cfg", executable.parent.parent / "pyvenv.cfg"]
        before += sorted(executable.parent.glob("*._pth"))
    for candidate in before:
        found = _writable_by_others(candidate)
        if found is not None:
            return found
    try:
        probe = subprocess.run(
            [python, "-I", "-S", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            check=True,
        )
        facts = json.loads(probe.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return f"cannot ask {python} where it starts from: {exc}"
    candidates: list[Path] = [Path(facts["executable"])]
    trees = [Path(p) for p in facts["path"] if p] + [Path(p) for p in facts["site"]]
    for folder in facts["site"]:
        candidates += _pth_files_and_paths(Path(folder))
    candidates += [Path(p) for p in env.get("PATH", "").split(os.pathsep) if p]
    for candidate in [*candidates, *trees]:
        if not candidate.is_absolute():
            return f"{candidate} (a relative path)"
        found = _writable_by_others(candidate)
        if found is not None:
            return found
    # Every file inside too (sitecustomize, a .pth's own mode, the libraries loaded by path):
    # ~0.8 s for a task environment with torch and the standard library, once per kind.
    for tree in trees:
        found = _anything_writable_by_others(tree)
        if found is not None:
            return found
    return None


def _anything_writable_by_others(tree: Path) -> str | None:
    """The first file or folder under `tree` that is not root's or that others than root may
    write; symbolic links by what they lead to. None when there is none (or no such folder)."""
    for folder, dirs, files in os.walk(tree):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISLNK(info.st_mode):
                found = _writable_by_others(Path(path))
                if found is not None:
                    return found
            elif info.st_uid != 0 or info.st_mode & 0o022:
                return f"{path} (not root's alone)"
    return None


def _pth_files_and_paths(folder: Path) -> Iterable[Path]:
    """A site-packages folder's .pth files, and the folders their path lines add."""
    try:
        names = sorted(p for p in folder.iterdir() if p.suffix == ".pth")
    except OSError:
        return []
    found: list[Path] = []
    for pth in names:
        found.append(pth)
        try:
            lines = pth.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for raw in lines:
            line = raw.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                found.append(folder / line)
    return found


class ZygoteError(OSError):
    """A zygote could not fork a standby (it died, refused, or did not answer)."""


class Zygote:
    """A zygote process of one kind (zygote.py), started at once; `fork` waits for its imports."""

    def __init__(
        self,
        python: str,
        modules: Sequence[str],
        env: Mapping[str, str],
        folder: Path,
        ids: Sequence[int] | None = None,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.folder = folder
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # ids: the task user's (uid, gid), who must be able to read every module it imports; the
        # experiment's variables it imports without, which its imports must not have looked up.
        drops_privileges = ids is not None
        imported = import_environment(env, drops_privileges)
        options = {"ids": list(ids) if ids else None, "withheld": sorted(set(env) - set(imported))}
        argv = [
            python,
            "-c",
            _ZYGOTE.read_text(),
            _WARM_INTERPRETER.read_text(),
            json.dumps(options),
            *modules,
        ]
        with open(folder / "zygote.log", "ab") as out:
            try:
                self._popen = subprocess.Popen(
                    argv,
                    cwd=folder,
                    # Its own folder (root's, empty) while the interpreter starts: the user
                    # site-packages it looks for there cannot exist. A root zygote then moves to
                    # a namespace of its own whose /tmp is empty and root's, and imports with
                    # HOME there, as a standby's HOME was its private /tmp (zygote.py).
                    env={**imported, "HOME": str(folder)},
                    stdin=theirs.fileno(),
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                    close_fds=True,
                )
            finally:
                theirs.close()
        self._socket = ours
        self._lock = threading.Lock()
        self._ready = False
        # Closed by the agent (it stops, or the pool made room): not a failure of its kind.
        self.closed = False

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def ready(self) -> bool:
        """Whether it is known to have imported its modules (a fork would not wait for them)."""
        return self._ready

    def alive(self) -> bool:
        return self._popen.poll() is None

    def fork(
        self, order: Mapping[str, Any], control: int, log_fd: int, ready_timeout: float = READY_SECONDS
    ) -> int:
        """Fork a standby: the supervisor's pid. `control` and `log_fd` go to it (the caller keeps
        and closes its own copies). ZygoteError when the zygote cannot."""
        with self._lock:
            self._wait_ready(ready_timeout)
            try:
                socket.send_fds(self._socket, [json.dumps(dict(order)).encode()], [control, log_fd])
            except OSError as exc:
                raise ZygoteError(f"the zygote is gone: {exc}") from exc
            answer = self._receive(ANSWER_SECONDS)
        if "pid" not in answer:
            raise ZygoteError(f"the zygote could not fork a standby: {answer.get('error', answer)}")
        return int(answer["pid"])

    def wait_ready(self, timeout: float = READY_SECONDS) -> None:
        """Until it has imported its modules; ZygoteError when it ended or took too long."""
        with self._lock:
            self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        if self.closed:
            raise ZygoteError("the zygote was closed")
        if not self._ready:
            answer = self._receive(timeout)
            if not answer.get("ready"):
                raise ZygoteError(str(answer.get("error") or f"the zygote did not start: {answer}"))
            self._ready = True

    def _receive(self, timeout: float) -> dict[str, Any]:
        self._socket.settimeout(timeout)
        try:
            message = self._socket.recv(_MAX_ANSWER)
        except TimeoutError as exc:
            raise ZygoteError(f"the zygote did not answer within {timeout:g} s") from exc
        except OSError as exc:
            raise ZygoteError(f"the zygote is gone: {exc}") from exc
        if not message:
            raise ZygoteError(
                f"the zygote ended (status {self._popen.poll()}; see {self.folder / 'zygote.log'})"
            )
        answer = json.loads(message)
        return answer if isinstance(answer, dict) else {"error": answer}

    def close(self, timeout: float = 5.0) -> None:
        """End of its socket: the zygote exits (standbys and trials it forked are not touched). A
        request waiting for its answer meanwhile ends at once, and its kind is not counted failed."""
        self.closed = True
        try:
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes a receive in progress: it reads the end
        except OSError:
            pass
        with self._lock:
            self._socket.close()
        try:
            self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()


class ZygotePool:
    """The agent's zygotes, one per kind, at most `capacity` (the least recently used ends first)."""

    def __init__(
        self,
        folder: Path,
        capacity: int = CAPACITY,
        trust: Callable[[str, Mapping[str, str]], str | None] = untrusted_paths,
    ) -> None:
        self._folder = folder
        self._capacity = max(1, capacity)
        self._trust = trust
        self._lock = threading.Lock()
        self._zygotes: OrderedDict[object, Zygote] = OrderedDict()
        # Kinds a zygote may not serve, or whose zygote failed: today's standbys for them.
        self._refused: dict[object, str] = {}
        self._numbers = 0
        self._closed = False
        # Folders of zygotes an earlier agent process left (they ended with its socket).
        shutil.rmtree(folder, ignore_errors=True)

    def get(
        self,
        key: object,
        python: str,
        modules: Sequence[str],
        env: Mapping[str, str],
        ids: Sequence[int] | None,
        private_tmp: bool = False,
    ) -> Zygote | None:
        """The zygote of `key`, started if need be; None when that kind may not have one."""
        ended: list[Zygote] = []
        with self._lock:
            if self._closed or key in self._refused:
                return None
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote.alive():
                self._zygotes.move_to_end(key)
                return zygote
            if zygote is not None:
                # It died: a second start of a kind whose zygote dies would only die again.
                del self._zygotes[key]
                self._refuse(key, f"its zygote ended (see {zygote.folder / 'zygote.log'})")
                return None
            drops_privileges = ids is not None
            reason = eligibility(env, drops_privileges, modules)
            if reason is None and drops_privileges and not private_tmp:
                # Paths the imports derive from HOME (/tmp) must lead to the trial's own /tmp.
                reason = "its trials have no private /tmp"
            if reason is None and drops_privileges:
                reason = self._trust(python, env)
                if reason is not None:
                    reason = f"what its interpreter starts from is not root's alone: {reason}"
            if reason is not None:
                self._refuse(key, reason)
                return None
            while len(self._zygotes) >= self._capacity:
                ended.append(self._zygotes.popitem(last=False)[1])
            self._numbers += 1
            try:
                zygote = Zygote(python, modules, env, self._folder / f"{os.getpid()}-{self._numbers}", ids)
            except OSError as exc:
                self._refuse(key, f"cannot start its zygote: {exc}")
                zygote = None
            else:
                self._zygotes[key] = zygote
        for old in ended:
            old.close()
        return zygote

    def refuse(self, key: object, reason: str) -> None:
        """No zygote for `key` from now on (its zygote failed); ends the one it has."""
        with self._lock:
            zygote = self._zygotes.pop(key, None)
            self._refuse(key, reason)
        if zygote is not None:
            zygote.close()

    def _refuse(self, key: object, reason: str) -> None:
        if key not in self._refused:
            self._refused[key] = reason
            log.warning("standbys of this kind start without a zygote", reason=reason)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            zygotes = list(self._zygotes.values())
            self._zygotes.clear()
        for zygote in zygotes:
            zygote.close()


def shim_signals() -> list[int]:
    """The control signals a supervisor keeps blocked (protocol.CONTROL_SIGNALS), as numbers."""
    return sorted(int(s) for s in CONTROL_SIGNALS)
