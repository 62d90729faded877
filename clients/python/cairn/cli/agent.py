"""`cairn agent ...` (alias `a`), `cairn slot list` (alias `s`), `cairn resource-pool list` (`rp`)."""

from __future__ import annotations

from collections.abc import Sequence

import click

from cairn.api.v1 import agent_pb2, common_pb2, resourcepool_pb2
from cairn.cli import agent_credentials
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import (
    bool_text,
    build_table,
    duration_text,
    enum_label,
    key_value_table,
    print_json,
    print_renderable,
    timestamp_text,
)
from cairn.cli.paging import fetch_all
from cairn.cli.state import CliState, json_option, pass_state
from cairn.client.session import Session

AGENT_COLUMNS = (
    "Agent ID",
    "Hostname",
    "Registered",
    "Slots",
    "Containers",
    "Resource Pool",
    "Enabled",
    "Draining",
    "Connected",
    "Addresses",
    "Version",
)
SLOT_COLUMNS = (
    "Agent ID",
    "Resource Pool",
    "Slot ID",
    "Type",
    "Brand",
    "Enabled",
    "Draining",
    "Health",
    "Allocation",
    "Container",
)
POOL_COLUMNS = (
    "Name",
    "Type",
    "Agents",
    "Slots used",
    "Slots available",
    "Slot type",
    "Scheduler",
    "Fitting",
    "Default priority",
    "Preemption",
    "Default",
    "Provider",
)
INSTANCE_COLUMNS = ("Instance", "Phase", "Launched", "Connected", "Idle since", "Drain", "Why launched")
EVENT_COLUMNS = ("At", "Action", "Instance", "Why")


def _agents(session: Session) -> list[agent_pb2.Agent]:
    def page(offset: int, limit: int) -> agent_pb2.GetAgentsResponse:
        return session.api.GetAgents(agent_pb2.GetAgentsRequest(offset=offset, limit=limit))

    return fetch_all(page, "agents")


def agent_row(agent: agent_pb2.Agent) -> list[str]:
    return [
        agent.id,
        agent.hostname,
        timestamp_text(agent.registered_time if agent.HasField("registered_time") else None),
        str(len(agent.slots)),
        str(len(agent.containers)),
        ", ".join(agent.resource_pools),
        bool_text(agent.enabled),
        bool_text(agent.draining),
        bool_text(agent.connected),
        ", ".join(agent.addresses),
        agent.cairn_version,
    ]


def _slot_sort_key(slot_id: str) -> tuple[int, str]:
    return (int(slot_id), "") if slot_id.isdigit() else (1 << 30, slot_id)


def slot_rows(agent: agent_pb2.Agent) -> list[list[str]]:
    rows = []
    for key in sorted(agent.slots, key=_slot_sort_key):
        slot = agent.slots[key]
        device = slot.device
        container = slot.container if slot.HasField("container") else None
        rows.append(
            [
                agent.id,
                ", ".join(agent.resource_pools),
                slot.id or key,
                enum_label(common_pb2.DeviceType.Name(device.type), "TYPE_"),
                device.brand,
                bool_text(slot.enabled),
                bool_text(slot.draining),
                # Why the slot is out of service after its device failed, until an admin enables it.
                f"unhealthy: {slot.unhealthy}" if slot.unhealthy else "ok",
                container.parent if container else "",
                container.id if container else "",
            ]
        )
    return rows


def pool_row(pool: resourcepool_pb2.ResourcePool) -> list[str]:
    rp = resourcepool_pb2.ResourcePool
    defaults = [
        kind
        for kind, flag in (("compute", pool.default_compute_pool), ("aux", pool.default_aux_pool))
        if flag
    ]
    return [
        pool.name,
        enum_label(rp.Type.Name(pool.type), "RESOURCE_POOL_TYPE_"),
        str(pool.num_agents),
        str(pool.slots_used),
        str(pool.slots_available),
        enum_label(common_pb2.DeviceType.Name(pool.slot_type), "TYPE_"),
        enum_label(rp.SchedulerType.Name(pool.scheduler_type), "SCHEDULER_TYPE_"),
        enum_label(rp.FittingPolicy.Name(pool.scheduler_fitting_policy), "FITTING_POLICY_"),
        str(pool.default_priority),
        bool_text(pool.preemption_enabled),
        ", ".join(defaults),
        _provider_text(pool),
    ]


def _provider_text(pool: resourcepool_pb2.ResourcePool) -> str:
    if not pool.HasField("provisioner"):
        return ""
    p = pool.provisioner
    return f"{p.provider} ({len(p.instances)} of {p.min_instances}-{p.max_instances})"


# ---- agent ----


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def agent() -> None:
    """Agents: the machines that run trials."""


@agent.command(name="list")
@json_option
@pass_state
def list_agents(state: CliState, as_json: bool) -> None:
    """List agents."""
    agents = _agents(state.session())
    if as_json:
        print_json(agent_pb2.GetAgentsResponse(agents=agents))
        return
    print_renderable(build_table(AGENT_COLUMNS, [agent_row(a) for a in agents]))


@agent.command()
@click.argument("agent_id")
@pass_state
def enable(state: CliState, agent_id: str) -> None:
    """Let the scheduler place work on AGENT_ID again."""
    state.session().api.EnableAgent(agent_pb2.EnableAgentRequest(agent_id=agent_id))
    click.echo(f"Enabled agent {agent_id}")


@agent.command()
@click.argument("agent_id")
@click.option("--drain", is_flag=True, help="Let running work finish instead of stopping it.")
@pass_state
def disable(state: CliState, agent_id: str, drain: bool) -> None:
    """Place no new work on AGENT_ID; stop what runs there unless --drain."""
    state.session().api.DisableAgent(agent_pb2.DisableAgentRequest(agent_id=agent_id, drain=drain))
    click.echo(f"Disabled agent {agent_id}" + (" (draining: running work may finish)" if drain else ""))


agent_credentials.add_to(agent)


# ---- slot ----


@click.group(cls=AliasedGroup, aliases={"ls": "list"})
def slot() -> None:
    """Slots: the GPUs or CPUs of agents."""


@slot.command(name="list")
@json_option
@pass_state
def list_slots(state: CliState, as_json: bool) -> None:
    """List every slot of every agent, with what runs on it."""
    agents = _agents(state.session())
    if as_json:
        print_json(agent_pb2.GetAgentsResponse(agents=agents))
        return
    rows = [row for a in agents for row in slot_rows(a)]
    print_renderable(build_table(SLOT_COLUMNS, rows))


# ---- resource pool ----


@click.group(name="resource-pool", cls=AliasedGroup, aliases={"ls": "list"})
def resource_pool() -> None:
    """Resource pools: groups of agents that work is scheduled onto."""


@resource_pool.command(name="list")
@json_option
@pass_state
def list_pools(state: CliState, as_json: bool) -> None:
    """List resource pools."""
    api = state.session().api

    def page(offset: int, limit: int) -> resourcepool_pb2.GetResourcePoolsResponse:
        return api.GetResourcePools(resourcepool_pb2.GetResourcePoolsRequest(offset=offset, limit=limit))

    pools = fetch_all(page, "resource_pools")
    if as_json:
        print_json(resourcepool_pb2.GetResourcePoolsResponse(resource_pools=pools))
        return
    print_renderable(build_table(POOL_COLUMNS, [pool_row(p) for p in pools]))


@resource_pool.command(name="describe")
@click.argument("name")
@json_option
@pass_state
def describe_pool(state: CliState, name: str, as_json: bool) -> None:
    """One pool: its settings and, for dynamic agents, its instances and the provisioner's recent
    decisions with their reasons."""
    api = state.session().api

    def page(offset: int, limit: int) -> resourcepool_pb2.GetResourcePoolsResponse:
        return api.GetResourcePools(resourcepool_pb2.GetResourcePoolsRequest(offset=offset, limit=limit))

    found = [p for p in fetch_all(page, "resource_pools") if p.name == name]
    if not found:
        raise click.ClickException(f"no resource pool {name!r}")
    pool = found[0]
    if as_json:
        print_json(pool)
        return
    print_renderable(key_value_table(zip(POOL_COLUMNS, pool_row(pool), strict=True)))
    if not pool.HasField("provisioner"):
        return
    p = pool.provisioner
    print_renderable(
        key_value_table(
            [
                ("Provider", p.provider),
                ("Instances", f"{len(p.instances)} (min {p.min_instances}, max {p.max_instances})"),
                ("Slots per instance", str(p.instance_slots)),
                ("Max idle period", duration_text(p.max_idle_agent_period_s)),
                ("Max starting period", duration_text(p.max_agent_starting_period_s)),
                ("Provider error", p.last_error or "none"),
            ]
        )
    )
    instance_rows = [
        [
            i.id,
            i.phase,
            timestamp_text(i.launched_at),
            timestamp_text(i.connected_at) if i.HasField("connected_at") else "",
            timestamp_text(i.idle_since) if i.HasField("idle_since") else "",
            i.drain_reason,
            i.reason,
        ]
        for i in p.instances
    ]
    print_renderable(build_table(INSTANCE_COLUMNS, instance_rows, title="Instances"))
    event_rows = [[timestamp_text(e.at), e.action, e.instance_id, e.message] for e in p.recent_events]
    print_renderable(build_table(EVENT_COLUMNS, event_rows, title="Recent decisions"))


SHARE_COLUMNS = ("Group", "Nominal", "Entitled", "Held", "Wanted", "Borrowed", "Lent")


def _share_rows(groups: Sequence[resourcepool_pb2.FairShare]) -> list[list[str]]:
    return [
        [
            g.name,
            str(g.nominal_slots),
            str(g.entitled_slots),
            str(g.held_slots),
            str(g.wanted_slots),
            str(g.borrowed_slots),
            str(g.lent_slots),
        ]
        for g in groups
    ]


@resource_pool.command(name="shares")
@click.argument("name")
@json_option
@pass_state
def pool_shares(state: CliState, name: str, as_json: bool) -> None:
    """How fair-share pool NAME is divided: per workspace and user, its share by weight (nominal),
    what its share gives it now (entitled), what it holds and wants, what it borrows and lends."""
    answer = state.session().api.GetResourcePoolShares(
        resourcepool_pb2.GetResourcePoolSharesRequest(resource_pool_name=name)
    )
    if as_json:
        print_json(answer)
        return
    if not answer.fair_share:
        click.echo(f"Pool {name} schedules by priority: it has no shares.")
        return
    print_renderable(build_table(SHARE_COLUMNS, _share_rows(answer.workspaces), title="Workspaces"))
    print_renderable(build_table(SHARE_COLUMNS, _share_rows(answer.users), title="Users"))
