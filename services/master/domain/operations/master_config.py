"""The master's effective settings as `det master config` shows them (Determined's GetMasterConfig).

Settings are named as Determined's master config names them where Determined has the same setting
(`port`, `db`, `log`, `checkpoint_storage`, `resource_manager`, `resource_pools`, `cluster_name`)
and by Cairn's own names otherwise. Secrets never leave: the database password (also inside the
URL), the cluster token and any key of the default checkpoint storage show as "********", as in
Determined; a last redaction pass over the whole document catches what a later setting may add.
Only admins may read it, as in Determined (its CanGetMasterConfig).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from services.common.principal import Principal
from services.common.redaction import HIDDEN, redact, redact_url
from services.master.configuration.pools import PoolSettings
from services.master.configuration.settings import Settings
from services.master.domain.experiments.creation import default_storage
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext

# Every field of Settings that effective_config shows (tests hold the two together, so a new
# setting is either shown here or the test says it was forgotten).
SHOWN_SETTINGS = frozenset(
    {
        "webhook_signing_key",
        "webhook_base_url",
        "agent_auth",
        "agent_enrolment_secret",
        "oidc",
        "host",
        "grpc_port",
        "http_port",
        "state_dir",
        "db_url",
        "scheduler_addr",
        "searcher_addr",
        "checkpoint_addr",
        "cluster_token",
        "cluster_name",
        "log_format",
        "log_level",
        "ready_file",
        "pools",
        "searcher_plugins",
        "default_pool",
        "max_model_definition_bytes",
        "max_trials_per_experiment",
        "allow_local_storage_endpoints",
        "allow_root_agent_user",
        "bind_mount_allowed_paths",
        "session_ttl_seconds",
        "token_default_lifespan_days",
        "token_max_lifespan_days",
        "login_failures_per_user",
        "login_failures_per_address",
        "login_window_s",
        "initial_user_password",
        "rpc_workers",
        "max_log_followers",
        "max_agents",
        "max_signal_waiters",
        "http_workers",
        "http_processes",
        "max_http_connections",
        "agent_heartbeat_interval_ms",
        "agent_heartbeat_timeout_s",
        "agent_reconnect_wait_s",
        "preemption_timeout_s",
        "kill_grace_s",
        "scheduling_interval_s",
        "read_cache_entries",
        "leader_lease",
        "tls_cert",
        "tls_key",
        "insecure_allow_plaintext",
        "default_checkpoint_dir",
        "default_aux_pool",
        "provisioner_period_s",
        "feature_switches",
        "audit_retention_days",
        "audit_max_rows",
        "system_metrics_full_hours",
    }
)


def check_can_read(principal: Principal) -> None:
    access.check_cluster(principal, Permission.VIEW_MASTER_CONFIG, "read the master's config")


def database_section(url: str) -> dict[str, Any]:
    """Determined's `db` section (user, password, host, port, name, ssl_mode) of a database URL,
    with the password hidden; `url` is the URL as given, its password hidden too."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return {"url": redact_url(url)}
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return {"type": "sqlite", "name": parsed.database or "", "url": redact_url(url)}
    query = dict(parsed.query)
    return {
        "type": backend,
        "user": parsed.username or "",
        "password": HIDDEN if parsed.password else "",
        "host": parsed.host or str(query.get("host") or ""),
        "port": str(parsed.port or ""),
        "name": parsed.database or "",
        "ssl_mode": str(query.get("sslmode") or ""),
        "url": redact_url(url),
    }


def _pool(pool: PoolSettings) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "pool_name": pool.name,
        "description": pool.description,
        "scheduler": {
            "type": "priority",
            "fitting_policy": pool.fitting_policy,
            "priority": {"preemption": pool.preemption_enabled, "default_priority": pool.default_priority},
        },
    }
    if pool.provider is not None:
        limits = pool.provider.limits
        shown["provider"] = {
            **pool.provider.options,
            "type": pool.provider.type,
            "min_instances": limits.min_instances,
            "max_instances": limits.max_instances,
            "instance_slots": limits.instance_slots,
            "max_idle_agent_period": f"{limits.max_idle_agent_period_s:g}s",
            "max_agent_starting_period": f"{limits.max_agent_starting_period_s:g}s",
            "max_disconnected_period": f"{limits.max_disconnected_s:g}s",
            "max_aux_containers_per_agent": limits.max_aux_per_instance,
        }
    return shown


def effective_config(ctx: MasterContext) -> dict[str, Any]:
    settings: Settings = ctx.settings
    default_pool = next((p for p in settings.pools if p.name == settings.default_pool), None)
    config: dict[str, Any] = {
        "cluster_name": settings.cluster_name,
        # Determined's `port` is its HTTP port (REST API and WebUI); Cairn serves gRPC beside it.
        "port": settings.http_port,
        "grpc_port": settings.grpc_port,
        "host": settings.host,
        "state_dir": str(settings.state_dir),
        "ready_file": settings.ready_file or "",
        "db": database_section(settings.database_url),
        "log": {"level": settings.log_level.lower(), "color": False, "format": settings.log_format},
        # What an experiment without checkpoint_storage gets.
        "checkpoint_storage": default_storage(ctx),
        "resource_manager": {
            "type": "agent",
            "default_compute_resource_pool": settings.default_pool,
            "default_aux_resource_pool": settings.default_aux_pool or settings.default_pool,
            # How often each pool with a provider is looked at (Cairn's).
            "provisioner_period": f"{settings.provisioner_period_s:g}s",
            "scheduler": {
                "type": "priority",
                "fitting_policy": default_pool.fitting_policy if default_pool else "best",
            },
        },
        "resource_pools": [_pool(p) for p in settings.pools],
        "telemetry": {"enabled": False},
        # Determined's switches for features still settling (its e2e suite reads them here).
        "feature_switches": list(settings.feature_switches),
        # Cairn's own: the services the master talks to.
        "services": {
            "scheduler": settings.scheduler_addr,
            "searcher": settings.searcher_addr,
            "checkpoint": settings.checkpoint_addr,
            "searcher_plugins": dict(settings.searcher_plugins),
        },
        "cluster_token": HIDDEN if settings.cluster_token else "",
        # How agents authenticate (credentials of their own, or the cluster token for compatibility),
        # and whether the master was given an enrolment secret to start a new cluster with.
        "agent_auth": settings.agent_auth,
        "agent_enrolment_secret": HIDDEN if settings.agent_enrolment_secret else "",
        "initial_user_password": HIDDEN if settings.initial_user_password else "",
        # Determined's webhooks block. The signing key is a secret, hidden like every other: the
        # operator sets it (or reads the generated one from the state directory) for receivers.
        "webhooks": {
            "signing_key": HIDDEN,
            "base_url": settings.webhook_base_url,
        },
        # Determined's oidc block (configuration/oidc.py); the client secret hidden.
        "oidc": _oidc(settings),
        # Failed logins before a user or a client address is paused (domain/identity/login_limiter.py).
        "login_limits": {
            "failures_per_user": settings.login_failures_per_user,
            "failures_per_address": settings.login_failures_per_address,
            "window_s": settings.login_window_s,
        },
        "timeouts": {
            "session_ttl_seconds": settings.session_ttl_seconds,
            "token_default_lifespan_days": settings.token_default_lifespan_days,
            "token_max_lifespan_days": settings.token_max_lifespan_days,
            "agent_heartbeat_interval_ms": settings.agent_heartbeat_interval_ms,
            "agent_heartbeat_timeout_s": settings.agent_heartbeat_timeout_s,
            "agent_reconnect_wait_s": settings.agent_reconnect_wait_s,
            "preemption_timeout_s": settings.preemption_timeout_s,
            "kill_grace_s": settings.kill_grace_s,
            "scheduling_interval_s": settings.scheduling_interval_s,
        },
        # How much of the audit trail is kept (domain/audit/retention.py); 0: no bound.
        "audit": {
            "retention_days": settings.audit_retention_days,
            "max_rows": settings.audit_max_rows,
        },
        # Tasks' system metrics: hours kept as sampled, then thinned (domain/metrics/system_metrics.py).
        "system_metrics": {"full_resolution_hours": settings.system_metrics_full_hours},
        "limits": {
            "max_model_definition_bytes": settings.max_model_definition_bytes,
            "max_trials_per_experiment": settings.max_trials_per_experiment,
        },
        # Policy on what experiment configs may reach on the hosts (domain/config/policies.py).
        "config_policy": {
            "allow_local_storage_endpoints": settings.allow_local_storage_endpoints,
            "bind_mount_allowed_paths": list(settings.bind_mount_allowed_paths),
            "allow_root_agent_user": settings.allow_root_agent_user,
        },
        # Where the certificate and key are (the key's path only: its contents never leave the file).
        "tls": {
            "cert": str(settings.tls_cert) if settings.tls_cert else "",
            "key": str(settings.tls_key) if settings.tls_key else "",
            "insecure_allow_plaintext": settings.insecure_allow_plaintext,
        },
        # Where experiments that name no checkpoint storage keep their checkpoints.
        "checkpoint_dir": str(settings.checkpoint_dir),
        "read_cache_entries": settings.read_cache_entries,
        # gRPC threads: ordinary calls, and followed log streams, agents' streams and calls waiting
        # for signals beside them.
        "rpc_workers": settings.rpc_workers,
        "max_log_followers": settings.max_log_followers,
        "max_agents": settings.max_agents,
        "max_signal_waiters": settings.max_signal_waiters,
        # The HTTP server: ordinary requests at once, and open connections (http_limits.py).
        "http_workers": settings.http_workers,
        "http_processes": settings.http_processes,
        "max_http_connections": settings.max_http_connections,
        # PostgreSQL: the lease that makes one master active and the others standbys.
        "leader_lease": {
            "poll_interval_s": settings.leader_lease.poll_interval_s,
            "check_interval_s": settings.leader_lease.check_interval_s,
            "takeover_delay_s": settings.leader_lease.takeover_delay_s,
            "regain_within_s": settings.leader_lease.regain_within_s,
        },
    }
    redacted: dict[str, Any] = redact(config)
    return redacted


def _oidc(settings: Settings) -> dict[str, Any]:
    oidc = settings.oidc
    if oidc is None:
        return {"enabled": False}
    return {
        "enabled": True,
        "provider": oidc.provider,
        "idp_sso_url": oidc.issuer,
        "idp_recipient_url": oidc.master_url,
        "client_id": oidc.client_id,
        "client_secret": HIDDEN if oidc.client_secret else "",
        "authentication_claim": oidc.authentication_claim,
        "auto_provision_users": oidc.auto_provision_users,
        "groups_claim_name": oidc.groups_claim_name,
        "display_name_attribute_name": oidc.display_name_claim,
        "always_redirect": oidc.always_redirect,
        "exclude_groups_scope": oidc.exclude_groups_scope,
    }
