"""A provisioner for every resource pool with a `provider:` block, its provider built from the
block's own settings (checked here, naming the field) and the master's."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from services.common.cluster_token import TOKEN_ENV
from services.master.configuration.pools import PoolSettings
from services.master.configuration.provider import ProviderConfig
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.provisioning.provider import Provider
from services.master.domain.provisioning.provisioner import PoolProvisioner
from services.master.provisioners.aws import AwsProvider, AwsSettings
from services.master.provisioners.docker import DEFAULT_IMAGE, DockerProvider
from services.master.provisioners.docker import check_options as check_docker_options
from services.master.provisioners.local import LocalProvider

# What a local agent inherits from the master's environment: enough to run Python, not the
# master's own secrets (its database URL, its TLS key's path); its join token is added per launch.
_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
MAX_AGENT_ARGS = 64


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_AGENT_ARGS:
        raise InvalidArgument(f"{where}: a list of at most {MAX_AGENT_ARGS} strings")
    for i, item in enumerate(value):
        if not isinstance(item, str) or "\0" in item or len(item) > 4096:
            raise InvalidArgument(f"{where}[{i}]: a string of at most 4096 characters without NUL")
    return list(value)


def _check_keys(options: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidArgument(f"{where}.{unknown[0]}: not a setting of this provider")


def agents_cluster_token(ctx: MasterContext) -> str | None:
    """The cluster token for the agents this master launches: only in compatibility mode
    (--agent-auth cluster_token). Each enrols with a join token made for it (provisioner.py), so by
    default the token stays with the control plane's services."""
    return ctx.settings.cluster_token if ctx.settings.agent_auth == "cluster_token" else None


def agent_environment(ctx: MasterContext) -> dict[str, str]:
    env = {key: os.environ[key] for key in _INHERITED if key in os.environ}
    env["PYTHONUNBUFFERED"] = "1"
    token = agents_cluster_token(ctx)
    if token:
        env[TOKEN_ENV] = token
    return env


def master_address(ctx: MasterContext, options: Mapping[str, Any], where: str) -> str:
    address = options.get("master_address") or f"{ctx.settings.host}:{ctx.settings.grpc_port}"
    if not isinstance(address, str) or ":" not in address:
        raise InvalidArgument(f"{where}.master_address: HOST:PORT of the master's gRPC port")
    return address


def local_provider(ctx: MasterContext, pool: PoolSettings, config: ProviderConfig) -> Provider:
    where = f"resource pool {pool.name}: provider"
    options = config.options
    _check_keys(options, {"master_address", "agent_args", "python", "advertise_address"}, where)
    python = options.get("python") or sys.executable
    if not isinstance(python, str) or not os.path.isabs(python):
        raise InvalidArgument(f"{where}.python: an absolute path to the agents' interpreter")
    advertise = options.get("advertise_address") or ctx.settings.host
    command = [
        python,
        "-m",
        "services.agent",
        "--master",
        master_address(ctx, options, where),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--log-format",
        ctx.settings.log_format,
        "--log-level",
        ctx.settings.log_level,
        # Every local agent is on the master's machine.
        "--advertise-address",
        str(advertise),
        "--kill-containers-on-exit",
        *_strings(options.get("agent_args", []), f"{where}.agent_args"),
    ]
    root = ctx.settings.state_dir / "provisioner" / pool.name
    return LocalProvider(pool.name, root, command, agent_environment(ctx))


def docker_provider(ctx: MasterContext, pool: PoolSettings, config: ProviderConfig) -> Provider:
    where = f"resource pool {pool.name}: provider"
    options = config.options
    check_docker_options(options, where)
    command = [
        "cairn-agent",
        "--master",
        master_address(ctx, options, where),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--log-format",
        ctx.settings.log_format,
        "--log-level",
        ctx.settings.log_level,
        # Host networking: the agent's address is the host's.
        "--advertise-address",
        ctx.settings.host,
        "--kill-containers-on-exit",
        "--runtime",
        "docker",
        *_strings(options.get("agent_args", []), f"{where}.agent_args"),
    ]
    return DockerProvider(
        pool.name,
        ctx.cluster_id,
        ctx.settings.state_dir / "provisioner" / pool.name,
        str(options.get("agent_docker_image") or DEFAULT_IMAGE),
        command,
        agents_cluster_token(ctx),
        str(options.get("docker_socket") or "/var/run/docker.sock"),
    )


def build_provisioners(ctx: MasterContext) -> list[PoolProvisioner]:
    """One provisioner per pool with a provider; InvalidArgument naming a wrong provider setting."""
    provisioners = []
    for pool in ctx.settings.pools:
        config = pool.provider
        if config is None:
            continue
        if config.type == "local":
            provider = local_provider(ctx, pool, config)
        elif config.type == "docker":
            provider = docker_provider(ctx, pool, config)
        elif config.type == "aws":
            where = f"resource pool {pool.name}: provider"
            default_master = f"{ctx.settings.host}:{ctx.settings.grpc_port}"
            provider = AwsProvider(AwsSettings.parse(config.options, pool.name, where, default_master))
        else:
            raise InvalidArgument(
                f"resource pool {pool.name}: provider.type: {config.type!r} is not available in this master"
            )
        provisioners.append(PoolProvisioner(ctx, pool.name, config, provider))
    return provisioners
