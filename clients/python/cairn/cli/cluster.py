"""`cairn cluster up | down | status`: a whole Cairn cluster as local processes (cairn.localcluster)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.text import Text

from cairn.cli.errors import CliError
from cairn.cli.groups import AliasedGroup
from cairn.cli.output import build_table, console, print_renderable
from cairn.cli.state import json_option
from cairn.localcluster.paths import default_state_dir
from cairn.localcluster.plan import ClusterOptions, Provisioning, default_task_env
from cairn.localcluster.record import ClusterRecord, ProcessRecord
from cairn.localcluster.supervisor import (
    ClusterStartError,
    cluster_status,
    start_cluster,
    stop_cluster,
)

_state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the cluster keeps its record, logs and data (default $CAIRN_STATE_DIR or "
    "~/.local/share/cairn/cluster).",
)


@click.group(cls=AliasedGroup)
def cluster() -> None:
    """Run a Cairn cluster on this machine."""


def _progress(message: str) -> None:
    console(stderr=True).print(Text(message, style="dim"))


def _address(process: ProcessRecord, https: bool) -> str:
    address = process.grpc_address or ""
    if process.http_port:
        address += f", {'https' if https else 'http'}://{process.host}:{process.http_port}/"
    return address


def _processes_table(record: ClusterRecord) -> list[list[str]]:
    https = bool(record.master_ca_file)
    return [[p.name, str(p.pid), _address(p, https), p.log_path] for p in record.processes]


@cluster.command()
@click.option(
    "--agents",
    type=click.IntRange(min=0),
    default=None,
    help="Number of agents to start (default 1; none with --provision).",
)
@click.option("--slots", type=click.IntRange(min=0), default=1, show_default=True, help="Slots per agent.")
@click.option(
    "--db-url", default=None, help="Database URL for the master (default: SQLite in the state dir)."
)
@_state_dir_option
@click.option("--master-port", type=click.IntRange(0, 65535), default=8090, show_default=True)
@click.option("--http-port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--log-format", type=click.Choice(["console", "json"]), default="console", show_default=True)
@click.option("--log-level", default="INFO", show_default=True)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Seconds to wait for every process to be ready.",
)
@click.option(
    "--task-env",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The Python environment (a virtualenv's folder) trials run in (default $CAIRN_TASK_ENV, else "
    "the .venv-task that `make install` builds: Cairn's client, Determined's package, PyTorch).",
)
@click.option(
    "--task-user",
    default=None,
    help="With --runtime process: the unprivileged user trials run as, so they cannot read the cluster's "
    "token or state (needs root; default when run as root: 'cairn-task', created if missing; '' runs "
    "them as this user).",
)
@click.option(
    "--runtime",
    type=click.Choice(["process", "docker"]),
    default="process",
    show_default=True,
    help="Where the agents run trials: as processes in --task-env, or in Docker containers (dockerd "
    "must run here; the image is the config's environment.image, else the task image of `make task-image`).",
)
@click.option(
    "--default-image",
    default=None,
    help="With --runtime docker: the image of trials whose config names none (default: the task image).",
)
@click.option(
    "--standby-masters",
    type=click.IntRange(0, 3),
    default=0,
    show_default=True,
    help="Standby masters to run beside the master (PostgreSQL --db-url only): one takes over "
    "within seconds when the active master dies.",
)
@click.option(
    "--tls",
    is_flag=True,
    default=False,
    help="Serve the master's gRPC and HTTP ports over TLS with a self-signed certificate kept in the "
    "state dir (made once, reused while valid); agents and trials verify the master with it.",
)
@click.option(
    "--supervise/--no-supervise",
    default=True,
    show_default=True,
    help="Run a watchdog that restarts a crashed service (same address, with backoff).",
)
@click.option(
    "--provision",
    is_flag=True,
    default=False,
    help="Dynamic agents: the master starts agents (processes on this machine) as work waits and "
    "retires them when idle, between --min-agents and --max-agents.",
)
@click.option(
    "--provision-provider",
    type=click.Choice(["local", "docker"]),
    default="local",
    show_default=True,
    help="With --provision: agents as processes here (local), or as containers of --agent-image "
    "that run their trials as containers (docker; needs --runtime docker).",
)
@click.option(
    "--agent-image",
    default="cairn-service:latest",
    show_default=True,
    help="With --provision-provider docker: the service image (`make images`) agents run from.",
)
@click.option("--min-agents", type=click.IntRange(0, 64), default=0, show_default=True)
@click.option("--max-agents", type=click.IntRange(1, 64), default=3, show_default=True)
@click.option(
    "--max-idle-agent-period",
    default="5m",
    show_default=True,
    help="With --provision: how long an agent may run nothing before it is retired.",
)
def up(
    agents: int | None,
    slots: int,
    db_url: str | None,
    state_dir: Path | None,
    master_port: int,
    http_port: int,
    log_format: str,
    log_level: str,
    timeout: float,
    task_env: Path | None,
    task_user: str | None,
    runtime: str,
    default_image: str | None,
    standby_masters: int,
    tls: bool,
    supervise: bool,
    provision: bool,
    provision_provider: str,
    agent_image: str,
    min_agents: int,
    max_agents: int,
    max_idle_agent_period: str,
) -> None:
    """Start scheduler, searcher, checkpoint, master and agents as local processes, and a watchdog
    that restarts any of them that crashes. On a cluster that partly runs, start only what is
    missing (as it ran before: same ports and token)."""
    if task_env is not None and not (task_env / "bin" / "python3").exists():
        raise CliError(f"--task-env: {task_env / 'bin' / 'python3'} does not exist")
    if provision and agents:
        raise CliError("--agents: with --provision the master starts the agents; leave --agents out")
    if min_agents > max_agents:
        raise CliError(f"--min-agents: {min_agents} is more than --max-agents ({max_agents})")
    if provision and provision_provider == "docker" and runtime != "docker":
        raise CliError(
            "--provision-provider docker: its agents run trials as containers; add --runtime docker"
        )
    if provision and provision_provider == "docker" and tls:
        raise CliError(
            "--provision-provider docker: not with --tls (the agents' containers cannot read the CA)"
        )
    options = ClusterOptions(
        state_dir=(state_dir or default_state_dir()).expanduser().resolve(),
        agents=0 if provision else (1 if agents is None else agents),
        provision=Provisioning(
            min_agents=min_agents,
            max_agents=max_agents,
            max_idle_agent_period=max_idle_agent_period,
            provider=provision_provider,
            agent_image=agent_image,
        )
        if provision
        else None,
        slots_per_agent=slots,
        db_url=db_url,
        master_port=master_port,
        http_port=http_port,
        log_format=log_format,
        log_level=log_level,
        timeout_s=timeout,
        task_env=task_env.resolve() if task_env is not None else default_task_env(),
        task_user=task_user,
        supervise=supervise,
        standby_masters=standby_masters,
        runtime=runtime,
        default_image=default_image,
        tls=tls,
    )
    try:
        record = start_cluster(options, progress=_progress)
    except ClusterStartError as exc:
        err = console(stderr=True)
        err.print(Text(f"error: {exc}"))
        if exc.tail:
            err.print(Text(f"last {len(exc.tail)} lines of {exc.log_path}:"))
            for line in exc.tail:
                err.print(Text(f"  {line}"))
        raise click.exceptions.Exit(1) from None
    out = console()
    out.print(Text(f"Cairn cluster is up (state in {options.state_dir})"))
    print_renderable(build_table(("Process", "PID", "Address", "Log"), _processes_table(record)))
    out.print(Text("Use it:"))
    masters = [p.grpc_address for p in record.by_role("master") if p.grpc_address]
    if masters:
        # Every master's address: the CLI and SDK move to whichever leads.
        out.print(Text(f"  export CAIRN_MASTER={','.join(masters)}"))
    if record.master_ca_file:
        out.print(Text(f"  export CAIRN_MASTER_CERT={record.master_ca_file}"))
        if record.master_http_url:
            # Determined's own client verifies the master with this variable.
            out.print(Text(f"  export DET_MASTER={record.master_http_url.rstrip('/')}"))
            out.print(Text(f"  export DET_MASTER_CERT_FILE={record.master_ca_file}"))
    out.print(Text("  cairn user login"))
    if record.master_http_url:
        out.print(Text(f"  WebUI: {record.master_http_url}"))
    out.print(Text("Stop it with: cairn cluster down"))


@cluster.command()
@_state_dir_option
def down(state_dir: Path | None) -> None:
    """Stop the cluster: the watchdog, then the agents (they stop taking work and stop their trials,
    which does not count against the trials), then the master, then the rest; then any trial
    process an agent left behind."""
    directory = (state_dir or default_state_dir()).expanduser().resolve()
    report = stop_cluster(directory, progress=_progress)
    if not report.stopped_anything:
        suffix = "" if report.had_record else f" (no cluster recorded in {directory})"
        click.echo(f"Nothing was running{suffix}")
        return
    for process in report.processes:
        click.echo(f"{process.name} (pid {process.pid}): {process.how}")
    for swept in report.swept:
        click.echo(f"leftover {swept.what} process group {swept.pgid} (container {swept.container}): killed")
    click.echo("Cluster stopped")


def _process_state(running: bool, process: ProcessRecord) -> str:
    if running:
        return "running"
    return "gave up" if process.gave_up else "stopped"


@cluster.command()
@_state_dir_option
@json_option
def status(state_dir: Path | None, as_json: bool) -> None:
    """Show the recorded processes: alive or not, and their health. Exit 1 if any is down."""
    directory = (state_dir or default_state_dir()).expanduser().resolve()
    result = cluster_status(directory)
    if result is None:
        if as_json:
            click.echo(json.dumps({"stateDir": str(directory), "running": False, "processes": []}, indent=2))
        else:
            click.echo(f"No cluster recorded in {directory} (start one with `cairn cluster up`)")
        return
    if as_json:
        data = {
            "stateDir": str(directory),
            "running": result.healthy,
            "master": result.record.master_grpc_address,
            # With standby masters: every master's address (CAIRN_MASTER takes the list).
            "masters": [p.grpc_address for p in result.record.by_role("master") if p.grpc_address],
            "webui": result.record.master_http_url,
            # `cluster up --tls`: the CA file clients verify the master with (null: plaintext).
            "masterCert": result.record.master_ca_file,
            "processes": [
                {
                    "name": s.process.name,
                    "pid": s.process.pid,
                    "running": s.running,
                    "health": s.health,
                    "address": s.process.grpc_address,
                    "log": s.process.log_path,
                    "restarts": s.process.restarts,
                    "lastExit": s.process.last_exit,
                    "gaveUp": s.process.gave_up,
                }
                for s in result.processes
            ],
        }
        click.echo(json.dumps(data, indent=2))
    else:
        rows = [
            [
                s.process.name,
                str(s.process.pid),
                _process_state(s.running, s.process),
                s.health or "-",
                str(s.process.restarts),
                s.process.last_exit or "-",
                _address(s.process, https=bool(result.record.master_ca_file)),
                s.process.log_path,
            ]
            for s in result.processes
        ]
        headers = ("Process", "PID", "Process state", "Health", "Restarts", "Last exit", "Address", "Log")
        print_renderable(build_table(headers, rows))
        for s in result.processes:
            if s.process.gave_up:
                console(stderr=True).print(Text(f"{s.process.name}: not restarted: {s.process.gave_up}"))
    if not result.healthy:
        raise CliError("some processes of the cluster are not running or not healthy")
