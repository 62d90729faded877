"""What one log line costs a service's thread, as the master logs it: structlog through the stdlib
to stderr (console or JSON), and with `--sink` also to the master's own log ring (`det master
logs`), which the master always has. stderr goes to /dev/null, so the write is a system call and
nothing more. A master at INFO logs about ten such lines a trial (allocation states, its end, the
trial's and the task's states).

    .venv/bin/python -m bench.log_line_cost [--format console|json] [--sink] [--lines 20000]

The last line: `log_line_cost: FORMAT[, with the log ring]: U us a line`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from services.common.logging import add_log_sink, configure_logging, get_logger
from services.master.domain.operations.master_log import MasterLogRing


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--format", choices=("console", "json"), default="console")
    parser.add_argument("--sink", action="store_true", help="also feed the master's log ring")
    parser.add_argument("--lines", type=int, default=20_000)
    args = parser.parse_args()
    report = sys.stdout
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the handler writes here until the process ends
    configure_logging("master", args.format, "INFO")
    if args.sink:
        add_log_sink(MasterLogRing().append)
    log = get_logger("services.master.domain.allocations.allocations")
    started = time.process_time()
    for i in range(args.lines):
        log.info(
            "allocation state",
            allocation_id=f"12.{i}.1",
            previous="RUNNING",
            state="TERMINATED",
            reason="ended: clean",
            exit_code=0,
            failure=None,
        )
    per_line = (time.process_time() - started) / args.lines * 1e6
    ring = ", with the log ring" if args.sink else ""
    print(f"log_line_cost: {args.format}{ring}: {per_line:.1f} us a line", file=report, flush=True)


if __name__ == "__main__":
    main()
