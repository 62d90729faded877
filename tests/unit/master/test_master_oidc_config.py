"""The config file's `oidc:` block (configuration/oidc.py): Determined's names, defaults, the
SAML/SCIM keys accepted and ignored, and every wrong value refused naming its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.common.errors import InvalidArgument
from services.master.configuration.config_file import parse_master_config
from services.master.configuration.oidc import parse_oidc, sso_providers
from services.master.configuration.settings import parse_settings

GOOD = {
    "enabled": True,
    "provider": "Okta",
    "idp_sso_url": "https://idp.example/",
    "idp_recipient_url": "https://cairn.example:8080",
    "client_id": "cairn",
    "client_secret": "s3cret",
}


def test_a_determined_block_reads_with_its_defaults() -> None:
    oidc = parse_master_config({"oidc": {**GOOD, "scim_authentication_attribute": "userName"}}).oidc
    assert oidc is not None
    assert (oidc.issuer, oidc.redirect_uri) == (
        "https://idp.example",
        "https://cairn.example:8080/oidc/callback",
    )
    assert (oidc.authentication_claim, oidc.groups_claim_name, oidc.auto_provision_users) == (
        "email",
        "groups",
        False,
    )
    assert sso_providers(oidc) == [
        {
            "name": "Okta",
            "sso_url": "https://cairn.example:8080/oidc/sso",
            "type": "OIDC",
            "always_redirect": False,
        }
    ]


def test_absent_or_disabled_is_off() -> None:
    assert parse_master_config({}).oidc is None
    assert parse_oidc({"enabled": False, "client_id": ""}) is None
    assert sso_providers(None) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"client_id": ""}, "oidc.client_id: required"),
        ({"idp_sso_url": ""}, "oidc.idp_sso_url: required"),
        ({"idp_sso_url": "ftp://idp"}, "oidc.idp_sso_url: 'ftp://idp' is not an http(s) URL"),
        (
            {"idp_recipient_url": "https://cairn?x=1"},
            "oidc.idp_recipient_url: 'https://cairn?x=1' must have no query",
        ),
        ({"auto_provision_users": "yes"}, "oidc.auto_provision_users: must be true or false"),
        ({"enabled": 1}, "oidc.enabled: must be true or false"),
        ({"authentication_claim": "e mail"}, "oidc.authentication_claim: 'e mail' is not a claim name"),
        ({"groups_claim_name": "x" * 200}, "oidc.groups_claim_name:"),
        ({"client_secret": 7}, "oidc.client_secret: must be text"),
        ({"saml_idp": "x"}, "oidc.saml_idp: unknown key"),
    ],
)
def test_a_wrong_value_is_refused_naming_its_key(change: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_master_config({"oidc": {**GOOD, **change}})
    assert named in str(refused.value)


def test_a_block_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="oidc: must be a mapping"):
        parse_master_config({"oidc": ["enabled"]})


def test_single_sign_on_takes_one_http_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "master.yaml"
    config.write_text(
        "oidc: {enabled: true, idp_sso_url: 'https://idp', idp_recipient_url: 'https://m', client_id: c}\n"
    )
    assert parse_settings(["--config-file", str(config)]).oidc is not None
    with pytest.raises(SystemExit):
        parse_settings(["--config-file", str(config), "--http-processes", "2"])
    assert "oidc: single sign-on is served with --http-processes 1 only" in capsys.readouterr().err
