"""The watchdog's decisions (backoff, crash loops) as pure functions, and the watchdog itself over
stand-in services: a killed service comes back on its address; one that keeps crashing is given
up on, with the reason in the record."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.record import ProcessRecord, load_record, record_lock, save_record
from cairn.localcluster.respawn import pinned_command
from cairn.localcluster.supervision import RestartPolicy, crashes_in_a_row, decide
from cairn.localcluster.supervisor import cluster_status, start_cluster, stop_cluster
from cairn.localcluster.watchdog import Watchdog
from tests.unit.cli.test_cli_localcluster import OptionsFactory, alive, stand_in_dir  # noqa: F401

POLICY = RestartPolicy(first_delay_s=1, max_delay_s=8, stable_s=60, max_crashes=4, crash_window_s=100)


def test_backoff_doubles_for_crashes_in_a_row_up_to_the_cap() -> None:
    delays = []
    started: list[float] = []
    ended: list[float] = []
    now = 0.0
    for _ in range(4):
        started.append(now)
        now += 5  # each run lasts 5 s: not stable
        ended.append(now)
        delays.append(decide(ended, started, now, POLICY).delay_s)
    assert delays == [1, 2, 4, 8]


def test_a_stable_run_starts_the_backoff_over() -> None:
    started, ended = [0.0, 10.0, 20.0], [5.0, 15.0, 200.0]  # the last run lasted 180 s
    assert crashes_in_a_row(ended, started, POLICY) == 0
    decision = decide(ended, started, 200.0, POLICY)
    assert decision.action == "restart" and decision.delay_s == 1


def test_more_crashes_than_allowed_within_the_window_is_a_crash_loop() -> None:
    ended = [10.0, 20.0, 30.0, 40.0, 50.0]
    started = [t - 5 for t in ended]
    decision = decide(ended, started, 50.0, POLICY)
    assert decision.gives_up and "crashed 5 times within 100 s" in decision.reason
    # The same crashes spread beyond the window are not a loop.
    spread = [0.0, 100.0, 200.0, 300.0, 400.0]
    assert not decide(spread, [t - 5 for t in spread], 400.0, POLICY).gives_up


def test_a_restart_pins_the_ports_the_service_got() -> None:
    master = ProcessRecord(
        name="master",
        role="master",
        pid=1,
        command=["python", "-m", "services.master", "--port", "0", "--http-port", "0"],
        log_path="x",
        ready_file="y",
        started_at=0,
        grpc_port=4001,
        http_port=4002,
    )
    assert pinned_command(master)[-4:] == ["--port", "4001", "--http-port", "4002"]


@pytest.fixture
def make_options(tmp_path: Path, stand_in_dir: Path) -> Iterator[OptionsFactory]:  # noqa: F811
    factory = OptionsFactory(tmp_path, stand_in_dir)
    yield factory
    factory.cleanup()


def _wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_the_watchdog_restarts_a_killed_service_on_its_address(make_options: OptionsFactory) -> None:
    options = make_options(agents=1)
    record = start_cluster(options)
    watchdog = next(p for p in record.processes if p.role == "watchdog")
    assert alive(watchdog.pid)
    searcher = record.by_name("searcher")
    assert searcher is not None
    os.kill(searcher.pid, signal.SIGKILL)

    def restarted() -> bool:
        now = load_record(ClusterPaths(options.state_dir).record_file)
        entry = now.by_name("searcher") if now else None
        return entry is not None and entry.pid != searcher.pid and alive(entry.pid)

    _wait(restarted, 20, "the searcher to be restarted")
    _wait(lambda: bool((status := cluster_status(options.state_dir)) and status.healthy), 20, "health")
    now = load_record(ClusterPaths(options.state_dir).record_file)
    assert now is not None
    entry = now.by_name("searcher")
    assert entry is not None
    assert entry.grpc_port == searcher.grpc_port and entry.restarts == 1
    assert entry.last_exit.startswith("exited at") and "exit code unknown" in entry.last_exit

    report = stop_cluster(options.state_dir, grace_s=2.0)
    assert report.processes[0].name == "watchdog"
    assert not alive(entry.pid) and not alive(watchdog.pid)


def test_the_watchdog_gives_up_on_a_crash_loop_and_says_why(make_options: OptionsFactory) -> None:
    options = make_options(agents=0, supervise=False)
    start_cluster(options)
    paths = ClusterPaths(options.state_dir)
    with record_lock(paths.record_file):
        record = load_record(paths.record_file)
        assert record is not None
        scheduler = record.by_name("scheduler")
        assert scheduler is not None
        # From now on the scheduler fails at once every time it starts.
        record.extra_env = {**record.extra_env, "STAND_IN_FAIL_ROLE": "internal"}
        save_record(paths.record_file, record)
    os.kill(scheduler.pid, signal.SIGKILL)
    fast = RestartPolicy(first_delay_s=0.05, max_delay_s=0.05, max_crashes=2, crash_window_s=60)
    watchdog = Watchdog(paths, fast)
    # The watchdog only works for the record's own watchdog: register this process as it.
    with record_lock(paths.record_file):
        record = load_record(paths.record_file)
        assert record is not None
        record.processes.append(
            ProcessRecord("watchdog", "watchdog", os.getpid(), ["test"], "log", "", time.time())
        )
        save_record(paths.record_file, record)

    def given_up() -> bool:
        assert watchdog.check_once()
        now = load_record(paths.record_file)
        entry = now.by_name("scheduler") if now else None
        return entry is not None and bool(entry.gave_up)

    _wait(given_up, 30, "the watchdog to give up")
    entry = load_record(paths.record_file).by_name("scheduler")  # type: ignore[union-attr]
    assert entry is not None
    assert entry.restarts == 2
    assert "crash loop" in entry.gave_up and "exit code 3" in entry.gave_up
    # Removed from the record before stopping: the stopping must not signal this test process.
    with record_lock(paths.record_file):
        record = load_record(paths.record_file)
        assert record is not None
        record.processes = [p for p in record.processes if p.role != "watchdog"]
        save_record(paths.record_file, record)
