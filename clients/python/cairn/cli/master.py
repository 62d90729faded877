"""`cairn master info`."""

from __future__ import annotations

import click

from cairn.api.v1 import master_pb2
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import bool_text, enum_label, key_value_table, print_json, print_renderable
from cairn.cli.state import CliState, json_option, pass_state


@click.group(cls=AliasedGroup)
def master() -> None:
    """The master itself."""


def master_info_rows(info: master_pb2.GetMasterResponse, address: str) -> list[tuple[str, str]]:
    product = master_pb2.GetMasterResponse.Product.Name(info.product)
    return [
        ("Address", address),
        ("Version", info.version),
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
