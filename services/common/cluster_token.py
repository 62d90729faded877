"""Where a service finds the cluster token (the secret agents and the control plane's services
join with): $CAIRN_CLUSTER_TOKEN, or a file named by --cluster-token-file / $CAIRN_CLUSTER_TOKEN_FILE.

Never a command-line value: every user on the machine can read every process's argv (`ps`,
/proc/<pid>/cmdline), trial code run as another user included. A process's environment and an
owner-only file are readable by its own user (and root) only, so the token file must be a regular
file that no one but its owner can read or write.
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TOKEN_ENV = "CAIRN_CLUSTER_TOKEN"
TOKEN_FILE_ENV = "CAIRN_CLUSTER_TOKEN_FILE"
# A token is a few dozen characters; a file far larger is not one.
MAX_TOKEN_FILE_BYTES = 4096


class ClusterTokenError(ValueError):
    """The token file cannot be used; the message names the option."""


def read_token_file(path: str | os.PathLike[str], what: str = "--cluster-token-file") -> str:
    """The token in `path`: its text without surrounding whitespace. The file must be a regular
    file of this process's user with no permission for group or others (0600 or 0400)."""
    file = Path(path)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ClusterTokenError(f"{what}: cannot open {file}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ClusterTokenError(f"{what}: {file} is not a regular file")
    with os.fdopen(fd, "rb") as handle:
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise ClusterTokenError(
                f"{what}: {file} has mode {mode:04o}; others could read the token: chmod 600 it"
            )
        if info.st_uid != os.geteuid():
            raise ClusterTokenError(f"{what}: {file} belongs to uid {info.st_uid}, not this process's user")
        data = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise ClusterTokenError(f"{what}: {file} is over {MAX_TOKEN_FILE_BYTES} bytes; expected a token")
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ClusterTokenError(f"{what}: {file} is not UTF-8 text") from None
    if not token or any(ch.isspace() or not ch.isprintable() for ch in token):
        raise ClusterTokenError(f"{what}: {file} must hold one token: printable, without spaces")
    return token


def secret_from_environment(environ: Mapping[str, str], env_name: str) -> str | None:
    """The secret in the file $<env_name>_FILE names (an owner-only file), else $<env_name>
    itself; None without either."""
    path = environ.get(f"{env_name}_FILE")
    if path:
        return read_token_file(path, f"{env_name}_FILE")
    return environ.get(env_name) or None


def token_from_environment(environ: Mapping[str, str]) -> str | None:
    """The token $CAIRN_CLUSTER_TOKEN_FILE or $CAIRN_CLUSTER_TOKEN gives; None without either."""
    return secret_from_environment(environ, TOKEN_ENV)


def add_secret_file_flag(
    parser: argparse.ArgumentParser,
    flag: str,
    dest: str,
    env_name: str,
    what: str,
    environ: Mapping[str, str],
) -> None:
    """`flag FILE` (an owner-only file, read_token_file's rules) into `dest`, defaulting to the
    secret in $<env_name>_FILE, else $<env_name>; never the secret itself on the command line
    (every user on the machine can read a process's argv). A bad file, named by the flag or the
    environment, is a usage error naming it."""
    try:
        default = secret_from_environment(environ, env_name)
    except ClusterTokenError as exc:
        parser.error(str(exc))

    class _FromFile(argparse.Action):
        def __call__(
            self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, _: Any = None
        ) -> None:
            try:
                setattr(namespace, self.dest, read_token_file(str(values), flag))
            except ClusterTokenError as exc:
                parser.error(str(exc))

    parser.add_argument(
        flag,
        dest=dest,
        metavar="FILE",
        default=default,
        action=_FromFile,
        help=f"{what}; FILE mode 0600 (env {env_name}_FILE, or the value itself in {env_name})",
    )


class _RefuseTokenValue(argparse.Action):
    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, _: Any = None
    ) -> None:
        parser.error(
            "--cluster-token: a token on the command line is visible to every user (ps, "
            f"/proc/PID/cmdline); give --cluster-token-file FILE (mode 0600) or ${TOKEN_ENV}"
        )


def add_cluster_token_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """--cluster-token-file FILE into args.cluster_token, defaulting to the environment's token.
    A bad $CAIRN_CLUSTER_TOKEN_FILE is a usage error at startup, like a bad flag."""
    add_secret_file_flag(
        parser,
        "--cluster-token-file",
        "cluster_token",
        TOKEN_ENV,
        "file holding the shared secret between Cairn processes",
        environ,
    )
    parser.add_argument("--cluster-token", nargs="?", action=_RefuseTokenValue, help=argparse.SUPPRESS)
