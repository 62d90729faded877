"""SIGTERM and SIGINT become a request to stop (cairn.termination_signals, used by the services'
bootstrap, the agent, the local cluster's watchdog and the searcher plugin): the handler takes no
lock, so a signal handled while the main thread holds the termination event's own lock (as it
does for a moment at each poll of `wait_for_termination`) still stops the process. Each case runs
in a fresh interpreter: handlers and the event are per process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Where the main thread is for a moment at each poll: inside the event's lock. The handler runs
# there, on this thread (raise_signal runs it before it returns). A handler that set the event
# waited for this thread's own lock, and the process never went on.
HANDLED_UNDER_THE_EVENTS_LOCK = """
import signal, sys
from services.common import server
server.install_termination_handlers()
with server._termination._cond:
    signal.raise_signal(signal.SIGTERM)
print("handler returned", flush=True)
sys.exit(0 if server._termination.wait(10) else 3)
"""

# The same, through the shared routing every long-running process uses, with the event the agent,
# the watchdog and the searcher plugin each poll. A first callback that fails leaves the thread
# alive for the next signal.
ROUTED_UNDER_THE_EVENTS_LOCK = """
import signal, sys, threading
from cairn.termination_signals import route_termination_signals
stop = threading.Event()
calls = []
failed = threading.Event()
def failing(sig):
    calls.append(sig.name)
    failed.set()
    raise RuntimeError("a callback that fails")
route_termination_signals(failing)
signal.raise_signal(signal.SIGINT)
failed.wait(10)
route_termination_signals(lambda sig: (calls.append(sig.name), stop.set()))
with stop._cond:
    signal.raise_signal(signal.SIGTERM)
print("handler returned", flush=True)
sys.exit(0 if stop.wait(10) and calls == ["SIGINT", "SIGTERM"] else 3)
"""

SERVICE = """
import sys
from services.common import server
server.install_termination_handlers()
print("ready", flush=True)
server.wait_for_termination(lambda: print("stopped", flush=True))
"""


def _python(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finished(code: str) -> tuple[subprocess.Popen[str], str]:
    """`code` run to its end in a fresh interpreter, and its output; a failure if it hangs (a
    handler that waited for the main thread's own lock)."""
    child = _python(code)
    try:
        out, _ = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        raise AssertionError(f"the handler waited for the main thread's own lock:\n{out}") from None
    return child, out


def test_a_signal_handled_while_the_main_thread_holds_the_events_lock_still_stops() -> None:
    child, out = _finished(HANDLED_UNDER_THE_EVENTS_LOCK)
    assert child.returncode == 0, out
    assert "handler returned" in out
    assert "signal received" in out and "SIGTERM" in out  # logged by the watcher, not the handler


def test_routed_signals_reach_their_callback_off_the_main_thread_even_after_a_failing_one() -> None:
    child, out = _finished(ROUTED_UNDER_THE_EVENTS_LOCK)
    assert child.returncode == 0, out
    assert "handler returned" in out
    assert "handling SIGINT failed" in out and "a callback that fails" in out


def test_no_long_running_process_acts_in_a_termination_handler_of_its_own() -> None:
    """The agent, the watchdog and the searcher plugin each once set their stop event in the
    handler: the same deadlock. Forwarding a signal to a child (launchers, notebook and TensorBoard
    servers) takes no lock the main thread holds and stays."""
    handlers = {
        str(path.relative_to(ROOT))
        for tree in ("services", "clients/python/cairn")
        for path in (ROOT / tree).rglob("*.py")
        if "/gen/" not in str(path)
        and any(
            "signal.signal(" in line and not any(ok in line for ok in ("send_signal", "forward", "SIG_DFL"))
            for line in path.read_text().splitlines()
        )
    }
    assert handlers == {"clients/python/cairn/termination_signals.py"}


def test_sigterm_stops_a_service_waiting_for_termination() -> None:
    child = _python(SERVICE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # into the wait's polls
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, out
    assert "stopped" in out and "SIGTERM" in out
