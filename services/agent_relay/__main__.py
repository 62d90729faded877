"""Entry point: `python -m services.agent_relay --master HOST:PORT` (agents then dial this port).

python -m services.agent_relay --master 127.0.0.1:8090 --port 8091 --cluster-token-file FILE
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

import grpc.aio

from cairn.agent.v1 import agent_pb2_grpc
from cairn.wire import CHANNEL_OPTIONS
from services.agent_relay.relay import AgentRelay
from services.common.args import add_common_flags
from services.common.logging import configure_logging, get_logger
from services.common.server import SERVER_OPTIONS, write_ready_file

DEFAULT_PORT = 8091
# How long the master may take to accept the relay's first call before the relay gives up starting.
FIRST_CONNECT_S = 60.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cairn-agent-relay",
        description="Cairn agent relay: holds agents' streams and carries them to the master in batches",
    )
    add_common_flags(parser, default_port=DEFAULT_PORT)
    parser.add_argument("--master", required=True, help="the master's gRPC address, HOST:PORT")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    log = get_logger("services.agent_relay")
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    async with grpc.aio.insecure_channel(args.master, options=CHANNEL_OPTIONS) as channel:
        relay = AgentRelay(channel, args.cluster_token)
        holding = asyncio.create_task(relay.run(stopping))
        try:
            await asyncio.wait_for(relay.connected.wait(), FIRST_CONNECT_S)
        except TimeoutError:
            log.error("the master did not accept the relay", master=args.master)
            stopping.set()
            await holding
            return 1
        server = grpc.aio.server(options=SERVER_OPTIONS)
        agent_pb2_grpc.add_AgentServiceServicer_to_server(relay, server)
        port = server.add_insecure_port(f"{args.host}:{args.port}")
        await server.start()
        write_ready_file(args.ready_file, grpc_port=port)
        log.info("agent relay ready", port=port, master=args.master)
        await stopping.wait()
        # The call to the master first: every agent's stream then ends UNAVAILABLE at once (they
        # reconnect, to another relay or to this one once it is back), and the server has no
        # open stream left to wait for.
        holding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holding
        await server.stop(1.0)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("agent-relay", args.log_format, args.log_level)
    try:
        import uvloop

        return uvloop.run(serve(args))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
