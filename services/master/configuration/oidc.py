"""Single sign-on with OpenID Connect: the config file's `oidc:` block, named as Determined's
master.yaml names it (an Enterprise feature there, open here).

    oidc:
      enabled: true
      provider: Keycloak                 # the name the login page and `det auth list-providers` show
      idp_sso_url: https://idp.example   # the issuer: discovery at /.well-known/openid-configuration
      idp_recipient_url: https://cairn.example:8080   # this master's public URL (callback: /oidc/callback)
      client_id: cairn
      client_secret: ...                 # empty: a public client (PKCE alone)
      authentication_claim: email        # the ID token claim that names the Cairn user
      auto_provision_users: true         # create the user on its first login
      groups_claim_name: groups          # the claim listing the user's groups (memberships synced)
      display_name_attribute_name: name  # the claim shown as the display name ("": none)
      always_redirect: false             # the WebUI goes to the provider at once
      exclude_groups_scope: false        # do not ask for the "groups" scope

Every key is checked and named when wrong; an unknown key stops the master, as in the rest of the
file. Determined's SAML/SCIM keys that do not apply to OIDC login (`scim_authentication_attribute`,
`groups_attribute_name`) are accepted and ignored, so a Determined master.yaml loads unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from services.common.errors import InvalidArgument

_KEYS = {
    "enabled",
    "provider",
    "idp_sso_url",
    "idp_recipient_url",
    "client_id",
    "client_secret",
    "authentication_claim",
    "auto_provision_users",
    "groups_claim_name",
    "display_name_attribute_name",
    "always_redirect",
    "exclude_groups_scope",
}
_IGNORED_KEYS = {"scim_authentication_attribute", "groups_attribute_name"}
# A claim's name as JSON carries it: bounded, and no characters that could hide in a log line.
_CLAIM_NAME = re.compile(r"[A-Za-z0-9_.:/\-]{1,128}")
MAX_TEXT = 1024
MAX_SECRET = 4096


@dataclass(frozen=True)
class OidcSettings:
    provider: str
    issuer: str
    master_url: str
    client_id: str
    client_secret: str = ""
    authentication_claim: str = "email"
    auto_provision_users: bool = False
    groups_claim_name: str = "groups"
    display_name_claim: str = ""
    always_redirect: bool = False
    exclude_groups_scope: bool = False

    @property
    def redirect_uri(self) -> str:
        return f"{self.master_url}/oidc/callback"

    @property
    def sso_url(self) -> str:
        return f"{self.master_url}/oidc/sso"


def _text(block: Mapping[str, Any], key: str, default: str = "", most: int = MAX_TEXT) -> str:
    value = block.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, str) or len(value) > most:
        raise InvalidArgument(f"oidc.{key}: must be text of at most {most} characters")
    return value.strip()


def _flag(block: Mapping[str, Any], key: str, default: bool) -> bool:
    value = block.get(key, default)
    if not isinstance(value, bool):
        raise InvalidArgument(f"oidc.{key}: must be true or false, not {str(value)[:64]!r}")
    return value


def _url(block: Mapping[str, Any], key: str, what: str) -> str:
    value = _text(block, key)
    if not value:
        raise InvalidArgument(f"oidc.{key}: required ({what})")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"oidc.{key}: {value[:128]!r} is not an http(s) URL ({what})")
    if parts.query or parts.fragment:
        raise InvalidArgument(f"oidc.{key}: {value[:128]!r} must have no query or fragment")
    return value.rstrip("/")


def _claim(block: Mapping[str, Any], key: str, default: str, *, optional: bool = False) -> str:
    value = _text(block, key, default)
    if not value and optional:
        return ""
    if not _CLAIM_NAME.fullmatch(value):
        raise InvalidArgument(
            f"oidc.{key}: {value[:128]!r} is not a claim name (1 to 128 letters, digits, _ . : / -)"
        )
    return value


def parse_oidc(block: Any) -> OidcSettings | None:
    """The `oidc:` block, checked; None when absent or not enabled."""
    if block is None:
        return None
    if not isinstance(block, Mapping):
        raise InvalidArgument("oidc: must be a mapping (enabled, idp_sso_url, client_id, ...)")
    unknown = set(block) - _KEYS - _IGNORED_KEYS
    if unknown:
        raise InvalidArgument(
            f"oidc.{sorted(map(str, unknown))[0]}: unknown key (known: {', '.join(sorted(_KEYS))})"
        )
    if not _flag(block, "enabled", False):
        return None
    client_id = _text(block, "client_id")
    if not client_id:
        raise InvalidArgument("oidc.client_id: required (the client registered with the provider)")
    provider = _text(block, "provider", "OIDC", most=64) or "OIDC"
    return OidcSettings(
        provider=provider,
        issuer=_url(block, "idp_sso_url", "the provider's issuer URL"),
        master_url=_url(block, "idp_recipient_url", "this master's public URL, where /oidc/callback is"),
        client_id=client_id,
        client_secret=_text(block, "client_secret", most=MAX_SECRET),
        authentication_claim=_claim(block, "authentication_claim", "email"),
        auto_provision_users=_flag(block, "auto_provision_users", False),
        groups_claim_name=_claim(block, "groups_claim_name", "groups"),
        display_name_claim=_claim(block, "display_name_attribute_name", "", optional=True),
        always_redirect=_flag(block, "always_redirect", False),
        exclude_groups_scope=_flag(block, "exclude_groups_scope", False),
    )


def sso_providers(oidc: OidcSettings | None) -> list[dict[str, Any]]:
    """Determined's `sso_providers` (/info, GetMaster): what `det auth sso` and login pages read."""
    if oidc is None:
        return []
    return [
        {
            "name": oidc.provider,
            "sso_url": oidc.sso_url,
            "type": "OIDC",
            "always_redirect": oidc.always_redirect,
        }
    ]
