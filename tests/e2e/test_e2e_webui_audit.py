"""The audit trail's page in Chromium (Playwright, as test_e2e_webui.py drives it): an admin sees
the changes made on the cluster, newest first, with who, what, targets, outcome and where from,
the browser's own login among them; filters by user and outcome narrow it (and stay in the
address); a user who is not an admin has no link to it and is told why when opening it, until a
role gives them what an admin holds (ClusterAdmin by assignment, the admin flag off). SQLite and
the process runtime only: the browser side depends on neither.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cairn.api.v1 import auth_pb2, rbac_pb2

# The browser helpers of the WebUI's own e2e tests: one way to start Chromium.
from tests.e2e.test_e2e_webui import SCREENSHOTS, Browser, _log_in, browser_on, expect
from tests.support.cluster import TestCluster

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def ui(one_slot_sqlite_cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    yield from browser_on(one_slot_sqlite_cluster, tmp_path)


def test_admins_read_and_filter_the_trail_others_are_refused(
    one_slot_sqlite_cluster: TestCluster, ui: Browser
) -> None:
    admin = one_slot_sqlite_cluster.login("admin")
    admin.PostUser(
        auth_pb2.PostUserRequest(user=auth_pb2.User(username="auditee", active=True), password="Pw-Audited1")
    )
    user = one_slot_sqlite_cluster.login("determined")
    with pytest.raises(grpc.RpcError):
        user.PostUser(
            auth_pb2.PostUserRequest(
                user=auth_pb2.User(username="sneaky", active=True), password="Pw-Audited1"
            )
        )

    b, page = ui, ui.page
    b.goto("/audit")
    _log_in(b, "admin")
    page.wait_for_url(re.compile(r"/audit"))
    expect(page.get_by_role("heading", name="Audit trail")).to_be_visible()
    rows = page.locator("tbody tr[data-method]")
    created = page.locator('tbody tr[data-method="PostUser"]', has_text="username=auditee")
    expect(created).to_have_count(1, timeout=20_000)
    expect(created).to_contain_text("admin")
    expect(created.locator(".badge")).to_have_text("OK")
    expect(created).to_contain_text("POST /api/v1/users")
    expect(created).to_contain_text("(grpc)")
    # The refused call and the browser's own login (through REST, from the browser's address) are
    # stored within a second of them, off the calls' path, and shown at the page's next refresh
    # (every 10 s): the page may have been read before.
    denied = page.locator('tbody tr[data-method="PostUser"]', has_text="username=sneaky")
    expect(denied.locator(".badge")).to_have_text("PERMISSION_DENIED", timeout=20_000)
    expect(denied).to_contain_text("determined")
    browser_login = page.locator('tbody tr[data-method="Login"]', has_text="127.0.0.1 (rest)").first
    expect(browser_login).to_be_visible(timeout=20_000)
    b.shot("audit-trail")

    # Filters narrow the list and stay in the address.
    page.get_by_label("User").fill("determined")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"user=determined"))
    expect(page.locator('tbody tr[data-method="PostUser"]', has_text="username=auditee")).to_have_count(0)
    expect(denied).to_have_count(1)
    page.get_by_label("Outcome").select_option("failed")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"outcome=failed"))
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".badge")).to_have_text("PERMISSION_DENIED")
    page.get_by_role("button", name="Clear").click()
    expect(created).to_have_count(1)

    # Someone who is not an admin: no link, and the page says why.
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r"/login"))
    _log_in(b, "determined")
    page.wait_for_url(re.compile(r"/experiments"))
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit")).to_have_count(0)
    b.goto("/audit")
    expect(page.get_by_role("alert")).to_contain_text("only an admin may read the audit trail")
    expect(rows).to_have_count(0)

    # Given ClusterAdmin by a role (the admin flag still off), the link and the trail are theirs.
    (me,) = [u for u in admin.GetUsers(auth_pb2.GetUsersRequest()).users if u.username == "determined"]
    admin.AssignRoles(
        rbac_pb2.AssignRolesRequest(
            user_role_assignments=[
                rbac_pb2.UserRoleAssignment(
                    user_id=me.id,
                    role_assignment=rbac_pb2.RoleAssignment(
                        role=rbac_pb2.Role(role_id=1), scope_cluster=True
                    ),
                )
            ]
        )
    )
    b.goto("/experiments")
    audit_link = page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit")
    expect(audit_link).to_have_count(1)
    audit_link.click()
    # Stored off the call's path: shown at the page's next refresh if the page was read first.
    expect(page.locator('tbody tr[data-method="AssignRoles"]')).to_have_count(1, timeout=20_000)
    b.check_clean()
    assert (SCREENSHOTS / "audit-trail.png").is_file()
