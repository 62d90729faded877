"""Bootstrap for a Cairn gRPC service: thread-pool server, health checking, reflection, a ready
file for supervisors, and a clean stop on SIGTERM/SIGINT.

A service whose clients hold long streams (the master: one per agent) runs an asyncio server
instead (`asyncio_server`): a coroutine handler (an agent's stream) costs no thread while it waits,
and every other handler is the same synchronous code as before, run in the server's thread pool
with the context it expects (sync_handlers.py). Its event loop has a thread of its own, so the
service's main thread and the rest of the process stay synchronous. The interceptors are the same
synchronous ones, adapted (_OnAsyncioServer); a coroutine handler they wrap stays a coroutine
(interceptors.py says how)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cairn.termination_signals import route_termination_signals
from services.common.channels import MAX_MESSAGE_BYTES
from services.common.held_ports import bind_when_free, probe_bind
from services.common.logging import get_logger
from services.common.request_decoding import RequestDecodingInterceptor
from services.common.sync_handlers import SyncHandlersAsCoroutines
from services.common.tls import ServerTls

log = get_logger(__name__)

SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Clients ping every 20 s; allow it even on idle connections.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    # A restarted service must be able to take its port back at once.
    ("grpc.so_reuseport", 0),
]


T = TypeVar("T")


class EventLoopThread:
    """An asyncio event loop running in a daemon thread of its own, for a synchronous process."""

    def __init__(self, name: str) -> None:
        import uvloop  # imported where it runs, as the HTTP port's server does

        # uvloop's loop (libuv, in C) rather than asyncio's pure-Python one: the master's loop
        # carries every agent's stream, and its selector, handles and the wake-ups other threads
        # send it ran under the process's one GIL (bench/README.md, "The master's loop on
        # uvloop"). grpc.aio runs on any loop: it polls its completion queue in a thread of its own.
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"{name}-asyncio", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # A uvloop loop left open logs an error when it is freed and keeps its descriptors.
            self.loop.close()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coroutine` on the loop and wait for its result here."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)


@dataclass
class ServiceServer:
    """A started gRPC server and what is needed to stop it."""

    name: str
    server: grpc.Server | grpc.aio.Server
    port: int
    health: health.HealthServicer
    # A plaintext port on 127.0.0.1 beside a TLS port (start_server's loopback_plaintext).
    loopback_port: int | None = None
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    # The asyncio server's loop (start_server's asyncio_server); None for a thread-pool server.
    loop_thread: EventLoopThread | None = None

    def stop(self, grace: float = 5.0) -> None:
        log.info("stopping", grace_seconds=grace)
        self.health.enter_graceful_shutdown()
        for hook in self.on_stop:
            try:
                hook()
            except Exception:
                log.exception("stop hook failed")
        if isinstance(self.server, grpc.aio.Server):
            assert self.loop_thread is not None
            self.loop_thread.call(self.server.stop(grace), timeout=grace + 10.0)
            self.loop_thread.stop()
        else:
            self.server.stop(grace).wait()
        log.info("stopped")


class _OnAsyncioServer(grpc.aio.ServerInterceptor):
    """A synchronous interceptor on an asyncio server. Cairn's interceptors only wrap the handler
    they are given (their checks run inside it, in the handler's own thread or task), so the
    handler is resolved first and handed to the synchronous one as its continuation's answer."""

    def __init__(self, inner: grpc.ServerInterceptor) -> None:
        self._inner = inner

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        return self._inner.intercept_service(lambda _details: handler, handler_call_details)


def with_request_checks(interceptors: Sequence[grpc.ServerInterceptor]) -> list[grpc.ServerInterceptor]:
    """A server's interceptors: `interceptors` (who is calling) first, then the refusal of requests
    that cannot be decoded, so that a caller is established before its request is looked at
    (request_decoding.py)."""
    return [*interceptors, RequestDecodingInterceptor()]


def start_server(
    name: str,
    register: Callable[[Any], Sequence[str]],
    *,
    host: str,
    port: int,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    max_workers: int = 64,
    tls: ServerTls | None = None,
    loopback_plaintext: bool = False,
    asyncio_server: bool = False,
) -> ServiceServer:
    """Start a server with the services `register` adds (it returns their full names).

    `port` 0 binds a free port; the bound one is in the result. With `tls` the port speaks only
    TLS; without, only plaintext. `loopback_plaintext` adds a plaintext port on 127.0.0.1 (for the
    master's HTTP gateway, which dials back into its own server as grpc-gateway does: callers are
    still authenticated by their tokens, and loopback is where plaintext is allowed anyway).
    `asyncio_server`: an asyncio server (the module's docstring), its synchronous handlers run in a
    pool of `max_workers` threads.
    """
    pool = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"{name}-rpc")
    if not asyncio_server:
        server = grpc.server(pool, interceptors=with_request_checks(interceptors), options=SERVER_OPTIONS)
        return _serve(name, server, register, host, port, tls, loopback_plaintext, None)
    loop_thread = EventLoopThread(name)

    async def serve() -> ServiceServer:
        # Made on its loop: the server binds to the loop it is made in.
        server = grpc.aio.server(
            # First (outermost): each synchronous handler, as the interceptors after it wrap it,
            # runs in `pool` with the context a synchronous handler expects (sync_handlers.py).
            interceptors=[
                SyncHandlersAsCoroutines(pool),
                *(_OnAsyncioServer(i) for i in with_request_checks(interceptors)),
            ],
            options=SERVER_OPTIONS,
        )
        started = _serve(name, server, register, host, port, tls, loopback_plaintext, loop_thread)
        await server.start()
        return started

    try:
        return loop_thread.call(serve())
    except BaseException:
        loop_thread.stop()
        raise


class _GenericHandlersOnly:
    """Where the generated `add_*Servicer_to_server` functions register an asyncio server's methods:
    through the generic handler they add, not as registered methods as well.

    grpc.aio's server keeps one pending request per registered method and waits for the next call
    with `asyncio.wait` over all of them, so every call it accepts costs Python work in proportion
    to the methods registered: the master's API has over 200, and a trivial call cost 0.1 ms more
    of its CPU with them (bench/README.md, "A call's cost on the asyncio server"). The generic
    handler the same generated code adds serves every one of them by name; the thread-pool server
    re-arms only the method that was called, so it keeps its registered methods.

    What it gives up: every method now shares one pending request, re-armed a loop turn after each
    call is accepted, where a burst to different methods could be taken several at once. Calls
    that arrive meanwhile wait in gRPC core's queue, which refuses some (RESOURCE_EXHAUSTED) past
    1,000 waiting (`grpc.server.max_pending_requests`): a burst that large to one method met the
    same limit before."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service_name: str, handlers: dict[str, Any]) -> None:
        """Left out: add_generic_rpc_handlers was given the same handlers."""


def _serve(
    name: str,
    server: grpc.Server | grpc.aio.Server,
    register: Callable[[Any], Sequence[str]],
    host: str,
    port: int,
    tls: ServerTls | None,
    loopback_plaintext: bool,
    loop_thread: EventLoopThread | None,
) -> ServiceServer:
    """Register the services, health and reflection on `server` and bind its ports; a thread-pool
    server is started here, an asyncio one by its caller (on its loop)."""
    handlers = _GenericHandlersOnly(server) if isinstance(server, grpc.aio.Server) else server
    service_names = list(register(handlers))
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, handlers)
    for service in ["", *service_names]:
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    # The server itself: reflection picks its asyncio servicer by the server's type (one method).
    reflection.enable_server_reflection(
        [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
        server,
    )

    def bind() -> int:
        # A fixed port a restarted service comes back on may be held for a moment (held_ports.py).
        probe_bind(host, port)
        if tls is not None:
            return server.add_secure_port(f"{host}:{port}", tls.grpc_credentials())
        return server.add_insecure_port(f"{host}:{port}")

    bound = bind_when_free(bind, name, host, port)
    if bound == 0:
        raise OSError(f"{name}: cannot bind {host}:{port}")
    loopback = server.add_insecure_port("127.0.0.1:0") if loopback_plaintext else None
    if loop_thread is None:
        assert isinstance(server, grpc.Server)
        server.start()
    log.info(
        "serving",
        host=host,
        port=bound,
        services=service_names,
        tls=tls is not None,
        asyncio=loop_thread is not None,
    )
    return ServiceServer(
        name=name,
        server=server,
        port=bound,
        health=health_servicer,
        loopback_port=loopback,
        loop_thread=loop_thread,
    )


def write_ready_file(path: str | None, **fields: int | str) -> None:
    """Tell a supervisor (`cairn cluster up`) the service is up: its ports, and any other fields."""
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), **fields}))
    tmp.replace(target)  # atomic: a reader never sees half a file


_termination = threading.Event()
TERMINATION_POLL_S = 0.2


def install_termination_handlers() -> None:
    """Turn SIGTERM/SIGINT into a request to stop. Call it first thing in a service's main: a
    signal that arrives between its ready file and the wait must stop it cleanly, not kill it.

    The handler takes no lock (cairn.termination_signals says why): the signal is logged and the
    event set on a thread of their own, not in the main thread that polls the event."""
    route_termination_signals(_on_termination_signal)


def _on_termination_signal(sig: signal.Signals) -> None:
    log.info("signal received", signal=sig.name)
    _termination.set()


def termination_requested() -> threading.Event:
    """Set once SIGTERM or SIGINT arrived: for a service that waits before it serves (a standby
    master) and must stop waiting then."""
    return _termination


def wait_for_termination(stop: Callable[[], None]) -> None:
    """Block until SIGTERM or SIGINT (handlers installed now if they were not yet), then `stop`."""
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        install_termination_handlers()
    # Wake up now and then: the kernel may hand the signal to one of gRPC's threads, and Python runs
    # its handler only when the main thread next executes bytecode. A wait without a timeout never
    # does, and the service went on serving a SIGTERM it had received.
    while not _termination.wait(timeout=TERMINATION_POLL_S):
        pass
    stop()
