"""Object collectives between a trial's processes over TCP: a star around a hub in the chief.

The chief (rank 0) runs a hub on `chief_ip:port` in a background thread; every process, the chief
included, connects to it and takes part in the same numbered sequence of operations. An operation
is complete when every member of its group (all processes, or those of one node for the `_local`
forms) has sent its object; the hub then answers each member: the whole list (allgather), the list
to the group's chief and None to the rest (gather), or the group chief's object (broadcast).

Objects are pickled, so only processes of the same trial may speak: a connection must first answer
the hub's random challenge with an HMAC keyed by the allocation's token, which every process of the
allocation has and nothing else does.

When a process leaves without saying goodbye (it crashed), the hub fails every waiting and later
operation with an error naming it, so the others raise instead of hanging; the allocation then ends
as one failure.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import pickle
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!Q")
# One pickled object per frame; far above what object collectives should move.
MAX_FRAME_BYTES = 1 << 31
CONNECT_TIMEOUT_S = 600.0  # the chief's container may start minutes after the others
CHALLENGE_BYTES = 32
GLOBAL = "global"


class CollectivesError(RuntimeError):
    """A peer went away or the hub refused this process; the message says which."""


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> Any:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if size > MAX_FRAME_BYTES:
        raise CollectivesError(f"a frame of {size} bytes is more than {MAX_FRAME_BYTES}")
    return pickle.loads(_recv_exact(sock, size))


def _mac(key: bytes, challenge: bytes) -> bytes:
    return hmac.new(key, challenge, hashlib.sha256).digest()


@dataclass(frozen=True)
class Member:
    rank: int
    size: int
    cross_rank: int
    local_rank: int
    local_size: int


@dataclass
class _Pending:
    kind: str
    members: int
    objects: dict[int, Any] = field(default_factory=dict)  # member index in the group -> object


class Hub:
    """Runs in the chief process; answers operations once every member of a group has joined in."""

    def __init__(self, host: str, port: int, size: int, key: bytes) -> None:
        self._size = size
        self._key = key
        self._lock = threading.Lock()
        self._clients: dict[int, tuple[socket.socket, Member]] = {}
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._failure = ""
        self._said_bye: set[int] = set()
        self._closed = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(max(16, size))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept_loop, name="collectives-hub", daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), name="collectives-peer", daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        member: Member | None = None
        try:
            challenge = os.urandom(CHALLENGE_BYTES)
            sock.sendall(challenge)
            answer = _recv_exact(sock, hashlib.sha256().digest_size)
            if not hmac.compare_digest(answer, _mac(self._key, challenge)):
                log.warning("collectives: refused a connection that does not hold the allocation's token")
                sock.close()
                return
            hello = _recv(sock)
            member = Member(**hello)
            if member.size != self._size or not 0 <= member.rank < self._size:
                _send(
                    sock, ("error", f"rank {member.rank} of {member.size} does not fit a job of {self._size}")
                )
                sock.close()
                return
            with self._lock:
                if member.rank in self._clients:
                    _send(sock, ("error", f"rank {member.rank} is already connected"))
                    sock.close()
                    return
                self._clients[member.rank] = (sock, member)
            _send(sock, ("ok", None))
            while True:
                message = _recv(sock)
                if message[0] == "bye":
                    with self._lock:
                        self._said_bye.add(member.rank)
                    return
                _, kind, group, seq, obj = message
                self._contribute(member, kind, group, seq, obj)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            if member is not None and member.rank not in self._said_bye and not self._closed.is_set():
                self._fail(f"rank {member.rank} left the job ({exc or 'connection closed'})")

    def _group_of(self, member: Member, group: str) -> tuple[str, int, list[int]]:
        """(group key, this member's index in it, the ranks in it, in order)."""
        if group == GLOBAL:
            return GLOBAL, member.rank, list(range(self._size))
        # A node's processes: its local ranks 0..local_size-1 are consecutive global ranks.
        first = member.rank - member.local_rank
        return f"node-{member.cross_rank}", member.local_rank, list(range(first, first + member.local_size))

    def _contribute(self, member: Member, kind: str, group: str, seq: int, obj: Any) -> None:
        key, index, ranks = self._group_of(member, group)
        with self._lock:
            if self._failure:
                self._reply(member.rank, ("error", self._failure))
                return
            pending = self._pending.setdefault((key, seq), _Pending(kind, len(ranks)))
            if pending.kind != kind:
                self._failure = (
                    f"collective #{seq} of group {key}: rank {member.rank} called {kind} while "
                    f"others called {pending.kind}"
                )
                self._fail_locked()
                return
            pending.objects[index] = obj
            if len(pending.objects) < pending.members:
                return
            del self._pending[(key, seq)]
            ordered = [pending.objects[i] for i in range(pending.members)]
            # The group's first member last: when it is the chief, its answer returning means every
            # other answer is already on its way, so the chief may close the hub right after.
            for i, rank in reversed(list(enumerate(ranks))):
                if kind == "allgather":
                    result: Any = ordered
                elif kind == "gather":
                    result = ordered if i == 0 else None
                else:  # broadcast
                    result = ordered[0]
                self._reply(rank, ("ok", result))

    def _reply(self, rank: int, message: Any) -> None:
        client = self._clients.get(rank)
        if client is None:
            return
        try:
            _send(client[0], message)
        except OSError:
            pass  # its own reader notices it is gone

    def _fail(self, reason: str) -> None:
        with self._lock:
            if self._failure:
                return
            self._failure = reason
            self._fail_locked()

    def _fail_locked(self) -> None:
        log.error("collectives failed: %s", self._failure)
        waiting = {rank for (key, _), p in self._pending.items() for rank in self._ranks_waiting(key, p)}
        self._pending.clear()
        for rank in waiting:
            self._reply(rank, ("error", self._failure))

    def _ranks_waiting(self, key: str, pending: _Pending) -> list[int]:
        members = [m for _, m in self._clients.values()]
        if key == GLOBAL:
            return [m.rank for m in members if m.rank in pending.objects]
        return [m.rank for m in members if f"node-{m.cross_rank}" == key and m.local_rank in pending.objects]

    def close(self, wait_s: float) -> None:
        """Stop once every other member said goodbye or left (at most `wait_s`), so none of them is
        cut off mid-answer. Members already waiting on an operation the chief will never join are
        failed at once: the chief left the job."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with self._lock:
                others = {r for r in self._clients if r != 0}
                if others <= self._said_bye or self._failure:
                    break
                # Operations of the chief's groups (all ranks, or its own node's) can never end now.
                if any(key in (GLOBAL, "node-0") for key, _ in self._pending):
                    self._failure = "the chief (rank 0) left the job"
                    self._fail_locked()
                    break
            time.sleep(0.01)
        self._closed.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            for sock, _ in self._clients.values():
                try:
                    sock.close()
                except OSError:
                    pass


class TcpCollectives:
    """One process's end: a connection to the hub (which it also runs when it is the chief)."""

    def __init__(
        self,
        member: Member,
        chief_ip: str,
        port: int,
        key: bytes,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        bind_host: str | None = None,
    ) -> None:
        self._member = member
        self._seq: dict[str, int] = {}
        self._hub: Hub | None = None
        if member.rank == 0:
            # Other machines reach the hub only when the job spans them.
            host = bind_host or ("0.0.0.0" if member.local_size < member.size else "127.0.0.1")
            self._hub = Hub(host, port, member.size, key)
            port = self._hub.port
            chief_ip = "127.0.0.1"
        self._sock = self._connect(chief_ip, port, key, connect_timeout_s)
        self._closed = False

    def _connect(self, host: str, port: int, key: bytes, timeout_s: float) -> socket.socket:
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        last: Exception | None = None
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=10)
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                challenge = _recv_exact(sock, CHALLENGE_BYTES)
                sock.sendall(_mac(key, challenge))
                m = self._member
                _send(
                    sock,
                    {
                        "rank": m.rank,
                        "size": m.size,
                        "cross_rank": m.cross_rank,
                        "local_rank": m.local_rank,
                        "local_size": m.local_size,
                    },
                )
                status, detail = _recv(sock)
                if status != "ok":
                    raise CollectivesError(f"the chief's hub refused rank {m.rank}: {detail}")
                return sock
            except (OSError, EOFError) as exc:
                last = exc
                if time.monotonic() >= deadline:
                    raise CollectivesError(
                        f"rank {self._member.rank} could not reach the chief's collectives hub at "
                        f"{host}:{port} within {timeout_s:g} s: {last}"
                    ) from exc
                time.sleep(delay)
                delay = min(1.0, delay * 2)

    def run(self, kind: str, group: str, obj: Any) -> Any:
        if self._closed:
            raise CollectivesError("the distributed context is closed")
        seq = self._seq.get(group, 0)
        self._seq[group] = seq + 1
        try:
            _send(self._sock, ("op", kind, group, seq, obj))
            status, result = _recv(self._sock)
        except (OSError, EOFError) as exc:
            raise CollectivesError(
                f"rank {self._member.rank}: lost the chief's collectives hub during {kind} ({exc})"
            ) from exc
        if status != "ok":
            raise CollectivesError(f"rank {self._member.rank}: {kind} failed: {result}")
        return result

    def close(self, wait_s: float = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            _send(self._sock, ("bye",))
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass
        if self._hub is not None:
            self._hub.close(wait_s)
