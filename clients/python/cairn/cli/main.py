"""The `cairn` command: the root group, its global options, and the top-level error handler."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click
import grpc

from cairn.cli.agent import agent, resource_pool, slot
from cairn.cli.audit import audit
from cairn.cli.checkpoint import checkpoint
from cairn.cli.cluster import cluster
from cairn.cli.command import command
from cairn.cli.errors import EXIT_INTERRUPTED, CliError, debug_enabled, translate
from cairn.cli.experiment import experiment
from cairn.cli.experiment_edits import label, set_group
from cairn.cli.groups import RootGroup
from cairn.cli.job import job
from cairn.cli.master import master, version
from cairn.cli.model import model
from cairn.cli.notebook import notebook
from cairn.cli.project import project
from cairn.cli.shell import shell
from cairn.cli.state import CliState
from cairn.cli.template import template
from cairn.cli.tensorboard import tensorboard
from cairn.cli.trial import trial
from cairn.cli.user import user
from cairn.cli.workspace import workspace
from cairn.client.address import DEFAULT_MASTER, MASTER_ENV
from cairn.client.errors import CairnError
from cairn.tls import MASTER_CERT_ENV, read_ca_bundle

# Determined's short names (`det e list`), plus `rp` for resource pools.
COMMAND_ALIASES = {
    "e": "experiment",
    "t": "trial",
    "c": "checkpoint",
    "a": "agent",
    "s": "slot",
    "rp": "resource-pool",
    "u": "user",
    "tpl": "template",
    "j": "job",
    "m": "model",
    "w": "workspace",
    "p": "project",
    "cmd": "command",
}


@click.group(cls=RootGroup, aliases=COMMAND_ALIASES, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-m",
    "--master",
    "master_address",
    envvar=MASTER_ENV,
    default=None,
    metavar="HOST:PORT",
    help=f"The master's gRPC address (env {MASTER_ENV}; default {DEFAULT_MASTER}).",
)
@click.option(
    "--master-cert",
    "master_cert",
    envvar=MASTER_CERT_ENV,
    default=None,
    metavar="FILE",
    help=f"Connect over TLS, trusting the CA certificates in FILE (env {MASTER_CERT_ENV}).",
)
@click.version_option(package_name="cairn", prog_name="cairn")
@click.pass_context
def cli(ctx: click.Context, master_address: str | None, master_cert: str | None) -> None:
    """Cairn: train deep-learning models on a cluster."""
    if master_cert:
        read_ca_bundle(master_cert)  # a bad file is named now, not as a failed handshake later
        # Every session a command opens (login, logout, the command's own) reads the CA from here.
        os.environ[MASTER_CERT_ENV] = os.path.abspath(os.path.expanduser(master_cert))
    state = ctx.ensure_object(CliState)
    state.master_flag = master_address
    ctx.call_on_close(state.close)


COMMANDS = (
    user,
    master,
    version,
    workspace,
    project,
    experiment,
    trial,
    checkpoint,
    model,
    template,
    agent,
    slot,
    resource_pool,
    job,
    command,
    notebook,
    shell,
    tensorboard,
    cluster,
    audit,
)
for group in COMMANDS:
    cli.add_command(group)
# `cairn experiment set|label ...` live in their own module.
experiment.add_command(set_group)
experiment.add_command(label)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code; failures become one line on stderr."""
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None, prog_name="cairn", standalone_mode=False
        )
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        click.echo("Aborted", err=True)
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (grpc.RpcError, CairnError, OSError, KeyboardInterrupt) as exc:
        # Raised outside a command (the root group translates those raised inside one).
        replacement = translate(exc, "the master")
        if isinstance(replacement, click.ClickException):
            replacement.show()
            return replacement.exit_code
        return replacement.exit_code if replacement is not None else 1
    except Exception as exc:
        if debug_enabled():
            raise
        CliError(f"unexpected {type(exc).__name__}: {exc} (set CAIRN_DEBUG=1 for the traceback)").show()
        return 1
    return result if isinstance(result, int) else 0


def main() -> None:
    code = run()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader has gone (`cairn e list | head`): point stdout at /dev/null so the
        # interpreter's own flush at exit does not print a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = code or 1
    sys.exit(code)


if __name__ == "__main__":
    main()
