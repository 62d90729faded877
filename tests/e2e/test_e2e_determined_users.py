"""Users as Determined has them, driven with the stock client (determined==0.38.1) on a cluster of
one agent and one slot: the names Determined accepts (printable ASCII, trimmed, at least two
characters), the names it keeps ("admin" for admins, "determined" for the default admin), display
names that may not pass for another user, and the exact error text clients match when a
deactivated user logs in. Every check reads the state back: `det` exits 0 after many failures."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.determined_client import DET, det_runner, determined_env, sdk_runner
from tests.support.cluster import TestCluster, running_cluster

PASSWORD = "Pw-Determined1"


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined's own suite runs."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def _usernames(sdk: Any) -> set[str]:
    return set(sdk("result = [u.username for u in client.list_users(active=None)]"))


def test_names_determined_accepts_keeps_and_refuses(cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(cluster, tmp_path / "home")
    admin = det_runner(env, "admin")
    sdk = sdk_runner(env, "admin")
    accepted = ["qa user", "ops+bot@lab.example", "x_y-z.1", "team(a)#2"]
    for name in accepted:
        admin("user", "create", name, "--password", PASSWORD)
    admin("user", "create", "  padded  ", "--password", PASSWORD)
    before = _usernames(sdk)
    assert set(accepted) | {"padded"} <= before

    # Refused, naming why, and nothing stored: non-ASCII, too short, the kept names.
    for name, why in (
        ("josé", "cannot contain non-ASCII characters"),
        ("a", "minimum length"),
        ("ADMIN", "Non-admin user cannot be renamed 'admin'"),
        ("Determined", "User cannot be renamed 'determined'"),
    ):
        out = admin("user", "create", name, "--password", PASSWORD, check=False)
        assert why in out, out
    assert _usernames(sdk) == before

    out = admin("user", "rename", "qa user", "determined", check=False)
    assert "User cannot be renamed 'determined'" in out, out
    admin("user", "rename", "qa user", "qa.user")
    assert "qa.user" in _usernames(sdk) and "qa user" not in _usernames(sdk)

    # A display name may not read as another user's name, case aside.
    out = admin("user", "edit", "qa.user", "--display-name", "Admin", check=False)
    assert "found a similar username or display name" in out, out
    admin("user", "edit", "qa.user", "--display-name", "Q. A. Team")
    shown = sdk('result = client.get_user_by_name("qa.user").display_name')
    assert shown == "Q. A. Team"


def test_a_deactivated_user_is_told_it_is_not_active(cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(cluster, tmp_path / "home")
    admin = det_runner(env, "admin")
    admin("user", "create", "leaver", "--password", PASSWORD)
    admin("user", "deactivate", "leaver")
    login = subprocess.run(
        [str(DET), "-u", "leaver", "user", "login", "leaver"],
        env=env,
        input=PASSWORD + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "user is not active" in login.stdout + login.stderr
    sdk = sdk_runner(env, "admin")
    assert sdk('result = client.get_user_by_name("leaver").active') is False
