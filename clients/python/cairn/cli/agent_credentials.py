"""`cairn agent join-token create|list`, `cairn agent enrolment-secret rotate`, `cairn agent
credentials` and `cairn agent revoke ID`: how agents join and how one is shut out (README's
"Agents and their credentials")."""

from __future__ import annotations

import click

from cairn.api.v1 import agent_enrolment_pb2 as epb
from cairn.cli.durations import seconds_of
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import build_table, key_value_table, print_json, print_renderable, timestamp_text
from cairn.cli.state import CliState, json_option, pass_state


def parse_expiry(text: str) -> int:
    """Seconds of "90m", "24h", "7d", "1h30m" or a plain number of seconds."""
    seconds = seconds_of(text, bare_seconds=True)
    if seconds is None:
        raise click.BadParameter(f"{text.strip()[:64]!r} is not a duration (write it like 30m, 24h or 7d)")
    return int(seconds)


@click.group(name="join-token", cls=AliasedGroup, aliases={"ls": "list"})
def join_token() -> None:
    """One-time tokens agents enrol with."""


@join_token.command(name="create")
@click.option("--agent-id", default="", help="Only this agent id may enrol with it (default: any new id).")
@click.option("--expires", default="24h", show_default=True, help="How long it stays good (at most 30d).")
@json_option
@pass_state
def create_join_token(state: CliState, agent_id: str, expires: str, as_json: bool) -> None:
    """Make a join token: give it to one agent (--join-token-file FILE, or $CAIRN_AGENT_JOIN_TOKEN)."""
    answer = state.session().api.CreateAgentJoinToken(
        epb.CreateAgentJoinTokenRequest(agent_id=agent_id, expires_in_seconds=parse_expiry(expires))
    )
    if as_json:
        print_json(answer)
        return
    token = answer.join_token
    for_whom = f"agent {token.agent_id}" if token.agent_id else "any new agent id"
    click.echo(answer.token)
    click.echo(
        f"Join token {token.id} for {for_whom}, good once until {timestamp_text(token.expires_at)}. "
        "It is shown only now.",
        err=True,
    )


@join_token.command(name="list")
@click.option("--all", "show_all", is_flag=True, help="Also the tokens used or expired.")
@json_option
@pass_state
def list_join_tokens(state: CliState, show_all: bool, as_json: bool) -> None:
    """The join tokens made (never the tokens themselves)."""
    answer = state.session().api.GetAgentJoinTokens(epb.GetAgentJoinTokensRequest(show_inactive=show_all))
    if as_json:
        print_json(answer)
        return
    rows = [
        [
            str(t.id),
            t.agent_id or "(any)",
            t.created_by,
            timestamp_text(t.created_at),
            timestamp_text(t.expires_at),
            f"{t.used_by_agent} at {timestamp_text(t.used_at)}" if t.HasField("used_at") else "",
        ]
        for t in answer.join_tokens
    ]
    print_renderable(build_table(("ID", "Agent", "Made by", "Made", "Expires", "Used"), rows))


@click.group(name="enrolment-secret", cls=AliasedGroup)
def enrolment_secret() -> None:
    """The cluster's long-lived secret agents may enrol with."""


@enrolment_secret.command(name="rotate")
@json_option
@pass_state
def rotate(state: CliState, as_json: bool) -> None:
    """Make a new enrolment secret; the one before stops enrolling agents (enrolled ones stay)."""
    answer = state.session().api.RotateAgentEnrolmentSecret(epb.RotateAgentEnrolmentSecretRequest())
    if as_json:
        print_json(answer)
        return
    click.echo(answer.secret)
    click.echo(
        "The new enrolment secret, shown only now: give it to agents as --enrolment-secret-file FILE "
        "(or $CAIRN_AGENT_ENROLMENT_SECRET). The previous one enrols no agent from now on.",
        err=True,
    )


def _credential_row(c: epb.AgentCredential) -> list[str]:
    revoked = f"{timestamp_text(c.revoked_at)} by {c.revoked_by}" if c.revoked else ""
    return [c.agent_id, timestamp_text(c.issued_at), c.issued_with, revoked]


CREDENTIAL_COLUMNS = ("Agent ID", "Enrolled", "With", "Revoked")


@click.command(name="credentials")
@json_option
@pass_state
def credentials(state: CliState, as_json: bool) -> None:
    """The agents' own credentials: when each enrolled, with what, and which are revoked."""
    answer = state.session().api.GetAgentCredentials(epb.GetAgentCredentialsRequest())
    if as_json:
        print_json(answer)
        return
    print_renderable(build_table(CREDENTIAL_COLUMNS, [_credential_row(c) for c in answer.credentials]))


@click.command(name="revoke")
@click.argument("agent_id")
@json_option
@pass_state
def revoke(state: CliState, agent_id: str, as_json: bool) -> None:
    """Shut AGENT_ID out: its stream closes at once and it is refused from then on; its work is
    treated as lost (trials restart elsewhere as their restart policy allows)."""
    answer = state.session().api.RevokeAgent(epb.RevokeAgentRequest(agent_id=agent_id))
    if as_json:
        print_json(answer)
        return
    c = answer.credential
    print_renderable(
        key_value_table(
            [
                ("Revoked agent", c.agent_id),
                ("At", f"{timestamp_text(c.revoked_at)} by {c.revoked_by}"),
                ("Allocations lost", ", ".join(answer.lost_allocation_ids) or "none"),
            ]
        )
    )


def add_to(agent: click.Group) -> None:
    for command in (join_token, enrolment_secret, credentials, revoke):
        agent.add_command(command)
