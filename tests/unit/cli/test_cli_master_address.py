from __future__ import annotations

import pytest

from cairn.client.address import (
    InvalidMasterAddress,
    MasterAddress,
    parse_master_address,
    resolve_master_address,
)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("localhost:8090", "localhost", 8090),
        ("  10.0.0.5:9000 ", "10.0.0.5", 9000),
        ("grpc://master.example:7000", "master.example", 7000),
        ("GRPC://master.example:7000/", "master.example", 7000),
        ("master.example", "master.example", 8090),
        ("[::1]:9000", "::1", 9000),
        ("[::1]", "::1", 8090),
        ("::1", "::1", 8090),
    ],
)
def test_accepted_forms(text: str, host: str, port: int) -> None:
    assert parse_master_address(text) == MasterAddress(host, port)


def test_target_brackets_ipv6() -> None:
    assert MasterAddress("::1", 8090).target == "[::1]:8090"
    assert str(MasterAddress("localhost", 8090)) == "localhost:8090"


@pytest.mark.parametrize("url", ["http://master:8080", "https://master.example/"])
def test_http_urls_are_refused_with_a_grpc_hint(url: str) -> None:
    with pytest.raises(InvalidMasterAddress) as caught:
        parse_master_address(url)
    message = str(caught.value)
    assert "gRPC" in message
    assert ":8090" in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("host:notaport", "port"),
        ("host:0", "port"),
        ("host:70000", "port"),
        ("ftp://host:1", "scheme"),
        ("host:8090/api", "no path"),
        (":8090", "host is missing"),
        ("[::1:8090", "IPv6"),
    ],
)
def test_bad_addresses(text: str, fragment: str) -> None:
    with pytest.raises(InvalidMasterAddress, match=fragment):
        parse_master_address(text)


def test_flag_then_environment_then_default() -> None:
    env = {"CAIRN_MASTER": "envhost:1234"}
    assert resolve_master_address("flaghost:1", env).endpoints == (MasterAddress("flaghost", 1),)
    assert resolve_master_address(None, env).endpoints == (MasterAddress("envhost", 1234),)
    assert resolve_master_address(None, {}).endpoints == (MasterAddress("localhost", 8090),)
