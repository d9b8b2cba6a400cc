"""The KV pool chart in a real browser: Plotly draws it with no console error on the run
page, and on the live job page the same plot element is redrawn in place when Job.telemetry changes
between two htmx polls (no page load, no new element, no flicker). Saved as var/screenshots/telemetry-*.png."""

from __future__ import annotations

import asyncio
import copy
import itertools
import threading
import time
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from benchmarks.jobs.client.stream import stream_completion
from benchmarks.models import Job, Run

from ...browser import Tab  # the browser and tab fixtures come from the root conftest.py
from ...real_parts import live_llama_server, register, run_in_background, submit
from .measured_series import PER_SLOT, SHARED

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PLOT = "#telemetry-plot"
HANG_S = 300  # the real job's waits: only a guard against a hang, whatever the machine's speed or load


def drawn(tab: Tab) -> dict[str, Any]:
    """What Plotly holds for the chart: trace names and y values, the shapes' positions, the annotations."""
    return tab.evaluate(
        """sel => { const el = document.querySelector(sel);
             return {names: el.data.map(t => t.name), ys: el.data.map(t => Array.from(t.y || [])),
                     shapes: el._fullLayout.shapes.map(s => [s.x0, s.y0]),
                     notes: el._fullLayout.annotations.map(a => a.text)}; }""",
        PLOT,
    )


def test_the_run_page_draws_the_pool_its_capacity_and_the_overflow(tab: Tab) -> None:
    job = Job.objects.create(base_url="http://127.0.0.1:9", params={"requests": 3}, state="succeeded")
    run = Run.objects.create(key="shared", model="tiny.gguf", job=job, n_requests=3, telemetry=SHARED)
    tab.open(f"/runs/{run.pk}/")
    tab.wait_for_plot(PLOT)
    seen = drawn(tab)
    assert "pool: cells held (all slots)" in seen["names"]
    assert [SHARED["overflow"]["t"], 0] in seen["shapes"]  # the overflow's vertical line
    assert any(y0 == SHARED["pool"]["pool_cells"] for _, y0 in seen["shapes"])  # the capacity
    assert any(note.startswith("pool full at 0.243 s") for note in seen["notes"])
    tab.do(lambda page: expect(page.locator("#telemetry .attribution")).to_contain_text("requests 1, 2 and 3 held"))
    # the SVG has the three slots' lines, the pool's, the requests' and the rate's, and the overflow marker
    assert tab.evaluate("document.querySelectorAll('#telemetry-plot .scatterlayer .trace').length") == len(
        seen["names"]
    )
    tab.screenshot("telemetry-run")
    tab.assert_no_errors()


def test_a_per_slot_run_with_a_gpu_draws_three_panels(tab: Tab) -> None:
    job = Job.objects.create(base_url="http://127.0.0.1:9", params={"requests": 3}, state="succeeded")
    run = Run.objects.create(key="per-slot", model="tiny.gguf", job=job, n_requests=3, telemetry=PER_SLOT)
    tab.open(f"/runs/{run.pk}/")
    tab.wait_for_plot(PLOT)
    panels = tab.evaluate(
        "Object.keys(document.querySelector('#telemetry-plot')._fullLayout).filter(k => /^yaxis\\d*$/.test(k)).sort()"
    )
    assert panels == ["yaxis", "yaxis2", "yaxis4"]  # cells, output tok/s (no /metrics), GPU memory
    assert "GPU 0 (NVIDIA H200): memory used" in drawn(tab)["names"]
    tab.screenshot("telemetry-per-slot")
    tab.assert_no_errors()


def test_the_live_job_page_redraws_the_same_chart_when_the_series_grows(tab: Tab) -> None:
    early = copy.deepcopy(SHARED)
    for key in ("t", "busy", "processing", "deferred", "tokens_out"):
        early[key] = early[key][:3]
    early["cells"] = [column[:3] for column in early["cells"]]
    early["overflow"] = None
    early["peak"] = {"pool": 768, "pool_t": 0.102, "slots": [256, 256, 256], "from": "samples"}
    job = Job.objects.create(
        base_url="http://127.0.0.1:9",
        params={"requests": 3, "concurrency": 3, "n_predict": 600},
        n_total=3,
        state="running",
        telemetry=None,  # the sampler has not reported yet
    )
    tab.open(f"/jobs/{job.pk}/")
    tab.do(lambda page: expect(page.locator("#progress")).to_contain_text("0 of 3 done"))
    assert tab.evaluate("document.querySelector('#telemetry-plot')") is None  # no empty chart
    Job.objects.filter(pk=job.pk).update(telemetry=early)  # the first heartbeat with a series
    tab.wait_for_plot(PLOT)
    assert drawn(tab)["ys"][3] == [0, 651, 768]
    tab.evaluate("window.__marker = 'live'; window.__plot = document.querySelector('#telemetry-plot')")
    svgs = tab.evaluate("document.querySelectorAll('#telemetry-plot .main-svg').length")
    Job.objects.filter(pk=job.pk).update(telemetry=SHARED)  # the next heartbeat's series, with the overflow

    def redrawn(page: Page) -> None:
        page.wait_for_function(
            "() => { const el = document.querySelector('#telemetry-plot');"
            " return el && el.data && el.data[3].y.length === 5; }",
        )
        expect(page.locator("#telemetry .attribution")).to_contain_text("the 1,024-cell pool was full")

    tab.do(redrawn)
    seen = drawn(tab)
    assert seen["ys"][3] == [0, 651, 768, 876, 966]
    assert any(note.startswith("pool full at 0.243 s") for note in seen["notes"])
    assert tab.evaluate("window.__plot === document.querySelector('#telemetry-plot')"), "a new element: not in place"
    assert tab.evaluate("document.querySelectorAll('#telemetry-plot').length") == 1
    assert tab.evaluate("document.querySelectorAll('#telemetry-plot .main-svg').length") == svgs  # none stacked up
    assert tab.evaluate("window.__marker") == "live", "the page was reloaded: not an htmx update"
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    tab.do(lambda page: expect(page.locator("#progress .verdict")).to_contain_text("Ran: completed"))
    tab.screenshot("telemetry-live")
    tab.assert_no_errors()


@pytest.mark.llama_server
def test_a_real_job_page_draws_the_slots_filling_while_it_runs(
    tab: Tab, llama_server_binary, tiny_models, settings, monkeypatch
) -> None:
    """The real llama-server (per-slot, 3 × 1,024 cells), the job run as the worker runs it: the live page's
    chart appears from Job.telemetry and grows in place at the polls; the run page keeps the series.

    The first wave of three requests runs at once; the second waits until the page has seen the chart
    grow, and only the sampler goes on meanwhile. So every wait ends on an event, never on the machine's
    speed: the job cannot end before the page's polls see it running (a fast machine), and nothing has
    to happen within a fixed time (a loaded one; HANG_S only stops a hang)."""
    settings.KVLAB_JOB_HEARTBEAT_S = 0.3
    monkeypatch.setattr("benchmarks.enqueue.job", lambda job: None)  # run here, not through Celery
    release = threading.Event()
    calls = itertools.count()

    async def second_wave_held(*args: Any, **kwargs: Any) -> Any:
        if next(calls) >= 3:  # requests 4 to 6 (concurrency 3) wait for the test
            while not release.is_set():
                await asyncio.sleep(0.05)
        return await stream_completion(*args, **kwargs)

    monkeypatch.setattr("benchmarks.jobs.execution.stream_completion", second_wave_held)
    flags = ["-c", "3072", "-np", "3", "--no-kv-unified", "--metrics"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        server = register(url, "llama-server " + " ".join(flags))
        job = submit(server, prompt_tokens=200, n_predict=600, requests=6)
        tab.open(f"/jobs/{job.pk}/")
        tab.evaluate("window.__marker = 'live'")
        worker = run_in_background(job)
        try:
            # the first heartbeat with a series, however long the job's start takes here
            deadline = time.monotonic() + HANG_S
            while not Job.objects.get(pk=job.pk).telemetry:
                assert time.monotonic() < deadline, f"no heartbeat with a series in {HANG_S} s"
                time.sleep(0.1)
            tab.wait_for_plot(PLOT)
            tab.evaluate("window.__plot = document.querySelector('#telemetry-plot')")
            first = tab.evaluate("document.querySelector('#telemetry-plot').data[0].x.length")

            def grown(page: Page) -> None:
                page.wait_for_function(
                    "n => { const el = document.querySelector('#telemetry-plot');"
                    " return el === window.__plot && el.data[0].x.length > n; }",
                    arg=first,
                )

            tab.do(grown)
            tab.screenshot("telemetry-live-real")
            names = drawn(tab)["names"]
            assert "slot 0: cells held" in names and "requests processing" in names
            notes = " ".join(drawn(tab)["notes"])
            assert "each slot's capacity: 1,024 cells (per-slot pool)" in notes
        finally:
            release.set()
            worker.join(timeout=HANG_S)
        assert not worker.is_alive(), f"the job did not finish within {HANG_S} s"
    assert Job.objects.get(pk=job.pk).state == "succeeded"
    tab.do(lambda page: expect(page.locator("#progress .verdict")).to_contain_text("Ran: completed"))
    assert tab.evaluate("window.__marker") == "live", "the page was reloaded: not an htmx update"
    # the job's live series is emptied at its end; the chart stays, drawn from the run's own series
    tab.do(lambda page: expect(page.locator("#telemetry-kept")).to_contain_text("The KV pool as the job ended: run"))
    tab.wait_for_plot(PLOT)
    run = Run.objects.filter(job=job).first()
    assert run is not None and run.telemetry and run.telemetry["peak"]["slots"]
    kept = drawn(tab)
    assert "slot 0: cells held" in kept["names"]
    assert max(max(v for v in y if v is not None) for y in kept["ys"][:3]) == max(run.telemetry["peak"]["slots"])
    tab.screenshot("telemetry-job-ended-real")
    tab.assert_no_errors()
    tab.open(f"/runs/{run.pk}/")
    tab.wait_for_plot(PLOT)
    assert max(max(v for v in y if v is not None) for y in drawn(tab)["ys"][:3]) == max(run.telemetry["peak"]["slots"])
    tab.screenshot("telemetry-run-real")
    tab.assert_no_errors()
