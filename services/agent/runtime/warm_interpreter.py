"""A prepared interpreter: `python3 -c <this file's text> MODULE...`, started by a standby shim.

It imports MODULE... (the Core API and the experiment's `environment.preload_modules`), then waits
on stdin for one JSON line, its assignment (warm_starts.PythonRun.assignment): the working
directory, the whole environment, and the script or module to run with its arguments. It then
becomes that command, as `python3 [-u] SCRIPT ARGS` / `python3 [-u] -m MODULE ARGS` would have
been: stdin closed (/dev/null), the environment replaced, sys.argv and sys.path[0] set the way the
interpreter sets them, the code run as `__main__`; its exit status is the command's. End of input
instead of an assignment means it is not needed: it exits at once.

Passed as `-c` text, not run as a file: a file's folder would go first on sys.path (this one holds
the agent's modules), and the task's interpreter need not be able to import the agent's code at all.
Standard library only, for the same reason.
"""

import gc
import importlib
import json
import os
import runpy
import sys
from typing import Any


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


def main() -> None:
    _preload(sys.argv[1:])
    # What the preloads made lives as long as the process: out of the collector's sight, no
    # collection scans it again, and above all the interpreter's exit does not (its collections
    # over every module's objects are most of the exit: ~35 ms of 45 with the Core API loaded).
    gc.freeze()
    line = sys.stdin.buffer.readline()
    if not line.strip():
        os._exit(0)
    _become(json.loads(line))


if __name__ == "__main__":  # so it is, run as `-c` text
    main()
