"""SIGTERM and SIGINT delivered to a thread of their own, never acted on inside the signal handler.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread is.
A long-running process's main thread spends its life polling a `threading.Event` (`wait(0.5)`),
and holds the event's own non-reentrant lock for a moment at each poll. A handler that set that
event (or logged: logging takes locks too) could run there and wait forever for a lock its own
thread held: the process never stopped, and its supervisor killed it after the grace period (a
master SIGKILLed in a Kubernetes e2e test under load). So the handler here only writes the
signal's number to a non-blocking pipe, and a daemon thread reads it and calls the process's
callback, where taking locks is safe."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# One pipe and one reader per process, made at the first call; a later call replaces the callback.
_lock = threading.Lock()
_write_end: int | None = None
_callback: Callable[[signal.Signals], None] | None = None


def route_termination_signals(callback: Callable[[signal.Signals], None]) -> None:
    """Install SIGTERM/SIGINT handlers that make `callback(signal)` run on the
    `termination-signals` thread. Call it from the main thread (Python installs handlers only
    there), before the process announces it is ready, so no signal finds the default handler."""
    global _write_end, _callback
    with _lock:
        _callback = callback
        if _write_end is None:
            read_end, write_end = os.pipe()
            os.set_blocking(write_end, False)  # a handler never waits, whatever is unread
            _write_end = write_end
            threading.Thread(
                target=_deliver, args=(read_end,), name="termination-signals", daemon=True
            ).start()
        write_end = _write_end

    def handle(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):  # a full pipe: a request is already there to be read
            os.write(write_end, bytes([signum]))

    for sig in TERMINATION_SIGNALS:
        signal.signal(sig, handle)


def _deliver(read_end: int) -> None:
    while True:
        data = os.read(read_end, 64)
        if not data:
            return
        for signum in data:
            callback = _callback
            if callback is None:
                continue
            try:
                callback(signal.Signals(signum))
            except Exception:
                # The thread must outlive a failing callback: the next signal has to get through.
                log.exception("handling %s failed", signal.Signals(signum).name)
