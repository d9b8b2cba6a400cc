"""The live job page in a real browser: while a job runs, the page shows
each request as it streams — tokens so far, elapsed time, state, tok/s — through htmx polls,
and ends on how the job ran and what it found. Saved as var/screenshots/job-live*.png."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from benchmarks.jobs.lifecycle import submit_job
from benchmarks.models import Job, Server

from ..browser import Tab  # the browser and tab fixtures come from the root conftest.py
from ..fake_server import PacedServer
from ..real_parts import run_in_background

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def tokens_of(page: Page) -> list[int]:
    cells = page.locator("table.live tr.live-streaming td:nth-child(3)").all_inner_texts()
    return [int(c.replace(",", "")) for c in cells]


def test_the_job_page_shows_each_request_as_it_streams(tab: Tab, settings, monkeypatch) -> None:
    settings.KVLAB_JOB_HEARTBEAT_S = 0.3
    monkeypatch.setattr("benchmarks.enqueue.job", lambda job: None)  # run here, not through Celery
    with PacedServer(max_hold_s=30.0) as paced:
        server = Server.objects.create(name="paced", base_url=paced.url)
        params = {"prompt_tokens": 5, "n_predict": 150, "concurrency": 2, "requests": 3, "timeout_s": 60}
        job = submit_job(server=server, label="live", params=params)
        tab.open(f"/jobs/{job.pk}/")
        tab.do(lambda page: expect(page.locator("#progress")).to_contain_text("0 of 3 done"))  # never "0 of 0"
        tab.evaluate("window.__marker = 'live'")
        worker = run_in_background(job)
        try:

            def streaming(page: Page) -> tuple[list[int], list[int], str]:
                rows = page.locator("table.live tr.live-streaming")
                expect(rows).to_have_count(2)
                first = tokens_of(page)
                page.wait_for_function(
                    "before => Array.from(document.querySelectorAll('table.live tr.live-streaming td:nth-child(3)'),"
                    " td => parseInt(td.textContent.replace(/,/g, ''))).some((n, i) => n > before[i])",
                    arg=first,
                )
                return first, tokens_of(page), page.locator("#progress").inner_text()

            first, later, progress = tab.do(streaming)
            tab.screenshot("job-live")
            assert len(first) == 2 and all(n > 0 for n in first), first
            assert any(b > a for a, b in zip(first, later, strict=False)), (first, later)
            assert "Ran: running" in progress and "#1" in progress and "streaming" in progress
            assert re.search(r"\d+\.\d{2} tok/s", progress), progress  # a rate, with its unit
            assert re.search(r"\d+\.\d{3} s", progress), progress  # elapsed and TTFT, in seconds
            generated = int(re.search(r"([\d,]+) tokens generated", progress).group(1).replace(",", ""))
            assert generated > 0, "tokens show as they stream, not only at the end"

            def finished(page: Page) -> str:
                expect(page.locator("#progress .verdict")).to_contain_text("Ran: completed")
                return page.locator("#progress").inner_text()

            final = tab.do(finished)
        finally:
            worker.join(timeout=60)
    assert "Found: all requests ok" in final and "3 of 3 done, 0 failed, 0 running; 450 tokens generated." in final
    assert tab.do(lambda page: page.locator("table.live").count()) == 0  # nothing in flight any more
    assert tab.evaluate("window.__marker") == "live", "the page was reloaded: not an htmx update"
    tab.screenshot("job-live-finished")
    tab.assert_no_errors()
    assert Job.objects.get(pk=job.pk).live == []
