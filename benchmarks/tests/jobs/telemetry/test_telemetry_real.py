"""Telemetry of jobs against real parts: a real llama-server on the tiny model, a real Redis,
a real Celery worker. The shared pool fills and is attributed from the requests' own numbers
(checked against the server's own log); per-slot caches stay within their slots; a server
without --metrics still gets its slots sampled."""

from __future__ import annotations

import re
import time

import pytest

from benchmarks.jobs.telemetry.summary import for_json
from benchmarks.models import Job, Run

from ...real_parts import HOLD_BACK, live_llama_server, register, submit, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.llama_server]

RELEASED = re.compile(r"slot\s+release: id\s+(\d+) \| task \d+ \| stop processing: n_tokens = (\d+)")


@pytest.mark.usefixtures("worker")
def test_a_shared_pool_fills_and_the_overflow_names_the_three_requests_and_their_cells(
    llama_server_binary, tiny_models, tmp_path
):
    # 3 × (200 prompt + 600 to generate) on one 1,024-cell pool shared by 3 slots.
    flags = ["-c", "1024", "-np", "3", "--kv-unified", "--metrics"]
    log_path = tmp_path / "server.log"
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags, log_path) as url:
        server = register(url, "llama-server " + " ".join(flags))
        job = wait_for(submit(server, prompt_tokens=200, n_predict=600))
    assert job.state == "succeeded", job.error
    assert job.telemetry is None  # the live copy is emptied at the end; the run keeps its own
    run = job.runs.get()
    requests = list(run.requests.order_by("seq"))  # the run page's table order: the overflow names them so
    assert [(r.http_status, r.error_type) for r in requests] == [(500, "context_exceeded")] * 3
    telemetry = run.telemetry
    assert telemetry is not None
    assert telemetry["pool"] == {
        "kind": "shared",
        "slots": 3,
        "slot_cells": 1024,
        "pool_cells": 1024,
        "from": "launch command",
    }
    assert telemetry["sources"]["slots"] == "ok" and telemetry["sources"]["metrics"] == "ok"
    assert telemetry["samples"] >= 1 and len(telemetry["t"]) == len(telemetry["busy"]) >= 1

    over = telemetry["overflow"]
    assert over is not None and over["pool_cells"] == 1024 and over["alone_needed"] == 800
    at_error = [r.extra["at_error"] for r in requests]
    assert over["requests"] == [
        {"i": i, "prompt": 200, "decoded": a["decoded"], "cells": a["cells"]} for i, a in enumerate(at_error)
    ]
    # Each request's cells are what the server itself says its slot held when it let go
    # (its log's "release ... n_tokens"), less what it held back from the stream, or one
    # more: the token sampled whose cell the failed step could not write.
    released = sorted(int(n) for _, n in RELEASED.findall(log_path.read_text(errors="replace")))
    assert len(released) == 3 and sum(released) > 1024, released
    cells = sorted(r["cells"] for r in over["requests"])
    assert all(s - HOLD_BACK <= c <= s + 1 for c, s in zip(cells, released, strict=True)), (cells, released)
    # Together they filled the pool: within the step that failed and what the stream held back.
    assert sum(cells) > 1024 - 3 * HOLD_BACK
    assert telemetry["peak"]["from"] == "overflow" and telemetry["peak"]["pool"] == sum(cells)
    assert telemetry["peak"]["pool_t"] == over["t"]
    # The overflow came before every 500 was recorded, and no sample saw more than the pool.
    assert all(over["t"] - 1e-4 <= a["t_s"] < over["t"] + 0.05 for a in at_error), (over["t"], at_error)
    sampled = [sum(c[k] or 0 for c in telemetry["cells"]) for k in range(len(telemetry["t"]))]
    assert max(sampled, default=0) <= 1024
    # kvlab's prediction: 3 × (200 + k) > 1024 first at k = 142; the server agrees within the hold-back
    # (and the one token sampled in the step that failed).
    assert over["predicted_step"] == 142
    assert all(142 - HOLD_BACK <= r["decoded"] <= 143 for r in over["requests"]), over["requests"]
    assert (
        over["sentence"].startswith("At ")
        and "the 1,024-cell pool was full: requests 1, 2 and 3 held " in (over["sentence"])
    )
    assert "each alone needed 800 (200 prompt + 600 to generate)" in over["sentence"]
    assert "kvlab predicted the pool would run out at token 142 of each" in over["sentence"]
    # The per-token gaps of each request are stored, one per token after the first.
    for r in requests:
        assert r.output_tokens == r.extra["at_error"]["decoded"]
        assert r.itl_s is not None and len(r.itl_s) == r.output_tokens - 1
    # bench --wait --json's block
    block = for_json(run)
    assert block is not None
    assert block["pool"] == {"kind": "shared", "cells": 1024, "peak": sum(cells), "peak_from": "overflow"}
    assert [(r["request"], r["cells"]) for r in block["overflow"]["requests"]] == [
        (i + 1, a["cells"]) for i, a in enumerate(at_error)
    ]
    assert len(block["slots"]) == 3 and block["samples"] == telemetry["samples"]


@pytest.mark.usefixtures("worker")
def test_per_slot_caches_stay_within_their_slots_and_the_job_shows_the_series_live(llama_server_binary, tiny_models):
    # 3 slots of 1,024 cells each; 340 + 600 = 940 per request fits. Two waves of three
    # requests keep the job running for the live copy to be seen.
    flags = ["-c", "3072", "-np", "3", "--no-kv-unified", "--metrics"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        job = submit(register(url, "llama-server " + " ".join(flags)), prompt_tokens=340, n_predict=600, requests=6)
        live = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and live is None:
            job.refresh_from_db()
            if job.finished:
                break
            if job.telemetry and job.telemetry.get("t"):
                live = job.telemetry
            time.sleep(0.1)
        job = wait_for(job)
    assert job.state == "succeeded", job.error
    assert live is not None, "no live telemetry was seen while the job ran"
    assert live["pool"]["kind"] == "per-slot" and live["overflow"] is None
    assert job.telemetry is None
    run: Run = job.runs.get()
    assert (run.n_requests, run.n_ok) == (6, 6)
    telemetry = run.telemetry
    assert telemetry is not None and telemetry["overflow"] is None
    assert telemetry["pool"] == {
        "kind": "per-slot",
        "slots": 3,
        "slot_cells": 1024,
        "pool_cells": 3072,
        "from": "launch command",
    }
    assert len(telemetry["t"]) >= 4 and telemetry["samples"] >= len(live["t"])
    assert telemetry["t"] == sorted(telemetry["t"])
    peaks = telemetry["peak"]["slots"]
    assert len(peaks) == 3 and telemetry["peak"]["from"] == "samples"
    # Every slot was seen decoding (past its prompt) and none ever held more than its cells.
    assert all(340 < p <= 940 <= 1024 for p in peaks), peaks
    assert all(max(c for c in column if c is not None) <= 1024 for column in telemetry["cells"])
    assert max(telemetry["processing"]) >= 1 and "deferred" in telemetry
    assert telemetry["tokens_out"][-1] is None or telemetry["tokens_out"][-1] <= 6 * 600
    for r in run.requests.all():
        assert r.output_tokens == 600 and r.itl_s is not None and len(r.itl_s) == 599
    assert "at_error" not in r.extra


@pytest.mark.usefixtures("worker")
def test_a_server_without_metrics_still_gets_its_slots_sampled(llama_server_binary, tiny_models):
    flags = ["-c", "2048", "-np", "2", "--no-kv-unified"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        job = wait_for(submit(register(url, ""), prompt_tokens=100, n_predict=400, concurrency=2, requests=2))
    assert job.state == "succeeded", job.error
    telemetry = Job.objects.get(pk=job.pk).runs.get().telemetry
    assert telemetry is not None
    assert telemetry["sources"]["slots"] == "ok"
    assert telemetry["sources"]["metrics"].startswith("off")
    assert "processing" not in telemetry
    assert max(telemetry["peak"]["slots"]) > 100  # a slot seen past its prompt
    # No launch command: /props cannot tell a shared pool from per-slot caches, and says so.
    assert telemetry["pool"]["kind"] == "unknown" and telemetry["pool"]["pool_cells"] is None
    assert telemetry["pool"]["from"].startswith("unknown: ")
    assert telemetry["pool"]["slots"] == 2 and telemetry["pool"]["slot_cells"] == 1024
