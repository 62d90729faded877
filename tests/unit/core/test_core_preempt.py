"""core.preempt on a cluster: the signal stream, its reconnects, the long-poll fallback, and acks."""

from __future__ import annotations

import time

import grpc
import pytest

import cairn.core
from cairn.core.cluster_info import get_cluster_info
from cairn.core.context import cluster_context
from cairn.core.preempt import ClusterPreemptContext
from cairn.core.settings import CoreSettings
from tests.unit.core.conftest import ClusterEnv
from tests.unit.core.core_master_double import wait_for


def _watcher_of(core: cairn.core.Context) -> ClusterPreemptContext:
    assert isinstance(core.preempt, ClusterPreemptContext)
    return core.preempt


def test_pushed_preemption_is_seen_within_a_second_and_acked_once(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    with cairn.core.init() as core:
        assert wait_for(lambda: master.streams_opened == 1)
        assert core.preempt.should_preempt() is False
        pushed = time.monotonic()
        master.preempt("paused by user")
        assert wait_for(core.preempt.should_preempt, timeout=1.0)
        assert time.monotonic() - pushed < 1.0
        for _ in range(100):
            assert core.preempt.should_preempt() is True
        assert _watcher_of(core).watcher.reason == "paused by user"
    (ack,) = master.calls.of("AckAllocationPreemptionSignal")
    assert ack.allocation_id == cluster_env.allocation_id
    (watch,) = master.calls.of("WatchAllocationSignals")
    assert watch.allocation_id == cluster_env.allocation_id


def test_preemption_pending_at_start_is_seen_in_the_first_message(cluster_env: ClusterEnv) -> None:
    cluster_env.master.preempt()
    with cairn.core.init() as core:
        assert wait_for(core.preempt.should_preempt, timeout=1.0)


def test_without_auto_ack_nothing_is_acked_until_asked(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    master.preempt()
    with cairn.core.init() as core:
        assert wait_for(lambda: core.preempt.should_preempt(auto_ack=False), timeout=1.0)
        assert master.calls.of("AckAllocationPreemptionSignal") == []
        core.preempt.acknowledge_preemption_signal()
    assert len(master.calls.of("AckAllocationPreemptionSignal")) == 1


def test_broken_stream_is_reopened(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    master.streams_to_break = 2
    with cairn.core.init() as core:
        assert wait_for(lambda: master.streams_opened == 3, timeout=5.0)
        master.preempt()
        assert wait_for(core.preempt.should_preempt, timeout=1.0)


def test_a_master_without_room_for_the_watch_to_wait_is_asked_again_later(cluster_env: ClusterEnv) -> None:
    """It tells the state and ends the stream (its --max-signal-waiters are all taken): the watcher
    asks again after watch_busy_poll_s (not its growing reconnect pauses) until there is room, and
    a preemption is seen at the next ask."""
    master = cluster_env.master
    master.streams_without_room = 3
    info = get_cluster_info()
    assert info is not None
    with cluster_context(info, settings=CoreSettings(watch_busy_poll_s=0.1)) as core:
        assert wait_for(lambda: master.streams_opened == 2, timeout=2.0)
        assert core.preempt.should_preempt() is False
        master.preempt("no room, yet seen")
        assert wait_for(core.preempt.should_preempt, timeout=1.0)
        watcher = _watcher_of(core).watcher
        assert watcher.polling and watcher.reason == "no room, yet seen"


def test_master_without_the_stream_is_long_polled(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    master.watch_unimplemented = True
    with cairn.core.init() as core:
        # The first poll answers at once; the next one waits for the master's news.
        assert wait_for(lambda: len(master.calls.of("AllocationPreemptionSignal")) >= 2, timeout=3.0)
        polls = master.calls.of("AllocationPreemptionSignal")
        assert [p.timeout_seconds for p in polls[:2]] == [0, 60]
        assert core.preempt.should_preempt() is False
        master.preempt()
        assert wait_for(core.preempt.should_preempt, timeout=1.0)
        assert _watcher_of(core).watcher.using_long_poll
    assert len(master.calls.of("AckAllocationPreemptionSignal")) == 1


def test_searcher_target_changes_are_followed(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    with cairn.core.init() as core:
        assert wait_for(lambda: master.streams_opened == 1)
        master.set_searcher_target(400)
        assert wait_for(lambda: _watcher_of(core).watcher.searcher_target == 400, timeout=1.0)
        assert core.preempt.should_preempt() is False


def test_exit_is_prompt_while_the_stream_is_idle(cluster_env: ClusterEnv) -> None:
    with cairn.core.init():
        assert wait_for(lambda: cluster_env.master.streams_opened == 1)
        entered_exit = time.monotonic()
    assert time.monotonic() - entered_exit < 2.0


def test_ack_failure_reaches_the_caller(cluster_env: ClusterEnv) -> None:
    master = cluster_env.master
    master.preempt()
    master.fail("AckAllocationPreemptionSignal", grpc.StatusCode.PERMISSION_DENIED)
    with cairn.core.init() as core:
        assert wait_for(lambda: _watcher_of(core).watcher.preempted, timeout=1.0)
        with pytest.raises(cairn.core.MasterCallError, match="PERMISSION_DENIED"):
            core.preempt.should_preempt()
        # Not acknowledged yet, so the next call tries again.
        assert core.preempt.should_preempt() is True
    assert len(master.calls.of("AckAllocationPreemptionSignal")) == 2


def test_should_preempt_outside_the_with_block_is_refused(cluster_env: ClusterEnv) -> None:
    core = cairn.core.init()
    with pytest.raises(RuntimeError, match=r"with cairn\.core\.init"):
        core.preempt.should_preempt()
    core.close()
