"""A prepared interpreter: `python3 -c <this file's text> MODULE...`, started by a standby shim.

It imports MODULE... (the Core API and the experiment's `environment.preload_modules`), then waits
on stdin for one JSON line, its assignment (warm_starts.PythonRun.assignment): the working
directory, the whole environment, and the script or module to run with its arguments. It then
becomes that command, as `python3 [-u] SCRIPT ARGS` / `python3 [-u] -m MODULE ARGS` would have
been: stdin closed (/dev/null), the environment replaced, sys.argv and sys.path[0] set the way the
interpreter sets them, the code run as `__main__`; its exit status is the command's. End of input
instead of an assignment means it is not needed: it exits at once.

When the command's code ends, the interpreter leaves as Python's own exit would, up to the point a
program can tell: non-daemon threads waited for, `atexit` handlers run, the standard streams and
every open file flushed, the exit status Python would give. It then skips the interpreter's
finalization (`os._exit`): tearing down every module's objects, and the C++ statics of libraries
such as torch, takes 0.3-0.9 s with torch loaded, during which the slot's next trial waits for
this process to end. The finalizers (weakref.finalize) that the preloaded modules registered as
they were imported are part of that teardown and are skipped with it (torch.library's 174 took
25 ms); the command's own run. Python makes no promise that `__del__` runs for objects alive at
exit; a command that needs the full finalization anyway sets CAIRN_WARM_EXIT=full in its
environment.

Passed as `-c` text, not run as a file: a file's folder would go first on sys.path (this one holds
the agent's modules), and the task's interpreter need not be able to import the agent's code at all.
Standard library only, for the same reason.
"""

import gc
import importlib
import io
import json
import os
import runpy
import signal
import sys
from typing import Any

# The command's environment variable that asks for the interpreter's full finalization at exit.
FULL_EXIT_ENV = "CAIRN_WARM_EXIT"
# weakref.finalize objects the preloaded modules registered (prepare): part of their teardown.
_PRELOADED_FINALIZERS: list[Any] = []


def _preload(modules: list[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            # The trial imports it again and fails there, with its own traceback in its own log.
            pass


def _become(assignment: dict[str, Any]) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.chdir(assignment["cwd"])
    os.environ.clear()
    os.environ.update(assignment["env"])
    # The temporary folder a preload may have looked up is the standby's (its TMPDIR): found again
    # from the command's environment on first use, as in a fresh interpreter.
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile.tempdir = None  # type: ignore[attr-defined]
    if assignment["unbuffered"]:
        sys.stdout.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]
        sys.stderr.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]
    target = assignment["target"]
    if assignment["module"]:
        # `python3 -m`: the working directory first on sys.path; runpy sets sys.argv[0] to the file.
        sys.path[0] = os.getcwd()
        sys.argv = ["-m", *assignment["args"]]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.realpath(target))
        sys.argv = [target, *assignment["args"]]
        runpy.run_path(target, run_name="__main__")


def _run(assignment: dict[str, Any]) -> int:
    """Run the command; its exit status as `python3 SCRIPT` would give it (an uncaught
    KeyboardInterrupt: -SIGINT, the caller ends by that signal)."""
    try:
        _become(assignment)
    except SystemExit as exc:
        return _system_exit_status(exc.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        return -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _system_exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    # sys.exit("message"): the message on stderr, status 1.
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _leave(status: int) -> None:
    """Python's exit as far as a program can observe it, then out without finalization."""
    threading = sys.modules.get("threading")
    if threading is not None and hasattr(threading, "_shutdown"):
        threading._shutdown()  # joins the non-daemon threads, as the interpreter's exit does
    import atexit

    for finalizer in _PRELOADED_FINALIZERS:
        finalizer.atexit = False  # the modules' own teardown, as finalization's (see prepare)
    atexit._run_exitfuncs()
    _flush_files()
    if status == -signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def _flush_files() -> None:
    # Files the command left open would have been flushed as finalization freed them; the
    # standard streams (whatever the command replaced them by) and C's stdio buffers likewise.
    streams = [sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__]
    for obj in gc.get_objects():
        if isinstance(obj, io.IOBase):
            streams.append(obj)
    for stream in streams:
        try:
            if stream is not None and not stream.closed and stream.writable():
                stream.flush()
        except Exception:
            pass
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:
        pass


def main() -> None:
    prepare(sys.argv[1:])
    serve()


def prepare(modules: list[str]) -> None:
    """Import `modules`; what they made is then frozen. A zygote (zygote.py) does this once and
    forks interpreters that serve."""
    _preload(modules)
    # What the preloads made lives as long as the process: out of the collector's sight, no
    # collection scans it again, and above all the interpreter's exit does not (its collections
    # over every module's objects are most of the exit: ~35 ms of 45 with the Core API loaded).
    gc.freeze()
    # The finalizers they registered (torch.library's: 174 of them, 25 ms at exit in a forked
    # interpreter) tear down what the modules made, as finalization would: the exit skips them too.
    weakref = sys.modules.get("weakref")
    registry = getattr(getattr(weakref, "finalize", None), "_registry", None)
    if isinstance(registry, dict):
        _PRELOADED_FINALIZERS.extend(registry)


def serve() -> None:
    """Wait for the assignment on stdin and become the command (or exit at end of input)."""
    _warm_up()
    line = sys.stdin.buffer.readline()
    if not line.strip():
        os._exit(0)
    assignment = json.loads(line)
    if assignment["env"].get(FULL_EXIT_ENV) == "full":
        _become(assignment)  # and the interpreter's own exit, finalization included
        return
    _leave(_run(assignment))


# The preloaded module whose warm_up() does, while the interpreter waits, work its command's start
# would otherwise do (the Core API's first gRPC channel). Looked up, not imported: this file runs
# in the task's interpreter, which imports what the preloads imported and nothing more.
_WARM_UP_MODULE = "cairn.core.master_session"


def _warm_up() -> None:
    function = getattr(sys.modules.get(_WARM_UP_MODULE), "warm_up", None)
    if function is None:
        return
    try:
        function()
    except Exception:
        pass  # only a head start: the command does the same work itself, and reports what fails


if __name__ == "__main__":  # so it is, run as `-c` text
    main()
