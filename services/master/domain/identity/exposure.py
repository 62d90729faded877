"""Whether the master may listen where it was told to, given its built-in accounts and its TLS.

Every cluster starts with the accounts `admin` and `determined` (as Determined's do). On loopback an
empty password is a convenience: only this machine's users reach the master. Reachable beyond it,
an empty admin password hands the cluster to anyone on the network, so the master refuses to start
until each built-in account has a password (Determined 0.38 likewise requires an initial one).
Likewise plaintext: beyond loopback, passwords and tokens would cross the network readable by
anyone on the path, so such a master needs TLS or the operator's explicit
--insecure-allow-plaintext.
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = frozenset({"localhost"})


class UnsafeExposure(Exception):
    """The master would be reachable beyond loopback with accounts anyone can log in to."""


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def check_exposure(host: str, accounts_without_password: list[str]) -> None:
    if is_loopback(host) or not accounts_without_password:
        return
    names = ", ".join(accounts_without_password)
    raise UnsafeExposure(
        f"--host {host} makes the master reachable beyond this machine, and the built-in "
        f"account(s) {names} have an empty password: anyone could log in. Give them one with "
        "--initial-user-password (env CAIRN_INITIAL_USER_PASSWORD), or set each with "
        "`det user change-password NAME` while the master listens on 127.0.0.1, or listen on "
        "127.0.0.1 only."
    )


def check_transport(host: str, tls: bool, allow_plaintext: bool) -> None:
    if tls or allow_plaintext or is_loopback(host):
        return
    raise UnsafeExposure(
        f"--host {host} makes the master reachable beyond this machine, and it has no TLS "
        "certificate: passwords and tokens would cross the network unencrypted. Give it one with "
        "--tls-cert FILE --tls-key FILE (`cairn cluster up --tls` makes a self-signed pair), "
        "listen on 127.0.0.1 only, or accept plaintext with --insecure-allow-plaintext."
    )
