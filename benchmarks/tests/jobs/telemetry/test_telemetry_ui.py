"""The KV pool telemetry on the job, run and sweep pages: what the user sees.

The series stored on a Run or Job is the shape of benchmarks/jobs/telemetry/series.py; the figures here
are the ones measured on the real server (the telemetry research's first measurement: a 1,024-cell shared pool, three
200-token prompts, the overflow at 0.243 s after 142 tokens each, the server's own n_tokens = 342).
"""

from __future__ import annotations

import copy
import html
import json
import re
from typing import Any

import pytest
from django.urls import reverse

from benchmarks.charts import telemetry as charts
from benchmarks.jobs import execution
from benchmarks.jobs.telemetry.series import Series
from benchmarks.models import Job, LaunchHost, Run, Sweep, SweepConfig

from ...real_parts import live_llama_server, register, submit
from .measured_series import PER_SLOT, SHARED

pytestmark = pytest.mark.django_db

UNKNOWN_POOL: dict[str, Any] = {
    **copy.deepcopy(PER_SLOT),
    "pool": {
        "kind": "unknown",
        "slots": 3,
        "slot_cells": 1024,
        "pool_cells": None,
        "from": "unknown: no launch command",
    },
}


def embedded_figure(page: str, element_id: str = "telemetry-figure") -> dict[str, Any]:
    found = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', page, re.S)
    assert found, f"no #{element_id} on the page"
    return json.loads(found.group(1))


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<script.*?</script>", " ", page, flags=re.S)))


def assert_no_gaps(page: str) -> None:
    for word in ("None", "nan", "NaN", "undefined", "Infinity"):
        found = re.search(rf"\b{word}\b", page)
        assert not found, f"{word!r} on the page: …{page[max(0, found.start() - 200) : found.end() + 100]}…"


def make_run(telemetry: dict[str, Any] | None, **fields: Any) -> Run:
    job = Job.objects.create(base_url="http://127.0.0.1:9", params={"requests": 3, "concurrency": 3}, state="succeeded")
    return Run.objects.create(
        key=f"r{Run.objects.count()}", model="tiny.gguf", job=job, n_requests=3, telemetry=telemetry, **fields
    )


def test_the_figure_draws_each_slot_the_pool_against_its_capacity_and_the_overflow():
    figure = charts.figure(SHARED)
    names = [trace["name"] for trace in figure["data"]]
    assert names[:4] == [
        "slot 0: cells held",
        "slot 1: cells held",
        "slot 2: cells held",
        "pool: cells held (all slots)",
    ]
    pool_line = figure["data"][3]
    assert pool_line["y"] == [sum(column[i] for column in SHARED["cells"]) for i in range(len(SHARED["t"]))]
    assert pool_line["x"] == SHARED["t"]
    capacity = [s for s in figure["layout"]["shapes"] if s["yref"] == "y" and s["y0"] == s["y1"]]
    assert [s["y0"] for s in capacity] == [SHARED["pool"]["pool_cells"]]
    overflow = next(t for t in figure["data"] if t["name"].startswith("at the overflow"))
    assert overflow["x"] == [SHARED["overflow"]["t"]]
    assert overflow["y"] == [sum(r["cells"] for r in SHARED["overflow"]["requests"])]  # 1,025: no sample saw it
    verticals = {s["x0"]: s["line"]["color"] for s in figure["layout"]["shapes"] if s["xref"] == "x"}
    assert set(verticals) == {SHARED["overflow"]["t"], SHARED["overflow"]["predicted_t"]}
    notes = " | ".join(a["text"] for a in figure["layout"]["annotations"])
    assert "pool capacity: 1,024 cells (from the launch command)" in notes
    assert "pool full at 0.243 s: 1,025 cells held" in notes and "kvlab predicted it at 0.257 s (token 142)" in notes
    by_name = {trace["name"]: trace for trace in figure["data"]}
    assert (
        by_name["requests processing"]["y"] == SHARED["processing"] and by_name["requests processing"]["yaxis"] == "y2"
    )
    rate = by_name["output tok/s (last second)"]
    assert rate["yaxis"] == "y3" and rate["y"][0] is None
    assert rate["y"][-1] == round((366 - 0) / (0.2025 - 0.0007), 1)  # every sample lies within the last second
    assert figure["layout"]["yaxis3"]["overlaying"] == "y2"


def test_slots_whose_lines_coincide_stay_distinguishable():
    same = copy.deepcopy(SHARED)
    same["cells"] = [list(same["cells"][0]) for _ in same["cells"]]  # every slot held the same cells throughout
    slots = [t for t in charts.figure(same)["data"] if t["name"].startswith("slot ")]
    assert len(slots) == len(same["cells"]) > 1
    styles = [(t["line"]["dash"], t["line"]["width"]) for t in slots]
    assert len({dash for dash, _ in styles}) == len(slots)  # each its own dash
    widths = [width for _, width in styles]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == len(slots)  # the first under the rest


def test_a_per_slot_pool_draws_each_slot_capacity_and_gpu_memory_and_no_pool_sum():
    figure = charts.figure(PER_SLOT)
    names = [trace["name"] for trace in figure["data"]]
    assert not any(name.startswith("pool") for name in names)
    assert "GPU 0 (NVIDIA H200): memory used" in names
    assert "requests processing" not in names  # /metrics was off
    lines = {s["y0"] for s in figure["layout"]["shapes"] if s["y0"] == s["y1"]}
    assert lines == {PER_SLOT["pool"]["slot_cells"], PER_SLOT["gpu"]["mem_total_mib"][0]}
    notes = " | ".join(a["text"] for a in figure["layout"]["annotations"])
    assert "each slot's capacity: 1,024 cells (per-slot pool)" in notes
    assert "requests processing / deferred: /metrics off: 501 Start it with `--metrics`" in notes
    assert "GPU 0 (NVIDIA H200): 143,771 MiB in all" in notes
    assert {key for key in figure["layout"] if key.startswith("yaxis")} == {"yaxis", "yaxis2", "yaxis4"}
    rate = next(trace for trace in figure["data"] if trace["name"] == "output tok/s (last second)")
    assert rate["yaxis"] == "y2" and figure["layout"]["yaxis2"]["title"]["text"] == "output tok/s"


def test_an_unknown_pool_says_so_instead_of_drawing_a_capacity():
    figure = charts.figure(UNKNOWN_POOL)
    notes = [a["text"] for a in figure["layout"]["annotations"]]
    assert "pool size unknown (no launch command)" in notes
    assert not [s for s in figure["layout"]["shapes"] if s["yref"] == "y"]
    assert "all slots: cells held" in [trace["name"] for trace in figure["data"]]
    assert "pool size unknown (no launch command)" in charts.peak_text(UNKNOWN_POOL)


def test_the_figure_stays_bounded_and_keeps_the_peak_whatever_the_series_holds():
    n, slots = 9000, 40
    big = copy.deepcopy(SHARED)
    big["t"] = [i * 0.01 for i in range(n)]
    big["cells"] = [[(i * (s + 1)) % 700 for i in range(n)] for s in range(slots)]
    big["cells"][5][4321] = 1000  # one sample's spike
    big["tokens_out"] = list(range(n))
    big["processing"] = [3] * n
    big["deferred"] = [0] * n
    figure = charts.figure(big)
    lines = [trace for trace in figure["data"] if trace["mode"] == "lines"]
    assert all(len(trace["x"]) <= charts.MAX_POINTS for trace in lines)
    slot_lines = [trace for trace in lines if trace["name"].startswith("slot ")]
    assert len(slot_lines) == charts.MAX_SLOT_LINES
    assert max(max(v for v in trace["y"] if v is not None) for trace in slot_lines) == 1000  # kept
    assert all(trace["type"] == "scattergl" for trace in lines)  # WebGL past figure_common.WEBGL_POINTS
    assert f"{charts.MAX_SLOT_LINES} of {slots} slots drawn (the fullest)" in [
        a["text"] for a in figure["layout"]["annotations"]
    ]
    assert len(json.dumps(figure)) < 1_500_000


def test_a_hostile_or_empty_series_gives_no_figure_and_no_crash():
    assert charts.figure(None) is None and charts.figure("x") is None
    assert charts.figure({"t": [], "cells": []}) is None
    odd = {"t": [0.1, None, "x", float("nan")], "cells": [[1, "y", None], "bad"], "pool": "bad", "peak": [1]}
    figure = charts.figure(odd)
    assert figure is not None and "NaN" not in json.dumps(figure)
    assert charts.peak_text(odd) is None and charts.prediction_text(odd) is None


def test_the_run_page_shows_the_chart_the_peak_against_the_prediction_and_the_attribution(client):
    run = make_run(SHARED)
    response = client.get(reverse("run-detail", args=[run.pk]))
    page = response.content.decode()
    assert response.status_code == 200
    figure = embedded_figure(page)
    assert figure == json.loads(json.dumps(charts.figure(SHARED)))
    words = text_of(page)
    assert SHARED["overflow"]["sentence"] in words
    assert "requests 1, 2 and 3 held 342, 342 and 341 cells" in words
    assert "kvlab predicted the pool would run out at token 142 of each (≈ 0.26 s)" in words
    assert words.count("kvlab predicted") == 1  # the sentence carries the prediction; no second line repeats it
    assert "Peak: 1,025 cells held of the 1,024-cell pool (100.1 %) at 0.243 s" in words
    assert "from the requests' own counts when the pool ran out" in words
    assert "Sampled every 0.05 s, 5 samples — /slots: ok · /metrics: ok · GPU (NVML): none seen" in words
    assert 'id="telemetry-plot"' in page and "hx-preserve" not in page  # a finished run is drawn once
    assert "vendor/plotly.min.js" in page
    assert_no_gaps(text_of(page))


def test_a_run_without_telemetry_shows_one_honest_line_and_no_chart(client):
    ours = make_run(None)
    page = client.get(reverse("run-detail", args=[ours.pk])).content.decode()
    assert "No KV pool telemetry was recorded for this run" in text_of(page)
    assert "telemetry-figure" not in page and "plotly" not in page
    imported = Run.objects.create(key="imported", model="m.gguf", n_requests=1)
    page = client.get(reverse("run-detail", args=[imported.pk])).content.decode()
    assert "telemetry" not in page.lower() and "plotly" not in page


def test_a_run_whose_sampler_saw_nothing_says_why_without_an_empty_chart(client):
    blind = {
        "v": 1,
        "period_s": 0.25,
        "sources": {"slots": "off: 501 Start it with `--slots`", "metrics": "off: 501", "gpu": "none seen: no NVML"},
        "pool": {
            "kind": "unknown",
            "slots": None,
            "slot_cells": None,
            "pool_cells": None,
            "from": "unknown: no launch command",
        },
        "t": [],
        "cells": [],
        "busy": [],
        "tokens_out": [],
        "peak": {"pool": None, "pool_t": None, "slots": [], "from": "samples"},
        "overflow": None,
    }
    page = client.get(reverse("run-detail", args=[make_run(blind).pk])).content.decode()
    words = text_of(page)
    assert "telemetry-figure" not in page and "No sample of the server's slots yet." in words
    assert "/slots: off: 501 Start it with `--slots`" in words
    assert_no_gaps(words)


def test_the_live_job_page_redraws_the_chart_in_place_at_each_poll(client):
    job = Job.objects.create(
        base_url="http://127.0.0.1:9",
        params={"requests": 3, "concurrency": 3, "n_predict": 600},
        n_total=3,
        state="running",
        telemetry=SHARED,
    )
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert 'hx-trigger="every 1s"' in page and "vendor/plotly.min.js" in page
    assert re.search(r'<div class="plot" id="telemetry-plot"[^>]*hx-preserve', page)  # Plotly.react into one div
    partial = client.get(reverse("job-detail", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<section id="progress"') and "<html" not in partial
    assert embedded_figure(partial)["layout"]["uirevision"] == "telemetry"  # a redraw keeps the user's zoom
    assert SHARED["overflow"]["sentence"] in text_of(partial)
    grown = copy.deepcopy(SHARED)
    grown["t"].append(0.25)
    for column in grown["cells"]:
        column.append(330)
    Job.objects.filter(pk=job.pk).update(telemetry=grown)
    partial = client.get(reverse("job-detail", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()
    assert embedded_figure(partial)["data"][0]["y"][-1] == 330
    assert partial.count('id="telemetry-plot"') == 1 and partial.count('id="telemetry-figure"') == 1
    assert_no_gaps(text_of(partial))


def test_a_queued_job_page_has_no_chart_until_a_series_arrives(client):
    job = Job.objects.create(base_url="http://127.0.0.1:9", params={"requests": 3}, n_total=3)
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert "telemetry-figure" not in page and "KV pool" not in page
    assert "vendor/plotly.min.js" in page  # loaded once, so a series that arrives by a poll can be drawn


def test_the_sweep_page_shows_each_flag_set_peak_beside_predicted_and_reported_memory(client, tmp_path):
    sweep = Sweep.objects.create(
        host=LaunchHost.objects.create(name="h", binaries=["/x"], models_dirs=[str(tmp_path)]),
        model_file="m.gguf",
        params={"requests": 3, "prompt_tokens": 200, "n_predict": 600, "concurrencies": [1, 3]},
        state="succeeded",
    )
    shared = SweepConfig.objects.create(
        sweep=sweep,
        position=0,
        command="-c 1024 -np 3 --kv-unified",
        outcome=SweepConfig.Outcome.RAN,
        predicted={"kv_bytes": 2 * 1024 * 1024, "errors": []},
        reported={"kv_mib": 2.0},
    )
    quiet = copy.deepcopy(SHARED)
    quiet["peak"] = {"pool": 400, "pool_t": 0.5, "slots": [400, 0, 0], "from": "samples"}
    for concurrency, telemetry in ((1, quiet), (3, SHARED)):
        job = Job.objects.create(
            base_url="http://127.0.0.1:9", params={"concurrency": concurrency}, sweep_config=shared
        )
        Run.objects.create(key=f"s-{concurrency}", model="m.gguf", job=job, n_requests=3, telemetry=telemetry)
    SweepConfig.objects.create(sweep=sweep, position=1, command="-c 512", outcome=SweepConfig.Outcome.RAN)
    page = client.get(reverse("sweep-detail", args=[sweep.pk])).content.decode()
    cells = re.findall(r'<td class="num peak-kv">(.*?)</td>', page)
    assert [html.unescape(c) for c in cells] == ["1,025 / 1,024 cells (100.1 %) ≈ 2.00 MiB", "—"]
    assert "peak KV pool occupancy" in page
    assert_no_gaps(text_of(page))


def test_a_prediction_without_the_execution_sentence_is_said_beside_the_moment():
    bare = copy.deepcopy(SHARED)
    del bare["overflow"]["sentence"]
    assert charts.attribution_text(bare) == (
        "At 0.243 s the 1,024-cell pool was full: request 1 held 342 cells, request 2 held 342 cells, "
        "request 3 held 341 cells."
    )
    assert charts.prediction_text(bare) == (
        "kvlab predicted the 1,024-cell pool would run out at token 142 of each request (≈ 0.257 s); "
        "it ran out at 0.243 s."
    )


def test_the_page_draws_what_the_real_series_stores(client):
    """Series (benchmarks/jobs/telemetry/series.py) fed /slots entries as the server sends them."""
    series = Series(0.05, SHARED["pool"], {"slots": "ok", "metrics": "ok"})
    for t, cells in zip(SHARED["t"], SHARED["cells"][0], strict=True):
        slots = [{"id": i, "n_ctx": 1024, "is_processing": cells > 0, "n_prompt_tokens": cells} for i in range(3)]
        series.add(t, slots, {"requests_processing": 3, "requests_deferred": 0}, None, tokens_out=int(t * 1800))
    series.set_overflow(SHARED["overflow"])
    stored = series.snapshot()
    run = make_run(stored)
    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    figure = embedded_figure(page)
    by_name = {trace["name"]: trace for trace in figure["data"]}
    assert by_name["pool: cells held (all slots)"]["y"] == [3 * c for c in SHARED["cells"][0]]
    assert by_name["requests processing"]["y"] == [3] * 5
    assert "Peak: 1,025 cells held of the 1,024-cell pool (100.1 %) at 0.243 s" in text_of(page)
    assert "Sampled every 0.05 s, 5 samples" in text_of(page)
    assert_no_gaps(text_of(page))


@pytest.mark.llama_server
@pytest.mark.django_db(transaction=True)
def test_a_real_shared_pool_job_shows_its_pool_filling_and_who_filled_it(
    llama_server_binary, tiny_models, client, monkeypatch
):
    """The real llama-server on the tiny model: 3 × (200 prompt + 600 to generate) on one 1,024-cell pool.
    The job runs here (execution.execute_job, the worker's domain function); the pages read what it stored."""
    monkeypatch.setattr("benchmarks.enqueue.job", lambda job: None)
    flags = ["-c", "1024", "-np", "3", "--kv-unified", "--metrics"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        server = register(url, "llama-server " + " ".join(flags))
        job = submit(server, prompt_tokens=200, n_predict=600)
        execution.execute_job(job.pk, worker="test")
    run = Run.objects.get(job=job)
    stored = run.telemetry
    assert stored and stored["pool"]["kind"] == "shared" and stored["pool"]["pool_cells"] == 1024
    overflow = stored["overflow"]
    assert overflow and overflow["requests"]  # who held what: A1's test_telemetry_real checks the three requests
    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    figure = embedded_figure(page)
    names = [trace["name"] for trace in figure["data"]]
    assert "pool: cells held (all slots)" in names and "requests processing" in names
    assert [s["y0"] for s in figure["layout"]["shapes"] if s["yref"] == "y"] == [1024]
    marker = next(trace for trace in figure["data"] if trace["name"].startswith("at the overflow"))
    assert marker["y"] == [sum(r["cells"] for r in overflow["requests"])] and marker["y"][0] > 1024 - 3
    assert marker["x"] == [overflow["t"]]
    words = text_of(page)
    assert overflow["sentence"] in words
    assert f"Peak: {stored['peak']['pool']:,} cells held of the 1,024-cell pool" in words
    assert "/slots: ok" in words and "/metrics: ok" in words
    assert_no_gaps(words)
    job_page = text_of(client.get(reverse("job-detail", args=[job.pk])).content.decode())
    assert_no_gaps(job_page)
