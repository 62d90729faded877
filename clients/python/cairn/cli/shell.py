"""`cairn shell ...`: start a shell on the cluster (an SSH server in a task), open it with the
system's `ssh` through the master's proxy (never an agent's port), list and kill shells."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import click
import yaml
from google.protobuf import struct_pb2

from cairn.api.v1 import master_pb2, notebook_pb2, task_pb2
from cairn.api.v1 import shell_pb2 as spb
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import build_table, enum_label, print_json, print_renderable, timestamp_text
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client.address import MasterAddress
from cairn.client.model_definition import build_model_definition
from cairn.client.session import Session
from cairn.shell_tunnel import TOKEN_ENV
from cairn.tls import ca_from_environment

COLUMNS = ("ID", "Owner", "Description", "State", "Exit status", "Resource pool", "Started")
READY_POLL_S = 1.0


def _row(shell: spb.Shell) -> list[str]:
    return [
        shell.id,
        shell.username,
        shell.description,
        enum_label(task_pb2.Allocation.State.Name(shell.state)),
        shell.exit_status,
        shell.resource_pool,
        timestamp_text(shell.start_time),
    ]


def _wait_ready(session: Session, shell_id: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        task = session.api.GetTask(notebook_pb2.GetTaskRequest(task_id=shell_id)).task
        if task.HasField("end_time"):
            raise click.ClickException(f"shell {shell_id} has ended (cairn task logs {shell_id})")
        if task.allocations and task.allocations[-1].is_ready:
            return
        time.sleep(READY_POLL_S)
    raise click.ClickException(f"shell {shell_id} was not ready within {timeout_s:.0f} s")


@contextmanager
def _key_file(private_key: str) -> Iterator[str]:
    """The shell's private key in a file only this user can read, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="cairn-shell-") as folder:
        path = os.path.join(folder, "key")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(private_key)
        yield path


def ssh_command(session: Session, shell: spb.Shell, key_path: str, extra: tuple[str, ...]) -> list[str]:
    """ssh with a ProxyCommand that tunnels through the master's HTTP port (cairn.shell_tunnel)."""
    http_port = session.api.GetMaster(master_pb2.GetMasterRequest()).http_port
    master = session.master if isinstance(session.master, MasterAddress) else session.master.endpoints[0]
    tls = " --tls" if (master.tls or ca_from_environment()) else ""
    proxy = f"{sys.executable} -m cairn.shell_tunnel {master.host} {http_port} %h{tls}"
    user = shell.agent_user_group.fields["user"].string_value or "root"
    return [
        "ssh",
        "-o",
        f"ProxyCommand={proxy}",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "IdentitiesOnly=yes",
        "-i",
        key_path,
        *(["-tt"] if sys.stdin.isatty() else []),
        f"{user}@{shell.id}",
        *extra,
    ]


def _open(session: Session, shell_id: str, extra: tuple[str, ...], timeout_s: float) -> int:
    if shutil.which("ssh") is None:
        raise click.ClickException("ssh is not installed: `cairn shell open` runs the system's ssh client")
    _wait_ready(session, shell_id, timeout_s)
    shell = session.api.GetShell(spb.GetShellRequest(shell_id=shell_id)).shell
    if not shell.private_key:
        raise click.ClickException(
            f"shell {shell_id} belongs to another user: only its owner or an admin may open it"
        )
    with _key_file(shell.private_key) as key_path:
        command = ssh_command(session, shell, key_path, extra)
        env = {**os.environ, TOKEN_ENV: session.token or ""}
        return subprocess.run(command, env=env, check=False).returncode


@click.group(name="shell", cls=AliasedGroup, aliases={"ls": "list"})
def shell() -> None:
    """Shells: an SSH server on the cluster's slots (or on none), opened through the master."""


@shell.command()
@click.argument("ssh_args", nargs=-1)
@click.option(
    "--context",
    "context_dir",
    type=click.Path(exists=True, file_okay=False),
    help="Copied into its working directory.",
)
@click.option("--config-file", type=click.File("r"), help="A shell config (YAML): resources, environment.")
@click.option(
    "--slots", type=click.IntRange(min=0), default=None, help="Slots it needs (0: runs on no slot)."
)
@click.option("-d", "--detach", is_flag=True, help="Print its id and return; do not open it.")
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True, help="Seconds to wait."
)
@pass_state
def start(
    state: CliState,
    ssh_args: tuple[str, ...],
    context_dir: str | None,
    config_file: IO[str] | None,
    slots: int | None,
    detach: bool,
    timeout: float,
) -> None:
    """Start a shell and open it (SSH_ARGS: a command to run, or ssh options)."""
    config: dict[str, Any] = (yaml.safe_load(config_file.read()) or {}) if config_file is not None else {}
    if not isinstance(config, dict):
        raise click.UsageError("--config-file: not a YAML mapping")
    if slots is not None:
        config.setdefault("resources", {})["slots"] = slots
    struct = struct_pb2.Struct()
    struct.update(config)
    request = spb.LaunchShellRequest(
        config=struct, files=build_model_definition(context_dir) if context_dir else []
    )
    session = state.session()
    launched = session.api.LaunchShell(request).shell
    if detach:
        click.echo(launched.id)
        return
    click.echo(f"Launched shell {launched.id}", err=True)
    sys.exit(_open(session, launched.id, ssh_args, timeout))


@shell.command(name="open")
@click.argument("shell_id")
@click.argument("ssh_args", nargs=-1)
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True, help="Seconds to wait."
)
@pass_state
def open_shell(state: CliState, shell_id: str, ssh_args: tuple[str, ...], timeout: float) -> None:
    """Open SHELL_ID with ssh (SSH_ARGS after `--`: a command to run instead of a login)."""
    sys.exit(_open(state.session(), shell_id, ssh_args, timeout))


@shell.command(name="list")
@click.option("-a", "--all", "everyone", is_flag=True, help="Everyone's shells, not only yours.")
@json_option
@pass_state
def list_shells(state: CliState, everyone: bool, as_json: bool) -> None:
    """List shells, oldest first."""
    session = state.session()
    mine = [session.username] if session.username and not everyone else []
    response = session.api.GetShells(spb.GetShellsRequest(users=mine))
    if as_json:
        print_json(response)
        return
    print_renderable(build_table(COLUMNS, [_row(s) for s in response.shells]))


@shell.command()
@click.argument("shell_ids", nargs=-1, required=True)
@pass_state
def kill(state: CliState, shell_ids: tuple[str, ...]) -> None:
    """Kill shells (they end CANCELED)."""
    session = state.session()
    for shell_id in shell_ids:
        session.api.KillShell(spb.KillShellRequest(shell_id=shell_id))
        click.echo(f"Killed shell {shell_id}")
