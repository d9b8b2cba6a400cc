"""End-to-end journeys through the real UI on the running stack.

The web app (pytest-django's live server), a real Celery worker process on a real Redis,
real tiny llama-servers, and Debian's Chromium driven by Playwright: a staff user logs
in, imports the demo file, filters the runs, registers a llama-server with per-slot
caches, benchmarks it and follows the job live; reproduces the investigation's failure
from the form on a second server whose slots share one pool (the form warns first,
the job completes and finds every request failed with HTTP 500); sizes the
investigation's deployment on a 16 GB GPU, learning that the fit cannot be judged
until the weights are known, then that the original flags neither hold the workload
nor fit beside the Q4_K_M weights; shares a snapshot that an anonymous browser opens
looking like the page; and draws the timeline and compare charts. Every step
is done by typing and clicking, as a user would; each one checks that the browser saw no
console error, page error, failed request or HTTP error, and leaves a screenshot under
var/screenshots/e2e-<step>.png.

One test with steps: the worker, the llama-server and the browser start once. After it,
two tests pin bugs the journeys found and that were then fixed: htmx forms answering 400
now show their error in place, and a filter changed while the previous one loads is kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, Response, expect

from benchmarks.models import Job, Run, Server
from benchmarks.tests.browser import Tab
from benchmarks.tests.builders import DEMO_PATH
from benchmarks.tests.real_parts import live_llama_server
from sizing import catalogue as sizing_catalogue
from sizing.models import SizingSnapshot

pytestmark = [pytest.mark.browser, pytest.mark.llama_server, pytest.mark.django_db(transaction=True)]

USERNAME = "e2e-staff"
PASSWORD = "a-long-e2e-password"
LLAMA_FLAGS = ["-c", "2048", "-np", "3", "--no-kv-unified"]
SHARED_FLAGS = ["-c", "1024"]  # no -np: 4 slots sharing one pool of 1,024 cells, the investigation's mistake
JOB_TIMEOUT_MS = 300_000  # the job's whole life, from the redirect to "succeeded": a hang guard (within a call's)
# kvsize's workload line for the investigation's original configuration (docs/sizing.md).
SIZING_VERDICT = "need 18,300 cells; the unified pool has 16,384"


@pytest.fixture
def tiny_server(llama_server_binary: Path, tiny_models: dict[str, Path]) -> Iterator[str]:
    with live_llama_server(llama_server_binary, tiny_models["llama"], LLAMA_FLAGS) as url:
        yield url


@pytest.fixture
def shared_server(llama_server_binary: Path, tiny_models: dict[str, Path]) -> Iterator[str]:
    with live_llama_server(llama_server_binary, tiny_models["llama"], SHARED_FLAGS) as url:
        yield url


@pytest.fixture
def staff(transactional_db: None) -> User:
    return User.objects.create_user(USERNAME, password=PASSWORD, is_staff=True)


def dd(page: Page, term: str) -> Any:
    """The <dd> that follows the <dt> reading `term` exactly."""
    return page.locator(f"xpath=//dt[normalize-space(.)='{term}']/following-sibling::dd[1]")


class Journey:
    """The logged-in tab, plus a checkpoint per step: a screenshot, and no error so far."""

    def __init__(self, tab: Tab) -> None:
        self.tab = tab
        self.screenshots: list[Path] = []

    def do(self, fn: Callable[[Page], Any]) -> Any:
        return self.tab.do(fn)

    def url(self) -> str:
        return self.do(lambda page: page.url)

    def path(self) -> str:
        return urlsplit(self.url()).path

    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.url()).query)

    def forgive_sizing_400s(self) -> list[str]:
        """Take the errors of the sizing page's half-filled states out of the tab's
        list (see test_a_half_filled_form_shows_its_error_in_place) and give them.

        Typing the workload one field at a time sends, in between, a prompt size with no output
        size; the page answers 400 and htmx logs an error. Anything else stays an error."""

        def take(page: Page) -> list[str]:
            known = [e for e in self.tab.errors if "400" in e and "/sizing/" in e]
            self.tab.errors[:] = [e for e in self.tab.errors if e not in known]
            return known

        known = self.do(take)
        for error in known:
            if error.startswith("HTTP 400: "):
                query = parse_qs(urlsplit(error.removeprefix("HTTP 400: ")).query)
                assert bool(query.get("prompt_tokens")) != bool(query.get("output_tokens")), error
        return known

    def checkpoint(self, step: str) -> None:
        self.screenshots.append(self.tab.screenshot(f"e2e-{step}"))
        self.tab.assert_no_errors()


@pytest.fixture
def journey(browser: Any, live_server: Any) -> Iterator[Journey]:  # noqa: F811
    tab = Tab(browser, live_server.url)
    try:
        yield Journey(tab)
    finally:
        tab.close()


def test_a_staff_user_goes_from_import_to_a_shared_sizing_snapshot(
    journey: Journey,
    browser: Any,  # noqa: F811
    live_server: Any,
    staff: User,
    tiny_server: str,
    shared_server: str,
    tiny_models: dict[str, Path],
    worker: Any,  # noqa: F811
) -> None:
    # 1. Log in through the login form; it lands on the run list.
    journey.tab.open("/accounts/login/", {"next": "/runs/"})

    def log_in(page: Page) -> None:
        page.get_by_label("Username").fill(USERNAME)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in", exact=True).click()
        page.wait_for_url("**/runs/")
        expect(page.locator("header .user")).to_contain_text(USERNAME)
        expect(page.locator("p.summary")).to_contain_text("0 runs")

    journey.do(log_in)
    journey.checkpoint("1-login")

    # 2. Import the demo file through the upload form, see its 6 runs, filter them by label.
    journey.tab.open("/imports/new/")

    def upload(page: Page) -> None:
        page.set_input_files("input[name=file]", str(DEMO_PATH))
        page.get_by_role("button", name="Import", exact=True).click()
        page.wait_for_url(re.compile(r"/imports/\d+/$"))
        expect(page.locator("h1")).to_have_text(f"Import of {DEMO_PATH.name}")
        expect(page.locator("p.ok")).to_have_text("Imported.")
        expect(dd(page, "runs")).to_have_text("6")
        expect(dd(page, "rejected")).to_have_text("0")
        expect(page.locator("p.message")).to_contain_text("into 6 runs")

    journey.do(upload)
    journey.checkpoint("2a-import")
    assert Run.objects.count() == 6

    journey.tab.open("/runs/")
    rows = "#run-table table.runs tbody tr"
    journey.do(lambda page: expect(page.locator(rows)).to_have_count(6))
    journey.tab.evaluate("window.__marker = 'runs'")

    def filter_c2(page: Page) -> dict[str, str]:
        with page.expect_response(lambda r: "/runs/" in r.url and "label=C2" in r.url) as swap:
            page.locator("#filters input[name=label]").fill("C2")
            page.locator("#filters input[name=label]").press("Enter")
        expect(page.locator(rows)).to_have_count(2)
        expect(page.locator("#run-table p.summary")).to_contain_text("2 runs")
        return swap.value.request.headers

    headers = journey.do(filter_c2)
    assert headers.get("hx-request") == "true", "the filter change was not an htmx request"
    assert journey.query().get("label") == ["C2"]  # hx-push-url
    assert journey.tab.evaluate("window.__marker") == "runs", "the page was reloaded: not an htmx swap"
    labels = journey.do(lambda page: page.locator(f"{rows} td:nth-child(3) a").all_inner_texts())
    assert labels == ["C2", "C2"]
    journey.checkpoint("2b-runs-filtered")

    # 3. Register the tiny llama-server; saving probes it.
    launch = "llama-server -m tiny-llama.gguf " + " ".join(LLAMA_FLAGS)
    journey.tab.open("/servers/new/")

    def register(page: Page) -> None:
        page.get_by_label("Name").fill("tiny")
        page.get_by_label("base URL").fill(tiny_server)
        page.get_by_label("Launch command").fill(launch)
        # The GPU is picked from the sizing catalogue (or typed); every field says what it is for.
        gpu = page.get_by_label("GPU")
        offered = gpu.evaluate("el => Array.from(el.list.options, o => o.value)")
        assert "GeForce RTX 4090" in offered and len(offered) == len(sizing_catalogue.gpus())
        gpu.fill("GeForce RTX 4090")
        expect(page.get_by_label("API key")).to_have_attribute("type", "password")
        assert page.locator(".helptext").count() == 7  # name, URL, key, GPU, command, queue, notes
        page.get_by_role("button", name="Save and probe").click()
        page.wait_for_url(re.compile(r"/servers/\d+/$"))
        expect(dd(page, "GPU")).to_have_text("GeForce RTX 4090")
        expect(dd(page, "reachable")).to_have_text("yes")
        expect(dd(page, "model")).to_have_text(str(tiny_models["llama"]))
        expect(dd(page, "slots")).to_have_text("3")
        expect(dd(page, "context per slot")).to_have_text("768")  # 2048 / 3 slots, padded to 256
        expect(dd(page, "KV pool")).to_contain_text("3 slots × 768 cells each")
        expect(dd(page, "launch command")).to_have_text(launch)

    journey.do(register)
    server = Server.objects.get()
    assert journey.path() == f"/servers/{server.pk}/"
    journey.checkpoint("3-server")

    # 4. Benchmark it from its page, follow the job live, open its run.
    def submit(page: Page) -> None:
        page.get_by_role("link", name="Benchmark this server").click()
        page.wait_for_url(f"**/jobs/new/?server={server.pk}")
        expect(page.locator("select[name=server]")).to_have_value(str(server.pk))
        page.get_by_label("Label").fill("e2e")
        page.select_option("select[name=prompt_source]", "synthetic")
        page.get_by_label("Prompt tokens").fill("100")
        page.get_by_label("output tokens per request").fill("30")
        page.get_by_label("Concurrency").fill("3")
        page.get_by_label("Requests").fill("3")
        page.get_by_role("button", name="Submit the job").click()
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        page.evaluate("window.__marker = 'job'")

    journey.do(submit)
    job = Job.objects.get()
    assert journey.path() == f"/jobs/{job.pk}/"
    first_state = journey.do(lambda page: page.locator("#progress strong[class^=state-]").inner_text())

    polls: list[Response] = []

    def follow(page: Page) -> None:
        def on_response(response: Response) -> None:
            if response.url.endswith(f"/jobs/{job.pk}/") and response.request.headers.get("hx-request") == "true":
                polls.append(response)

        page.on("response", on_response)
        try:
            expect(page.locator("#progress .state-succeeded")).to_have_text("completed", timeout=JOB_TIMEOUT_MS)
        finally:
            page.remove_listener("response", on_response)
        expect(page.locator("#progress")).to_contain_text("3 of 3 done, 0 failed, 0 running; 90 tokens generated.")
        expect(page.locator("#progress progress")).to_have_attribute("value", "3")
        expect(page.locator("#progress strong.found")).to_have_text("all requests ok")
        expect(page.locator("#progress button", has_text="Cancel")).to_have_count(0)  # finished: no Cancel

    journey.do(follow)
    assert journey.tab.evaluate("window.__marker") == "job", "the job page was reloaded: not an htmx update"
    # The job takes a second or so on the tiny model; the page opens within milliseconds of the submit.
    assert first_state in ("queued", "running"), f"the job page opened on a finished job ({first_state})"
    assert polls, f"the page first showed {first_state!r} and no htmx poll brought the news"
    journey.checkpoint("4a-job")

    def open_run(page: Page) -> None:
        page.locator("#progress p.run a[href^='/runs/']").click()
        page.wait_for_url(re.compile(r"/runs/\d+/$"))
        expect(dd(page, "success rate")).to_contain_text("3 / 3")

    journey.do(open_run)
    run = Run.objects.get(job=job)
    assert journey.path() == f"/runs/{run.pk}/"
    assert (run.source, run.n_ok, run.n_requests, run.label) == ("executed", 3, 3, "e2e")
    journey.checkpoint("4b-run")

    # 4c. Reproduce the investigation's failure from the form: a server whose 4 slots share one pool.
    shared_launch = "llama-server -m tiny-llama.gguf " + " ".join(SHARED_FLAGS)
    journey.tab.open("/servers/new/")

    def register_shared(page: Page) -> None:
        page.get_by_label("Name").fill("tiny-shared")
        page.get_by_label("base URL").fill(shared_server)
        page.get_by_label("Launch command").fill(shared_launch)
        page.get_by_role("button", name="Save and probe").click()
        page.wait_for_url(re.compile(r"/servers/\d+/$"))
        expect(dd(page, "KV pool")).to_contain_text("4 slots sharing one pool of 1,024 cells")

    journey.do(register_shared)
    shared = Server.objects.get(name="tiny-shared")

    def warned_then_run_anyway(page: Page) -> None:
        page.get_by_role("link", name="Benchmark this server").click()
        page.wait_for_url(f"**/jobs/new/?server={shared.pk}")
        page.get_by_label("Label").fill("shared-x3")
        page.select_option("select[name=prompt_source]", "synthetic")
        page.get_by_label("Prompt tokens").fill("300")
        page.get_by_label("output tokens per request").fill("300")
        page.get_by_label("Concurrency").fill("3")
        page.get_by_label("Requests").fill("3")
        page.get_by_role("button", name="Submit the job").click()
        warning = page.locator("#pool-warning")
        expect(warning).to_contain_text("4 slots sharing one pool of 1,024 cells")
        expect(warning).to_contain_text("Context size has been exceeded")
        page.get_by_label("run it anyway (to reproduce the failure)").check()
        page.get_by_role("button", name="Submit the job").click()
        page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        expect(page.locator("#progress .state-succeeded")).to_have_text("completed", timeout=JOB_TIMEOUT_MS)
        expect(page.locator("#progress strong.found.outcome-failed")).to_have_text("all failed")
        expect(page.locator("#progress")).to_contain_text("3 of 3 done, 3 failed")

    journey.do(warned_then_run_anyway)
    failed_job = Job.objects.get(label="shared-x3")
    assert Job.objects.count() == 2, "the warning submitted nothing until 'run it anyway' was ticked"
    failed_run = Run.objects.get(job=failed_job)
    assert (failed_run.n_ok, failed_run.n_requests, failed_run.outcome) == (0, 3, "failed")
    assert set(failed_run.requests.values_list("http_status", "error_type")) == {(500, "context_exceeded")}
    journey.checkpoint("4c-failure-reproduced")

    # 5. Size the investigation's deployment on a 16 GB GPU, share a snapshot, open it anonymously.
    journey.tab.open("/sizing/")

    def size_it(page: Page) -> None:
        page.select_option("#sizing-form select[name=model]", "devstral-small-2-24b")
        page.select_option("#sizing-form select[name=gpu]", "rtx-5060-ti-16gb")
        page.get_by_label("-c (context)").fill("16384")
        page.get_by_label("p95 prompt tokens").fill("4362")
        page.get_by_label("p95 output tokens").fill("1738")
        page.get_by_label("concurrent requests").fill("3")
        page.get_by_role("button", name="Size it").click()
        page.wait_for_url(re.compile(r"concurrency=3"))
        expect(page.locator("#results .prediction")).to_contain_text(SIZING_VERDICT)
        # No weights yet: no "fits", nothing ranked as fitting, and a way to give them.
        expect(page.locator("#results")).to_contain_text("cannot judge the fit without the weights")
        expect(page.locator("#results")).not_to_contain_text("Each fits")
        page.wait_for_load_state("networkidle")  # no htmx request left in flight before the next click
        page.locator("#results .needs").get_by_role("link", name="Q4_K_M", exact=True).click()
        page.wait_for_url(re.compile(r"quant=Q4_K_M"))
        verdict = page.locator("#results .prediction")
        expect(verdict).to_contain_text(SIZING_VERDICT)
        expect(verdict).to_contain_text("Will fail:")
        expect(dd(page, "context")).to_contain_text("one unified pool of 16,384 cells shared by all slots")
        expect(dd(page, "KV total")).to_contain_text("2,684,354,560 B (2,560.00 MiB)")
        expect(dd(page, "weights")).to_contain_text("14,326,026,240 B (13,662.36 MiB)")
        # f16 KV beside the Q4_K_M weights does not fit whole, but llama-server's --fit starts it with
        # 4 of its 41 layers in system RAM: the page says what the server will do
        expect(dd(page, "on the GPU")).to_contain_text("fits")
        expect(page.locator("#results")).to_contain_text("You typed no -ngl; llama-server will run with -ngl 37")
        expect(page.locator("#results")).to_contain_text("4 of 41 layers in system RAM")
        expect(page.locator("#results")).to_contain_text("Each fits, starts, and cannot overflow")
        # The first recommendation is the investigation's answer: q8_0 KV on the GPU.
        expect(page.locator("#results code").filter(has_text="-ctk q8_0 -ctv q8_0").first).to_be_visible()
        page.wait_for_load_state("networkidle")

    journey.do(size_it)
    verdict = journey.do(lambda page: page.locator("#results .prediction").inner_text())
    query = journey.query()
    wanted = ("model", "quant", "gpu", "ctx_size", "prompt_tokens", "output_tokens", "concurrency")
    assert {k: query.get(k) for k in wanted} == {
        "model": ["devstral-small-2-24b"],
        "quant": ["Q4_K_M"],
        "gpu": ["rtx-5060-ti-16gb"],
        "ctx_size": ["16384"],
        "prompt_tokens": ["4362"],
        "output_tokens": ["1738"],
        "concurrency": ["3"],
    }
    journey.forgive_sizing_400s()
    journey.checkpoint("5a-sizing")

    def share(page: Page) -> str:
        page.get_by_role("button", name="Share a snapshot").click()
        page.wait_for_url(re.compile(r"/s/[^/]+/$"))
        expect(page.locator(".prediction")).to_contain_text(SIZING_VERDICT)
        return page.url

    snapshot_url = journey.do(share)
    snapshot = SizingSnapshot.objects.get()
    assert urlsplit(snapshot_url).path == f"/s/{snapshot.slug}/"
    journey.checkpoint("5b-snapshot")

    anonymous = Tab(browser, live_server.url)  # a fresh context: no session cookie
    try:
        anonymous.open(urlsplit(snapshot_url).path)

        def read_snapshot(page: Page) -> str:
            expect(page.locator("header .user")).to_contain_text("log in")
            expect(page.locator("header .user")).not_to_contain_text(USERNAME)
            expect(page.locator(".prediction")).to_contain_text(SIZING_VERDICT)
            # It looks like the page: the same tables, units and recommendations.
            expect(dd(page, "slots")).to_have_text("4 (automatic: no -np)")
            expect(dd(page, "context")).to_contain_text("one unified pool of 16,384 cells shared by all slots")
            expect(dd(page, "KV total")).to_have_text("2,684,354,560 B (2,560.00 MiB)")
            expect(dd(page, "KV per token")).to_have_text("163,840 B (160.00 KiB)")
            expect(dd(page, "on the GPU")).to_contain_text("fits")
            expect(page.locator("main")).to_contain_text("4 of 41 layers in system RAM")  # the fit, shared too
            expect(page.locator("code").filter(has_text="-ctk q8_0 -ctv q8_0").first).to_be_visible()
            return page.locator(".prediction").inner_text()

        shared_verdict = anonymous.do(read_snapshot)
        # The same words the logged-in page gave, less its "Will fail:" heading.
        assert verdict.endswith(shared_verdict.strip()), (verdict, shared_verdict)
        journey.screenshots.append(anonymous.screenshot("e2e-5c-snapshot-anonymous"))
        anonymous.assert_no_errors()
    finally:
        anonymous.close()

    # 6. The timeline, then the compare chart of runs ticked on the run list.
    journey.tab.open("/charts/timeline/")
    journey.tab.wait_for_plot("#timeline-figure-plot")
    traces = journey.tab.traces("#timeline-figure-plot")
    assert {pk for t in traces for pk in t["customdata"]} == set(Run.objects.values_list("pk", flat=True))
    assert Run.objects.count() == 8  # the demo's 6 and the two jobs'

    assert {"original", "C2", "C3P", "e2e", "shared-x3"} <= {t["name"] for t in traces}
    journey.checkpoint("6a-timeline")

    journey.tab.open("/runs/")
    keys = ["orig-x3", "c2-x3", "c3p-queue2"]

    def chart_selected(page: Page) -> None:
        for key in keys:
            page.get_by_label(f"select {key}", exact=True).check()
        page.get_by_role("button", name="Chart selected").click()
        page.wait_for_url("**/charts/compare/?*")

    journey.do(chart_selected)
    pks = [Run.objects.get(key=k).pk for k in keys]
    assert journey.path() == "/charts/compare/"
    assert sorted(int(v) for v in journey.query()["run"]) == sorted(pks)
    journey.tab.wait_for_plot("#compare-figure-plot")
    traces = journey.tab.traces("#compare-figure-plot")
    boxes = [t for t in traces if t["type"] == "box"]
    bars = [t for t in traces if t["type"] == "bar"]
    assert bars and all(sorted(b["customdata"]) == sorted(pks) for b in bars)
    assert sorted(len(b["y"]) for b in boxes) == [0, 2, 3]  # ok requests' tok/s: 0/3, 3/3, 2/2
    journey.checkpoint("6b-compare")


# A form with an htmx live update, half filled: (page, fill it, the request that follows, its target, the message).
HALF_FILLED: dict[str, tuple[str, Callable[[Page], object], str, str, str]] = {
    # The sizing page, with a prompt size typed and no output size yet.
    "sizing": (
        "/sizing/",
        lambda page: (
            page.select_option("#sizing-form select[name=model]", "devstral-small-2-24b"),
            page.get_by_label("p95 prompt tokens").fill("4362"),
            page.get_by_label("p95 prompt tokens").press("Tab"),
        ),
        "prompt_tokens=4362&output_tokens=&",
        "#results",
        "Give both the p95 prompt tokens and the p95 output tokens.",
    ),
    # The run list's filters, with a date range that ends before it starts. The page opens with "from"
    # set, so that one change sends the request (see the test after this one for two quick changes).
    "runs": (
        "/runs/?date_from=2026-09-20",
        lambda page: (
            page.get_by_label("to", exact=True).fill("2026-09-10"),
            page.get_by_label("to", exact=True).press("Tab"),
        ),
        "date_from=2026-09-20&date_to=2026-09-10",
        "#run-table",
        "'from' is after 'to'.",
    ),
}


@pytest.mark.parametrize("case", sorted(HALF_FILLED))
def test_a_half_filled_form_shows_its_error_in_place(
    browser: Any,  # noqa: F811
    live_server: Any,
    case: str,
) -> None:
    path, fill, request, target, message = HALF_FILLED[case]
    tab = Tab(browser, live_server.url)

    def fill_and_wait(page: Page) -> int:
        with page.expect_response(lambda r: request in r.url) as answer:
            fill(page)
        if answer.value.request.headers.get("hx-request") != "true":  # not AssertionError: not the bug
            pytest.fail(f"{request}: not an htmx request")
        return answer.value.status

    try:
        tab.open(path)
        status = tab.do(fill_and_wait)
        # The form answers 400 with its error, and htmx swaps it in (kvlab's htmx-config).
        tab.do(lambda page: expect(page.locator(f"{target} [role=alert]")).to_contain_text(message))
        assert status == 400
        # The browser itself logs any 4xx fetch; that 400, and nothing else, is expected.
        expected = [e for e in tab.errors if request in e and "400" in e]
        tab.errors[:] = [e for e in tab.errors if e not in expected]
        tab.assert_no_errors()
    finally:
        tab.close()


def test_a_filter_changed_while_the_previous_one_loads_is_kept(
    browser: Any,  # noqa: F811
    live_server: Any,
) -> None:
    tab = Tab(browser, live_server.url)
    held: list[Any] = []  # the first filter request, held back: a slow server

    def change_two_filters(page: Page) -> None:
        page.route(re.compile(r"/runs/\?.*date_from=2026-09-18&date_to=&"), lambda route: held.append(route))
        page.get_by_label("from").fill("2026-09-18")
        page.get_by_label("from").press("Tab")
        while not held:
            page.wait_for_timeout(20)
        page.get_by_label("to", exact=True).fill("2026-09-19")  # while the first request is in flight
        page.get_by_label("to", exact=True).press("Tab")
        held[0].continue_()
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(500)  # any queued request has gone out and come back

    try:
        tab.open("/runs/")
        tab.do(change_two_filters)
        tab.do(lambda page: expect(page.get_by_label("to", exact=True)).to_have_value("2026-09-19"))
        assert tab.query().get("date_to") == ["2026-09-19"], tab.query()
        tab.assert_no_errors()
    finally:
        tab.close()


def test_sizing_fields_typed_while_an_earlier_answer_loads_are_kept(
    browser: Any,  # noqa: F811
    live_server: Any,
) -> None:
    """The journey found it: the answer to the GPU choice, arriving after -c was typed, put -c back to blank."""
    tab = Tab(browser, live_server.url)
    held: list[Any] = []  # the answer to the GPU choice, held back: a slow server

    def type_while_it_loads(page: Page) -> None:
        page.select_option("#sizing-form select[name=model]", "devstral-small-2-24b")
        page.wait_for_load_state("networkidle")
        page.route(re.compile(r"/sizing/\?.*ctx_size=&.*gpu=rtx-5060-ti-16gb"), lambda route: held.append(route))
        page.select_option("#sizing-form select[name=gpu]", "rtx-5060-ti-16gb")
        while not held:
            page.wait_for_timeout(20)
        page.get_by_label("-c (context)").fill("16384")  # while the GPU's answer is in flight
        page.get_by_label("-c (context)").press("Tab")
        held[0].continue_()
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(500)  # any queued request has gone out and come back

    try:
        tab.open("/sizing/")
        tab.do(type_while_it_loads)
        tab.do(lambda page: expect(page.get_by_label("-c (context)")).to_have_value("16384"))
        tab.do(lambda page: expect(dd(page, "context")).to_contain_text("n_ctx 16,384"))
        tab.assert_no_errors()
    finally:
        tab.close()
