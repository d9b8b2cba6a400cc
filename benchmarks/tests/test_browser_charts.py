"""The chart pages in a real browser: Debian's Chromium, driven by Playwright, against a live server.

What only a browser shows: that Plotly draws each figure with no console error, the traces
it holds (read from the plot element's `.data`), and that a filter change re-draws the
timeline through htmx without a page load. Each chart page is saved as a PNG under
var/screenshots/ for review.

Playwright drives /usr/bin/chromium and never downloads a browser; `make test` installs
Debian's chromium when it is missing (scripts/ensure-chromium.sh).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.conf import settings
from playwright.sync_api import BrowserContext, ConsoleMessage, Page, expect, sync_playwright

from benchmarks.charts import figures as charts
from benchmarks.history.importer import import_bench_file
from benchmarks.models import RequestResult, Run
from benchmarks.tests.conftest import DEMO_PATH

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
# Headless Chromium on a machine with a closed network: no GPU, no sandbox (root in a
# container), and none of the background connections (they are refused, many at a time).
# Playwright's launch() gives the browser a fresh, empty --user-data-dir of its own.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(settings.VAR_DIR) / "screenshots"
TIMEOUT_MS = 10_000  # Playwright's waits
CALL_TIMEOUT_S = 60  # one call to the browser's thread, waits included
T = TypeVar("T")


class BrowserThread:
    """Playwright's sync API on a thread of its own.

    Its sync API keeps an asyncio loop running on the thread that started it, and on a
    thread with a running loop Django refuses ORM calls (SynchronousOnlyOperation) and
    asyncio.run() fails, which would break this module's database work and every later
    test that runs a client. So every browser call goes to this one thread.
    """

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="playwright")
        self.call(self._start)

    def _start(self) -> None:
        self._playwright = sync_playwright().start()
        try:
            self.browser = self._playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
        except BaseException:
            self._playwright.stop()
            raise

    def _stop(self) -> None:
        try:
            self.browser.close()
        finally:
            self._playwright.stop()

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) on the browser's thread; its result, or its exception, comes back."""
        return self._executor.submit(fn, *args).result(timeout=CALL_TIMEOUT_S)

    def close(self) -> None:
        try:
            self.call(self._stop)
        finally:
            self._executor.shutdown(wait=True)


@pytest.fixture(scope="session")
def browser() -> Iterator[BrowserThread]:
    """One headless Chromium for the whole session."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is not installed: the browser tests need Debian's chromium. "
            "`make test` installs it (scripts/ensure-chromium.sh), or: sudo apt-get install chromium"
        )
    thread = BrowserThread()
    yield thread
    thread.close()


class Tab:
    """A page in a fresh browser context that keeps every console error, page error, failed request
    and HTTP error response. Each method runs on the browser's thread."""

    def __init__(self, thread: BrowserThread, base_url: str) -> None:
        self.thread = thread
        self.base_url = base_url
        self.errors: list[str] = []
        self.context, self.page = thread.call(self._new_page)

    def _new_page(self) -> tuple[BrowserContext, Page]:
        # A context per test: no cache, cookies or htmx history carried from another test.
        context = self.thread.browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        page.on("requestfailed", lambda req: self.errors.append(f"request failed: {req.url} ({req.failure})"))
        page.on(
            "response",
            lambda resp: self.errors.append(f"HTTP {resp.status}: {resp.url}") if resp.status >= 400 else None,
        )
        return context, page

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console error: {message.text} ({message.location.get('url')})")

    def do(self, fn: Callable[[Page], T]) -> T:
        """fn(page) on the browser's thread: for Playwright's expect() and one-off steps."""
        return self.thread.call(fn, self.page)

    def open(self, path: str, params: dict[str, Any] | list[tuple[str, Any]] | None = None) -> None:
        url = self.base_url + path + (f"?{urlencode(params, doseq=True)}" if params else "")

        def goto(page: Page) -> int | None:
            response = page.goto(url)
            return response.status if response else None

        status = self.do(goto)
        assert status == 200, f"{url}: HTTP {status}"

    def wait_for_plot(self, selector: str) -> None:
        """Until Plotly has drawn into the element (its data attached and its SVG in place)."""
        self.do(
            lambda page: page.wait_for_function(
                "sel => { const el = document.querySelector(sel);"
                " return !!(el && el.data && el._fullLayout && el.querySelector('.main-svg')); }",
                arg=selector,
            )
        )

    def change_filter(self, name: str, value: str) -> dict[str, str]:
        """Pick a value in the chart form's select and wait until htmx has swapped the chart in.

        Gives the swap request's headers. The chart is a new element afterwards (the swap
        replaces #chart), so a wait for the plot after this one waits for the new plot."""

        def change(page: Page) -> dict[str, str]:
            old_chart = page.locator("#chart").element_handle()
            with page.expect_response(lambda r: f"{name}={value}" in r.url) as swap:
                page.select_option(f"#chart-form select[name={name}]", value)
            page.wait_for_function("old => !old.isConnected", arg=old_chart)
            return swap.value.request.headers

        return self.do(change)

    def evaluate(self, script: str, arg: Any = None) -> Any:
        return self.do(lambda page: page.evaluate(script, arg))

    def traces(self, selector: str) -> list[dict[str, Any]]:
        """The traces Plotly holds for the plot element: what it drew, not what the server sent."""
        return self.evaluate(
            """sel => Array.from(document.querySelector(sel).data, t => ({
                   name: t.name, type: t.type,
                   x: Array.from(t.x || []), y: Array.from(t.y || []),
                   customdata: Array.from(t.customdata || []), text: t.text,
               }))""",
            selector,
        )

    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.do(lambda page: page.url)).query)

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.do(lambda page: page.screenshot(path=str(path), full_page=True))
        return path

    def assert_no_errors(self) -> None:
        errors = self.do(lambda page: list(self.errors))
        assert errors == [], "the page reported errors:\n" + "\n".join(errors)

    def close(self) -> None:
        self.thread.call(self.context.close)


@pytest.fixture
def tab(browser: BrowserThread, live_server: Any) -> Iterator[Tab]:
    tab = Tab(browser, live_server.url)
    try:
        yield tab
    finally:
        tab.close()


@pytest.fixture
def demo(transactional_db: None) -> dict[str, Run]:
    """The demo file imported (transactional tests flush the database after each test), runs by key."""
    with DEMO_PATH.open("rb") as fh:
        import_bench_file(fh, filename=DEMO_PATH.name, origin="demo")
    return {run.key: run for run in Run.objects.all()}


def expected_timeline(runs: list[Run]) -> dict[str, int]:
    """Trace name → number of points: one trace per config label, one for the failed runs."""
    dated = [r for r in runs if r.started_at is not None]
    expected = dict(Counter(r.label or "(none)" for r in dated))
    failed = [r for r in dated if r.n_requests and not r.n_ok]
    if failed:
        expected["failed runs"] = len(failed)
    return expected


def test_timeline_draws_one_trace_per_label_and_one_for_failed_runs(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    traces = tab.traces("#timeline-figure-plot")

    expected = expected_timeline(list(demo.values()))
    assert {t["name"]: len(t["x"]) for t in traces} == expected
    assert set(expected) == {"original", "C2", "C3P", "failed runs"}
    assert all(len(t["y"]) == len(t["x"]) for t in traces)
    by_name = {t["name"]: t for t in traces}
    # The failed run is a red cross, not a zero: a gap in its label's line.
    failed = demo["orig-x3"]
    assert by_name["failed runs"]["customdata"] == [failed.pk]
    original = by_name["original"]
    assert original["y"][original["customdata"].index(failed.pk)] is None
    # The points are the runs' decode tok/s, each trace in start order.
    for name in ("original", "C2", "C3P"):
        runs = sorted((r for r in demo.values() if r.label == name), key=lambda r: r.started_at)
        assert by_name[name]["customdata"] == [r.pk for r in runs]
        assert by_name[name]["y"] == [
            None if r.n_requests and not r.n_ok else pytest.approx(r.tok_s_mean, rel=1e-3) for r in runs
        ]
    tab.do(lambda page: expect(page.locator("#chart .summary")).to_contain_text(f"{len(demo)} runs"))
    tab.screenshot("timeline")
    tab.assert_no_errors()


def test_a_filter_change_redraws_the_timeline_through_htmx_without_a_page_load(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")

    tab.evaluate("window.__marker = 1")
    headers = tab.change_filter("label", "C2")
    assert headers.get("hx-request") == "true", "the filter change was not an htmx request"
    tab.wait_for_plot("#timeline-figure-plot")

    assert tab.query().get("label") == ["C2"]  # hx-push-url
    c2 = sorted((r for r in demo.values() if r.label == "C2"), key=lambda r: r.started_at)
    traces = tab.traces("#timeline-figure-plot")
    assert [(t["name"], t["customdata"]) for t in traces] == [("C2", [r.pk for r in c2])]
    assert len(c2) == 2
    assert tab.evaluate("window.__marker") == 1, "the page was reloaded: the filter change was not an htmx swap"
    tab.do(lambda page: expect(page.locator("#chart-form select[name=label]")).to_have_value("C2"))
    tab.assert_no_errors()


def test_compare_draws_a_bar_per_metric_panel_and_a_box_per_run(tab: Tab, demo: dict[str, Run]) -> None:
    runs = [demo["orig-x3"], demo["c2-x3"], demo["c3p-queue2"]]
    tab.open("/charts/compare/", [("run", r.pk) for r in runs])
    tab.wait_for_plot("#compare-figure-plot")
    traces = tab.traces("#compare-figure-plot")

    bars = [t for t in traces if t["type"] == "bar"]
    boxes = [t for t in traces if t["type"] == "box"]
    assert len(traces) == len(bars) + len(boxes)
    assert [b["name"] for b in bars] == [charts.METRICS[k].label for k in charts.COMPARE_METRICS]
    assert all(b["customdata"] == [r.pk for r in runs] for b in bars)
    success = next(b for b in bars if b["name"] == charts.METRICS["success"].label)
    assert success["y"] == [r.n_ok / r.n_requests for r in runs] == [0, 1, 1]  # 0/3 vs 3/3 vs 2/2
    assert success["text"] == ["failed: 0 ok", "", ""]
    # One box per run, holding its ok requests' tok/s.
    assert len(boxes) == len(runs)
    for box, run in zip(boxes, runs, strict=True):
        assert box["name"] == f"{run.label} ({run.key})"
        ok = RequestResult.objects.filter(run=run, ok=True).exclude(tok_s=None).count()
        assert len(box["y"]) == ok
    assert [len(b["y"]) for b in boxes] == [0, 3, 2]
    tab.screenshot("compare")
    tab.assert_no_errors()


def test_the_home_page_draws_the_decode_trend(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/")
    tab.wait_for_plot("#trend-figure-plot")
    traces = tab.traces("#trend-figure-plot")
    assert {t["name"]: len(t["x"]) for t in traces} == expected_timeline(list(demo.values()))
    tab.do(lambda page: expect(page.locator("section table tbody tr")).to_have_count(len(demo)))
    tab.screenshot("home")
    tab.assert_no_errors()


def test_the_load_curve_draws_after_picking_a_model(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/load/")
    tab.do(lambda page: expect(page.locator("#chart .empty")).to_have_text("Pick a model."))
    model = demo["orig-x3"].model
    tab.change_filter("model", model)
    tab.wait_for_plot("#load-figure-plot")

    assert tab.query().get("model") == [model]
    concurrencies = sorted({r.concurrency for r in demo.values() if r.model == model and r.concurrency})
    assert concurrencies == [1, 2, 3]
    traces = tab.traces("#load-figure-plot")
    # the demo timed no TTFT, so there is no TTFT line (and no axis of arbitrary ticks)
    assert [t["name"] for t in traces] == ["aggregate throughput (tok/s)", "per-request decode tok/s"]
    assert all(t["x"] == concurrencies for t in traces)
    tab.screenshot("load-curve")
    tab.assert_no_errors()


def test_the_regressions_page_lists_the_drop_in_decode_speed(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/regressions/")
    tab.do(lambda page: expect(page.locator("h1")).to_have_text("Regressions"))
    # C2 fell from 7.93 to 2.15 tok/s per request (one run alone, then three at once).
    tab.do(
        lambda page: expect(
            page.locator("tbody tr", has_text=charts.METRICS["tok_s"].label).filter(has_text="C2")
        ).to_have_count(1)
    )
    tab.screenshot("regressions")
    tab.assert_no_errors()


def test_a_zoom_in_the_browser_survives_a_filter_change(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    tab.evaluate(
        "sel => Plotly.relayout(document.querySelector(sel),"
        " {'xaxis.range[0]': '2026-09-18 19:00:00', 'xaxis.range[1]': '2026-09-18 20:30:00'})",
        "#timeline-figure-plot",
    )
    tab.do(lambda page: page.wait_for_url("**x0=**"))
    assert tab.query().get("x0") == ["2026-09-18 19:00:00"]

    tab.change_filter("metric", "success")
    tab.wait_for_plot("#timeline-figure-plot")
    assert tab.query().get("metric") == ["success"]
    shown = tab.evaluate("sel => document.querySelector(sel)._fullLayout.xaxis.range", "#timeline-figure-plot")
    assert tab.query().get("x0") == ["2026-09-18 19:00:00"], f"the zoom was lost: the chart now shows {shown}"
    assert shown[0].replace("T", " ").startswith("2026-09-18 19:00")
