"""`cairn shell ...`: start a shell on the cluster (an SSH server in a task) and open it with the
system's `ssh` through the master's proxy (never an agent's port); the family's list, describe,
logs, kill and set-priority (task_kinds.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from cairn.api.v1 import shell_pb2 as spb
from cairn.cli.state import CliState, pass_state
from cairn.cli.task_kinds import (
    TaskKindCli,
    launch,
    launch_options,
    master_http,
    task_group,
    timeout_option,
    wait_ready,
)
from cairn.client.session import Session
from cairn.shell_tunnel import TOKEN_ENV

SHELL = TaskKindCli(
    spb, "Shell", "Shells: an SSH server on the cluster's slots (or on none), opened through the master."
)
shell = task_group(SHELL)


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
    http = master_http(session)
    proxy = f"{sys.executable} -m cairn.shell_tunnel {http.host} {http.port} %h{' --tls' if http.tls else ''}"
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
    wait_ready(session, SHELL, shell_id, timeout_s)
    shell = SHELL.task(session, shell_id)
    if not shell.private_key:
        raise click.ClickException(
            f"shell {shell_id} belongs to another user: only its owner or an admin may open it"
        )
    with _key_file(shell.private_key) as key_path:
        command = ssh_command(session, shell, key_path, extra)
        env = {**os.environ, TOKEN_ENV: session.token or ""}
        return subprocess.run(command, env=env, check=False).returncode


@shell.command()
@click.argument("ssh_args", nargs=-1)
@launch_options("A shell config (YAML): resources, environment.", "do not open it")
@timeout_option
@pass_state
def start(state: CliState, /, ssh_args: tuple[str, ...], timeout: float, **options: Any) -> None:
    """Start a shell and open it (SSH_ARGS: a command to run, or ssh options)."""
    session = state.session()
    launched = launch(session, SHELL, options)
    if launched is None:
        return
    click.echo(f"Launched shell {launched.id}", err=True)
    sys.exit(_open(session, launched.id, ssh_args, timeout))


@shell.command(name="open")
@click.argument("shell_id")
@click.argument("ssh_args", nargs=-1)
@timeout_option
@pass_state
def open_shell(state: CliState, shell_id: str, ssh_args: tuple[str, ...], timeout: float) -> None:
    """Open SHELL_ID with ssh (SSH_ARGS after `--`: a command to run instead of a login)."""
    sys.exit(_open(state.session(), shell_id, ssh_args, timeout))
