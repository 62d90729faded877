"""Policy on what an experiment config may reach on the cluster's hosts and network, beyond what
its schema allows: checkpoint storage paths, s3 endpoints, bind mounts and privileged options.

Trial code and the checkpoint service act on these fields with the cluster's own rights, so a
config must not point them at the host's root, its kernel interfaces, a cloud metadata service or
the master's own loopback ports. Admins may bind mount any host path and add capabilities; other
users only under the paths the operator allows (settings.bind_mount_allowed_paths).
"""

from __future__ import annotations

import ipaddress
import posixpath
import socket
from typing import Any
from urllib.parse import urlsplit

from services.common.principal import Principal
from services.master.configuration.settings import Settings
from services.master.domain.kernel.errors import InvalidArgument

# Kernel and device interfaces and the host's own configuration: checkpoints written there could
# change the host or read its secrets, whoever asks.
SENSITIVE_HOST_PATHS = ("/proc", "/sys", "/dev", "/etc", "/boot")

# Host names that always mean this host or a cloud metadata service, whatever DNS says.
LOCAL_HOST_NAMES = ("localhost", "metadata.google.internal", "metadata")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _checked_host_path(value: Any, field: str) -> str:
    """`value` as a normalised absolute path; refused when relative, climbing (..) or the root."""
    path = str(value)
    if not path.startswith("/"):
        raise InvalidArgument(f"{field}: {path!r} must be an absolute path")
    if ".." in path.split("/"):
        raise InvalidArgument(f"{field}: {path!r} must not contain '..'")
    normalised = posixpath.normpath(path)
    if normalised in ("/", "//"):
        raise InvalidArgument(f"{field}: the host's root directory cannot be used")
    return normalised


def _check_storage_path(value: Any, field: str) -> None:
    path = _checked_host_path(value, field)
    for sensitive in SENSITIVE_HOST_PATHS:
        if _under(path, sensitive):
            raise InvalidArgument(f"{field}: {path!r} is under {sensitive}, which cannot hold checkpoints")


def _address_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address a host name spells, in any form a resolver accepts (127.1, 0x7f000001,
    2130706433, [::ffff:127.0.0.1]), or None for a DNS name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        try:
            address = ipaddress.ip_address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_local_endpoint(url: str) -> bool:
    """Whether `url` names this host (loopback, unspecified) or a link-local address (cloud metadata
    services live at 169.254.169.254 and fe80::/10)."""
    try:
        host = (urlsplit(url if "//" in url else f"//{url}").hostname or "").rstrip(".").lower()
    except ValueError:
        return False  # not a URL the s3 client can use either; its own check names it
    if host in LOCAL_HOST_NAMES or host.endswith(".localhost"):
        return True
    address = _address_of(host)
    return address is not None and (address.is_loopback or address.is_link_local or address.is_unspecified)


def _check_storage(settings: Settings, storage: Any) -> None:
    if not isinstance(storage, dict):
        return
    kind = storage.get("type")
    if kind == "shared_fs" and storage.get("host_path") is not None:
        _check_storage_path(storage["host_path"], "checkpoint_storage.host_path")
        sub = storage.get("storage_path")
        if sub and (posixpath.isabs(sub) or ".." in str(sub).split("/")):
            raise InvalidArgument(
                f"checkpoint_storage.storage_path: {sub!r} must be a relative path inside host_path"
            )
    endpoint = storage.get("endpoint_url")
    allowed = settings.allow_local_storage_endpoints
    if kind == "s3" and endpoint and not allowed and is_local_endpoint(str(endpoint)):
        raise InvalidArgument(
            f"checkpoint_storage.endpoint_url: {endpoint!r} is a loopback or link-local address; the "
            "master refuses those unless started with --allow-local-storage-endpoints"
        )


def _check_bind_mounts(settings: Settings, principal: Principal, mounts: Any) -> None:
    if not isinstance(mounts, list):
        return
    for index, mount in enumerate(mounts):
        if not isinstance(mount, dict):
            continue
        field = f"bind_mounts[{index}].host_path"
        path = _checked_host_path(mount.get("host_path", ""), field)
        if principal.admin:
            continue
        if not any(_under(path, allowed) for allowed in settings.bind_mount_allowed_paths):
            allowed = ", ".join(settings.bind_mount_allowed_paths) or "none"
            raise InvalidArgument(
                f"{field}: {path!r} is outside the host paths users may mount (allowed: {allowed}); "
                "an admin may mount it, or allow it with the master's --bind-mount-allow"
            )


def check_config_policy(settings: Settings, principal: Principal, config: dict[str, Any]) -> None:
    """Refuse an expanded config that reaches where `principal` may not, naming the field."""
    _check_storage(settings, config.get("checkpoint_storage"))
    _check_bind_mounts(settings, principal, config.get("bind_mounts"))
    capabilities = (config.get("environment") or {}).get("add_capabilities")
    if capabilities and not principal.admin:
        raise InvalidArgument("environment.add_capabilities: only an admin may add capabilities")
