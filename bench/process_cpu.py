"""Where a command's CPU goes: run it, sample /proc while it runs, and report the CPU time of each
kind of process it started (its descendants), with the machine's user, system and idle time.

    .venv/bin/python -m bench.process_cpu -- .venv/bin/python -m bench.hpo.run \\
        --systems cairn_asha_promote --seeds 0 --budget 16 --out /tmp/hpo

A process's kind is what it runs: the module of `python -m MODULE`, the first line of `python -c`
code (a zygote's forks keep their zygote's command line, so they count as it), else the program
and its first argument. CPU a process spends after the last sample before it ends is not seen
(at 50 ms between samples, little for all but the shortest processes); the machine's totals
count everything, other programs' work included, so compare them with an idle machine's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Seen:
    kind: str
    user_s: float = 0.0
    system_s: float = 0.0


@dataclass
class Sampler:
    root: int
    # (pid, start time in ticks) -> what was seen of it: pids are reused, the pair is not.
    seen: dict[tuple[int, int], Seen] = field(default_factory=dict)

    def sample(self) -> None:
        stats: dict[int, tuple[int, int, int, int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit() and (stat := process_stat(int(name))) is not None:
                stats[int(name)] = stat
        # Parents do not always have lower pids: widen until nothing is added.
        descendants = {self.root}
        grew = True
        while grew:
            grew = False
            for pid, (ppid, _, _, _) in stats.items():
                if pid not in descendants and ppid in descendants:
                    descendants.add(pid)
                    grew = True
        for pid in descendants & stats.keys():
            _, start, user, system = stats[pid]
            # Read each time: a fork that then execs (a zygote's supervisor becoming a shim) is
            # counted as what it became.
            # A process that has ended but is not yet reaped shows no command line: keep the last.
            argv = command_line(pid)
            seen = self.seen.setdefault((pid, start), Seen(kind_of(argv)))
            if argv:
                seen.kind = kind_of(argv)
            seen.user_s = max(seen.user_s, user / TICKS)
            seen.system_s = max(seen.system_s, system / TICKS)

    def by_kind(self) -> list[dict[str, object]]:
        cpu: defaultdict[str, float] = defaultdict(float)
        system: defaultdict[str, float] = defaultdict(float)
        count: Counter[str] = Counter()
        for seen in self.seen.values():
            cpu[seen.kind] += seen.user_s + seen.system_s
            system[seen.kind] += seen.system_s
            count[seen.kind] += 1
        return [
            {
                "kind": kind,
                "cpu_s": round(cpu[kind], 2),
                "system_s": round(system[kind], 2),
                "processes": count[kind],
            }
            for kind in sorted(cpu, key=cpu.__getitem__, reverse=True)
        ]


def process_stat(pid: int) -> tuple[int, int, int, int] | None:
    """(parent pid, start time, user ticks, system ticks), or None for a process gone meanwhile."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[19]), int(fields[11]), int(fields[12])


def command_line(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def kind_of(argv: list[str]) -> str:
    if not argv:
        return "(unknown)"
    program = os.path.basename(argv[0])
    if program.startswith("python"):
        for flag, rest in itertools.pairwise(argv[1:]):
            if flag == "-m":
                return rest
            if flag == "-c":
                first = rest.strip().splitlines()[0] if rest.strip() else ""
                return f"python -c {first[:60]!r}"
    return " ".join([program, *(os.path.basename(a)[:40] for a in argv[1:2])])


def machine_times() -> tuple[float, float, float]:
    """(user + nice, system, idle + iowait) seconds since boot, all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (values[0] + values[1]) / TICKS, values[2] / TICKS, (values[3] + values[4]) / TICKS


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    parser.add_argument("--top", type=int, default=15, help="kinds to print")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name a command after --")

    before, started = machine_times(), time.monotonic()
    child = subprocess.Popen(command)
    sampler = Sampler(child.pid)
    while child.poll() is None:
        sampler.sample()
        time.sleep(args.interval)
    wall = time.monotonic() - started
    after = machine_times()
    user, system, idle = (b - a for a, b in zip(before, after, strict=True))
    kinds = sampler.by_kind()
    print(
        f"\n{' '.join(command)}\nexit {child.returncode}; wall {wall:.1f} s; machine: user {user:.1f} s, "
        f"system {system:.1f} s, idle {idle:.1f} s ({os.cpu_count()} cores)"
    )
    for row in kinds[: args.top]:
        print(
            f"{row['cpu_s']:9.2f} s  (system {row['system_s']:6.2f} s)  {row['processes']:5d}  {row['kind']}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": command,
                    "exit": child.returncode,
                    "wall_s": round(wall, 2),
                    "machine": {
                        "user_s": round(user, 2),
                        "system_s": round(system, 2),
                        "idle_s": round(idle, 2),
                    },
                    "kinds": kinds,
                },
                indent=2,
            )
        )
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
