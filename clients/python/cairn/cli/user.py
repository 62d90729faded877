"""`cairn user login | logout | whoami`."""

from __future__ import annotations

import os
import sys

import click

from cairn.api.v1 import auth_pb2
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import bool_text, key_value_table, print_json, print_renderable
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client import auth


@click.group(cls=AliasedGroup)
def user() -> None:
    """Log in and out of a master."""


def _read_password(password_stdin: bool, username: str) -> str:
    """--password-stdin, then $CAIRN_PASSWORD, then a hidden prompt (an empty password is allowed)."""
    if password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if auth.PASSWORD_ENV in os.environ:
        return os.environ[auth.PASSWORD_ENV]
    entered: str = click.prompt(
        f"Password for {username}", default="", hide_input=True, show_default=False, err=True
    )
    return entered


@user.command()
@click.argument("username", required=False, envvar=auth.USER_ENV)
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@pass_state
def login(state: CliState, username: str | None, password_stdin: bool) -> None:
    """Log in as USERNAME (default: determined) and remember the session for this master."""
    name = username or auth.DEFAULT_USER
    password = _read_password(password_stdin, name)
    response = auth.login(state.master, name, password, state.token_store())
    click.echo(f"Logged in to {state.master.target} as {response.user.username or name}")


@user.command()
@pass_state
def logout(state: CliState) -> None:
    """End the session of the active user on this master."""
    who = auth.logout(state.master, state.token_store())
    if who is None:
        click.echo(f"Not logged in to {state.master.target}")
    else:
        click.echo(f"Logged out {who} from {state.master.target}")


@user.command()
@json_option
@pass_state
def whoami(state: CliState, as_json: bool) -> None:
    """Show the user this session acts as."""
    response = state.session().api.GetMe(auth_pb2.GetMeRequest())
    if as_json:
        print_json(response)
        return
    who = response.user
    print_renderable(
        key_value_table(
            [
                ("User", who.username),
                ("ID", str(who.id)),
                ("Display name", who.display_name),
                ("Admin", bool_text(who.admin)),
                ("Active", bool_text(who.active)),
                ("Master", state.master.target),
            ]
        )
    )
