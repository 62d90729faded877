"""The standby pool (services/agent/runtime/standbys.py) with real processes standing in for shims:
a container that asks for its kind's standby waits for one on its way, or started for it, instead
of starting cold, however long its kind's zygote imports; the next standby is started a moment
after a launch, or at once when a container asks for it sooner."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from services.agent.runtime.standbys import ShimStarter, StandbyPool
from services.agent.runtime.warm_starts import WarmKey

KEY = WarmKey(python="python3", modules=(), start_env=frozenset())
OTHER = WarmKey(python="python3", modules=("json",), start_env=frozenset())


def _order(folder: Path) -> dict[str, object]:
    return {"argv": [], "python": "python3", "env": {}, "cwd": str(folder), "unmount": []}


def _slow_shim(delay_s: float, started: threading.Event) -> ShimStarter:
    """Make the standby's log, as the agent's starter does, then take `delay_s` to start it."""

    def start(args: Sequence[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        log.touch()
        started.set()
        time.sleep(delay_s)
        # Reads its input until it ends, as a standby shim does: discard() closes it.
        return subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=cwd)

    return start


def _held_shim(started: threading.Event, release: threading.Event) -> ShimStarter:
    """As _slow_shim, but the start takes until the test sets `release`: what happens meanwhile is
    judged by what the standby's start had reached, not by how many seconds passed."""

    def start(args: Sequence[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        log.touch()
        started.set()
        release.wait(60)
        return subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=cwd)

    return start


def _returns(call: Callable[[], object]) -> object:
    """What `call` returns, run in a thread that must end within a bound no answer that does not
    wait comes near (a deadlock guard, not a timing)."""
    answer: list[object] = []
    thread = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "it waited"
    return answer[0]


def test_a_standby_being_started_is_waited_for(tmp_path: Path) -> None:
    started = threading.Event()
    pool = StandbyPool(tmp_path / "standby", 1, _slow_shim(0.5, started))
    try:
        pool.prepare_soon(KEY, _order)
        assert started.wait(5)  # its log exists: the process is on its way
        begun = time.monotonic()
        standby = pool.take(KEY, _order)
        assert standby is not None and standby.alive()
        assert 0.2 < time.monotonic() - begun < 5
        standby.discard()
    finally:
        pool.close()


def test_a_kind_with_no_room_for_its_standby_is_not_kept_waiting(tmp_path: Path) -> None:
    """One slot, its standby on its way for another kind: this container starts cold at once."""
    started, release = threading.Event(), threading.Event()
    pool = StandbyPool(tmp_path / "standby", 1, _held_shim(started, release))
    try:
        pool.prepare_soon(KEY, _order)
        assert started.wait(5)
        # Answered while the other kind's standby is still held at its start: it did not wait.
        assert _returns(lambda: pool.take(OTHER, _order)) is None
    finally:
        release.set()
        pool.close()


def test_a_kind_with_none_on_its_way_has_one_started_and_waits_for_it(tmp_path: Path) -> None:
    started = threading.Event()
    pool = StandbyPool(tmp_path / "standby", 2, _slow_shim(0.5, started), delay_s=30.0)
    try:
        begun = time.monotonic()
        standby = pool.take(KEY, _order)
        assert standby is not None and standby.alive() and standby.key == KEY
        assert 0.4 < time.monotonic() - begun < 10  # started at once, not after the delay
        standby.discard()
        # Two containers of a kind at once: each gets a standby of its own.
        taken: list[object] = []
        takers = [threading.Thread(target=lambda: taken.append(pool.take(OTHER, _order))) for _ in range(2)]
        for taker in takers:
            taker.start()
        for taker in takers:
            taker.join(10)
        assert len(taken) == 2 and all(t is not None for t in taken) and taken[0] is not taken[1]
        for t in taken:
            t.discard()  # type: ignore[attr-defined]
    finally:
        pool.close()


def test_a_stopped_container_stops_waiting_and_its_standby_is_given_back(tmp_path: Path) -> None:
    started, release = threading.Event(), threading.Event()
    pool = StandbyPool(tmp_path / "standby", 1, _held_shim(started, release), delay_s=30.0)
    try:
        stopped = threading.Event()
        started_then_stopped = threading.Thread(target=lambda: started.wait(10) and stopped.set())
        started_then_stopped.start()
        # Stopped while its standby is held at its start: it stops waiting for it.
        assert _returns(lambda: pool.take(KEY, _order, aborted=stopped.is_set)) is None
        started_then_stopped.join()
        # The standby it asked for still comes, for the next container of its kind.
        release.set()
        standby = pool.take(KEY, _order)
        assert standby is not None and standby.alive()
        pool.give_back(standby)
        again = pool.take(KEY, _order, timeout=0.5)
        assert again is standby
        again.discard()
    finally:
        release.set()
        pool.close()


def test_the_next_standby_is_started_after_the_delay(tmp_path: Path) -> None:
    """Not while the launched command starts: its start would share the CPU with that one's."""
    started = threading.Event()
    pool = StandbyPool(tmp_path / "standby", 1, _slow_shim(0.0, started), delay_s=0.6)
    try:
        begun = time.monotonic()
        pool.prepare_soon(KEY, _order)
        assert not started.wait(0.3)
        assert started.wait(5)
        assert time.monotonic() - begun >= 0.6
    finally:
        pool.close()


def test_a_take_during_the_delay_starts_the_standby_at_once(tmp_path: Path) -> None:
    started = threading.Event()
    pool = StandbyPool(tmp_path / "standby", 1, _slow_shim(0.0, started), delay_s=30.0)
    try:
        pool.prepare_soon(KEY, _order)
        begun = time.monotonic()
        standby = pool.take(KEY, _order)
        assert standby is not None and standby.alive() and standby.key == KEY
        assert time.monotonic() - begun < 10
        standby.discard()
    finally:
        pool.close()


def test_a_delayed_start_nobody_waits_for_yields_its_room_to_a_waiting_kind(tmp_path: Path) -> None:
    """One slot: the next standby of the kind that just ran waits out its delay when a container
    of another kind comes; that container gets a standby of its own rather than starting cold."""
    started: list[float] = []
    lock = threading.Lock()

    def shim(args: Sequence[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        log.touch()
        with lock:
            started.append(time.monotonic())
        return subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=cwd)

    pool = StandbyPool(tmp_path / "standby", 1, shim, delay_s=1.0)
    try:
        pool.prepare_soon(KEY, _order)
        standby = pool.take(OTHER, _order)
        assert standby is not None and standby.key == OTHER
        time.sleep(1.5)  # past the cancelled start's delay: it started nothing
        assert len(started) == 1
        standby.discard()
        # A start its own kind's container waits for is hurried, not cancelled.
        pool.prepare_soon(KEY, _order)
        again = pool.take(KEY, _order)
        assert again is not None and again.key == KEY and len(started) == 2
        again.discard()
    finally:
        pool.close()


def test_closing_the_pool_during_the_delay_starts_nothing(tmp_path: Path) -> None:
    started = threading.Event()
    pool = StandbyPool(tmp_path / "standby", 1, _slow_shim(0.0, started), delay_s=30.0)
    pool.prepare_soon(KEY, _order)
    begun = time.monotonic()
    pool.close()
    assert time.monotonic() - begun < 10
    assert not started.wait(0.5)
    assert pool.take(KEY, _order) is None


class _ImportingZygotes:
    """A zygote pool whose zygote is still importing its modules (for `import_s`), then fails, so
    the standby is started by the pool itself."""

    def __init__(self, import_s: float) -> None:
        self.import_s = import_s
        self.asked = threading.Event()
        self.closed = False
        self.ready = False

    def get(self, *args: object, **kwargs: object) -> _ImportingZygotes:
        self.asked.set()
        return self

    def wait_ready(self) -> None:
        time.sleep(self.import_s)
        raise OSError("the zygote did not start")

    def refuse(self, key: object, reason: str) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _zygote_order(folder: Path) -> dict[str, object]:
    return {**_order(folder), "binds": None, "modules": [], "ids": None}


def test_a_take_waits_for_a_zygote_still_importing(tmp_path: Path) -> None:
    """The first container of a kind waits for its zygote's imports rather than importing the same
    modules beside it (outside the container manager's lock); here the zygote then fails, and the
    standby the pool starts itself is the container's."""
    started = threading.Event()
    zygotes = _ImportingZygotes(import_s=1.5)
    pool = StandbyPool(
        tmp_path / "standby",
        1,
        _slow_shim(0.0, started),
        lambda args: (["true", *args], {}),
        zygotes,  # type: ignore[arg-type]
        delay_s=30.0,
    )
    try:
        pool.prepare_soon(KEY, _zygote_order)
        begun = time.monotonic()
        standby = pool.take(KEY, _zygote_order)
        assert standby is not None and standby.alive()
        assert 1.4 < time.monotonic() - begun < 10
        assert zygotes.asked.is_set() and started.is_set()
        standby.discard()
    finally:
        pool.close()
