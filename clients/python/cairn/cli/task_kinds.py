"""One family of commands for the interactive task kinds (`cairn cmd|notebook|shell|tensorboard`):
list, describe, kill, set-priority and logs for every kind, and open for a kind served over HTTP
(its URL through the master's proxy), written once here and given the kind's row (TaskKindCli:
its names, its Determined messages, what its list shows). Each kind's module adds only what is its
own: `cmd run`, `notebook start`, `shell start|open` (ssh), `tensorboard start`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import IO, Any, TypeVar

import click
import yaml
from rich.table import Table

from cairn.api.v1 import master_pb2, notebook_pb2, task_pb2
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    build_table,
    enum_label,
    key_value_table,
    print_json,
    print_json_line,
    print_renderable,
    timestamp_text,
)
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client.address import MasterAddress
from cairn.client.model_definition import build_model_definition
from cairn.client.session import Session
from cairn.tls import ca_from_environment
from cairn.wire import python_to_struct, struct_to_python, whole_numbers

READY_POLL_S = 1.0
FC = TypeVar("FC", bound=Callable[..., Any])
# A column of a kind's list: its header, and its cell of one task's message.
Column = tuple[str, Callable[[Any], str]]


def state_text(message: Any) -> str:
    return enum_label(task_pb2.Allocation.State.Name(message.state))


COLUMNS: tuple[Column, ...] = (
    ("ID", lambda m: m.id),
    ("Owner", lambda m: m.username),
    ("Description", lambda m: m.description),
    ("State", state_text),
    ("Exit status", lambda m: m.exit_status),
    ("Resource pool", lambda m: m.resource_pool),
    ("Started", lambda m: timestamp_text(m.start_time)),
)


@dataclass(frozen=True)
class TaskKindCli:
    """A kind as the CLI knows it: its protobuf module and its name in Determined's messages
    ("Notebook": GetNotebooksRequest, KillNotebook, notebook_id...; lower-cased, its group's name),
    its group's help, how messages name one (the group's name unless `noun`), what its list
    shows, and whether `open` prints its URL."""

    module: ModuleType
    message: str
    help: str
    noun: str = ""
    columns: tuple[Column, ...] = COLUMNS
    # Served over HTTP through the master's proxy: `open` prints its URL once it answers.
    http: bool = False

    @property
    def name(self) -> str:
        return self.message.lower()

    @property
    def one(self) -> str:
        return self.noun or self.name

    @property
    def many(self) -> str:
        return f"{self.one}s"

    @property
    def id_field(self) -> str:
        return f"{self.name}_id"

    def call(self, session: Session, rpc: str, **fields: Any) -> Any:
        """The kind's RPC named by `rpc` ("{}": its message name) with a request of `fields`."""
        name = rpc.format(self.message)
        return getattr(session.api, name)(getattr(self.module, f"{name}Request")(**fields))

    def task(self, session: Session, task_id: str) -> Any:
        """The kind's message of one task (its Get answer's)."""
        return getattr(self.call(session, "Get{}", **{self.id_field: task_id}), self.name)

    def launch(self, session: Session, **fields: Any) -> Any:
        """A new task of the kind (its Launch answer's message)."""
        return getattr(self.call(session, "Launch{}", **fields), self.name)


def timeout_option(function: FC) -> FC:
    """--timeout on a command that waits until a task's service answers."""
    return click.option(
        "--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True, help="Seconds to wait."
    )(function)


def launch_options(config_help: str, detach_help: str) -> Callable[[FC], FC]:
    """What a launch takes beside the kind's own: a context directory, a config file, slots, and
    whether to return at once (`detach_help`: what it does not wait for). The command takes their
    values as keyword arguments and hands them to `launch`."""
    options = (
        click.option(
            "--context",
            "context_dir",
            type=click.Path(exists=True, file_okay=False),
            help="Copied into its working directory.",
        ),
        click.option("--config-file", type=click.File("r"), help=config_help),
        click.option(
            "--slots", type=click.IntRange(min=0), default=None, help="Slots it needs (0: runs on no slot)."
        ),
        click.option("-d", "--detach", is_flag=True, help=f"Print its id and return; {detach_help}."),
    )

    def apply(function: FC) -> FC:
        for option in reversed(options):
            function = option(function)
        return function

    return apply


def launch(session: Session, kind: TaskKindCli, options: Mapping[str, Any], **config: Any) -> Any | None:
    """A new task of the kind from the launch_options' values (and `config` fields over its config
    file); its message, or None once its id is printed when the launch is detached."""
    context_dir = options["context_dir"]
    files = build_model_definition(context_dir) if context_dir else []
    config_struct = launch_config(options["config_file"], options["slots"], **config)
    launched = kind.launch(session, config=config_struct, files=files)
    if options["detach"]:
        click.echo(launched.id)
        return None
    return launched


def launch_config(config_file: IO[str] | None, slots: int | None = None, **fields: Any) -> Any:
    """A launch's config: the --config-file's mapping, with --slots and `fields` set over it."""
    config: dict[str, Any] = (yaml.safe_load(config_file.read()) or {}) if config_file is not None else {}
    if not isinstance(config, dict):
        raise click.UsageError("--config-file: not a YAML mapping")
    config.update(fields)
    if slots is not None:
        config.setdefault("resources", {})["slots"] = slots
    return python_to_struct(config)


def print_logs(session: Session, task_id: str, *, follow: bool, as_json: bool) -> None:
    for entry in session.api.TaskLogs(task_pb2.TaskLogsRequest(task_id=task_id, follow=follow)):
        if as_json:
            print_json_line(entry)
        else:
            click.echo(entry.log.rstrip("\r\n"))


def wait_ready(session: Session, kind: TaskKindCli, task_id: str, timeout_s: float) -> None:
    """Until the task's latest allocation says its service answers; a ClickException when the task
    ends first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        task = session.api.GetTask(notebook_pb2.GetTaskRequest(task_id=task_id)).task
        if task.HasField("end_time"):
            raise click.ClickException(
                f"{kind.one} {task_id} ended before it was ready (cairn task logs {task_id})"
            )
        if task.allocations and task.allocations[0].is_ready:  # the latest comes first
            return
        time.sleep(READY_POLL_S)
    raise click.ClickException(
        f"{kind.one} {task_id} was not ready within {timeout_s:g} s; it keeps starting"
    )


@dataclass(frozen=True)
class MasterHttp:
    """The master's HTTP address, where its proxy serves tasks: the host of the address the CLI
    dials, the HTTP port the master reports, TLS as the gRPC connection has it."""

    host: str
    port: int
    tls: bool

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"


def master_http(session: Session) -> MasterHttp:
    http_port = session.api.GetMaster(master_pb2.GetMasterRequest()).http_port
    master = session.master if isinstance(session.master, MasterAddress) else session.master.endpoints[0]
    return MasterHttp(master.host, http_port, bool(master.tls or ca_from_environment()))


def task_group(kind: TaskKindCli) -> AliasedGroup:
    """The kind's group with the family's commands; the kind's module adds its own to it."""
    group = AliasedGroup(name=kind.name, aliases={"ls": "list"}, help=kind.help)
    id_metavar = f"{kind.name.upper()}_ID"

    @group.command(name="list", help=f"List {kind.many}, oldest first.")
    @click.option("-a", "--all", "everyone", is_flag=True, help=f"Everyone's {kind.many}, not only yours.")
    @json_option
    @pass_state
    def list_tasks(state: CliState, everyone: bool, as_json: bool) -> None:
        session = state.session()
        mine = [session.username] if session.username and not everyone else []
        response = kind.call(session, "Get{}s", users=mine)
        if as_json:
            print_json(response)
            return
        listed = getattr(response, f"{kind.name}s")
        print_renderable(_table(kind, listed))

    @group.command(help=f"Show a {kind.one}: what its list shows, and its config.")
    @click.argument("task_id", metavar=id_metavar)
    @json_option
    @pass_state
    def describe(state: CliState, task_id: str, as_json: bool) -> None:
        response = kind.call(state.session(), "Get{}", **{kind.id_field: task_id})
        if as_json:
            print_json(response)
            return
        message = getattr(response, kind.name)
        rows = [(header, cell(message)) for header, cell in kind.columns]
        if kind.http:
            rows.append(("Proxy path", message.service_address))
        print_renderable(key_value_table(rows))
        config = whole_numbers(struct_to_python(response.config))
        click.echo(yaml.safe_dump(config, sort_keys=False).rstrip("\n"))

    @group.command(help=f"Kill {kind.many} (they end CANCELED).")
    @click.argument("task_ids", metavar=f"{id_metavar}...", nargs=-1, required=True)
    @pass_state
    def kill(state: CliState, task_ids: tuple[str, ...]) -> None:
        session = state.session()
        for task_id in task_ids:
            kind.call(session, "Kill{}", **{kind.id_field: task_id})
            click.echo(f"Killed {kind.one} {task_id}")

    @group.command(name="set-priority", help=f"Move a {kind.one} in its pool's queue (1-99, lower first).")
    @click.argument("task_id", metavar=id_metavar)
    @click.argument("priority", type=int)  # the master says what range it takes
    @pass_state
    def set_priority(state: CliState, task_id: str, priority: int) -> None:
        kind.call(state.session(), "Set{}Priority", **{kind.id_field: task_id}, priority=priority)
        click.echo(f"Set the priority of {kind.one} {task_id} to {priority}")

    @group.command(help=f"Print a {kind.one}'s logs (Ctrl-C stops following).")
    @click.argument("task_id", metavar=id_metavar)
    @click.option("-f", "--follow", is_flag=True, help=f"Keep printing new lines until the {kind.one} ends.")
    @json_option
    @pass_state
    def logs(state: CliState, task_id: str, follow: bool, as_json: bool) -> None:
        print_logs(state.session(), task_id, follow=follow, as_json=as_json)

    if kind.http:

        @group.command(name="open", help=f"Print a {kind.one}'s URL through the master, once it answers.")
        @click.argument("task_id", metavar=id_metavar)
        @timeout_option
        @pass_state
        def open_url(state: CliState, task_id: str, timeout: float) -> None:
            session = state.session()
            wait_ready(session, kind, task_id, timeout)
            click.echo(f"{master_http(session).url}{kind.task(session, task_id).service_address}")

    return group


def _table(kind: TaskKindCli, messages: Any) -> Table:
    rows = [[cell(message) for _, cell in kind.columns] for message in messages]
    return build_table([header for header, _ in kind.columns], rows)
