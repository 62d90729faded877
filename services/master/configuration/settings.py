"""The master's settings: flags and environment resolved into one typed object with defaults."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.args import add_common_flags
from services.common.cluster_token import add_secret_file_flag
from services.master.configuration.config_file import AGENT_AUTH_MODES, ConfigFileError, load_master_config
from services.master.configuration.lease import LeaseTiming
from services.master.configuration.oidc import OidcSettings
from services.master.configuration.pools import PoolSettings

DEFAULT_GRPC_PORT = 8090
DEFAULT_HTTP_PORT = 8080


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    grpc_port: int = DEFAULT_GRPC_PORT
    http_port: int = DEFAULT_HTTP_PORT
    state_dir: Path = Path.home() / ".local" / "share" / "cairn" / "master"
    db_url: str = ""
    # Where checkpoints go by default when not <state_dir>/checkpoints: trials write there, so with
    # tasks run as another user it must lie outside the (owner-only) state directory.
    default_checkpoint_dir: Path | None = None
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
    # Where zero-slot tasks go when neither they nor their workspace name a pool (Determined's
    # default_aux_resource_pool); None: default_pool.
    default_aux_pool: str | None = None
    # Determined's feature_switches, from the config file (configuration/feature_switches.py).
    feature_switches: tuple[str, ...] = ()
    # How often the provisioner looks at each pool with a provider (Determined: 5 s).
    provisioner_period_s: float = float(os.environ.get("CAIRN_PROVISIONER_PERIOD", "5"))
    # Model definitions larger than this are refused (Determined allows about 95 MiB).
    max_model_definition_bytes: int = 96 * 1024 * 1024
    # The most trials one experiment may ask for (random/ASHA max_trials, a grid's point count):
    # each is a row, a searcher entry and an allocation request, created in the searcher's first
    # transaction when max_concurrent_trials is 0. 10,000 is beyond real searches (Determined's
    # examples use 16-1,000) yet keeps that transaction to seconds on SQLite.
    max_trials_per_experiment: int = 10_000
    # s3 endpoint_url at a loopback or link-local address (a cloud metadata service, the master's
    # own ports) is refused unless the operator allows it, e.g. for a MinIO on the same host.
    allow_local_storage_endpoints: bool = False
    # Whether an admin may link a user or workspace to uid 0 (their tasks would run as root).
    allow_root_agent_user: bool = False
    # Host paths under which users who are not admins may bind mount (admins may mount any path).
    bind_mount_allowed_paths: tuple[str, ...] = ()
    # How long a login lasts (Determined's sessions last 7 days); expired tokens are refused.
    session_ttl_seconds: int = 7 * 24 * 3600
    # Access tokens (`det token create`): the lifespan of one created without a lifespan, and the
    # longest one may ask for; -1: no end (Determined's default_lifespan_days, max_lifespan_days).
    token_default_lifespan_days: int = 30
    token_max_lifespan_days: int = -1
    # Failed logins before a user / a client address is paused, within the window (login_limiter.py).
    login_failures_per_user: int = 10
    login_failures_per_address: int = 30
    login_window_s: float = 60.0
    # Given to the built-in accounts (admin, determined) while they have no password (Determined's
    # initial_user_password); a master reachable beyond loopback needs them to have one.
    initial_user_password: str = ""
    # TLS for the gRPC and HTTP ports (both or neither): PEM files, the key readable by the master.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # A master listening beyond loopback without TLS refuses to start unless this is set
    # (domain/identity/exposure.py): tokens and passwords would cross the network in the clear.
    insecure_allow_plaintext: bool = False
    # gRPC server threads for ordinary calls (reports, agents' streams, CLI and REST calls).
    rpc_workers: int = 256
    # Followed log streams served at once, each on a thread of its own beside rpc_workers
    # (servicers/thread_slots.py): 512 is 2.5 times the 200 followers a busy team was seen to open,
    # and each costs an idle thread and a database poll a second.
    max_log_followers: int = 512
    # Agent streams served at once, each on a thread of its own beside the two above: an agent's
    # stream holds a server thread for as long as the agent is connected, so out of rpc_workers a
    # few hundred agents left nothing for other calls, and past the pool's size the next agents and
    # every other call waited for good (bench/sim_agents.py, at 1,000 agents). Threads are made as
    # streams open, so an unused slot costs nothing.
    max_agents: int = 2048
    # Calls waiting for an allocation's signals (a running trial's WatchAllocationSignals, a
    # stock Determined client's preemption long poll), each on a thread of its own beside the
    # three above (servicers/thread_slots.py): every running trial keeps one, so these are sized
    # for a large cluster's running trials; past them a watch is told the state and asks again
    # later, and a long poll is refused (Determined's client asks again 10 s later).
    max_signal_waiters: int = 4096
    # The HTTP server (gateway/http_limits.py): ordinary requests handled at once (more queue,
    # then get 503), and connections open at once (more are refused).
    http_workers: int = 64
    max_http_connections: int = 4096
    # Processes serving the public HTTP port (gateway/public_server.py): the master's own and
    # http_processes - 1 workers on the same socket. 1 on a small machine: see bench/README.md's
    # "REST served by several processes" for when more pay.
    http_processes: int = 1
    # How often an agent that has sent nothing else says it is alive. Its every message counts as
    # one, so this is the rate of an idle agent's messages: at 1,000 agents, 2 s cost the idle
    # master a few points of a core more than 5 s (bench/README.md, "Simulated agents"); three
    # intervals still fit in the timeout below.
    agent_heartbeat_interval_ms: int = 5_000
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
    # Webhooks (Determined's `webhooks:` block): the key their posts are signed with (empty: one
    # generated once and kept in the state directory, webhooks_key.py) and the WebUI's address
    # that Slack messages link to (empty: no links).
    webhook_signing_key: str = ""
    webhook_base_url: str = ""
    # How agents authenticate (servicers/agent_auth.py): "credentials", each its own (enrolled with
    # a join token or the enrolment secret), or "cluster_token", compatibility for agents that still
    # join with the shared cluster token (their own credentials work too).
    agent_auth: str = "credentials"
    # Seeds the cluster's agent enrolment secret on a cluster that has none (a deployment's agents
    # can then enrol with it from the first boot); afterwards `cairn agent enrolment-secret rotate`
    # alone changes it.
    agent_enrolment_secret: str = ""
    # The audit trail (domain/audit/): rows older than this many days, and rows past the newest
    # this many, are pruned; 0 keeps the trail without that bound.
    audit_retention_days: float = 90.0
    # Single sign-on with OpenID Connect (the config file's `oidc:` block, configuration/oidc.py);
    # None: off.
    oidc: OidcSettings | None = None
    audit_max_rows: int = 1_000_000
    # Tasks' system metrics (domain/metrics/system_metrics.py) are kept at full resolution this
    # many hours, then thinned to one sample per container every five minutes.
    system_metrics_full_hours: float = 24.0

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.state_dir / 'cairn.db'}"

    @property
    def checkpoint_dir(self) -> Path:
        """Where experiments without checkpoint_storage keep their checkpoints (shared_fs)."""
        return self.default_checkpoint_dir or self.state_dir / "checkpoints"


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
        "--checkpoint-dir",
        default=os.environ.get("CAIRN_CHECKPOINT_DIR"),
        help="where experiments without checkpoint_storage keep their checkpoints (shared_fs) "
        "(env CAIRN_CHECKPOINT_DIR; default <state-dir>/checkpoints)",
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
    parser.add_argument(
        "--max-trials-per-experiment",
        type=int,
        default=int(
            os.environ.get("CAIRN_MAX_TRIALS_PER_EXPERIMENT", str(Settings.max_trials_per_experiment))
        ),
        help="the most trials one experiment may create (max_trials, a grid's size)",
    )
    parser.add_argument(
        "--allow-local-storage-endpoints",
        action="store_true",
        default=os.environ.get("CAIRN_ALLOW_LOCAL_STORAGE_ENDPOINTS", "") in ("1", "true", "yes"),
        help="accept s3 endpoint_url at loopback and link-local addresses (refused by default)",
    )
    parser.add_argument(
        "--allow-root-agent-user",
        action="store_true",
        default=os.environ.get("CAIRN_ALLOW_ROOT_AGENT_USER", "") in ("1", "true", "yes"),
        help="let admins link users and workspaces to uid 0, so that their tasks run as root "
        "(env CAIRN_ALLOW_ROOT_AGENT_USER; refused by default)",
    )
    parser.add_argument(
        "--bind-mount-allow",
        action="append",
        default=[],
        metavar="HOST_PATH",
        help="a host path under which non-admin users may bind mount (repeatable; env "
        "CAIRN_BIND_MOUNT_ALLOW=/a:/b); admins may mount any path",
    )
    parser.add_argument(
        "--config-file",
        default=os.environ.get("CAIRN_MASTER_CONFIG") or None,
        metavar="PATH",
        help="Determined-style master.yaml with the cluster's resource_pools (their schedulers and "
        "providers for dynamic agents); env CAIRN_MASTER_CONFIG",
    )
    parser.add_argument(
        "--webhooks-signing-key",
        default=os.environ.get("CAIRN_WEBHOOKS_SIGNING_KEY")
        or os.environ.get("DET_WEBHOOKS_SIGNING_KEY", ""),
        help="the key webhook posts are signed with (X-Determined-AI-Signature); env "
        "CAIRN_WEBHOOKS_SIGNING_KEY or DET_WEBHOOKS_SIGNING_KEY; default: generated once, kept in the "
        "state dir",
    )
    parser.add_argument(
        "--webhooks-base-url",
        default=os.environ.get("CAIRN_WEBHOOKS_BASE_URL", ""),
        help="the WebUI's address, for links in Slack messages (env CAIRN_WEBHOOKS_BASE_URL)",
    )
    add_login_flags(parser)
    add_tls_flags(parser)
    add_agent_auth_flags(parser)
    add_audit_flags(parser)
    args = parser.parse_args(argv)
    check_login_flags(args, parser)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key: give both (a certificate and its key) or neither")
    check_audit_flags(args, parser)
    if args.max_trials_per_experiment < 1:
        parser.error("--max-trials-per-experiment: must be at least 1")
    allowed_mounts = [p for p in os.environ.get("CAIRN_BIND_MOUNT_ALLOW", "").split(":") if p]
    allowed_mounts += args.bind_mount_allow
    for path in allowed_mounts:
        if not os.path.isabs(path) or os.path.normpath(path) == "/":
            parser.error(f"--bind-mount-allow: {path!r} must be an absolute path other than /")
    from_env = os.environ.get("CAIRN_SEARCHER_PLUGINS", "").split(",")
    plugins = _plugins([*from_env, *args.searcher_plugin], parser)
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else Settings.state_dir
    pools: dict[str, Any] = {}
    agent_auth = args.agent_auth
    webhooks = {"webhook_signing_key": args.webhooks_signing_key, "webhook_base_url": args.webhooks_base_url}
    if args.config_file:
        try:
            config_file = load_master_config(Path(args.config_file).expanduser())
        except ConfigFileError as exc:
            parser.error(str(exc))
        pools = {
            "pools": config_file.pools,
            "default_pool": config_file.default_compute_pool or config_file.pools[0].name,
            "default_aux_pool": config_file.default_aux_pool,
            "feature_switches": config_file.feature_switches,
            "oidc": config_file.oidc,
        }
        if config_file.oidc is not None and args.http_processes > 1:
            # A login's pending state and its session are the master's process's alone (the
            # worker processes hold no domain state): one process serves single sign-on.
            parser.error("oidc: single sign-on is served with --http-processes 1 only")
        # A flag or an environment variable wins over the file.
        agent_auth = agent_auth or config_file.agent_auth
        webhooks = {
            "webhook_signing_key": args.webhooks_signing_key or config_file.webhook_signing_key,
            "webhook_base_url": args.webhooks_base_url or config_file.webhook_base_url,
        }
    return Settings(
        host=args.host,
        grpc_port=args.port,
        http_port=args.http_port,
        state_dir=state_dir.resolve(),
        default_checkpoint_dir=Path(args.checkpoint_dir).expanduser().resolve()
        if args.checkpoint_dir
        else None,
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
        session_ttl_seconds=args.session_ttl,
        token_default_lifespan_days=args.token_default_lifespan_days,
        token_max_lifespan_days=args.token_max_lifespan_days,
        login_failures_per_user=args.login_failures_per_user,
        login_failures_per_address=args.login_failures_per_address,
        login_window_s=args.login_window,
        initial_user_password=args.initial_user_password,
        max_log_followers=args.max_log_followers,
        max_agents=args.max_agents,
        max_signal_waiters=args.max_signal_waiters,
        http_workers=args.http_workers,
        max_http_connections=args.max_http_connections,
        http_processes=args.http_processes,
        max_trials_per_experiment=args.max_trials_per_experiment,
        allow_local_storage_endpoints=args.allow_local_storage_endpoints,
        allow_root_agent_user=args.allow_root_agent_user,
        bind_mount_allowed_paths=tuple(os.path.normpath(p) for p in allowed_mounts),
        tls_cert=Path(args.tls_cert).expanduser().resolve() if args.tls_cert else None,
        tls_key=Path(args.tls_key).expanduser().resolve() if args.tls_key else None,
        insecure_allow_plaintext=args.insecure_allow_plaintext,
        read_cache_entries=0 if os.environ.get("CAIRN_READ_CACHE", "on") == "off" else 1024,
        agent_auth=agent_auth or Settings.agent_auth,
        agent_enrolment_secret=args.agent_enrolment_secret or "",
        audit_retention_days=args.audit_retention_days,
        audit_max_rows=args.audit_max_rows,
        system_metrics_full_hours=args.system_metrics_full_hours,
        **pools,
        **webhooks,
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


# Each follower is a thread: past this the process's threads, not the setting, are the limit.
MAX_LOG_FOLLOWERS = 10_000
MAX_AGENTS = 20_000
MAX_SIGNAL_WAITERS = 50_000
MAX_HTTP_WORKERS = 4096
MAX_HTTP_CONNECTIONS = 100_000
# Each is a Python process of ~60 MB; beyond the cores of a big machine more only contend.
MAX_HTTP_PROCESSES = 64
# Sessions longer than a year are not sessions any more; Determined's last 7 days.
MAX_SESSION_TTL_S = 366 * 24 * 3600
# An access token's lifespan in days, at most: a hundred years, well inside what dates can hold.
MAX_TOKEN_LIFESPAN_DAYS = 36_500


def add_login_flags(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--session-ttl",
        type=int,
        default=int(env("CAIRN_SESSION_TTL", str(Settings.session_ttl_seconds))),
        help="seconds a login lasts before its token is refused (env CAIRN_SESSION_TTL; default 7 days)",
    )
    parser.add_argument(
        "--token-default-lifespan-days",
        type=int,
        default=int(env("CAIRN_TOKEN_DEFAULT_LIFESPAN_DAYS", str(Settings.token_default_lifespan_days))),
        help="days an access token created without a lifespan lasts "
        "(env CAIRN_TOKEN_DEFAULT_LIFESPAN_DAYS; default 30)",
    )
    parser.add_argument(
        "--token-max-lifespan-days",
        type=int,
        default=int(env("CAIRN_TOKEN_MAX_LIFESPAN_DAYS", str(Settings.token_max_lifespan_days))),
        help="the longest lifespan an access token may have, in days; -1: no limit, and tokens "
        "without an end may be made (env CAIRN_TOKEN_MAX_LIFESPAN_DAYS; default -1)",
    )
    parser.add_argument(
        "--login-failures-per-user",
        type=int,
        default=int(env("CAIRN_LOGIN_FAILURES_PER_USER", str(Settings.login_failures_per_user))),
        help="failed logins of one user within --login-window before its logins pause",
    )
    parser.add_argument(
        "--login-failures-per-address",
        type=int,
        default=int(env("CAIRN_LOGIN_FAILURES_PER_ADDRESS", str(Settings.login_failures_per_address))),
        help="failed logins from one client address within --login-window before its logins pause",
    )
    parser.add_argument(
        "--login-window",
        type=float,
        default=float(env("CAIRN_LOGIN_WINDOW", str(Settings.login_window_s))),
        help="seconds over which failed logins are counted",
    )
    parser.add_argument(
        "--max-log-followers",
        type=int,
        default=int(env("CAIRN_MAX_LOG_FOLLOWERS", str(Settings.max_log_followers))),
        help="followed log streams (`logs -f`) and live metric samples served at once; more are "
        "refused until one ends",
    )
    parser.add_argument(
        "--max-agents",
        type=int,
        default=int(env("CAIRN_MAX_AGENTS", str(Settings.max_agents))),
        help="agents connected at once, each stream on a thread of its own; more are refused (and "
        "retry) until one leaves",
    )
    parser.add_argument(
        "--max-signal-waiters",
        type=int,
        default=int(env("CAIRN_MAX_SIGNAL_WAITERS", str(Settings.max_signal_waiters))),
        help="calls waiting for allocation signals at once (running trials' signal watches, "
        "preemption long polls), each on a thread of its own; past them a watch asks again later",
    )
    parser.add_argument(
        "--http-workers",
        type=int,
        default=int(env("CAIRN_HTTP_WORKERS", str(Settings.http_workers))),
        help="HTTP requests handled at once (followed streams and the task proxy aside); more wait "
        "up to 10 s, then get 503",
    )
    parser.add_argument(
        "--max-http-connections",
        type=int,
        default=int(env("CAIRN_MAX_HTTP_CONNECTIONS", str(Settings.max_http_connections))),
        help="HTTP connections open at once; more are refused",
    )
    parser.add_argument(
        "--http-processes",
        type=int,
        default=int(env("CAIRN_HTTP_PROCESSES", str(Settings.http_processes))),
        help="processes serving the HTTP port: the master and N-1 workers that transcode REST to "
        "its gRPC port (env CAIRN_HTTP_PROCESSES); --http-workers and --max-http-connections are "
        "shared out among them",
    )
    parser.add_argument(
        "--initial-user-password",
        default=env("CAIRN_INITIAL_USER_PASSWORD", ""),
        help="password for the built-in accounts (admin, determined) while they have none; "
        "required when the master listens beyond loopback (env CAIRN_INITIAL_USER_PASSWORD)",
    )


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--tls-cert",
        default=env("CAIRN_TLS_CERT"),
        metavar="FILE",
        help="serve gRPC and HTTPS with this PEM certificate (chain) (env CAIRN_TLS_CERT); needs --tls-key",
    )
    parser.add_argument(
        "--tls-key",
        default=env("CAIRN_TLS_KEY"),
        metavar="FILE",
        help="the PEM private key of --tls-cert (env CAIRN_TLS_KEY)",
    )
    parser.add_argument(
        "--insecure-allow-plaintext",
        action="store_true",
        default=env("CAIRN_INSECURE_ALLOW_PLAINTEXT", "") in ("1", "true", "yes"),
        help="let a master that listens beyond loopback serve without TLS (refused by default: "
        "passwords and tokens would cross the network unencrypted)",
    )


def check_login_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if not 1 <= args.session_ttl <= MAX_SESSION_TTL_S:
        parser.error(
            f"--session-ttl: must be between 1 and {MAX_SESSION_TTL_S} seconds, not {args.session_ttl}"
        )
    if not 1 <= args.token_default_lifespan_days <= MAX_TOKEN_LIFESPAN_DAYS:
        parser.error(
            f"--token-default-lifespan-days: must be between 1 and {MAX_TOKEN_LIFESPAN_DAYS}, "
            f"not {args.token_default_lifespan_days}"
        )
    if args.token_max_lifespan_days != -1 and not (
        args.token_default_lifespan_days <= args.token_max_lifespan_days <= MAX_TOKEN_LIFESPAN_DAYS
    ):
        parser.error(
            "--token-max-lifespan-days: must be -1 (no limit) or between --token-default-lifespan-days "
            f"({args.token_default_lifespan_days}) and {MAX_TOKEN_LIFESPAN_DAYS}, "
            f"not {args.token_max_lifespan_days}"
        )
    for flag, value in (
        ("--login-failures-per-user", args.login_failures_per_user),
        ("--login-failures-per-address", args.login_failures_per_address),
    ):
        if value < 1:
            parser.error(f"{flag}: must be at least 1, not {value}")
    if not 1 <= args.max_log_followers <= MAX_LOG_FOLLOWERS:
        parser.error(
            f"--max-log-followers: must be between 1 and {MAX_LOG_FOLLOWERS}, not {args.max_log_followers}"
        )
    for flag, value, most in (
        ("--max-agents", args.max_agents, MAX_AGENTS),
        ("--max-signal-waiters", args.max_signal_waiters, MAX_SIGNAL_WAITERS),
        ("--http-workers", args.http_workers, MAX_HTTP_WORKERS),
        ("--max-http-connections", args.max_http_connections, MAX_HTTP_CONNECTIONS),
        ("--http-processes", args.http_processes, MAX_HTTP_PROCESSES),
    ):
        if not 1 <= value <= most:
            parser.error(f"{flag}: must be between 1 and {most}, not {value}")
    if not 0 < args.login_window <= 24 * 3600:
        parser.error(f"--login-window: must be between 0 and 86400 seconds, not {args.login_window:g}")


AGENT_ENROLMENT_SECRET_ENV = "CAIRN_AGENT_ENROLMENT_SECRET"


def add_agent_auth_flags(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    mode = env("CAIRN_AGENT_AUTH") or None
    if mode is not None and mode not in AGENT_AUTH_MODES:
        parser.error(f"CAIRN_AGENT_AUTH: {mode!r} is not one of {', '.join(AGENT_AUTH_MODES)}")
    parser.add_argument(
        "--agent-auth",
        choices=AGENT_AUTH_MODES,
        default=mode,
        help="credentials: every agent presents a credential of its own, got by enrolling with a join "
        "token or the enrolment secret (the default); cluster_token: compatibility mode, agents that "
        "present only the cluster token are taken too (env CAIRN_AGENT_AUTH; config file agent_auth)",
    )
    add_secret_file_flag(
        parser,
        "--agent-enrolment-secret-file",
        "agent_enrolment_secret",
        AGENT_ENROLMENT_SECRET_ENV,
        "file holding the agent enrolment secret this cluster starts with, where it has none yet; "
        "afterwards `cairn agent enrolment-secret rotate` changes it",
        os.environ,
    )


# A century of days, and a billion rows: past these a bound is no bound (0 says so plainly).
MAX_AUDIT_RETENTION_DAYS = 36_500
MAX_AUDIT_ROWS = 1_000_000_000
# An hour at least (a live chart's window), a year at most. Thinning bounds the table's growth to
# 288 rows a container a day past this; the rows go with their trial when it is deleted.
MIN_SYSTEM_METRICS_FULL_HOURS = 1.0
MAX_SYSTEM_METRICS_FULL_HOURS = 24.0 * 366


def add_audit_flags(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--audit-retention-days",
        type=float,
        default=float(env("CAIRN_AUDIT_RETENTION_DAYS", str(Settings.audit_retention_days))),
        help="days the audit trail keeps a record (env CAIRN_AUDIT_RETENTION_DAYS; 0: no age bound)",
    )
    parser.add_argument(
        "--audit-max-rows",
        type=int,
        default=int(env("CAIRN_AUDIT_MAX_ROWS", str(Settings.audit_max_rows))),
        help="records the audit trail keeps at most, the newest (env CAIRN_AUDIT_MAX_ROWS; 0: no bound)",
    )
    parser.add_argument(
        "--system-metrics-full-hours",
        type=float,
        default=env("CAIRN_SYSTEM_METRICS_FULL_HOURS", str(Settings.system_metrics_full_hours)),
        help="hours tasks' system metrics are kept as sampled, before they are thinned to one sample "
        "per container every five minutes (env CAIRN_SYSTEM_METRICS_FULL_HOURS)",
    )


def check_audit_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if not MIN_SYSTEM_METRICS_FULL_HOURS <= args.system_metrics_full_hours <= MAX_SYSTEM_METRICS_FULL_HOURS:
        parser.error(
            f"--system-metrics-full-hours: must be between {MIN_SYSTEM_METRICS_FULL_HOURS:g} and "
            f"{MAX_SYSTEM_METRICS_FULL_HOURS:g}, not {args.system_metrics_full_hours:g}"
        )
    if not 0 <= args.audit_retention_days <= MAX_AUDIT_RETENTION_DAYS:
        parser.error(
            f"--audit-retention-days: must be between 0 (no bound) and {MAX_AUDIT_RETENTION_DAYS}, "
            f"not {args.audit_retention_days:g}"
        )
    if not 0 <= args.audit_max_rows <= MAX_AUDIT_ROWS:
        parser.error(
            f"--audit-max-rows: must be between 0 (no bound) and {MAX_AUDIT_ROWS}, not {args.audit_max_rows}"
        )
