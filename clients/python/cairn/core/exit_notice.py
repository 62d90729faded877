"""The last word of a trial process to the master: "this allocation is exiting", sent as the
interpreter exits after a clean close of the Core API, so that the master can hand the slots to
the next allocation while this process ends (the agent starts the next one's command once this
container has ended). Purely a head start: a notice that never comes (a crash, os._exit, a master
that does not know the call) leaves the slots to be freed as always, when the agent sees the exit.

Sent at exit, not at close: code may go on after `with cairn.core.init()` ends, or open another
context, and the next trial's start would then wait for it. The master session (its channel) is
kept open from the close until then.
"""

from __future__ import annotations

import atexit
import logging
import threading

import grpc

from cairn.api.v1 import task_pb2
from cairn.core.master_session import MasterSession

log = logging.getLogger(__name__)

# A notice is one short call; an unanswered one must not hold the exit.
NOTICE_TIMEOUT_S = 2.0

_lock = threading.Lock()
_pending: tuple[MasterSession, str] | None = None
_registered = False


def arrange(session: MasterSession, allocation_id: str) -> None:
    """After a clean close: send the notice when the interpreter exits, over `session`, which this
    module now owns (it closes it)."""
    global _registered
    with _lock:
        if not _registered:
            atexit.register(send_pending)
            _registered = True
    _replace((session, allocation_id))


def cancel() -> None:
    """A new context started in this process: it is not exiting after all."""
    _replace(None)


def _replace(pending: tuple[MasterSession, str] | None) -> None:
    """Make `pending` the notice to send; the one it replaces is dropped and its session closed."""
    global _pending
    with _lock:
        previous, _pending = _pending, pending
    if previous is not None:
        previous[0].close()


def send_pending() -> bool:
    """Send the arranged notice now (at exit); whether the master released the slots."""
    global _pending
    with _lock:
        pending, _pending = _pending, None
    if pending is None:
        return False
    session, allocation_id = pending
    try:
        response = session.stub.NotifyAllocationExiting(
            task_pb2.NotifyAllocationExitingRequest(allocation_id=allocation_id),
            timeout=NOTICE_TIMEOUT_S,
            metadata=session.metadata,
        )
        return bool(response.released)
    except grpc.RpcError as exc:
        log.debug("the master did not take the exit notice of allocation %s: %s", allocation_id, exc)
        return False
    finally:
        session.close()
