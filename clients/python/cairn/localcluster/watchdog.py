"""The watchdog: a detached process (`python -m cairn.localcluster.watchdog --state-dir DIR`) that
`cairn cluster up` starts last and `cairn cluster down` stops first. It restarts every service of
the cluster that dies (respawn.py: same address, token and environment), with the backoff and the
crash-loop limit of supervision.py, and writes what it did into the cluster record (restarts, how
the last run ended, why it gave up), where `cairn cluster status` shows it.

It stops on SIGTERM, when the record is gone (the cluster was taken down without it), or when the
record names another watchdog (a newer `cairn cluster up` replaced it).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path

from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.processes import is_recorded_process_running
from cairn.localcluster.record import ClusterRecord, ProcessRecord, load_record, record_lock, save_record
from cairn.localcluster.respawn import describe_exit, respawn
from cairn.localcluster.supervision import RestartPolicy, decide
from cairn.termination_signals import route_termination_signals

log = logging.getLogger("cairn.localcluster.watchdog")

ROLE = "watchdog"
NAME = "watchdog"
CHECK_INTERVAL_S = 0.5
# Crashes kept per service: enough for the crash-loop window.
_HISTORY = 20


class Watchdog:
    def __init__(self, paths: ClusterPaths, policy: RestartPolicy) -> None:
        self.paths = paths
        self.policy = policy
        # Service name -> when its restart is due (it crashed and waits out its backoff).
        self.due: dict[str, float] = {}

    def check_once(self) -> bool:
        """One look at every service; False when the watchdog should stop."""
        with record_lock(self.paths.record_file):
            record = load_record(self.paths.record_file)
            if record is None:
                log.info("the cluster record is gone; stopping")
                return False
            me = record.by_name(NAME)
            if me is None or me.pid != os.getpid():
                log.info("another watchdog is recorded; stopping")
                return False
            changed = False
            for process in record.processes:
                if process.role != ROLE and not process.gave_up:
                    changed |= self._look_after(record, process)
            if changed:
                save_record(self.paths.record_file, record)
        return True

    def _look_after(self, record: ClusterRecord, process: ProcessRecord) -> bool:
        now = time.time()
        if is_recorded_process_running(process.pid, process.command):
            self.due.pop(process.name, None)
            return False
        due = self.due.get(process.name)
        if due is None:
            process.last_exit = describe_exit(process.pid)
            process.crashes = [*process.crashes, [process.started_at, now]][-_HISTORY:]
            decision = decide(
                [ended for _, ended in process.crashes],
                [started for started, _ in process.crashes],
                now,
                self.policy,
            )
            if decision.gives_up:
                process.gave_up = f"{decision.reason}; last run: {process.last_exit}; see {process.log_path}"
                log.error("giving up on %s: %s", process.name, process.gave_up)
            else:
                self.due[process.name] = now + decision.delay_s
                log.warning(
                    "%s (pid %s) %s; restarting it in %.1f s",
                    process.name,
                    process.pid,
                    process.last_exit,
                    decision.delay_s,
                )
            return True
        if now < due:
            return False
        del self.due[process.name]
        respawn(record, process)
        process.restarts += 1
        log.warning("restarted %s (pid %s, restart %d)", process.name, process.pid, process.restarts)
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cairn.localcluster.watchdog")
    parser.add_argument("--state-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    stop = threading.Event()
    # Set on a thread of its own, not in the handler, which runs inside the main thread's poll of
    # `stop` (cairn.termination_signals says why).
    route_termination_signals(lambda _sig: stop.set())
    watchdog = Watchdog(ClusterPaths(args.state_dir), RestartPolicy())
    log.info("watching the cluster in %s", args.state_dir)
    while not stop.is_set():
        try:
            if not watchdog.check_once():
                break
        except Exception:
            # One bad pass (an unreadable record being replaced, say) must not end the supervision.
            log.exception("watchdog pass failed; continuing")
        stop.wait(CHECK_INTERVAL_S)
    log.info("watchdog stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
