"""gkr-ui in a real headless browser: Debian's `chromium` driven by Playwright (its own browser
download cannot work offline, so `executable_path` points at the system one; `make browser`
installs it). `gkr ui` runs as a process on a chDB store holding a synthetic run whose rank 2
is a straggler; the test clicks from the runs list to the run and checks what is drawn.

Screenshots are kept in tests/artifacts/ (git-ignored), or $GKR_TEST_ARTIFACTS.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.doubles.kube_apiserver import KubeApiServer
from tests.telemetry.test_ui import (
    EVIL,
    EVIL_MESSAGE,
    FLOPS_PER_TOKEN,
    PEAK_FLOPS,
    RANKS,
    ROOT,
    RUN,
    STEPS,
    STRAGGLER,
    TOKENS,
    UiProcess,
    fill_cluster,
    fill_store,
)

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
TIMEOUT_MS = 60_000  # generous: two shared cores, a browser, a server and chDB
expect = sync_api.expect
expect.set_options(timeout=TIMEOUT_MS)


def _chromium() -> str:
    found = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is missing in CI: `make test` installs it through `make browser`")
    pytest.skip("no chromium on PATH: `make browser` (or `apt-get install chromium`) installs it")


@pytest.fixture(scope="module")
def artifacts() -> Path:
    folder = Path(os.environ.get("GKR_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts") / "ui"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\ngkr ui screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def store_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    dsn = f"chdb://{tmp_path_factory.mktemp('ui-browser') / 'telemetry'}"
    fill_store(dsn)
    return dsn


@pytest.fixture(scope="module")
def ui(store_dsn: str) -> Iterator[UiProcess]:
    server = UiProcess.start(store_dsn)
    yield server
    server.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page that records every request it makes and every script error."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    opened.requests, opened.errors = [], []
    opened.on("request", lambda request: opened.requests.append(request.url))
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))
    opened.on("console", lambda m: opened.errors.append(m.text) if m.type == "error" else None)
    yield opened
    context.close()


def test_runs_list_then_a_run_with_curves_heatmap_and_stragglers(ui, page, artifacts) -> None:
    page.goto(ui.url)
    runs = page.locator("#runs a.run")
    expect(runs).to_have_count(2)
    expect(page.locator("#no-cluster")).to_contain_text("No cluster reachable")
    expect(page.locator("#no-warden")).to_contain_text("Warden not reachable")
    expect(page.locator("#events")).to_contain_text("XID 79")
    page.screenshot(path=artifacts / "runs.png", full_page=True)

    page.get_by_role("link", name=RUN, exact=True).first.click()
    expect(page.locator("#run-name")).to_have_text(RUN)
    for chart in ("loss", "samples", "tokens", "step-time"):
        line = page.locator(f'svg[data-chart="{chart}"] path.series').first
        expect(line).to_have_attribute("data-points", str(STEPS))
        assert line.get_attribute("d").count("L") == STEPS - 1, chart  # one segment a step
    expect(page.locator('svg[data-chart="loss"] path.band')).to_have_count(1)
    expect(page.locator("#ledger-card .badge.ok")).to_have_text("exactly once")
    expect(page.locator("#ledger-verdict")).to_contain_text(f"up to step {STEPS}")
    for chart in ("rank-tokens", "rank-mfu", "rank-memory", "rank-step-time"):
        lines = page.locator(f'svg[data-chart="{chart}"] path.series')
        expect(lines).to_have_count(RANKS)  # one line a rank, one point a step each
        for i in range(RANKS):
            expect(lines.nth(i)).to_have_attribute("data-points", str(STEPS))
            expect(lines.nth(i)).to_have_attribute("data-series", f"rank {i}")
    expect(page.locator("#ranks-card")).to_contain_text("Peak CUDA memory allocated (GiB)")
    expect(page.locator("#ranks tbody tr")).to_have_count(RANKS)
    slow = page.locator("#ranks tbody tr").nth(STRAGGLER)
    expect(slow.locator("td").first).to_have_text(str(STRAGGLER))
    expect(slow).to_contain_text(f"{_straggler_mfu() * 100:.1f}%")
    expect(slow).to_contain_text(f"{42 + STRAGGLER}.0 GiB")  # its allocator's peak
    expect(page.locator('svg[data-chart^="fleet-"]')).to_have_count(3)  # rates, 2 services
    expect(page.locator("#health tbody tr")).to_have_count(2)

    cells = page.locator('svg[data-chart="heatmap"] rect.cell')
    expect(cells).to_have_count(RANKS * 6)  # 180 s in 30 s windows
    outlined = page.locator('svg[data-chart="heatmap"] rect.cell.last')
    expect(outlined).to_have_count(6)
    assert {outlined.nth(i).get_attribute("data-rank") for i in range(6)} == {str(STRAGGLER)}
    top = page.locator("#stragglers tbody tr").first
    expect(top.locator("td").first).to_have_text(str(STRAGGLER))
    expect(top).to_contain_text("persistent straggler")
    expect(top).to_contain_text(f"{RUN}-worker-{STRAGGLER}")
    expect(page.locator("#stragglers tbody tr.persistent")).to_have_count(1)
    expect(page.locator("#placement tbody tr")).to_have_count(RANKS + 1)  # and the driver
    page.screenshot(path=artifacts / "run.png", full_page=True)

    page.select_option("#window", "60")
    expect(cells).to_have_count(RANKS * 3)
    origin = ui.url.rstrip("/")
    assert [url for url in page.requests if not url.startswith(origin)] == []  # nothing remote
    assert page.errors == []


def _straggler_mfu() -> float:
    """The straggler's mean MFU, as the synthetic run wrote it (tests/telemetry/test_ui.py)."""
    times = [0.55 + 0.01 * math.sin(step / 8) for step in range(STEPS)]
    return sum(TOKENS / t for t in times) / STEPS * FLOPS_PER_TOKEN / PEAK_FLOPS


def test_markup_in_run_names_and_messages_stays_text(ui, page) -> None:
    page.goto(ui.url)
    link = page.locator("#runs a.run", has_text="onerror")
    expect(link).to_have_text(EVIL)
    link.click()
    expect(page.locator("#run-name")).to_have_text(EVIL)
    expect(page.locator("#run-events-card")).to_contain_text(EVIL_MESSAGE)
    expect(page.locator("#no-stragglers")).to_contain_text("no collective samples")
    expect(page.locator("#no-ledger")).to_contain_text("no sample ledger")
    for injected in ("main img", "main b", "main script"):
        assert page.locator(injected).count() == 0, injected
    assert page.evaluate("window.__pwned") is None
    assert page.errors == []


def test_a_busy_store_is_shown_and_the_page_fills_once_released(ui, page, store_dsn) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom runtime.telemetry.store import Store\n"
         f"s = Store.connect({store_dsn!r}, migrate=False)\nprint('held', flush=True)\n"
         "sys.stdin.readline()\ns.close()"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        page.goto(ui.url)
        expect(page.locator("#notice")).to_contain_text("open in another process")
        expect(page.locator("#notice")).to_be_visible()
    finally:
        holder.communicate("\n", timeout=60)
    expect(page.locator("#runs a.run")).to_have_count(2)  # asked again after Retry-After
    expect(page.locator("#notice")).to_be_hidden()


def test_live_pods_and_nodes_when_a_cluster_answers(page, store_dsn, tmp_path,
                                                   artifacts) -> None:
    """Against the Kubernetes API test double (testing/doubles/kube_apiserver.py): no cluster
    can run here."""
    with KubeApiServer() as api:
        fill_cluster(api)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        server = UiProcess.start(store_dsn, "--kubeconfig", str(kubeconfig))
        try:
            page.goto(server.url)
            expect(page.locator("#nodes tbody tr")).to_have_count(2)
            expect(page.locator("#pods tbody tr")).to_have_count(1)
            expect(page.locator("#pods")).to_contain_text(f"{RUN}-worker-{STRAGGLER}")
            expect(page.locator("#runs a.run")).to_have_count(2)
            page.screenshot(path=artifacts / "runs-with-cluster.png", full_page=True)
            page.get_by_role("link", name=RUN, exact=True).first.click()
            live = page.locator("#placement span.live")
            expect(live.and_(page.locator(f'[data-pod="{RUN}-worker-{STRAGGLER}"]'))
                   ).to_have_text("Running")
            expect(live.and_(page.locator(f'[data-pod="{RUN}-worker-0"]'))
                   ).to_have_text("not running")
            expect(page.locator("#no-cluster")).to_have_count(0)
        finally:
            server.stop()
