"""The WebUI's tasks in Chromium (Playwright, as test_e2e_webui.py drives it) against a real cluster:
the tasks page lists a command and a notebook with owner, slots and pool; a notebook launched from
its dialog opens in a new tab through the master's proxy (the browser's session cookie is its only
credential) and runs a cell typed into JupyterLab; killing it from the page ends it on the master;
an experiment whose name hides a bidi override and an ANSI escape is shown with both escaped; and
"Open TensorBoard" on the experiment page opens the experiment's TensorBoard through the proxy.

SQLite and the process runtime only: the browser side does not depend on either.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from cairn.api.v1 import command_pb2, notebook_pb2, task_pb2
from tests.e2e.helpers import config, create, wait_state

# The browser helpers of the WebUI's own e2e tests: one way to start Chromium.
from tests.e2e.test_e2e_webui import SCREENSHOTS, Browser, _log_in, browser_on, expect
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.polling import wait_for

RUNNING = task_pb2.Allocation.STATE_RUNNING
TERMINATED = task_pb2.Allocation.STATE_TERMINATED
# JupyterLab starting on a loaded two-core machine: generous, but bounded.
JUPYTER_START_MS = 240_000
CELL_MS = 120_000
# A right-to-left override that would show "exe.txt" as "txt.exe", and a colour escape.
HOSTILE_NAME = "report\u202etxt.exe \x1b[31mred"
ESCAPED_NAME = "report\\u202etxt.exe \\x1b[31mred"


@pytest.fixture
def task_cluster(tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with two slots, process runtime, SQLite."""
    with running_cluster(tmp_path / "cluster", None, agents=1, slots=2) as c:
        yield c


@pytest.fixture
def ui(task_cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    yield from browser_on(task_cluster, tmp_path)


def launch_command(api: AuthedStub, entrypoint: str, description: str) -> str:
    body = struct_pb2.Struct()
    body.update({"entrypoint": entrypoint, "resources": {"slots": 1}, "description": description})
    return str(api.LaunchCommand(command_pb2.LaunchCommandRequest(config=body)).command.id)


def notebook_state(api: AuthedStub, task_id: str) -> int:
    return int(api.GetNotebook(notebook_pb2.GetNotebookRequest(notebook_id=task_id)).notebook.state)


def notebooks(api: AuthedStub) -> list[notebook_pb2.Notebook]:
    return list(api.GetNotebooks(notebook_pb2.GetNotebooksRequest()).notebooks)


def run_cell_in_jupyterlab(lab: Any, code: str) -> Any:
    """Opens a Python notebook from JupyterLab's launcher, types `code` into its first cell and
    runs it (JupyterLab holds the execution until the new kernel is up); the cell's output area."""
    lab.locator(".jp-LauncherCard[data-category='Notebook']").first.click(timeout=JUPYTER_START_MS)
    editor = lab.locator(".jp-Notebook .jp-Cell .cm-content").first
    # A new notebook's editor can drop keystrokes while it is still being set up (seen under load:
    # the cell ran empty): type until it holds the code, a bounded number of times.
    for _attempt in range(3):
        editor.click(timeout=CELL_MS)
        lab.keyboard.press("ControlOrMeta+A")
        editor.press_sequentially(code)
        if (editor.text_content(timeout=CELL_MS) or "").strip() == code:
            break
    expect(editor).to_have_text(code)
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # imported once the test runs

    output = lab.locator(".jp-Cell .jp-OutputArea-output").first
    # Run the cell in place. A run asked for while the new kernel is still connecting can be
    # dropped by JupyterLab (seen under load: the cell stayed "[ ]" with the kernel idle), so a
    # run that shows nothing is asked for again, a bounded number of times.
    for _attempt in range(3):
        editor.click(timeout=CELL_MS)
        lab.keyboard.press("ControlOrMeta+Enter")
        try:
            output.wait_for(timeout=CELL_MS // 3)
            break
        except PlaywrightTimeout:
            continue
    return output


def test_tasks_page_lists_launches_opens_runs_a_cell_and_kills(
    task_cluster: TestCluster, ui: Browser
) -> None:
    api = task_cluster.login()
    command_id = launch_command(api, "echo started; sleep 600", "webui-command")
    wait_for(
        lambda: api.GetCommand(command_pb2.GetCommandRequest(command_id=command_id)).command.state == RUNNING,
        timeout=90,
        what=f"command {command_id} running",
    )
    experiment_id = create(
        api, config(name=HOSTILE_NAME, description=f"about {HOSTILE_NAME}", labels=["ok", "a\u2066b\nc"])
    )
    b, page = ui, ui.page

    b.goto("/tasks")
    _log_in(b)
    page.wait_for_url(re.compile(r"/tasks$"))
    command_row = page.locator(f"tr[data-task-id='{command_id}']")
    expect(command_row).to_contain_text("Command")
    expect(command_row).to_contain_text("webui-command")
    expect(command_row).to_contain_text("Running")
    expect(command_row).to_contain_text("determined")
    expect(command_row.locator("td").nth(4)).to_have_text("1")  # its slot, from the live allocation
    expect(command_row.locator("td").nth(5)).to_have_text("default")

    # Launch from the dialog: zero slots (the command holds one of two), the default pool.
    page.get_by_role("button", name="Launch JupyterLab").click()
    dialog = page.get_by_role("dialog", name="Launch JupyterLab")
    dialog.get_by_label("Slots").fill("0")
    expect(dialog.get_by_label("Resource pool")).to_have_value("default")
    dialog.get_by_label("Name (optional)").fill("webui-notebook")
    with page.context.expect_page(timeout=60_000) as opened:
        dialog.get_by_role("button", name="Launch").click()
    lab = opened.value
    wait_for(lambda: len(notebooks(api)) == 1, timeout=30, what="the launched notebook on the master")
    (notebook,) = notebooks(api)
    config_of = api.GetNotebook(notebook_pb2.GetNotebookRequest(notebook_id=notebook.id)).config
    assert config_of["resources"]["slots"] == 0 and notebook.description == "webui-notebook"

    # Both kinds listed; the notebook with its name and owner.
    notebook_row = page.locator(f"tr[data-task-id='{notebook.id}']")
    expect(notebook_row).to_contain_text("Notebook")
    expect(notebook_row).to_contain_text("webui-notebook")
    expect(notebook_row).to_contain_text("determined")
    expect(command_row).to_be_visible()

    # The new tab waited for JupyterLab, then moved on to the master's proxy; only the session
    # cookie authenticates it (no token in the URL), and a typed cell runs on the kernel.
    lab.wait_for_url(re.compile(rf"/proxy/{notebook.id}/lab"), timeout=JUPYTER_START_MS)
    assert "token" not in lab.url
    output = run_cell_in_jupyterlab(lab, "print(6*7)")
    expect(output).to_contain_text("42", timeout=CELL_MS)
    lab.screenshot(path=str(SCREENSHOTS / "30-jupyterlab-cell.png"), timeout=30_000)
    expect(notebook_row).to_contain_text("Running")
    b.shot("31-tasks")

    # Kill from the page, asked first; the master ends it and the proxy then refuses.
    notebook_row.get_by_role("button", name="Kill").click()
    page.get_by_role("dialog", name="Kill task?").get_by_role("button", name="Kill").click()
    wait_for(lambda: notebook_state(api, notebook.id) == TERMINATED, timeout=90, what="the notebook killed")
    expect(notebook_row).to_contain_text("Terminated", timeout=30_000)
    expect(notebook_row.get_by_role("button", name="Kill")).to_have_count(0)
    expect(command_row).to_contain_text("Running")  # only the notebook was killed
    ended = lab.request.get(f"{b.base_url}/proxy/{notebook.id}/api/status")
    assert ended.status == 404

    # Names are shown with their control characters escaped, in the list and on the page.
    b.goto("/experiments")
    expect(page.locator(f"tr[data-experiment-id='{experiment_id}']")).to_contain_text(ESCAPED_NAME)
    assert not {"\u202e", "\x1b"} & set(page.locator("main").inner_text())
    b.goto(f"/experiments/{experiment_id}")
    expect(page.locator("#experiment-title")).to_contain_text(ESCAPED_NAME)
    expect(page.locator(".about")).to_contain_text(f"about {ESCAPED_NAME}")
    expect(page.locator(".about .chips")).to_contain_text("a\\u2066b\\nc")
    assert not {"\u202e", "\x1b"} & set(page.locator("main").inner_text())
    b.shot("32-escaped-name")
    wait_state(api, experiment_id, "COMPLETED")
    b.check_clean()
    api.KillCommand(command_pb2.KillCommandRequest(command_id=command_id))


def test_open_tensorboard_from_the_experiment_page(task_cluster: TestCluster, ui: Browser) -> None:
    api = task_cluster.login()
    experiment_id = create(api, config(name="webui-tensorboard"))
    wait_state(api, experiment_id, "COMPLETED")
    b, page = ui, ui.page
    b.goto(f"/experiments/{experiment_id}")
    _log_in(b)
    page.wait_for_url(re.compile(rf"/experiments/{experiment_id}$"))
    with page.context.expect_page(timeout=60_000) as opened:
        page.get_by_role("button", name="Open TensorBoard").click()
    board = opened.value
    board.wait_for_url(re.compile(r"/proxy/[^/]+/"), timeout=JUPYTER_START_MS)
    task_id = board.url.split("/proxy/", 1)[1].split("/", 1)[0]
    task = api.GetTask(notebook_pb2.GetTaskRequest(task_id=task_id)).task
    assert task.task_type == notebook_pb2.TASK_TYPE_TENSORBOARD
    expect(board).to_have_title(re.compile("TensorBoard"), timeout=CELL_MS)
    # The experiment's trial is a run, and the metrics it reported are scalars.
    expect(board.get_by_text(f"experiment_{experiment_id}/trial_", exact=False).first).to_be_visible(
        timeout=CELL_MS
    )
    expect(board.get_by_text("validation_loss", exact=False).first).to_be_visible(timeout=CELL_MS)
    board.screenshot(path=str(SCREENSHOTS / "33-tensorboard.png"), timeout=30_000)

    # It is a task like the others: listed with its kind, and killed from the tasks page.
    b.goto("/tasks")
    row = page.locator(f"tr[data-task-id='{task_id}']")
    expect(row).to_contain_text("TensorBoard")
    expect(row).to_contain_text("Running")
    expect(row.get_by_role("link", name="Open")).to_have_attribute("href", f"/tasks/{task_id}/open")
    row.get_by_role("button", name="Kill").click()
    page.get_by_role("dialog", name="Kill task?").get_by_role("button", name="Kill").click()
    expect(row).to_contain_text("Terminated", timeout=60_000)
    assert api.GetTask(notebook_pb2.GetTaskRequest(task_id=task_id)).task.HasField("end_time")
    b.check_clean()
