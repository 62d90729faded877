"""The cluster-wide message in Chromium (Playwright, as test_e2e_webui.py drives it): a message an
admin sets shows as a banner above every page, its text as given (escaped, never markup), and is
gone once cleared. SQLite and the process runtime only: the browser side depends on neither.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.api.v1 import master_pb2

# The browser helpers of the WebUI's own e2e tests: one way to start Chromium.
from tests.e2e.test_e2e_webui import SCREENSHOTS, Browser, _log_in, browser_on, expect
from tests.support.cluster import TestCluster

pytestmark = pytest.mark.timeout(300)
MESSAGE = "Maintenance at 18:00 UTC <b>not bold</b>"


@pytest.fixture
def ui(one_slot_sqlite_cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    yield from browser_on(one_slot_sqlite_cluster, tmp_path)


def test_the_cluster_message_shows_as_a_banner_until_cleared(
    one_slot_sqlite_cluster: TestCluster, ui: Browser
) -> None:
    admin = one_slot_sqlite_cluster.login("admin")
    admin.SetClusterMessage(master_pb2.SetClusterMessageRequest(message=MESSAGE))
    b, page = ui, ui.page
    b.goto("/experiments")
    _log_in(b)
    page.wait_for_url(re.compile(r"/experiments"))
    banner = page.get_by_role("status", name="Cluster message")
    expect(banner).to_have_text(MESSAGE)
    expect(banner.locator("b")).to_have_count(0)  # text, never markup
    # It stays above every page.
    page.get_by_role("link", name="Cluster").click()
    page.wait_for_url(re.compile(r"/cluster"))
    expect(banner).to_have_text(MESSAGE)
    b.shot("cluster-message-banner")

    admin.DeleteClusterMessage(master_pb2.DeleteClusterMessageRequest())
    page.reload()
    expect(page.get_by_role("heading").first).to_be_visible()
    expect(banner).to_have_count(0)
    b.check_clean()
    assert (SCREENSHOTS / "cluster-message-banner.png").is_file()
