"""Turning any failure into one readable line on stderr and an exit code — never a traceback."""

from __future__ import annotations

import os

import click
import grpc

from cairn.client.errors import CairnError, from_rpc_error, one_line
from cairn.printable import printable_lines

DEBUG_ENV = "CAIRN_DEBUG"
EXIT_INTERRUPTED = 130


class CliError(click.ClickException):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        # click declares exit_code a class variable; this error carries its own per instance.
        vars(self)["exit_code"] = exit_code

    def show(self, file: object = None) -> None:
        # The master's messages quote names users chose: shown escaped, never acted on.
        click.echo(f"error: {printable_lines(self.message)}", err=True)


def os_error_message(exc: OSError) -> str:
    reason = exc.strerror or str(exc) or type(exc).__name__
    target = exc.filename
    if target is not None:
        return f"{target}: {reason}"
    return reason


def translate(exc: BaseException, master: str) -> click.ClickException | click.exceptions.Exit | None:
    """The click exception to raise instead of `exc`; None when `exc` is not ours to translate."""
    if isinstance(exc, grpc.RpcError):
        return CliError(str(from_rpc_error(exc, master)))
    if isinstance(exc, CairnError):
        return CliError(one_line(str(exc)), exc.exit_code)
    if isinstance(exc, BrokenPipeError):
        # `cairn ... | head`: the reader has gone; stop quietly.
        return click.exceptions.Exit(1)
    if isinstance(exc, OSError):
        return CliError(os_error_message(exc))
    if isinstance(exc, KeyboardInterrupt):
        return click.exceptions.Exit(EXIT_INTERRUPTED)
    if isinstance(exc, click.exceptions.Abort) and isinstance(exc.__context__, KeyboardInterrupt):
        return click.exceptions.Exit(EXIT_INTERRUPTED)
    return None


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0", "false")
