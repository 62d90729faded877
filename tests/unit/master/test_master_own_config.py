"""`det master config`: the master's effective settings under Determined's names, every secret hidden
(also inside URLs), every setting shown, admins only."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from services.common.principal import Principal
from services.common.redaction import HIDDEN, redact, redact_url
from services.master.configuration.pools import PoolSettings
from services.master.configuration.settings import Settings
from services.master.domain.kernel.errors import PermissionDenied
from services.master.domain.operations import master_config
from tests.unit.master.domain.harness import Master

PASSWORD = "pa55-w0rd!"
TOKEN = "join-secret-123"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            f"postgresql://cairn:{PASSWORD}@db.example:5432/cairn",
            f"postgresql://cairn:{HIDDEN}@db.example:5432/cairn",
        ),
        (
            f"postgresql+psycopg2://cairn:{PASSWORD}@/cairn?host=/run/pg",
            f"postgresql+psycopg2://cairn:{HIDDEN}@/cairn?host=/run/pg",
        ),
        (
            f"postgresql://db/cairn?user=cairn&password={PASSWORD}",
            f"postgresql://db/cairn?user=cairn&password={HIDDEN}",
        ),
        ("postgresql://cairn@db/cairn", "postgresql://cairn@db/cairn"),
        ("sqlite:////var/lib/cairn/cairn.db", "sqlite:////var/lib/cairn/cairn.db"),
        ("not a url", "not a url"),
    ],
)
def test_urls_keep_everything_but_their_passwords(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redaction_hides_secret_keys_anywhere_and_keeps_empty_ones_visible() -> None:
    document = {
        "db": {"password": PASSWORD, "user": "cairn"},
        "checkpoint_storage": {"type": "s3", "access_key": "AKIA", "secret_key": "s3cr3t", "bucket": "b"},
        "nested": [{"api_key": "k"}, {"token": ""}],
        "dsn": f"postgresql://u:{PASSWORD}@h/d",
        "port": 8080,
    }
    shown = redact(document)
    assert shown["db"] == {"password": HIDDEN, "user": "cairn"}
    assert shown["checkpoint_storage"] == {
        "type": "s3",
        "access_key": HIDDEN,
        "secret_key": HIDDEN,
        "bucket": "b",
    }
    assert shown["nested"] == [{"api_key": HIDDEN}, {"token": ""}]
    assert PASSWORD not in json.dumps(shown) and shown["port"] == 8080


def test_every_setting_is_shown_or_deliberately_named() -> None:
    fields = {f.name for f in dataclasses.fields(Settings)}
    assert fields == master_config.SHOWN_SETTINGS, "show the new setting in master_config.effective_config"


def test_the_config_shows_determined_names_and_no_secret(tmp_path: Path) -> None:
    master = Master(tmp_path / "m")
    try:
        master.ctx.settings = dataclasses.replace(
            master.ctx.settings,
            db_url=f"postgresql://cairn:{PASSWORD}@db.example:6543/cairn?sslmode=require",
            cluster_token=TOKEN,
            pools=(
                PoolSettings("default"),
                PoolSettings("gpu", fitting_policy="worst", preemption_enabled=True),
            ),
            searcher_plugins=(("mine", "127.0.0.1:9999"),),
            feature_switches=("streaming_updates",),
        )
        config = master_config.effective_config(master.ctx)
        shown_switches = config["feature_switches"]
        master.ctx.settings = dataclasses.replace(master.ctx.settings, feature_switches=())
        default_switches = master_config.effective_config(master.ctx)["feature_switches"]
    finally:
        master.close()
    text = json.dumps(config)
    assert PASSWORD not in text and TOKEN not in text
    assert config["db"] == {
        "type": "postgresql",
        "user": "cairn",
        "password": HIDDEN,
        "host": "db.example",
        "port": "6543",
        "name": "cairn",
        "ssl_mode": "require",
        "url": f"postgresql://cairn:{HIDDEN}@db.example:6543/cairn?sslmode=require",
    }
    assert config["cluster_token"] == HIDDEN
    assert config["port"] == master.ctx.settings.http_port and config["log"]["level"] == "info"
    assert config["checkpoint_storage"]["type"] == "shared_fs"
    assert config["checkpoint_storage"]["host_path"] == str(master.ctx.settings.checkpoint_dir)
    assert [p["pool_name"] for p in config["resource_pools"]] == ["default", "gpu"]
    assert config["resource_pools"][1]["scheduler"] == {
        "type": "priority",
        "fitting_policy": "worst",
        "priority": {"preemption": True, "default_priority": 42},
    }
    assert config["resource_manager"]["default_compute_resource_pool"] == "default"
    assert config["services"]["searcher_plugins"] == {"mine": "127.0.0.1:9999"}
    assert shown_switches == ["streaming_updates"] and default_switches == []


def test_an_empty_secret_reads_as_not_set(tmp_path: Path) -> None:
    master = Master(tmp_path / "m")
    try:
        config = master_config.effective_config(master.ctx)
    finally:
        master.close()
    assert config["cluster_token"] == "" and config["db"]["type"] == "sqlite"


def test_only_admins_read_it() -> None:
    master_config.check_can_read(Principal(user_id=1, username="admin", admin=True))
    with pytest.raises(PermissionDenied, match="only an admin"):
        master_config.check_can_read(Principal(user_id=2, username="determined", admin=False))
