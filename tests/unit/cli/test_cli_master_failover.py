"""Several master addresses (an active master and its standbys): parsing, and one channel that fails
over to whichever master serves, for the CLI's Session and the Core API's MasterSession."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, TypeVar

import grpc
import pytest

from cairn.api.v1 import api_pb2_grpc, master_pb2
from cairn.client.address import (
    InvalidMasterAddress,
    MasterAddress,
    parse_master_addresses,
    resolve_master_address,
)
from cairn.client.session import Session
from cairn.core.master_session import MasterSession
from cairn.core.settings import CoreSettings
from tests.support.ports import free_port

T = TypeVar("T")


def test_several_addresses_keep_their_order_and_drop_repeats() -> None:
    parsed = parse_master_addresses(" 10.0.0.1:8090, grpc://10.0.0.2:9090,10.0.0.1:8090")
    assert parsed.endpoints == (MasterAddress("10.0.0.1", 8090), MasterAddress("10.0.0.2", 9090))
    assert parsed.target == "10.0.0.1:8090,10.0.0.2:9090"
    assert parsed.dial_target == "ipv4:10.0.0.1:8090,10.0.0.2:9090"


def test_one_address_is_dialled_as_written() -> None:
    assert resolve_master_address("master.example:7000").dial_target == "master.example:7000"


def test_host_names_resolve_into_one_family() -> None:
    assert parse_master_addresses("localhost:1234,127.0.0.2:5678").dial_target == (
        "ipv4:127.0.0.1:1234,127.0.0.2:5678"
    )
    assert parse_master_addresses("[::1]:1234,[::2]:5678").dial_target == "ipv6:[::1]:1234,[::2]:5678"
    with pytest.raises(InvalidMasterAddress, match="one family"):
        _ = parse_master_addresses("127.0.0.1:1,[::1]:2").dial_target


def test_a_standby_that_does_not_resolve_is_left_out_but_not_every_address() -> None:
    assert parse_master_addresses("127.0.0.1:1,nowhere.invalid:2").dial_target == "ipv4:127.0.0.1:1"
    with pytest.raises(InvalidMasterAddress, match="resolves"):
        _ = parse_master_addresses("nowhere.invalid:1,nowhere-else.invalid:2").dial_target


@pytest.mark.parametrize("text", ["a:1,,b:2", "a:1,", ",b:2"])
def test_an_empty_address_between_commas_is_refused(text: str) -> None:
    with pytest.raises(InvalidMasterAddress, match="empty"):
        parse_master_addresses(text)


class _NamedMaster(api_pb2_grpc.CairnServicer):
    def __init__(self, name: str) -> None:
        self.name = name

    def GetMaster(self, request: Any, context: grpc.ServicerContext) -> master_pb2.GetMasterResponse:
        return master_pb2.GetMasterResponse(master_id=self.name)


class Masters:
    """Two ports for an active master and a standby; a master serves on a port only when started."""

    def __init__(self) -> None:
        self.ports = [free_port(), free_port()]
        self._servers: dict[int, grpc.Server] = {}

    @property
    def addresses(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start(self, index: int) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_CairnServicer_to_server(_NamedMaster(f"master-{index}"), server)
        assert server.add_insecure_port(f"127.0.0.1:{self.ports[index]}")
        server.start()
        self._servers[index] = server

    def kill(self, index: int) -> None:
        self._servers.pop(index).stop(0).wait(5)

    def stop_all(self) -> None:
        for index in list(self._servers):
            self.kill(index)


@pytest.fixture
def masters() -> Iterator[Masters]:
    pair = Masters()
    yield pair
    pair.stop_all()


def _until_available(call: Callable[[], T], within: float = 10.0) -> T:
    """What a caller's own retry of UNAVAILABLE does (the CLI's and the Core API's)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_the_cli_session_reaches_the_standby_when_the_first_master_is_down(masters: Masters) -> None:
    masters.start(1)
    with Session(resolve_master_address(masters.addresses)) as session:
        # No retry: a refused first address is skipped within the call.
        assert session.api.GetMaster(master_pb2.GetMasterRequest(), timeout=5).master_id == "master-1"


def test_the_cli_session_follows_a_failover(masters: Masters) -> None:
    masters.start(0)
    with Session(resolve_master_address(masters.addresses)) as session:
        assert session.api.GetMaster(master_pb2.GetMasterRequest(), timeout=5).master_id == "master-0"
        masters.kill(0)
        masters.start(1)
        response = _until_available(lambda: session.api.GetMaster(master_pb2.GetMasterRequest(), timeout=5))
        assert response.master_id == "master-1"
        # The old leader back (as a standby would be, had it opened its ports): the session stays.
        masters.start(0)
        assert session.api.GetMaster(master_pb2.GetMasterRequest(), timeout=5).master_id == "master-1"


def test_trial_code_follows_a_failover_through_its_retries(masters: Masters) -> None:
    masters.start(0)
    session = MasterSession(masters.addresses, "token", CoreSettings())
    try:
        what = "get master"
        assert session.call(session.stub.GetMaster, master_pb2.GetMasterRequest(), what=what).master_id == (
            "master-0"
        )
        masters.kill(0)
        started = time.monotonic()
        masters.start(1)
        response = session.call(session.stub.GetMaster, master_pb2.GetMasterRequest(), what=what)
        assert response.master_id == "master-1"
        assert time.monotonic() - started < 15
    finally:
        session.close()
