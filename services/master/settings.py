"""The master's settings: flags and environment resolved into one typed object with defaults."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from services.common.args import add_common_flags
from services.master.leadership import LeaseTiming

DEFAULT_GRPC_PORT = 8090
DEFAULT_HTTP_PORT = 8080


@dataclass(frozen=True)
class PoolSettings:
    name: str
    description: str = ""
    fitting_policy: str = "best"
    preemption_enabled: bool = False
    default_priority: int = 42


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    grpc_port: int = DEFAULT_GRPC_PORT
    http_port: int = DEFAULT_HTTP_PORT
    state_dir: Path = Path.home() / ".local" / "share" / "cairn" / "master"
    db_url: str = ""
    scheduler_addr: str = "127.0.0.1:8091"
    searcher_addr: str = "127.0.0.1:8092"
    checkpoint_addr: str = "127.0.0.1:8093"
    cluster_token: str | None = None
    cluster_name: str = "cairn"
    log_format: str = "console"
    log_level: str = "INFO"
    ready_file: str | None = None
    pools: tuple[PoolSettings, ...] = field(default_factory=lambda: (PoolSettings("default"),))
    # Custom searchers known by name: `searcher: {name: custom, plugin: NAME}`.
    searcher_plugins: tuple[tuple[str, str], ...] = ()
    default_pool: str = "default"
    # Model definitions larger than this are refused (Determined allows about 95 MiB).
    max_model_definition_bytes: int = 96 * 1024 * 1024
    session_ttl_seconds: int = 7 * 24 * 3600
    agent_heartbeat_interval_ms: int = 2_000
    # An agent silent for this long is treated as disconnected.
    agent_heartbeat_timeout_s: float = 15.0
    # How long a disconnected agent's containers are kept before they count as lost.
    agent_reconnect_wait_s: float = 30.0
    # Pause/cancel/searcher-stop: seconds between the preemption signal and the kill.
    preemption_timeout_s: int = 300
    # Kill: seconds between SIGTERM and SIGKILL on the agent.
    kill_grace_s: int = 10
    # Passes run when something changed, at most this often (a pass is a few queries and one RPC).
    scheduling_interval_s: float = 0.05
    # Reads answered from memory while nothing changed (servicers/read_cache.py); env
    # CAIRN_READ_CACHE=off turns it off, e.g. to measure the queries themselves.
    read_cache_entries: int = 1024
    # PostgreSQL: the leader lease between an active master and its standbys (leadership.py).
    leader_lease: LeaseTiming = field(default_factory=LeaseTiming)

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.state_dir / 'cairn.db'}"

    @property
    def checkpoint_dir(self) -> Path:
        """Where experiments without checkpoint_storage keep their checkpoints (shared_fs)."""
        return self.state_dir / "checkpoints"


def parse_settings(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(prog="cairn-master", description="Cairn master")
    add_common_flags(parser, default_port=DEFAULT_GRPC_PORT)
    parser.add_argument(
        "--http-port",
        type=int,
        default=int(os.environ.get("CAIRN_HTTP_PORT", "8080")),
        help="HTTP port (REST, WebUI, /healthz, /metrics); 0 picks a free one",
    )
    parser.add_argument(
        "--state-dir",
        default=os.environ.get("CAIRN_STATE_DIR"),
        help="where the embedded database and default checkpoints live",
    )
    parser.add_argument(
        "--db-url",
        default=os.environ.get("CAIRN_DB_URL", ""),
        help="database URL (default: SQLite in the state dir); e.g. postgresql://...",
    )
    parser.add_argument("--scheduler-addr", default=os.environ.get("CAIRN_SCHEDULER_ADDR", "127.0.0.1:8091"))
    parser.add_argument("--searcher-addr", default=os.environ.get("CAIRN_SEARCHER_ADDR", "127.0.0.1:8092"))
    parser.add_argument(
        "--checkpoint-addr", default=os.environ.get("CAIRN_CHECKPOINT_ADDR", "127.0.0.1:8093")
    )
    parser.add_argument("--cluster-name", default=os.environ.get("CAIRN_CLUSTER_NAME", "cairn"))
    parser.add_argument(
        "--preemption-timeout",
        type=int,
        default=int(os.environ.get("CAIRN_PREEMPTION_TIMEOUT", "300")),
        help="seconds a paused/canceled trial has to checkpoint and exit before it is killed",
    )
    parser.add_argument(
        "--agent-reconnect-wait",
        type=float,
        default=float(os.environ.get("CAIRN_AGENT_RECONNECT_WAIT", "30")),
        help="seconds a disconnected agent's work is kept before it is rescheduled",
    )
    parser.add_argument(
        "--searcher-plugin",
        action="append",
        default=[],
        metavar="NAME=HOST:PORT",
        help="register a custom searcher under a name (repeatable; env CAIRN_SEARCHER_PLUGINS=a=h:p,b=h:p)",
    )
    args = parser.parse_args(argv)
    from_env = os.environ.get("CAIRN_SEARCHER_PLUGINS", "").split(",")
    plugins = _plugins([*from_env, *args.searcher_plugin], parser)
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else Settings.state_dir
    return Settings(
        host=args.host,
        grpc_port=args.port,
        http_port=args.http_port,
        state_dir=state_dir.resolve(),
        db_url=args.db_url,
        scheduler_addr=args.scheduler_addr,
        searcher_addr=args.searcher_addr,
        checkpoint_addr=args.checkpoint_addr,
        cluster_token=args.cluster_token,
        cluster_name=args.cluster_name,
        log_format=args.log_format,
        log_level=args.log_level,
        ready_file=args.ready_file,
        preemption_timeout_s=args.preemption_timeout,
        agent_reconnect_wait_s=args.agent_reconnect_wait,
        searcher_plugins=plugins,
        read_cache_entries=0 if os.environ.get("CAIRN_READ_CACHE", "on") == "off" else 1024,
    )


def _plugins(items: list[str], parser: argparse.ArgumentParser) -> tuple[tuple[str, str], ...]:
    result: dict[str, str] = {}
    for item in (i.strip() for i in items):
        if not item:
            continue
        name, _, address = item.partition("=")
        if not name or ":" not in address:
            parser.error(f"--searcher-plugin: expected NAME=HOST:PORT, got {item!r}")
        result[name] = address
    return tuple(sorted(result.items()))
