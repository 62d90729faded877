"""The standby pool (services/agent/runtime/standbys.py) with real processes standing in for shims:
a container that asks for its kind's standby while that standby's process is being started waits
the milliseconds it takes instead of starting cold; the next standby is started a moment after a
launch, or at once when a container asks for it sooner."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Sequence
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


def test_a_standby_being_started_is_waited_for(tmp_path: Path) -> None:
    started = threading.Event()
    pool = StandbyPool(tmp_path / "standby", 1, _slow_shim(0.5, started))
    try:
        pool.prepare_soon(KEY, _order)
        assert started.wait(5)  # its log exists: the process is on its way
        begun = time.monotonic()
        standby = pool.take(KEY)
        assert standby is not None and standby.alive()
        assert 0.2 < time.monotonic() - begun < 5
        standby.discard()
        # Another kind's container does not wait for it, and none is left for anyone.
        assert pool.take(OTHER) is None
        assert pool.take(KEY) is None
    finally:
        pool.close()


def test_a_kind_without_a_standby_on_its_way_is_not_kept_waiting(tmp_path: Path) -> None:
    started = threading.Event()
    pool = StandbyPool(tmp_path / "standby", 1, _slow_shim(3.0, started))
    try:
        pool.prepare_soon(KEY, _order)
        assert started.wait(5)
        begun = time.monotonic()
        assert pool.take(OTHER) is None
        assert time.monotonic() - begun < 0.1
    finally:
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
        # Another kind's take neither waits for it nor starts it.
        assert pool.take(OTHER) is None
        assert not started.is_set()
        standby = pool.take(KEY)
        assert standby is not None and standby.alive()
        assert time.monotonic() - begun < 10
        standby.discard()
        assert pool.take(KEY) is None
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
    assert pool.take(KEY) is None


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


def test_a_take_does_not_wait_for_a_zygote_still_importing(tmp_path: Path) -> None:
    """The take holds the container manager's lock: a delayed start that would wait seconds for its
    zygote lets the container start cold, as a take without the delay did."""
    started = threading.Event()
    zygotes = _ImportingZygotes(import_s=3.0)
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
        assert pool.take(KEY) is None
        assert time.monotonic() - begun < 2.0
        assert zygotes.asked.is_set()
        # The standby still comes, once its kind has given up on the zygote.
        assert started.wait(10)
    finally:
        pool.close()
