"""The pause between two attempts to reach the master, cut short when the master comes back.

The backoff (backoff.py) grows to 10 s while the master is away, and gRPC keeps a backoff of its own
per address (up to 5 s, wire.CHANNEL_OPTIONS), during which a call fails at once without trying
to connect. Slept blindly, the two add up: after a failover the agent found the new leader up to
~15 s after it began to serve, past the reconnect window the master gives absent agents (30 s by
default, of which the takeover has used part; 10 s in the tests), and the new leader gave up the
agent's running trials. So while the master cannot be reached, the pause watches the channel and
ends as soon as it connects (gRPC retries on its own backoff meanwhile); a master that could be
reached but refused or ended the stream gets the whole pause, so that it is not hammered.
"""

from __future__ import annotations

import threading
import time

import grpc

# How often the pause looks at its stop flag while it waits for the channel.
_STOP_CHECK_S = 0.25


def pause_until_reachable(channel: grpc.Channel, delay: float, stopping: threading.Event) -> bool:
    """Wait `delay` seconds, less if the channel goes from not connected to connected meanwhile
    (True then), or until `stopping` is set."""
    connected = threading.Event()
    first: list[grpc.ChannelConnectivity] = []

    def watch(state: grpc.ChannelConnectivity) -> None:
        # gRPC reports the current state first, then each change. Connected already: the master
        # was reachable and said no (or ended the stream); only a change counts as coming back.
        if not first:
            first.append(state)
        elif state is grpc.ChannelConnectivity.READY:
            connected.set()

    channel.subscribe(watch, try_to_connect=True)
    try:
        deadline = time.monotonic() + delay
        while not stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if connected.wait(min(remaining, _STOP_CHECK_S)):
                return True
        return False
    finally:
        channel.unsubscribe(watch)
