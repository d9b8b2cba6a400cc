"""Benchmark jobs against real parts: a real llama-server on a tiny model, a real Redis,
real Celery worker processes. The investigation's failure and its fix, scaled down."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.urls import reverse

from benchmarks.jobs import lifecycle
from benchmarks.models import Job, RequestResult, Run

from ..real_parts import live_llama_server, register, start_worker, submit, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.llama_server]


def test_auto_slots_with_a_shared_pool_fail_all_three_requests_together(
    llama_server_binary, tiny_models, worker, user_client
):
    # The investigation at small scale: no -np (4 slots, one unified pool of 1024 cells),
    # three concurrent requests of 300 prompt + 300 output tokens need 1800 cells.
    flags = ["-c", "1024"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        server = register(url, "llama-server -c 1024")
        response = user_client.post(
            reverse("job-new"),
            {
                "server": server.pk,
                "label": "original",
                "prompt_source": "synthetic",
                "prompt_tokens": 300,
                "n_predict": 300,
                "concurrency": 3,
                "requests": 3,
                "repeats": 1,
                "timeout_s": 120,
                "run_anyway": "on",  # past the form's warning: this job reproduces the failure
            },
        )
        assert response.status_code == 302
        job = wait_for(Job.objects.get())
    assert job.state == "succeeded", job.error
    run = job.runs.get()
    assert (run.source, run.n_requests, run.n_ok, run.parallel, run.ctx_size, run.kv_unified) == (
        "executed",
        3,
        0,
        4,
        1024,
        True,
    )
    statuses = list(run.requests.values_list("http_status", "error_type", "error"))
    assert statuses == [(500, "context_exceeded", "Context size has been exceeded.")] * 3
    # one history for every tool: kvlab's own runs say so, beside the tool filter's others
    assert (run.tool, run.engine) == ("kvlab", "llama.cpp") and "-c 1024" in run.server_flags
    assert run.server_props["props"]["total_slots"] == 4
    # what was sent is recorded although the server's answer does not say it
    assert list(run.requests.values_list("prompt_tokens", flat=True)) == [300] * 3
    assert (job.how_it_ran, job.found, job.live) == ("completed", "failed", [])


def test_per_slot_kv_succeeds_and_client_tok_s_matches_the_server(llama_server_binary, tiny_models, worker):
    # 1365 cells per slot >= 1300 per request. The client's clock also times delivery, so on a
    # busy machine (2 cores shared with the server, the worker and the database) it reads up to
    # some 10% slower than the server's own, never faster: the bounds are one-sided. A client
    # rate from the wrong span (with the TTFT, or the wave's clock) or counting events rather
    # than tokens is off by far more.
    flags = ["-c", "4096", "-np", "3", "--no-kv-unified"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        job = wait_for(submit(register(url, "llama-server " + " ".join(flags)), prompt_tokens=300, n_predict=1000))
    assert job.state == "succeeded", job.error
    run = job.runs.get()
    assert (run.n_requests, run.n_ok, run.kv_unified, run.ctx_size) == (3, 3, False, 4096)
    for request in run.requests.all():
        assert request.http_status == 200 and request.output_tokens == 1000 and request.prompt_tokens == 300
        assert request.ttft_s is not None and request.ttft_s < request.elapsed_s
        client, server_rate = request.extra["client_tok_s"], request.tok_s
        assert 0.85 * server_rate < client < 1.02 * server_rate, (client, server_rate)
    assert run.throughput_tok_s and run.throughput_tok_s > 0


def test_a_run_of_more_requests_than_its_concurrency_has_the_waves_wall_time(llama_server_binary, tiny_models, worker):
    # 6 requests, at most 2 in flight: they run in turn, so the run's wall time is the wave's, at
    # least the requests' summed elapsed time over 2, never the longest request's alone (which made
    # the throughput about 3 times too high), and the throughput is the output tokens over it.
    flags = ["-c", "2048", "-np", "2", "--no-kv-unified"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        job = wait_for(
            submit(
                register(url, "llama-server " + " ".join(flags)),
                prompt_tokens=50,
                n_predict=64,
                requests=6,
                concurrency=2,
            )
        )
    assert job.state == "succeeded", job.error
    run = job.runs.get()
    elapsed = list(run.requests.values_list("elapsed_s", flat=True))
    assert run.n_ok == 6 and run.wall_s is not None
    assert run.wall_s >= sum(elapsed) / 2 > max(elapsed)
    assert run.effective_wall_s == run.wall_s
    assert run.throughput_tok_s == pytest.approx(run.output_tokens_total / run.wall_s)


def test_a_prompt_longer_than_its_slot_gets_a_400_for_that_request_alone(llama_server_binary, tiny_models, worker):
    flags = ["-c", "2048", "-np", "3", "--no-kv-unified"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        server = register(url, "llama-server " + " ".join(flags))
        long_job = wait_for(submit(server, prompt_tokens=900, n_predict=10, requests=1, concurrency=1))
        short_job = wait_for(submit(server, prompt_tokens=100, n_predict=10, requests=1, concurrency=1))
    (long,) = RequestResult.objects.filter(run__job=long_job)
    assert (long.http_status, long.error_type, long.extra["n_prompt_tokens"], long.extra["n_ctx"]) == (
        400,
        "exceed_context_size",
        900,
        768,
    )
    assert RequestResult.objects.get(run__job=short_job).ok


def test_cancelling_a_running_job_keeps_what_finished(llama_server_binary, tiny_models, worker, user, user_client):
    flags = ["-c", "2048", "-np", "1"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        server = register(url, "llama-server -c 2048 -np 1")
        job = submit(server, user=user, prompt_tokens=50, n_predict=400, requests=40, concurrency=1)
        wait_for(job, finished=False, done=2)
        assert user_client.post(reverse("job-cancel", args=[job.pk])).status_code == 302
        job = wait_for(job)
    assert job.state == "cancelled" and "finished requests are kept" in job.error
    kept = RequestResult.objects.filter(run__job=job)
    assert 2 <= kept.count() < 40 and all(r.ok for r in kept)
    assert Run.objects.get(job=job).n_requests == kept.count()


def test_a_worker_killed_mid_job_does_not_leave_it_running(llama_server_binary, tiny_models, broker):
    flags = ["-c", "2048", "-np", "1"]
    victim = start_worker(broker, f"victim-{os.getpid()}@test")
    try:
        with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
            job = submit(
                register(url, "llama-server -c 2048 -np 1"), prompt_tokens=50, n_predict=400, requests=40, concurrency=1
            )
            wait_for(job, finished=False, done=1)
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
            time.sleep(2.5)  # longer than the 1 s heartbeat
            assert lifecycle.reap_stale_jobs(max_silence_s=2) == [job.pk]
    finally:
        if victim.poll() is None:
            victim.kill()
    job.refresh_from_db()
    assert job.state == "failed" and "stopped sending heartbeats" in job.error
    recorded = RequestResult.objects.filter(run__job=job).count()
    assert recorded >= 1 and f"{recorded} request result(s) were recorded" in job.error
    assert Run.objects.get(job=job).n_requests == recorded
    assert lifecycle.reap_stale_jobs(max_silence_s=2) == []  # never twice


def test_manage_py_bench_waits_and_reports_json(llama_server_binary, tiny_models, worker):
    import json
    from io import StringIO

    from django.core.management import call_command

    flags = ["-c", "2048", "-np", "3", "--no-kv-unified"]
    with live_llama_server(llama_server_binary, tiny_models["llama"], flags) as url:
        out = StringIO()
        call_command(
            "bench", "--server", url, "--concurrency", "3", "--requests", "3", "--prompt-tokens", "100",
            "--n-predict", "20", "--label", "cli", "--wait", "--json", stdout=out, stderr=StringIO(),
        )  # fmt: skip
    summary = json.loads(out.getvalue())
    assert (summary["state"], summary["ok"], summary["total"], summary["status_codes"]) == (
        "succeeded",
        3,
        3,
        [200] * 3,
    )
    run = Run.objects.get(pk=summary["runs"][0]["run_id"])
    assert run.label == "cli" and run.source == "executed" and run.n_ok == 3
