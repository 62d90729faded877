"""The webhooks' settings: Determined's `webhooks:` block of master.yaml (checked, naming the key),
the flag and environment variable that win over it, and the signing key generated once and kept
in the state directory when none is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.errors import InvalidArgument
from services.master.configuration.config_file import parse_master_config
from services.master.configuration.settings import Settings, parse_settings
from services.master.domain.webhooks.signing_key import KEY_FILE, signing_key


def test_the_config_files_webhooks_block_is_read_and_checked() -> None:
    parsed = parse_master_config({"webhooks": {"signing_key": "k", "base_url": "https://det.example.com"}})
    assert (parsed.webhook_signing_key, parsed.webhook_base_url) == ("k", "https://det.example.com")
    with pytest.raises(InvalidArgument, match=r"webhooks\.signingkey"):
        parse_master_config({"webhooks": {"signingkey": "k"}})
    with pytest.raises(InvalidArgument, match=r"webhooks\.signing_key"):
        parse_master_config({"webhooks": {"signing_key": 7}})


def test_a_flag_wins_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_WEBHOOKS_SIGNING_KEY", raising=False)
    monkeypatch.delenv("DET_WEBHOOKS_SIGNING_KEY", raising=False)
    config = tmp_path / "master.yaml"
    config.write_text("webhooks:\n  signing_key: from-file\n  base_url: https://file\n")
    from_file = parse_settings(["--config-file", str(config), "--state-dir", str(tmp_path)])
    assert (from_file.webhook_signing_key, from_file.webhook_base_url) == ("from-file", "https://file")
    monkeypatch.setenv("DET_WEBHOOKS_SIGNING_KEY", "from-env")
    flagged = parse_settings(["--config-file", str(config), "--state-dir", str(tmp_path)])
    assert flagged.webhook_signing_key == "from-env"


def test_without_a_key_one_is_generated_once_and_kept(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state")
    first = signing_key(settings)
    assert len(first) == 64 and signing_key(settings) == first
    assert (tmp_path / "state" / KEY_FILE).stat().st_mode & 0o077 == 0
    assert signing_key(Settings(state_dir=tmp_path / "state", webhook_signing_key="given")) == "given"
