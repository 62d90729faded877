"""Client-side password hashing, compatible with Determined's clients.

Determined's CLI and SDK never send a plain password: they send sha512(SALT + password) as hex
with `isHashed: true`. Cairn's clients do the same, and the master accepts both forms, so a user
can log in with `cairn` or with the stock `det` client.
"""

from __future__ import annotations

import hashlib

# Determined's fixed client-side salt (harness/determined/common/api/authentication.py).
PASSWORD_SALT = "GubPEmmotfiK9TMD6Zdw"


def salt_and_hash(password: str) -> str:
    """The value a Determined-compatible client sends for `password` with is_hashed=true."""
    return hashlib.sha512((PASSWORD_SALT + password).encode()).hexdigest()
