"""`cairn audit list`: the master's audit trail, who changed what and from where (admins)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click
from google.protobuf.timestamp_pb2 import Timestamp

from cairn.api.v1 import audit_pb2
from cairn.cli.durations import seconds_of
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import build_table, print_json, print_renderable, timestamp_text
from cairn.cli.state import CliState, json_option, pass_state

# The master answers at most this many events a call; --limit pages through more.
PAGE = 1000
MAX_LIMIT = 100_000
COLUMNS = ("ID", "Time", "Who", "Method", "Targets", "Outcome", "From")


def parse_moment(text: str, now: datetime | None = None) -> datetime:
    """A time as given: an age back from now ("30m", "2h", "7d") or an ISO 8601 date or time
    ("2026-12-01", "2026-12-01T12:00:00Z"; without a zone, this machine's)."""
    age = seconds_of(text)
    if age is not None:
        return (now or datetime.now(UTC)) - timedelta(seconds=age)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected an age (30m, 2h, 7d) or a date or time (2026-12-01, 2026-12-01T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # this machine's zone
    return moment.astimezone(UTC)


class Moment(click.ParamType):
    name = "TIME"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_moment(str(value))
        except click.BadParameter as exc:
            self.fail(exc.message, param, ctx)


def _stamp(moment: datetime | None) -> Timestamp | None:
    if moment is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def who_text(event: audit_pb2.AuditEvent) -> str:
    if event.actor == "allocation":
        return f"allocation {event.allocation_id}"
    if event.actor == "anonymous":
        return f"{event.username} (not logged in)" if event.username else "(not logged in)"
    return event.username or event.actor


def event_row(event: audit_pb2.AuditEvent) -> list[str]:
    targets = " ".join(f"{key}={value}" for key, value in event.targets.items())
    outcome = event.outcome if event.outcome == "OK" else f"{event.outcome}: {event.error}".rstrip(": ")
    where = f"{event.address} ({event.transport})" if event.transport else event.address
    return [str(event.id), timestamp_text(event.time), who_text(event), event.method, targets, outcome, where]


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def audit() -> None:
    """The master's audit trail: every change made through its API, who made it, from where and
    how it ended (admins only)."""


@audit.command("list")
@click.option(
    "-u", "--user", "username", default="", help="Only this user's calls (failed logins by the name too)."
)
@click.option(
    "--since", type=Moment(), default=None, help="Only calls since TIME: 30m, 2h, 7d, or 2026-12-01T12:00Z."
)
@click.option("--until", type=Moment(), default=None, help="Only calls before TIME (the same forms).")
@click.option("--method", default="", help="Only RPCs whose name contains this: Kill, PostUser, Login.")
@click.option("--outcome", default="", help="ok, failed, or a status code's name (PERMISSION_DENIED).")
@click.option("--target", default="", help="Only calls that named this object: experiment_id=7.")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIMIT),
    default=100,
    show_default=True,
    help="The newest this many matching calls.",
)
@json_option
@pass_state
def list_events(
    state: CliState,
    username: str,
    since: datetime | None,
    until: datetime | None,
    method: str,
    outcome: str,
    target: str,
    limit: int,
    as_json: bool,
) -> None:
    """List the audit trail, newest first."""
    api = state.session().api
    found: list[audit_pb2.AuditEvent] = []
    before_id = 0
    while len(found) < limit:
        request = audit_pb2.GetAuditEventsRequest(
            username=username,
            since=_stamp(since),
            until=_stamp(until),
            method=method,
            outcome=outcome,
            target=target,
            limit=min(PAGE, limit - len(found)),
            before_id=before_id,
        )
        response = api.GetAuditEvents(request)
        found.extend(response.events)
        before_id = response.next_before_id
        if not before_id:
            break
    if as_json:
        print_json(audit_pb2.GetAuditEventsResponse(events=found, next_before_id=before_id))
        return
    print_renderable(build_table(COLUMNS, (event_row(e) for e in found)))
