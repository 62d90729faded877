"""`cairn master info|config|logs`."""

from __future__ import annotations

import click
import grpc
import yaml

from cairn import DETERMINED_API_VERSION, __version__
from cairn.api.v1 import master_pb2, trial_pb2
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    bool_text,
    enum_label,
    key_value_table,
    print_json,
    print_json_line,
    print_renderable,
    struct_to_dict,
    timestamp_text,
)
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client.errors import CairnError, rpc_error_message
from cairn.wire import whole_numbers


@click.group(cls=AliasedGroup)
def master() -> None:
    """The master itself."""


def master_info_rows(info: master_pb2.GetMasterResponse, address: str) -> list[tuple[str, str]]:
    product = master_pb2.GetMasterResponse.Product.Name(info.product)
    return [
        ("Address", address),
        ("Cairn version", info.cairn_version),
        ("Determined API", info.version),
        ("Cluster name", info.cluster_name),
        ("Cluster ID", info.cluster_id),
        ("Master ID", info.master_id),
        ("gRPC port", str(info.grpc_port) if info.grpc_port else ""),
        ("HTTP port", str(info.http_port) if info.http_port else ""),
        ("Database", info.database),
        ("Product", enum_label(product, "PRODUCT_")),
        ("RBAC", bool_text(info.rbac_enabled)),
        ("Telemetry", bool_text(info.telemetry_enabled)),
        ("Feature switches", ", ".join(info.feature_switches)),
    ]


@click.command()
@pass_state
def version(state: CliState) -> None:
    """Show this client's version and, when it answers, the master's."""
    click.echo(f"cairn client {__version__} (Determined API {DETERMINED_API_VERSION})")
    try:
        response = state.session(auto_login=False).api.GetMaster(master_pb2.GetMasterRequest())
    except grpc.RpcError as exc:
        click.echo(f"master at {state.master.target}: {rpc_error_message(exc, state.master.target)}")
        return
    except CairnError as exc:
        click.echo(f"master at {state.master.target}: {exc}")
        return
    click.echo(
        f"master at {state.master.target}: cairn {response.cairn_version} (Determined API {response.version})"
    )


@master.command()
@json_option
@pass_state
def info(state: CliState, as_json: bool) -> None:
    """Show the master's version, cluster and ports."""
    response = state.session(auto_login=False).api.GetMaster(master_pb2.GetMasterRequest())
    if as_json:
        print_json(response)
        return
    print_renderable(key_value_table(master_info_rows(response, state.master.target)))


@master.command(name="config")
@json_option
@pass_state
def show_config(state: CliState, as_json: bool) -> None:
    """Show the master's effective settings, secrets hidden (admins only)."""
    response = state.session().api.GetMasterConfig(master_pb2.GetMasterConfigRequest())
    config = whole_numbers(struct_to_dict(response.config))
    if as_json:
        print_json(config)
        return
    click.echo(yaml.safe_dump(config, sort_keys=True, default_flow_style=False).rstrip())


def master_log_line(entry: master_pb2.LogEntry) -> str:
    level = enum_label(trial_pb2.LogLevel.Name(entry.level), "LOG_LEVEL_")
    return f"{timestamp_text(entry.timestamp)} [{level}] {entry.message}"


@master.command()
@click.option("-f", "--follow", is_flag=True, help="Keep printing new records (Ctrl-C stops).")
@click.option("--tail", type=click.IntRange(min=1), default=None, help="Start with the last N records.")
@json_option
@pass_state
def logs(state: CliState, follow: bool, tail: int | None, as_json: bool) -> None:
    """Print the master's own recent log records."""
    request = master_pb2.MasterLogsRequest(follow=follow, offset=-tail if tail else 0)
    for response in state.session().api.MasterLogs(request):
        if as_json:
            print_json_line(response.log_entry)
        else:
            click.echo(master_log_line(response.log_entry))
