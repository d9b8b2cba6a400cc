"""A real browser for the browser tests: Debian's Chromium, driven by Playwright on a thread of its own.

Playwright drives /usr/bin/chromium and never downloads a browser; `make test` installs
Debian's chromium when it is missing (scripts/ensure-chromium.sh). The browser and tab fixtures
that hand these out are in the root conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

from django.conf import settings
from playwright.sync_api import BrowserContext, ConsoleMessage, Page, Request, expect, sync_playwright

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
# Playwright's waits (the page's and expect()'s) and one call to the browser's thread, its waits
# included: guards against a hang only. A wait ends as soon as the page shows what it waits for, so
# on a quiet machine these cost nothing, and on a loaded one (one core, the memory held by another
# process) they leave the page the time it takes. No test states a speed through them.
TIMEOUT_MS = 60_000
CALL_TIMEOUT_S = 600
expect.set_options(timeout=TIMEOUT_MS)
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
        page.on("requestfailed", self._request_failed)
        page.on(
            "response",
            lambda resp: self.errors.append(f"HTTP {resp.status}: {resp.url}") if resp.status >= 400 else None,
        )
        return context, page

    def _request_failed(self, request: Request) -> None:
        # A filter's suggestions are fetched while the user types; the request still in flight is
        # aborted when the form is swapped by the results it filtered (htmx), which loses nothing.
        if "/runs/values/" in request.url and request.failure == "net::ERR_ABORTED":
            return
        self.errors.append(f"request failed: {request.url} ({request.failure})")

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
        """Until Plotly has drawn into the element (its data attached and its SVG in place) and charts.js has
        made room for its legend (fitLegend)."""
        self.do(
            lambda page: page.wait_for_function(
                "sel => { const el = document.querySelector(sel);"
                " return !!(el && el.data && el._fullLayout && el.querySelector('.main-svg') && el.dataset.fitted); }",
                arg=selector,
            )
        )

    def change_filter(self, name: str, value: str) -> dict[str, str]:
        """Pick a value in the chart form's select, or type it in full in a value filter's box and
        press Enter, and wait until htmx has swapped the chart in.

        Gives the swap request's headers. The chart is a new element afterwards (the swap
        replaces #chart), so a wait for the plot after this one waits for the new plot."""

        def change(page: Page) -> dict[str, str]:
            old_chart = page.locator("#chart").element_handle()
            field = page.locator(f"#chart-form [name={name}]")
            with page.expect_response(lambda r: "/charts/" in r.url and f"{name}={value}" in r.url) as swap:
                if field.evaluate("el => el.tagName") == "SELECT":
                    field.select_option(value)
                else:
                    field.fill(value)
                    field.press("Enter")
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

    def annotations(self, selector: str) -> list[str]:
        """The annotation texts Plotly drew in the plot (SVG text, as a reader sees them)."""
        return self.evaluate(
            "sel => Array.from(document.querySelectorAll(sel + ' .annotation-text'), e => e.textContent)", selector
        )

    def tick_labels(self, selector: str, axis: str) -> list[str]:
        """The tick labels drawn on one axis ("x", "y3", ...)."""
        return self.evaluate(
            "([sel, ax]) => Array.from(document.querySelectorAll(`${sel} .${ax}tick text`), e => e.textContent)",
            [selector, axis],
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
