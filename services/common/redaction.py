"""Hiding secrets in settings before they are shown: values under secret-sounding keys, and the
password inside a URL (postgresql://user:password@host/db). Used on whole documents as a last pass,
so a secret that a new setting carries is hidden even where nobody thought to hide it."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

# What Determined's master config shows in place of a secret.
HIDDEN = "********"

# A key holding one of these words holds a secret (db.password, cluster_token, secret_key, ...).
_SECRET_WORDS = (
    "password",
    "passwd",
    "secret",
    "token",
    "access_key",
    "private_key",
    "credential",
    "api_key",
)


def is_secret_name(name: str) -> bool:
    lowered = name.lower().replace("-", "_")
    return any(word in lowered for word in _SECRET_WORDS)


def redact_url(text: str) -> str:
    """`text` with the password of a URL's user info, and secret query parameters, hidden; any
    other text unchanged."""
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:  # not a URL after all (a bad port, say): nothing to pick apart
        return text
    netloc, query = parts.netloc, parts.query
    if password:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{HIDDEN}@{hostport}"
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(is_secret_name(key) for key, _ in pairs):
        query = urlencode([(k, HIDDEN if is_secret_name(k) else v) for k, v in pairs], safe="*/")
    if (netloc, query) == (parts.netloc, parts.query):
        return text
    # Put together by hand: urlunsplit drops the "//" of an empty host (sqlite:////path).
    rebuilt = f"{parts.scheme}://{netloc}{parts.path}"
    if query:
        rebuilt += f"?{query}"
    if parts.fragment:
        rebuilt += f"#{parts.fragment}"
    return rebuilt


def redact(value: Any) -> Any:
    """A copy of a JSON-like document with every secret hidden: values under secret keys (an
    empty or missing one stays as it is, so the reader sees that none is set) and URL passwords."""
    if isinstance(value, dict):
        return {
            key: HIDDEN if is_secret_name(str(key)) and value_is_set(item) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return redact_url(value)
    return value


def value_is_set(value: Any) -> bool:
    return value is not None and value is not False and value not in ("", {}, [])
