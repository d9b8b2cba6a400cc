"""Fault injection: the streaming client against a server that misbehaves on purpose.

Every fault must end as a recorded Outcome (never an exception, never a hang past the
deadline), classified the way docs/record-schema.md names failures. The fake server
is in fake_server.py; the job-level test runs a real Celery worker on a real Redis.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Iterator

import orjson
import pytest

from benchmarks.history.exporter import export_lines
from benchmarks.jobs import execution
from benchmarks.jobs.client import stream
from benchmarks.jobs.client.stream import Outcome, session_for, stream_completion
from benchmarks.jobs.client.target import Target, resolve_target
from benchmarks.models import Job, Run, Server
from benchmarks.records.schema import normalize

from ...fake_server import FakeServer
from ...real_parts import register, submit, wait_for

DEADLINE_S = 1.0
HOLD_S = 15  # how long the fake server holds a connection: a request that ends before, its deadline ended


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    with FakeServer(max_hold_s=HOLD_S) as server:
        yield server


def complete(where: str | Target, *, deadline_s: float = 3.0, **payload: object) -> Outcome:
    """One stream_completion call, as a job makes it."""
    target = where if isinstance(where, Target) else resolve_target(where)
    body = {"prompt": "one two three", "n_predict": 5, **payload}

    async def go() -> Outcome:
        async with session_for(target, limit=2) as session:
            return await stream_completion(session, target, body, deadline_s=deadline_s)

    return asyncio.run(go())


# -- a good stream -------------------------------------------------------------------


def test_a_normal_stream_succeeds_and_keep_alive_lines_are_not_tokens(fake):
    outcome = complete(fake.url_for("normal"), n_predict=7)
    assert (outcome.ok, outcome.http_status, outcome.error_type, outcome.error) == (True, 200, "", "")
    # 7 token events, each followed by a keep-alive line; the server's counts are kept.
    assert (outcome.output_tokens, outcome.prompt_tokens) == (7, 3)
    assert outcome.extra["timings"]["predicted_n"] == 7 and outcome.extra["stop_type"] == "limit"
    assert outcome.tok_s and outcome.tok_s > 0 and outcome.client_tok_s and outcome.client_tok_s > 0
    assert 0 < outcome.ttft_s < outcome.elapsed_s
    assert outcome.started_at == pytest.approx(time.time(), abs=10)


def test_ttft_waits_for_the_first_token_not_a_keep_alive_or_an_empty_event(fake):
    # The server sends a keep-alive at once, then keep-alives and empty-content
    # events for 0.4 s, then the tokens.
    outcome = complete(fake.url_for("normal"), n_predict=3, fake_first_token_delay_s=0.4)
    assert outcome.ok and outcome.output_tokens == 3
    assert outcome.ttft_s >= 0.4
    assert outcome.ttft_s < outcome.elapsed_s


# -- errors the server means -------------------------------------------------------


def test_http_500_context_exceeded_is_context_exceeded(fake):
    outcome = complete(fake.url_for("ctx500"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 500, "context_exceeded")
    assert outcome.error == "Context size has been exceeded."
    assert outcome.ttft_s is None and outcome.output_tokens is None


def test_http_400_exceed_context_size_keeps_the_token_counts(fake):
    outcome = complete(fake.url_for("ctx400"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 400, "exceed_context_size")
    assert outcome.error.startswith("request (900 tokens) exceeds the available context size (768 tokens)")
    assert outcome.extra == {"n_prompt_tokens": 900, "n_ctx": 768}
    assert outcome.prompt_tokens == 900


def test_another_http_error_keeps_its_status_and_body_text(fake):
    outcome = complete(fake.url_for("error_text"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 502, "http_error")
    assert outcome.error == "Bad Gateway: upstream llama-server is restarting"


def test_an_error_event_inside_a_200_stream_is_a_failure_with_the_events_code(fake):
    # As llama-server does when the unified pool fills during generation.
    outcome = complete(fake.url_for("error_event"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 500, "context_exceeded")
    assert outcome.error == "Context size has been exceeded."
    assert outcome.extra == {"error_event": True}
    assert outcome.ttft_s is not None  # two tokens came before the error


def test_an_error_event_about_something_else_is_an_http_error(fake):
    outcome = complete(fake.url_for("error_event_other"))
    assert (outcome.ok, outcome.http_status, outcome.error_type, outcome.error) == (False, 503, "http_error", "Loading")


# -- streams that break --------------------------------------------------------------


def test_a_connection_closed_mid_stream_is_a_disconnect(fake):
    outcome = complete(fake.url_for("disconnect"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 200, "disconnect")
    assert "closed the connection mid-response" in outcome.error


def test_a_stream_that_ends_without_its_final_chunk_is_not_a_success(fake):
    outcome = complete(fake.url_for("truncated"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 200, "disconnect")
    assert outcome.error == "the stream ended before its final chunk (incomplete, not a success)"
    assert outcome.output_tokens == 2


def test_a_refused_connection_is_a_disconnect():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    outcome = complete(f"http://127.0.0.1:{port}")
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, None, "disconnect")
    assert outcome.error.startswith("connection failed:")


@pytest.mark.parametrize(
    ("behaviour", "status"),
    [
        ("hang", None),  # accepts the connection, never sends a status line
        ("drip_headers", None),  # the status line and headers one byte every 0.2 s
        ("stall", 200),  # headers and one token, then silence
        ("drip", 200),  # a valid-looking stream one byte every 0.2 s: reads never time out
    ],
)
def test_the_deadline_ends_a_request_the_server_never_finishes(fake, behaviour, status):
    started = time.monotonic()
    outcome = complete(fake.url_for(behaviour), deadline_s=DEADLINE_S)
    wall = time.monotonic() - started
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, status, "timeout")
    assert outcome.error == "no complete answer within the 1 s deadline"
    # never before its deadline, and not the server's letting go: how long past it depends on the machine
    assert DEADLINE_S <= outcome.elapsed_s < HOLD_S and wall < HOLD_S
    assert fake.hits_for(behaviour) == 1


# -- answers of the wrong shape -----------------------------------------------------


def test_a_data_line_that_is_not_json_is_other(fake):
    outcome = complete(fake.url_for("garbage"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 200, "other")
    assert outcome.error == "a stream event is not JSON: b'this is not json {'"


def test_json_array_events_are_other(fake):
    outcome = complete(fake.url_for("array"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 200, "other")
    assert outcome.error == "a stream event is not a JSON object"


def test_an_html_page_instead_of_a_stream_is_a_wrong_shape_not_a_success(fake):
    outcome = complete(fake.url_for("not_sse"))
    assert (outcome.ok, outcome.http_status, outcome.output_tokens) == (False, 200, 0)
    assert outcome.error_type == "other" and outcome.error == "the response is not an event stream (no 'data:' events)"


def test_a_final_chunk_without_timings_is_a_success_without_the_servers_rates(fake):
    # The request finished; only the server's own numbers are missing, so none are invented.
    outcome = complete(fake.url_for("no_timings"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (True, 200, "")
    assert (outcome.output_tokens, outcome.prompt_tokens, outcome.tok_s) == (2, None, None)
    assert outcome.extra == {"timings": {}}


def test_a_response_over_the_size_cap_is_cut_off(fake, monkeypatch):
    monkeypatch.setattr(stream, "MAX_RESPONSE_BYTES", 64 * 1024)  # the server would send 4 MiB
    outcome = complete(fake.url_for("huge"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 200, "other")
    assert outcome.error == "the response passed the cap of 65,536 bytes"


def test_one_endless_line_is_cut_off_and_recorded(fake):
    outcome = complete(fake.url_for("huge_line"))
    assert (outcome.ok, outcome.error_type) == (False, "other")


def test_a_redirect_is_recorded_and_never_followed(fake):
    outcome = complete(fake.url_for("redirect"))
    assert (outcome.ok, outcome.http_status, outcome.error_type) == (False, 302, "http_error")
    assert outcome.error == "HTTP 302"
    assert fake.hits["/redirect/completion"] == 1
    assert fake.hits["/redirected/completion"] == 0  # where the Location header pointed


# -- a whole job through the real worker --------------------------------------------

JOB_FAULTS = {  # prompt (the behaviour) -> (ok, http_status, error_type) as recorded
    "normal": (True, 200, ""),
    "ctx500": (False, 500, "context_exceeded"),
    "ctx400": (False, 400, "exceed_context_size"),
    "error_event": (False, 500, "context_exceeded"),
    "disconnect": (False, 200, "disconnect"),
    "truncated": (False, 200, "disconnect"),
    "hang": (False, None, "timeout"),
    "garbage": (False, 200, "other"),
    "redirect": (False, 302, "http_error"),
    "array": (False, 200, "other"),
    "drip": (False, 200, "timeout"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_a_job_with_faulty_requests_records_each_one_once_with_its_error_type(fake):
    prompts = [*JOB_FAULTS, "normal"]
    job = submit(
        register(fake.url, ""), prompts=prompts, requests=len(prompts), concurrency=4, n_predict=4, timeout_s=1.5
    )
    job = wait_for(job, timeout=60)
    assert job.state == "succeeded", job.error
    n_failed = sum(not JOB_FAULTS[p][0] for p in prompts)
    assert (job.n_total, job.n_done, job.n_failed, job.n_running) == (len(prompts), len(prompts), n_failed, 0)
    assert len(job.recent_errors) == n_failed

    run = job.runs.get()
    assert (run.n_requests, run.n_ok) == (len(prompts), len(prompts) - n_failed)
    rows = sorted(run.requests.all(), key=lambda r: r.extra["index"])
    assert [r.extra["index"] for r in rows] == list(range(len(prompts)))  # none lost, none twice
    for row, prompt in zip(rows, prompts, strict=True):
        assert (row.ok, row.http_status, row.error_type) == JOB_FAULTS[prompt], (prompt, row.error)
        assert bool(row.error) is not row.ok
    timed_out = [r for r in rows if r.error_type == "timeout"]
    assert all(1.5 <= r.elapsed_s < HOLD_S for r in timed_out)

    # The server saw each request exactly once: no retries, no redirect followed.
    assert Counter(hit.prompt for hit in fake.completions) == Counter(prompts)
    assert fake.hits["/redirected/completion"] == 0
    assert fake.hits["/health"] == fake.hits["/props"] == 1
    assert fake.hits["/slots"] >= 1  # the probe's, then the telemetry sampler's


def run_job_here(fake: FakeServer, prompts: list[str]) -> Job:
    """execute_job in this process (the domain function; no queue needed)."""
    server = Server.objects.create(name="fake", base_url=fake.url)
    params = {"prompts": prompts, "requests": len(prompts), "concurrency": 2, "n_predict": 3, "timeout_s": 3}
    job = Job.objects.create(server=server, base_url=server.base_url, label="faults", params=params)
    execution.execute_job(job.pk, worker="test")
    job.refresh_from_db()
    return job


@pytest.mark.django_db
def test_a_job_keeps_a_request_whose_stream_has_an_endless_line(fake):
    job = run_job_here(fake, ["normal", "huge_line"])
    assert job.state == "succeeded"
    assert (job.n_total, job.n_done) == (2, 2)
    assert job.runs.get().n_requests == 2


@pytest.mark.django_db
def test_an_exported_run_with_faulty_requests_reads_back(fake):
    job = run_job_here(fake, ["normal", "truncated", "garbage"])
    assert job.state == "succeeded", job.error
    lines = list(export_lines(Run.objects.filter(job=job)))
    assert len(lines) == 3
    for line in lines:
        normalize(orjson.loads(line))
