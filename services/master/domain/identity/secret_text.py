"""Secrets as the master hands them out (session and access tokens, allocation tokens, agents'
credentials): 32 random bytes in URL-safe base64, which users paste into command lines."""

from __future__ import annotations

import secrets


def new_secret_text() -> str:
    """~43 characters that never start with '-': one in 64 of base64's would, and a command line
    takes such an argument for an option (`det token login -Ab…` fails: "the following arguments
    are required: token"). The first character is then '_', which loses a sixth of a bit."""
    text = secrets.token_urlsafe(32)
    return "_" + text[1:] if text.startswith("-") else text
