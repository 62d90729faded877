"""What every command shares: the master address (from -m/--master) and a lazily opened session."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from cairn.client.address import MasterEndpoints, resolve_master_address
from cairn.client.auth import open_session
from cairn.client.session import Session
from cairn.client.token_store import TokenStore


@dataclass
class CliState:
    master_flag: str | None = None
    _master: MasterEndpoints | None = field(default=None, init=False)
    _session: Session | None = field(default=None, init=False)

    @property
    def master(self) -> MasterEndpoints:
        # Parsed on first use, so a bad $CAIRN_MASTER does not break `cairn cluster ...`.
        if self._master is None:
            self._master = resolve_master_address(self.master_flag)
        return self._master

    @property
    def master_target(self) -> str:
        """The address for messages; the raw text when it does not parse."""
        try:
            return self.master.target
        except Exception:
            return self.master_flag or "the master"

    def token_store(self) -> TokenStore:
        return TokenStore.default()

    def session(self, auto_login: bool = True) -> Session:
        """`auto_login=False` for calls that need no user (GetMaster): no login is attempted."""
        if self._session is None:
            self._session = open_session(self.master, self.token_store(), auto_login=auto_login)
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


pass_state = click.make_pass_decorator(CliState, ensure=True)


def json_option(function: click.decorators.FC) -> click.decorators.FC:
    """--json on a read command: print the response messages as JSON instead of a table."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the response as JSON (lowerCamelCase field names)."
    )(function)
