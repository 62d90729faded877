"""Project keys as Determined makes and checks them: 1 to 5 letters and digits, upper case, unique
in the cluster. A generated key is the first three letters and digits of the project's name,
upper-cased, followed by random ones up to five characters."""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Callable

from services.master.domain.kernel.errors import AlreadyExists, InvalidArgument

KEY_LENGTH = 5
KEY_PREFIX_LENGTH = 3
GENERATION_ATTEMPTS = 5
_KEY = re.compile(r"[A-Za-z0-9]{1,5}")
_NOT_ALPHANUMERIC = re.compile(r"[^A-Za-z0-9]")
_ALPHABET = string.ascii_uppercase + string.digits


def checked_key(key: str, field: str = "key") -> str:
    """The key upper-cased, or InvalidArgument saying what is wrong with it."""
    if len(key) > KEY_LENGTH:
        raise InvalidArgument(f"{field}: project key cannot be longer than {KEY_LENGTH} characters")
    if not key:
        raise InvalidArgument(f"{field}: project key cannot be empty")
    if not _KEY.fullmatch(key):
        raise InvalidArgument(f"{field}: project key can only contain letters and digits (got {key!r})")
    return key.upper()


def generated_key(project_name: str, taken: Callable[[str], bool]) -> str:
    """A key for a new project named `project_name` that `taken` says is free."""
    prefix = _NOT_ALPHANUMERIC.sub("", project_name).upper()[:KEY_PREFIX_LENGTH]
    for _ in range(GENERATION_ATTEMPTS):
        suffix = "".join(secrets.choice(_ALPHABET) for _ in range(KEY_LENGTH - len(prefix)))
        key = prefix + suffix
        if not taken(key):
            return key
    raise AlreadyExists(f"key: could not generate a unique project key for {project_name!r}; give one")
