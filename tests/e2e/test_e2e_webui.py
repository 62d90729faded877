"""The WebUI end to end: Debian's Chromium, driven by Playwright, against a real cluster whose
master serves the built WebUI and the REST API. A person's path through it — log in, the
experiments list, an experiment with its curves, trials, hyperparameters and checkpoints, a trial
with its charts and logs, the cluster's slot map, pause and activate from the UI, log out — and a
learning curve of many trials. Screenshots of every page go to test-artifacts/webui/.

Needs /usr/bin/chromium (scripts/ensure_chromium.sh installs it) and the `playwright` package; the
WebUI is built here when webui/dist is missing, which needs npm. Without any of them the tests
skip, saying which is missing.
"""

from __future__ import annotations

import fcntl
import gzip
import http.client
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from cairn.api.v1 import experiment_pb2, trial_pb2
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.public_server import start_public_http
from services.master.gateway.webui import webui_routes
from tests.e2e.helpers import config, create, logs, state, trials, wait_state
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
# The badge of an ACTIVE experiment or trial: the derived state the API answers for it.
DERIVED_BADGE = re.compile(r"^(Queued|Pulling|Starting|Running)$")
WEBUI = REPO / "webui"
SCREENSHOTS = REPO / "test-artifacts" / "webui"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
UI_TIMEOUT_MS = 30_000


def _build_webui() -> None:
    """Builds webui/dist when it is missing (as `make install` does where npm exists), once: the
    test workers (pytest-xdist) take turns on a lock."""
    if (WEBUI / "dist" / "index.html").is_file():
        return
    with open(WEBUI / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (WEBUI / "dist" / "index.html").is_file():
            _run_npm_build()


def _run_npm_build() -> None:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm not found and webui/dist is not built: WebUI tests NOT RUN")
    if not (WEBUI / "node_modules").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=WEBUI, check=True, timeout=600)
    subprocess.run([npm, "run", "build"], cwd=WEBUI, check=True, timeout=300)
    assert (WEBUI / "dist" / "index.html").is_file(), "npm run build made no webui/dist/index.html"


def _webui_ready() -> Any:
    """Playwright's sync API once the browser side is there and the WebUI built; skips the test,
    saying what is missing, where it is not."""
    playwright_api = pytest.importorskip(
        "playwright.sync_api", reason="the `playwright` package is not installed: WebUI tests NOT RUN"
    )
    if os.environ.get("CAIRN_TEST_BROWSER") == "skip":
        pytest.skip("CAIRN_TEST_BROWSER=skip: WebUI browser tests NOT RUN")
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is missing (run scripts/ensure_chromium.sh): WebUI tests NOT RUN")
    _build_webui()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return playwright_api


@pytest.fixture(scope="session")
def playwright_api() -> Any:
    """`_webui_ready` as a fixture: asked before the cluster, so a missing browser starts none."""
    return _webui_ready()


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


@dataclass
class Browser:
    """One page in a fresh Chromium profile, recording script errors and every URL it requested."""

    page: Any
    base_url: str
    page_errors: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)

    def goto(self, path: str) -> None:
        self.page.goto(self.base_url + path, timeout=UI_TIMEOUT_MS)

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True, timeout=UI_TIMEOUT_MS)

    def check_clean(self) -> None:
        assert not self.page_errors, f"script errors in the page: {self.page_errors}"
        foreign = [u for u in self.requested if not u.startswith((self.base_url, "data:"))]
        assert not foreign, f"the page fetched from outside the master: {foreign}"


@pytest.fixture
def browser(playwright_api: Any, cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    yield from _open_browser(playwright_api, cluster, tmp_path)


def browser_on(cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    """Chromium on `cluster`'s WebUI, for the `ui` fixture of each other WebUI test module (on a
    cluster of its own): skips as the fixtures here do, once that cluster is up."""
    yield from _open_browser(_webui_ready(), cluster, tmp_path)


def _open_browser(playwright_api: Any, cluster: TestCluster, tmp_path: Path) -> Iterator[Browser]:
    assert cluster.record is not None and cluster.record.master_http_url
    base_url = cluster.record.master_http_url.rstrip("/")
    with playwright_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1400, "height": 1000},
            timeout=60_000,
        )
        try:
            context.set_default_timeout(UI_TIMEOUT_MS)
            page = context.pages[0] if context.pages else context.new_page()
            result = Browser(page=page, base_url=base_url)
            page.on("pageerror", lambda error: result.page_errors.append(str(error)))
            page.on("request", lambda request: result.requested.append(request.url))
            yield result
        finally:
            context.close()


def _log_in(b: Browser, username: str = "determined") -> None:
    """Signs in on the login page the app has sent the browser to (empty password), and waits
    until it has left it."""
    page = b.page
    page.wait_for_url(re.compile(r"/login"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill("")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"^(?!.*/login)"))


def _state_badge(b: Browser) -> Any:
    return b.page.locator(".page-head .badge").first


def test_webui_pages_and_experiment_actions(cluster: TestCluster, browser: Browser) -> None:
    api = cluster.login()
    text = config(
        name="webui-e2e",
        hyperparameters={
            "steps": 40,
            "step_s": 0.25,
            "val_every": 4,
            "ckpt_every": 10,
            "scale": {"type": "double", "minval": 0.5, "maxval": 2.0},
            "width": {"type": "categorical", "vals": [16, 32, 64]},
        },
        searcher={
            "name": "random",
            "metric": "validation_loss",
            "max_trials": 3,
            "max_length": {"batches": 40},
        },
    )
    experiment_id = create(api, text)
    b, page = browser, browser.page

    # On the real master, health and the REST API come before the WebUI's catch-all route.
    port = int(b.base_url.rsplit(":", 1)[1])
    assert _fetch(port, "/healthz").status == 200
    assert _fetch(port, "/api/v1/master").headers["content-type"].startswith("application/json")
    assert _fetch(port, "/api/v1/experiments").status == 401
    assert _fetch(port, f"/experiments/{experiment_id}").headers["content-type"].startswith("text/html")

    # Any page without a session lands on the login page, and comes back after it.
    b.goto(f"/experiments/{experiment_id}")
    b.shot("01-login")
    _log_in(b)
    page.wait_for_url(re.compile(rf"/experiments/{experiment_id}$"))

    b.goto("/experiments")
    row = page.locator(f"tr[data-experiment-id='{experiment_id}']")
    expect(row).to_contain_text("webui-e2e")
    expect(row.get_by_role("progressbar")).to_be_visible()
    # Stored ACTIVE, answered as Determined's derived state: its badge says which.
    expect(row.locator(".badge")).to_have_text(DERIVED_BADGE)
    b.shot("02-experiments")

    # While trials run, the slot map names the allocations on the slots.
    page.get_by_role("link", name="Cluster").click()
    expect(page.locator(".slot-alloc").first).to_have_text(re.compile(rf"^{experiment_id}\.\d+\.\d+$"))
    expect(page.locator("[data-agent-id]")).to_have_count(1)
    b.shot("03-cluster-busy")

    # Pause and activate from the experiment page; the master's state follows.
    b.goto(f"/experiments/{experiment_id}")
    expect(page.get_by_role("heading", name=re.compile("webui-e2e"))).to_be_visible()
    page.get_by_role("button", name="Pause").click()
    wait_for(lambda: state(api, experiment_id) == "PAUSED", timeout=30, what="PAUSED after Pause")
    expect(_state_badge(b)).to_have_text("Paused")
    b.shot("04-experiment-paused")
    page.get_by_role("button", name="Activate").click()
    wait_for(
        lambda: state(api, experiment_id) in ("ACTIVE", "QUEUED", "PULLING", "STARTING", "RUNNING"),
        timeout=30,
        what="ACTIVE after Activate",
    )
    expect(page.get_by_role("button", name="Pause")).to_be_visible()
    expect(_state_badge(b)).to_have_text(DERIVED_BADGE)

    # Kill asks first; dismissing the dialog changes nothing.
    page.get_by_role("button", name="Kill").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Kill experiment?")
    dialog.get_by_role("button", name="Cancel", exact=True).click()
    expect(dialog).to_be_hidden()

    wait_state(api, experiment_id, "COMPLETED", timeout=240)
    expect(_state_badge(b)).to_have_text("Completed")
    expect(page.get_by_test_id("curve-summary")).to_have_text(re.compile(r"^3 trials, [1-9]\d* points"))
    expect(page.locator(".chart canvas")).to_have_count(1)
    _expect_drawn(page.locator(".chart canvas"))
    b.shot("05-experiment-curves")

    page.get_by_role("tab", name="Trials").click()
    expect(page.locator("tr[data-trial-id]")).to_have_count(3)
    b.shot("06-experiment-trials")

    page.get_by_role("tab", name="Hyperparameters").click()
    expect(page.locator("figure.scatter figcaption", has_text="scale vs. validation_loss")).to_be_visible()
    expect(page.locator("figure.scatter canvas").first).to_be_visible()
    b.shot("07-experiment-hparams")

    page.get_by_role("tab", name="Checkpoints").click()
    expect(page.locator("table tbody tr code").first).to_be_visible()
    b.shot("08-experiment-checkpoints")

    # A trial: its metric charts (training and validation), logs, checkpoints.
    first_trial = min(t.id for t in trials(api, experiment_id))
    page.get_by_role("tab", name="Trials").click()
    page.locator(f"tr[data-trial-id='{first_trial}'] a").first.click()
    page.wait_for_url(re.compile(rf"/trials/{first_trial}$"))
    expect(page.locator("figure.metric-chart[data-metric='validation_loss'] canvas")).to_be_visible()
    expect(page.locator("figure.metric-chart[data-metric='loss'] canvas")).to_be_visible()
    expect(page.get_by_role("table").filter(has_text="scale")).to_be_visible()
    b.shot("09-trial-overview")

    page.get_by_role("tab", name="Logs").click()
    expect(page.get_by_role("log").locator(".log-line", has_text="DONE")).to_have_count(1)
    expect(page.get_by_role("log")).to_contain_text("LEDGER training 40")
    b.shot("10-trial-logs")

    page.get_by_role("tab", name="Checkpoints").click()
    expect(page.locator("table tbody tr code").first).to_be_visible()
    b.shot("11-trial-checkpoints")

    page.get_by_role("link", name="Cluster").click()
    expect(page.locator("[data-slot-state='free']")).to_have_count(2)
    expect(page.locator("tr[data-pool='default']")).to_be_visible()
    b.shot("12-cluster-idle")

    # Logging out ends the session: the next page asks to log in again.
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r"/login"))
    b.goto("/experiments")
    page.wait_for_url(re.compile(r"/login\?redirect="))
    b.check_clean()


def _report_curves(api: AuthedStub, trial: trial_pb2.Trial, points: int) -> None:
    reports = []
    for i in range(points):
        values = struct_pb2.Struct()
        values.update({"curve_loss": (1.0 + trial.id % 13) / (i + 1) + 0.01 * (trial.id % 7)})
        reports.append(
            trial_pb2.MetricReport(seq=i + 1, group="curve", steps_completed=(i + 1) * 10, metrics=values)
        )
    api.ReportTrialMetricsBatch(
        trial_pb2.ReportTrialMetricsBatchRequest(
            trial_id=trial.id, trial_run_id=trial.run_id, reports=reports
        )
    )


def test_learning_curve_chart_renders_many_trials(cluster: TestCluster, browser: Browser) -> None:
    trial_count, points = 150, 200
    api = cluster.login()
    # A paused random search creates all its trials at once and runs none of them; the curves are
    # reported straight to the master as a custom group, so the searcher is not involved.
    text = config(
        name="many-curves",
        hyperparameters={"scale": {"type": "double", "minval": 0.5, "maxval": 2.0}},
        searcher={
            "name": "random",
            "metric": "validation_loss",
            "max_trials": trial_count,
            "max_concurrent_trials": 0,
            "max_length": {"batches": points * 10},
        },
    )
    experiment_id = create(api, text, activate=False)
    listed = api.GetExperimentTrials(
        trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id, limit=-1)
    ).trials
    assert len(listed) == trial_count
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda t: _report_curves(api, t, points), listed))

    b, page = browser, browser.page
    # Web Crypto is missing on plain-http origins other than localhost: login must still work.
    page.add_init_script("Object.defineProperty(globalThis.crypto, 'subtle', {value: undefined});")
    b.goto(f"/experiments/{experiment_id}")
    _log_in(b)
    page.wait_for_url(re.compile(rf"/experiments/{experiment_id}$"))

    started = time.monotonic()
    page.get_by_label("Metric").select_option(label="curve_loss (curve)")
    page.get_by_label("Top trials").select_option("500")
    expect(page.get_by_test_id("curve-summary")).to_have_text(
        re.compile(rf"^{trial_count} trials, {trial_count * points} points"), timeout=60_000
    )
    rendered_s = time.monotonic() - started
    assert rendered_s < 30, f"{trial_count} curves took {rendered_s:.1f}s to arrive and draw"

    # Hovering finds the nearest curve among all of them and names its trial.
    over = page.locator(".chart .u-over").first
    box = over.bounding_box()
    assert box is not None
    tip = page.locator(".chart-tip").first
    named = False
    for step in range(40):
        page.mouse.move(box["x"] + box["width"] * 0.01, box["y"] + box["height"] * step / 40)
        if tip.is_visible() and re.match(r"^Trial \d+ ·", tip.text_content() or ""):
            named = True
            break
    assert named, "hovering the learning curves never named a trial"
    b.shot("13-learning-curves-many-trials")
    b.check_clean()
    assert state(api, experiment_id) == "PAUSED"


# Pixels of a canvas in a series colour: saturated, unlike the greys of the grid, axes and ticks.
_COLOURED_PIXELS_JS = """canvas => {
  const {data} = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height);
  let n = 0;
  for (let i = 0; i < data.length; i += 4) {
    const [r, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
    if (a > 128 && Math.max(r, g, b) - Math.min(r, g, b) > 80) n++;
  }
  return n;
}"""


def _expect_drawn(canvas: Any) -> None:
    """The chart drew its data: some of its pixels are in a series colour."""
    wait_for(
        lambda: canvas.evaluate(_COLOURED_PIXELS_JS) >= 10, timeout=10, what="the chart to draw its data"
    )


def _hover_names(page: Any, chart: Any, pattern: str) -> None:
    """Moves the mouse down the middle of a chart's plot area until the hover readout matches."""
    box = chart.locator(".u-over").bounding_box()
    assert box is not None, "the chart has no plot area"
    tip = chart.locator(".chart-tip")
    seen = ""
    for step in range(41):
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] * step / 40)
        if tip.is_visible():
            seen = tip.text_content() or ""
            if re.match(pattern, seen):
                return
    raise AssertionError(f"hovering the chart never showed {pattern!r} (last readout: {seen!r})")


def test_charts_of_one_point_per_trial_render(cluster: TestCluster, browser: Browser) -> None:
    """Early in a search every trial has one validation, all at the same step: a chart whose x
    range is a single value (uPlot failed on it with "Invalid array length" and drew nothing)."""
    api = cluster.login()
    text = config(
        name="one-point-curves",
        hyperparameters={"scale": {"type": "double", "minval": 0.5, "maxval": 2.0}},
        searcher={
            "name": "random",
            "metric": "validation_loss",
            "max_trials": 3,
            "max_concurrent_trials": 0,
            "max_length": {"batches": 100},
        },
    )
    experiment_id = create(api, text, activate=False)
    listed = api.GetExperimentTrials(
        trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id, limit=-1)
    ).trials
    for t in listed:
        values = struct_pb2.Struct()
        values.update({"validation_loss": 1.0 / t.id})
        report = trial_pb2.MetricReport(seq=1, group="validation", steps_completed=10, metrics=values)
        api.ReportTrialMetricsBatch(
            trial_pb2.ReportTrialMetricsBatchRequest(trial_id=t.id, trial_run_id=t.run_id, reports=[report])
        )

    b, page = browser, browser.page
    b.goto(f"/experiments/{experiment_id}")
    _log_in(b)
    page.wait_for_url(re.compile(rf"/experiments/{experiment_id}$"))
    expect(page.get_by_test_id("curve-summary")).to_have_text(re.compile(r"^3 trials, 3 points"))
    expect(page.locator(".chart canvas")).to_have_count(1)
    expect(page.locator(".chart canvas")).to_be_visible()
    _expect_drawn(page.locator(".chart canvas"))
    _hover_names(page, page.locator(".chart").first, r"^Trial \d+ · Batches 10 ·")

    b.goto(f"/trials/{listed[0].id}")
    expect(page.locator("figure.metric-chart[data-metric='validation_loss'] canvas")).to_be_visible()
    _expect_drawn(page.locator("figure.metric-chart[data-metric='validation_loss'] canvas"))
    _hover_names(
        page,
        page.locator("figure.metric-chart[data-metric='validation_loss'] .chart"),
        r"^validation · Batches 10 · validation_loss ",
    )
    b.shot("14-one-point-per-trial")
    b.check_clean()


# ---- Serving the files: content types, caching, SPA fallback, no build ----


@dataclass
class Fetched:
    status: int
    headers: dict[str, str]
    body: bytes


def _fetch(port: int, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> Fetched:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return Fetched(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


@pytest.fixture
def fake_dist(tmp_path: Path) -> Path:
    """A build laid out as Vite writes it: index.html and hashed files under assets/."""
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text(
        '<!doctype html><script type="module" src="/assets/app-1a2b3c.js"></script>'
    )
    (dist / "assets" / "app-1a2b3c.js").write_text("console.log('cairn');\n" * 200)
    (dist / "assets" / "app-1a2b3c.css").write_text("body { color: black; }\n")
    (tmp_path / "secret.txt").write_text("outside the build")
    return dist


def _serve(dist: Path) -> Iterator[int]:
    server = start_public_http("127.0.0.1", 0, HttpLimits(), None)
    server.routes.extend(webui_routes(dist))
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def served(fake_dist: Path) -> Iterator[int]:
    yield from _serve(fake_dist)


def test_webui_files_have_types_and_cache_rules(served: int) -> None:
    index = _fetch(served, "/")
    assert index.status == 200 and index.headers["content-type"].startswith("text/html")
    assert index.headers["cache-control"] == "no-cache"
    assert "default-src 'self'" in index.headers["content-security-policy"]
    script = _fetch(served, "/assets/app-1a2b3c.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert (
        "immutable" in script.headers["cache-control"]
        and "max-age=31536000" in script.headers["cache-control"]
    )
    assert _fetch(served, "/assets/app-1a2b3c.css").headers["content-type"].startswith("text/css")
    zipped = _fetch(served, "/assets/app-1a2b3c.js", {"Accept-Encoding": "gzip, br"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert gzip.decompress(zipped.body) == script.body
    unchanged = _fetch(served, "/", {"If-None-Match": index.headers["etag"]})
    assert unchanged.status == 304 and unchanged.body == b""
    head = _fetch(served, "/", method="HEAD")
    assert head.status == 200 and head.body == b"" and head.headers["content-length"] == str(len(index.body))


def test_webui_falls_back_to_the_app_but_not_for_files_or_the_api(served: int) -> None:
    index = _fetch(served, "/").body
    for deep_link in ("/experiments/7", "/trials/3?tab=logs", "/cluster", "/login?redirect=%2Fexperiments"):
        found = _fetch(served, deep_link)
        assert found.status == 200 and found.body == index, deep_link
    assert _fetch(served, "/assets/missing-123.js").status == 404
    assert _fetch(served, "/favicon.ico").status == 404
    api = _fetch(served, "/api/v1/unknown")
    assert api.status == 404 and api.headers["content-type"] == "application/json"
    assert _fetch(served, "/api/v1/experiments", method="POST").status == 404
    for escape in ("/../secret.txt", "/assets/%2e%2e/%2e%2e/secret.txt", "/%2e%2e/secret.txt"):
        found = _fetch(served, escape)
        assert b"outside the build" not in found.body, escape


def test_webui_without_a_build_says_how_to_make_one(tmp_path: Path) -> None:
    for port in _serve(tmp_path / "no-such-dist"):
        page = _fetch(port, "/experiments")
        assert page.status == 503 and page.headers["content-type"].startswith("text/html")
        assert b"npm run build" in page.body
        assert _fetch(port, "/api/v1/master").status == 404


DIST_TRIAL = Path(__file__).parent / "fixtures" / "dist_trial"


@pytest.fixture
def browser_on_two_agents(
    playwright_api: Any, db_url: str | None, tmp_path: Path
) -> Iterator[tuple[TestCluster, Browser]]:
    with running_cluster(tmp_path / "cluster2", db_url, agents=2, slots=1) as two:
        for b in _open_browser(playwright_api, two, tmp_path):
            yield two, b


def test_a_multi_slot_trial_on_the_slot_map_and_its_logs_by_rank(
    browser_on_two_agents: tuple[TestCluster, Browser],
) -> None:
    cluster, b = browser_on_two_agents
    api = cluster.login()
    text = config(
        name="two-ranks",
        entrypoint="python3 -m cairn.launch.torch_distributed python3 dist_trial.py",
        resources={"slots_per_trial": 2},
        hyperparameters={"steps": 300, "step_s": 0.1},
    )
    experiment_id = create(api, text, DIST_TRIAL)
    trial_id = wait_for(lambda: trials(api, experiment_id), timeout=30, what="trial")[0].id
    wait_for(lambda: trials(api, experiment_id)[0].runner_state == "RUNNING", timeout=60, what="running")
    page = b.page
    b.goto("/cluster")
    _log_in(b)
    page.wait_for_url(re.compile(r"/cluster"))
    # Both agents' slots carry the one allocation, each with the container it runs.
    allocation = f"{experiment_id}.{trial_id}.1"
    expect(page.locator(".slot-alloc", has_text=allocation)).to_have_count(2)
    expect(page.locator(".slot-rank")).to_have_text(["container 0/2", "container 1/2"])
    b.shot("20-cluster-multi-slot")

    # Both ranks' first lines are stored before the page is read: the test is of what the page
    # shows, not of how soon a loaded machine's rank 1 gets to print (a run saw it take over 5 s).
    wait_for(
        lambda: all(any(f"RANK {r} size 2" in line for line in logs(api, trial_id)) for r in (0, 1)),
        timeout=60,
        what="both ranks' first lines in the trial's logs",
    )
    b.goto(f"/trials/{trial_id}?tab=logs")
    log = page.get_by_role("log")
    expect(log.locator(".log-line", has_text="RANK 1 size 2")).to_have_count(1)
    page.get_by_label("Show the lines of rank").select_option("1")
    expect(log.locator(".log-line", has_text="RANK 1 size 2")).to_have_count(1)
    expect(log.locator(".log-line", has_text="RANK 0 size 2")).to_have_count(0)
    expect(log.locator(".log-rank").first).to_have_text("[1]")
    b.shot("21-trial-logs-rank-1")
    api.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
    wait_state(api, experiment_id, "CANCELED", timeout=90)
    b.check_clean()


def test_experiment_edits_fork_continue_registry_and_projects(cluster: TestCluster, browser: Browser) -> None:
    """What Determined's WebUI lets a user change: name, description, labels and notes on the
    experiment page, fork and continue, a checkpoint registered in a model, the list by project."""
    api = cluster.login()
    text = config(
        name="edit-me",
        hyperparameters={"step_s": 0.05, "ckpt_every": 2, "follow_ops": True},
        searcher={"max_length": {"batches": 4}},
    )
    experiment_id = create(api, text)
    wait_state(api, experiment_id, "COMPLETED")
    b, page = browser, browser.page
    b.goto(f"/experiments/{experiment_id}")
    _log_in(b)
    page.wait_for_url(re.compile(rf"/experiments/{experiment_id}$"))

    about = page.locator("dl.about")
    about.get_by_role("button", name="Edit name").click()
    about.get_by_label("Name").fill("edited")
    about.get_by_role("button", name="Save").click()
    expect(page.get_by_role("heading", name=re.compile("^edited"))).to_be_visible()
    about.get_by_role("button", name="Edit description").click()
    about.get_by_label("Description").fill("from the browser")
    about.get_by_role("button", name="Save").click()
    expect(about).to_contain_text("from the browser")
    for label in ("keep", "drop"):
        about.get_by_label("New label").fill(label)
        about.get_by_role("button", name="Add").click()
        expect(about.get_by_role("button", name=f"Remove label {label}")).to_be_visible()
    about.get_by_role("button", name="Remove label drop").click()
    expect(about.get_by_role("button", name="Remove label drop")).to_have_count(0)
    page.get_by_role("tab", name="Notes").click()
    page.get_by_role("button", name="Edit notes").click()
    page.get_by_role("textbox", name="Notes").fill("# Findings\nlearning rate too high")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".panel pre.notes")).to_contain_text("learning rate too high")
    # An empty name is refused in the page and changes nothing.
    about.get_by_role("button", name="Edit name").click()
    about.get_by_label("Name").fill("  ")
    about.get_by_role("button", name="Save").click()
    expect(about.get_by_role("alert")).to_contain_text("must not be empty")
    about.get_by_role("button", name="Cancel").click()
    stored = api.GetExperiment(experiment_pb2.GetExperimentRequest(experiment_id=experiment_id)).experiment
    assert (stored.name, stored.description, list(stored.labels)) == ("edited", "from the browser", ["keep"])
    assert stored.notes == "# Findings\nlearning rate too high"
    b.shot("30-experiment-edited")

    # Register a checkpoint in a new model; the registry shows it as version 1.
    b.goto("/models")
    page.get_by_role("button", name="New model").click()
    page.get_by_role("dialog").get_by_label("Name").fill("digits-mlp")
    page.get_by_role("dialog").get_by_role("button", name="Create").click()
    page.wait_for_url(re.compile(r"/models/digits-mlp$"))
    b.goto(f"/experiments/{experiment_id}?tab=checkpoints")
    page.get_by_role("button", name="Register").first.click()
    dialog = page.get_by_role("dialog", name="Register checkpoint")
    expect(dialog.get_by_label("Model")).to_have_value("digits-mlp")
    dialog.get_by_role("button", name="Register").click()
    expect(dialog.get_by_role("status")).to_contain_text("digits-mlp version 1")
    dialog.get_by_role("link", name="digits-mlp version 1").click()
    page.wait_for_url(re.compile(r"/models/digits-mlp$"))
    expect(page.locator("tr[data-version='1']")).to_be_visible()
    b.shot("31-model-registry")

    # Fork: a new experiment with the parent's code and the edited config.
    b.goto(f"/experiments/{experiment_id}")
    page.get_by_role("button", name="Fork").click()
    fork = page.get_by_role("dialog", name="Fork experiment")
    field = fork.get_by_label("Configuration of the new experiment")
    field.fill(field.input_value().replace("name: edit-me", "name: forked"))
    fork.get_by_role("button", name="Create experiment").click()
    page.wait_for_url(
        lambda url: re.search(r"/experiments/\d+$", url) is not None and not url.endswith(f"/{experiment_id}")
    )
    forked_id = int(page.url.rsplit("/", 1)[1])
    assert forked_id != experiment_id
    expect(page.get_by_role("link", name=f"experiment {experiment_id}")).to_be_visible()
    wait_state(api, forked_id, "COMPLETED")

    # Continue: the single trial trains on to the longer length, in place.
    b.goto(f"/experiments/{experiment_id}")
    page.get_by_role("button", name="Continue").click()
    dialog = page.get_by_role("dialog", name="Continue training")
    dialog.get_by_label("Configuration changes (YAML)").fill("searcher:\n  max_length:\n    batches: 8\n")
    dialog.get_by_role("button", name="Continue").click()
    expect(dialog).to_be_hidden()
    wait_for(
        lambda: max(t.total_batches_processed for t in trials(api, experiment_id)) >= 8,
        timeout=120,
        what="the continued trial to reach 8 batches",
    )
    wait_state(api, experiment_id, "COMPLETED")

    # The list filtered by project: both experiments are in Uncategorized.
    b.goto("/experiments")
    page.get_by_label("Project").select_option(label="Uncategorized › Uncategorized")
    expect(page.locator("tr[data-experiment-id]")).to_have_count(2)
    b.shot("32-experiments-by-project")
    b.check_clean()
