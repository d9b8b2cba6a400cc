"""The investigation's situation against real parts: a llama-server kvlab did not launch (started
here, not by kvlab's launcher, with llama-server's default slots), reached through `bench --server
URL` or registered without a launch command. Its shared pool overflows, and the overflow is
attributed from the requests' own counts: the HTTP 500 says the pool is shared, /props gives its
size, or, when /props cannot be read, the requests say how many cells it held at least. A per-slot
400 and a 500 that is not a full pool are not attributed. A real Redis and a real Celery worker."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils.html import escape

from benchmarks.jobs.telemetry.summary import for_json
from benchmarks.models import Run

from ...real_parts import HOLD_BACK, live_llama_server, register, submit, wait_for
from ...relay import Relay

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.llama_server]

# No -np: llama-server's default of 4 slots sharing one pool of 1,024 cells. 3 × (300 + 300) cannot fit.
DEFAULT_SLOTS = ["-c", "1024"]
SHARED_BY_500 = ' The HTTP 500 "Context size has been exceeded" says the slots share one pool'


def bench(url: str, *args: str) -> dict[str, Any]:
    out = StringIO()
    call_command(
        "bench", "--server", url, "--concurrency", "3", "--requests", "3", *args, "--wait", "--json",
        "--allow-failures", stdout=out, stderr=StringIO(),
    )  # fmt: skip
    return json.loads(out.getvalue())


def held(run: Run) -> list[dict[str, Any]]:
    """Each request's own counts when its stream failed, in the run page's table order (the order they
    finished in), as the overflow names them."""
    return [r.extra["at_error"] for r in run.requests.order_by("seq")]


def run_page(client: Any, run: Run) -> str:
    response = client.get(reverse("run-detail", args=[run.pk]))
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.usefixtures("worker")
def test_bench_server_url_attributes_the_overflow_to_the_shared_pool_of_the_size_props_gives(
    llama_server_binary, tiny_models, user_client
):
    with live_llama_server(llama_server_binary, tiny_models["llama"], DEFAULT_SLOTS) as url:
        summary = bench(url, "--prompt-tokens", "300", "--n-predict", "300")
    assert summary["status_codes"] == [500] * 3 and summary["error_types"] == ["context_exceeded"] * 3
    run = Run.objects.select_related("job").get(pk=summary["runs"][0]["run_id"])
    assert run.job.server is None and run.job.launch_command == ""  # nobody told kvlab how it was started
    telemetry = run.telemetry
    assert telemetry["pool"]["kind"] == "unknown" and telemetry["pool"]["slot_cells"] == 1024

    over = telemetry["overflow"]
    at_error = held(run)
    cells = [a["cells"] for a in at_error]
    assert over is not None
    assert (over["pool_cells"], over["pool_from"], over["shared_from"]) == (1024, "/props", "error")
    assert over["requests"] == [
        {"i": i, "prompt": 300, "decoded": a["decoded"], "cells": a["cells"]} for i, a in enumerate(at_error)
    ]
    assert 1024 - 3 * HOLD_BACK < sum(cells) <= 1024 + 3  # the pool, full: one token each was being written
    assert over["predicted_step"] == 42  # 3 × (300 + 42) > 1,024
    sentence = over["sentence"]
    assert sentence.startswith(
        f"At {over['t']:.2f} s the shared pool of 1,024 cells was full: requests 1, 2 and 3 held "
        f"{cells[0]:,}, {cells[1]:,} and {cells[2]:,} cells ({sum(cells):,} together); "
        "each alone needed 600 (300 prompt + 300 to generate)."
    ), sentence
    assert "kvlab predicted the pool would run out at token 42 of each" in sentence
    assert sentence.endswith(
        SHARED_BY_500 + " (a cache per slot refuses a prompt with HTTP 400 at admission); "
        "its size is the context /props gives each slot, all of which each slot may use."
    )

    # bench --json says the same, and the run's page shows the sentence.
    block = summary["telemetry"]["overflow"]
    assert (block["pool_cells"], block["pool_from"], block["shared_from"]) == (1024, "/props", "error")
    assert [(r["request"], r["cells"]) for r in block["requests"]] == [(1, cells[0]), (2, cells[1]), (3, cells[2])]
    assert block["sentence"] == sentence
    page = run_page(user_client, run)
    assert f'<p class="attribution" role="status">{escape(sentence)}</p>' in page
    # the peak line under it names the same pool, not "pool size unknown"
    assert "pool size unknown" not in page
    assert (
        f"cells held of the 1,024-cell pool ({100 * telemetry['peak']['pool'] / 1024:.1f} %, its size from "
        "/props; shared, as its HTTP 500 said)" in page
    )


@pytest.mark.usefixtures("worker")
def test_without_props_the_overflow_says_the_pool_held_at_least_what_the_requests_wrote(
    llama_server_binary, tiny_models, user_client
):
    # Registered without a launch command, behind a gateway that does not route /props.
    with (
        live_llama_server(llama_server_binary, tiny_models["llama"], DEFAULT_SLOTS) as url,
        Relay(url, hide_props=True) as relay,
    ):
        server = register(relay.url, "")
        job = wait_for(submit(server, prompt_tokens=300, n_predict=300))
    assert job.state == "succeeded", job.error
    assert relay.props_asked >= 1
    run = job.runs.get()
    assert list(run.requests.values_list("http_status", "error_type")) == [(500, "context_exceeded")] * 3
    telemetry = run.telemetry
    assert telemetry["pool"]["kind"] == "unknown" and telemetry["pool"]["slot_cells"] is None

    over = telemetry["overflow"]
    at_error = held(run)
    cells = [a["cells"] for a in at_error]
    assert over is not None and over["pool_cells"] is None and over["pool_from"] is None
    assert over["shared_from"] == "error"
    # What the requests had written: their counts less the token each was writing. Never more
    # than the pool the server was started with, and short of it by at most what streams hold back.
    assert over["pool_at_least"] == sum(a["cells"] - 1 for a in at_error)
    assert 1024 - 3 * HOLD_BACK <= over["pool_at_least"] <= 1024
    assert over["predicted_step"] is None and over["predicted_t"] is None
    sentence = over["sentence"]
    assert sentence.startswith(
        f"At {over['t']:.2f} s the shared pool — at least {over['pool_at_least']:,} cells, a size the server did "
        f"not say — was full: requests 1, 2 and 3 held {cells[0]:,}, {cells[1]:,} and {cells[2]:,} cells "
        f"({sum(cells):,} together); each alone needed 600 (300 prompt + 300 to generate). "
        "Without the pool's size kvlab made no prediction." + SHARED_BY_500
    ), sentence
    assert sentence.endswith(
        "To learn its size, read the server's /props (default_generation_settings.n_ctx: with one shared pool "
        "every slot may use all of it), or register the server with the command that launched it (its -c and -np)."
    )
    block = for_json(run)
    assert block is not None and block["overflow"]["pool_at_least"] == over["pool_at_least"]
    assert block["overflow"]["pool_cells"] is None and block["overflow"]["sentence"] == sentence
    page = run_page(user_client, run)
    assert f'<p class="attribution" role="status">{escape(sentence)}</p>' in page
    assert (
        f"pool size unknown (the server did not say; shared, at least {over['pool_at_least']:,} cells when it ran out)"
        in page
    )


@pytest.mark.usefixtures("worker")
def test_a_prompt_too_long_for_its_slot_is_a_400_and_no_shared_pool_overflow(
    llama_server_binary, tiny_models, user_client
):
    # 768 cells per slot (-np 3 turns the shared pool off): a 900-token prompt is refused at admission.
    flags = ["-c", "2048", "-np", "3"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        summary = bench(url, "--prompt-tokens", "900", "--n-predict", "50")
    assert summary["status_codes"] == [400] * 3 and summary["error_types"] == ["exceed_context_size"] * 3
    run = Run.objects.get(pk=summary["runs"][0]["run_id"])
    assert run.telemetry is not None and run.telemetry["overflow"] is None
    assert summary["telemetry"]["overflow"] is None
    page = run_page(user_client, run)
    assert 'class="attribution"' not in page and "pool was full" not in page


@pytest.mark.usefixtures("worker")
def test_a_500_that_is_not_a_full_pool_is_not_attributed(llama_server_binary, tiny_models, user_client):
    # Room for all three (4,096 shared cells); the relay cuts each stream with the server's other
    # decode failure, "Compute error.", after a few events.
    with (
        live_llama_server(llama_server_binary, tiny_models["llama"], ["-c", "4096"]) as url,
        Relay(url, fail_after_events=5, fail_message="Compute error.") as relay,
    ):
        summary = bench(relay.url, "--prompt-tokens", "100", "--n-predict", "200")
    assert summary["status_codes"] == [500] * 3 and summary["error_types"] == ["http_error"] * 3
    run = Run.objects.get(pk=summary["runs"][0]["run_id"])
    assert all(a["decoded"] > 0 for a in held(run))  # failed in flight, like an overflow, yet not one
    assert run.telemetry is not None and run.telemetry["overflow"] is None
    assert summary["telemetry"]["overflow"] is None
    page = run_page(user_client, run)
    assert 'class="attribution"' not in page and "pool was full" not in page
