"""The notebook launcher: JupyterLab bound to the master's port and host, under the proxy path,
its token the allocation token's hash (which only the master's proxy presents), never on its
command line; and Determined's three ways of judging a notebook idle."""

from __future__ import annotations

import hashlib

import pytest

from cairn import notebook_server

ENV = {"CAIRN_SERVICE_HOST": "10.0.0.7", "CAIRN_SERVICE_PORT": "31405", "CAIRN_TASK_ID": "t-1"}


def test_jupyter_listens_where_the_master_said_under_the_proxy_path() -> None:
    command = notebook_server.jupyter_command(ENV, python="py")
    assert command[:3] == ["py", "-m", "jupyterlab"]
    for arg in (
        "--ServerApp.ip=10.0.0.7",
        "--ServerApp.port=31405",
        "--ServerApp.port_retries=0",
        "--ServerApp.base_url=/proxy/t-1/",
    ):
        assert arg in command
    assert not any("token" in arg.lower() for arg in command)  # `ps` shows no token
    assert not any("disable_check_xsrf" in arg for arg in command)  # Jupyter's XSRF check stays on


def test_jupyters_token_is_the_allocation_tokens_hash_as_the_master_stores_it() -> None:
    env = {**ENV, "CAIRN_ALLOCATION_TOKEN": "secret"}
    expected = hashlib.sha256(b"secret").hexdigest()  # what allocations.token_hash holds
    assert notebook_server.service_credential(env) == expected
    assert notebook_server.jupyter_environment(env)["JUPYTER_TOKEN"] == expected


def test_a_launch_outside_a_task_names_what_is_missing() -> None:
    with pytest.raises(notebook_server.LaunchError, match="CAIRN_SERVICE_PORT"):
        notebook_server.jupyter_command({"CAIRN_SERVICE_HOST": "h", "CAIRN_TASK_ID": "t"})


def test_idleness_by_each_idle_type() -> None:
    busy = {"kernels": 1, "connections": 1, "last_activity": "2026-01-01T00:00:00.000000Z"}
    quiet = {"kernels": 0, "connections": 0, "last_activity": "2026-01-01T00:00:00.000000Z"}
    then = 1767225600.0  # 2026-01-01T00:00:00Z
    assert notebook_server.is_idle("kernels_or_terminals", quiet, [], then)
    assert not notebook_server.is_idle("kernels_or_terminals", quiet, [{"name": "1"}], then)
    assert not notebook_server.is_idle("kernels_or_terminals", busy, [], then)
    assert notebook_server.is_idle("kernel_connections", {**busy, "connections": 0}, [], then)
    assert not notebook_server.is_idle("kernel_connections", busy, [], then)
    assert not notebook_server.is_idle("activity", busy, [], then + 1)
    assert notebook_server.is_idle("activity", busy, [], then + 60)
