"""`cairn user login | logout | whoami | list | create | change-password | activate | deactivate | edit`."""

from __future__ import annotations

import os
import sys

import click

from cairn.api.v1 import auth_pb2, common_pb2
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import bool_text, build_table, key_value_table, print_json, print_renderable
from cairn.cli.paging import fetch_all
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client import auth
from cairn.client.password import salt_and_hash
from cairn.client.session import Session
from cairn.printable import printable


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def user() -> None:
    """Log in and out of a master, and manage its users (admins)."""


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
    click.echo(f"Logged in to {state.master.target} as {printable(response.user.username or name)}")


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


USER_COLUMNS = ("ID", "Username", "Display name", "Admin", "Active", "Last login")


def _new_password(password_stdin: bool, username: str) -> str:
    """--password-stdin, then $CAIRN_PASSWORD, then a hidden prompt asked twice."""
    if password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if auth.PASSWORD_ENV in os.environ:
        return os.environ[auth.PASSWORD_ENV]
    entered: str = click.prompt(
        f"New password for {username}", hide_input=True, confirmation_prompt=True, err=True
    )
    return entered


def user_by_name(session: Session, username: str) -> auth_pb2.User:
    return session.api.GetUserByUsername(auth_pb2.GetUserByUsernameRequest(username=username)).user


def _patch(state: CliState, username: str, changes: auth_pb2.PatchUser) -> auth_pb2.User:
    session = state.session()
    target = user_by_name(session, username)
    return session.api.PatchUser(auth_pb2.PatchUserRequest(user_id=target.id, user=changes)).user


@user.command("list")
@click.option("--all", "-a", "include_inactive", is_flag=True, help="Include deactivated users.")
@json_option
@pass_state
def list_users(state: CliState, include_inactive: bool, as_json: bool) -> None:
    """List the master's users."""
    api = state.session().api

    def page(offset: int, limit: int) -> auth_pb2.GetUsersResponse:
        request = auth_pb2.GetUsersRequest(order_by=common_pb2.ORDER_BY_ASC, offset=offset, limit=limit)
        if not include_inactive:
            request.active = True
        return api.GetUsers(request)

    found = fetch_all(page, "users")
    if as_json:
        print_json(auth_pb2.GetUsersResponse(users=found))
        return
    rows = [
        [str(u.id), u.username, u.display_name, bool_text(u.admin), bool_text(u.active), u.last_auth_at]
        for u in found
    ]
    print_renderable(build_table(USER_COLUMNS, rows))


@user.command()
@click.argument("username")
@click.option("--admin", is_flag=True, help="Give the new user admin rights.")
@click.option("--display-name", default="", help="The name shown for the user.")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@pass_state
def create(state: CliState, username: str, admin: bool, display_name: str, password_stdin: bool) -> None:
    """Create user USERNAME (admins only)."""
    password = _new_password(password_stdin, username)
    wanted = auth_pb2.User(username=username, admin=admin, active=True, display_name=display_name)
    request = auth_pb2.PostUserRequest(user=wanted, password=salt_and_hash(password), is_hashed=True)
    created = state.session().api.PostUser(request).user
    click.echo(
        f"Created user {printable(created.username)} (id {created.id}{', admin' if created.admin else ''})"
    )


@user.command("change-password")
@click.argument("username", required=False)
@click.option("--password-stdin", is_flag=True, help="Read the new password from the first line of stdin.")
@pass_state
def change_password(state: CliState, username: str | None, password_stdin: bool) -> None:
    """Set the password of USERNAME (default: yourself); only admins change other users'."""
    session = state.session()
    target = user_by_name(session, username) if username else session.api.GetMe(auth_pb2.GetMeRequest()).user
    password = _new_password(password_stdin, target.username)
    changes = auth_pb2.PatchUser(password=salt_and_hash(password), is_hashed=True)
    session.api.PatchUser(auth_pb2.PatchUserRequest(user_id=target.id, user=changes))
    click.echo(f"Changed the password of {printable(target.username)}")


@user.command()
@click.argument("username")
@pass_state
def activate(state: CliState, username: str) -> None:
    """Let USERNAME log in again (admins only)."""
    _patch(state, username, auth_pb2.PatchUser(active=True))
    click.echo(f"Activated {username}")


@user.command()
@click.argument("username")
@pass_state
def deactivate(state: CliState, username: str) -> None:
    """Stop USERNAME from logging in and end their sessions (admins only)."""
    _patch(state, username, auth_pb2.PatchUser(active=False))
    click.echo(f"Deactivated {username}; their sessions have ended")


@user.command()
@click.argument("username")
@click.option("--display-name", default=None, help="A new display name.")
@click.option("--admin", type=bool, default=None, metavar="true|false", help="Grant or take admin rights.")
@click.option("--active", type=bool, default=None, metavar="true|false", help="Activate or deactivate.")
@pass_state
def edit(
    state: CliState, username: str, display_name: str | None, admin: bool | None, active: bool | None
) -> None:
    """Change USERNAME's display name, admin flag or active state."""
    changes = auth_pb2.PatchUser()
    if display_name is not None:
        changes.display_name = display_name
    if admin is not None:
        changes.admin = admin
    if active is not None:
        changes.active = active
    if not changes.ListFields():
        raise click.UsageError("nothing to change: give --display-name, --admin or --active")
    updated = _patch(state, username, changes)
    click.echo(
        f"Updated {printable(updated.username)}: "
        f"admin {bool_text(updated.admin)}, active {bool_text(updated.active)}"
    )
