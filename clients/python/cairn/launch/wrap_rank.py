"""`python3 -m cairn.launch.wrap_rank [RANK] -- COMMAND...`: run COMMAND with every line of its
output prefixed with `[rank=RANK] `, the prefix the agent (and Determined's log viewer) reads the
rank from. RANK is a number or the name of an environment variable holding it (default `RANK`, which
torchrun sets for each worker). stdout stays stdout and stderr stays stderr; the exit code is
COMMAND's, and SIGTERM/SIGINT are passed on to it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import BinaryIO

_LINE_END = re.compile(rb"\r\n|\r|\n")
# A line longer than this is cut, as the agent cuts it.
MAX_LINE_BYTES = 64 * 1024


def resolve_rank(spec: str, env: dict[str, str] | os._Environ[str] = os.environ) -> int:
    if spec.isdigit():
        return int(spec)
    value = env.get(spec, "").strip()
    if not value.isdigit():
        raise SystemExit(f"wrap_rank: the rank: {spec!r} is not a number, and ${spec} is {value!r}")
    return int(value)


def copy_lines(source: BinaryIO, sink: BinaryIO, prefix: bytes) -> None:
    """Copy `source` to `sink` line by line, each line with `prefix` (a bare "\\r" ends a line too:
    progress bars redraw with it)."""
    pending = b""
    fd = source.fileno()
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        pending += chunk
        out = []
        position = 0
        for match in _LINE_END.finditer(pending):
            if match.group() == b"\r" and match.end() == len(pending):
                break  # a "\r" at the end may be the first half of "\r\n"
            line = pending[position : match.start()]
            while len(line) > MAX_LINE_BYTES:
                out.append(prefix + line[:MAX_LINE_BYTES] + b"\n")
                line = line[MAX_LINE_BYTES:]
            out.append(prefix + line + b"\n")
            position = match.end()
        pending = pending[position:]
        while len(pending) > MAX_LINE_BYTES:
            out.append(prefix + pending[:MAX_LINE_BYTES] + b"\n")
            pending = pending[MAX_LINE_BYTES:]
        if out:
            sink.write(b"".join(out))
            sink.flush()
    pending = pending.rstrip(b"\r")
    if pending:
        sink.write(prefix + pending + b"\n")
        sink.flush()


def run(rank: int, command: Sequence[str]) -> int:
    prefix = f"[rank={rank}] ".encode()
    child = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    assert child.stdout is not None and child.stderr is not None
    copiers = [
        threading.Thread(target=copy_lines, args=(child.stdout, sys.stdout.buffer, prefix), daemon=True),
        threading.Thread(target=copy_lines, args=(child.stderr, sys.stderr.buffer, prefix), daemon=True),
    ]
    for copier in copiers:
        copier.start()
    code = child.wait()
    for copier in copiers:
        copier.join(5)
    return code if code >= 0 else 128 - code


def parse(argv: Sequence[str]) -> tuple[int, list[str]]:
    args = list(argv)
    if "--" not in args:
        raise SystemExit("usage: python3 -m cairn.launch.wrap_rank [RANK] -- COMMAND...")
    split = args.index("--")
    before, command = args[:split], args[split + 1 :]
    if len(before) > 1 or not command:
        raise SystemExit("usage: python3 -m cairn.launch.wrap_rank [RANK] -- COMMAND...")
    return resolve_rank(before[0] if before else "RANK"), command


def main(argv: Sequence[str] | None = None) -> int:
    rank, command = parse(sys.argv[1:] if argv is None else argv)
    try:
        return run(rank, command)
    except FileNotFoundError as exc:
        print(f"[rank={rank}] wrap_rank: cannot start {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
