"""Servers and jobs tell the truth: the pool as the server has it, a
warning before a job fails, honest outcomes, a live job page, runs that show what they measured."""

from __future__ import annotations

import html
import json
import re
import time
from io import StringIO
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from benchmarks.jobs import execution
from benchmarks.jobs.lifecycle import submit_job
from benchmarks.management.commands import bench as bench_command
from benchmarks.management.commands import sweep as sweep_command
from benchmarks.models import Job, LaunchHost, RequestResult, Run, Server, Sweep, SweepConfig
from benchmarks.sweeps.lifecycle import create_sweep
from benchmarks.tests.builders import announced_host

from ..fake_server import FakeServer, PacedServer, TruthServer
from ..real_parts import run_in_background

pytestmark = pytest.mark.django_db

SHARED = {"reachable": True, "props": {"total_slots": 4, "n_ctx_slot": 1024, "model_path": "/m/tiny.gguf"}}
PER_SLOT = {"reachable": True, "props": {"total_slots": 3, "n_ctx_slot": 768, "model_path": "/m/tiny.gguf"}}


@pytest.fixture(autouse=True)
def no_queue(monkeypatch):
    """Jobs are run here by the domain function, never sent to Celery."""
    monkeypatch.setattr("benchmarks.enqueue.job", lambda job: None)


def text(response) -> str:
    """The page's text: tags dropped, entities decoded, whitespace collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())))


def make_server(name: str, launch: str, probe: dict | None) -> Server:
    return Server.objects.create(name=name, base_url="http://127.0.0.1:9", launch_command=launch, last_probe=probe)


# -- 7. slots and pools, as the server has them ------------------------------------------


def test_a_server_without_np_shows_four_slots_sharing_one_pool(user_client):
    server = make_server("auto", "llama-server -m tiny.gguf -c 1024", SHARED)
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "KV pool 4 slots sharing one pool of 1,024 cells" in page
    assert "every slot may use it, all together may not" in page
    listing = text(user_client.get(reverse("server-list")))
    assert "4 slots sharing one pool of 1,024 cells" in listing and "4 × 1024" not in listing


def test_a_server_with_np_shows_cells_per_slot(user_client):
    server = make_server("per-slot", "llama-server -c 2048 -np 3 --no-kv-unified", PER_SLOT)
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "KV pool 3 slots × 768 cells each (2,304 in all)" in page
    assert "3 slots × 768 cells each" in text(user_client.get(reverse("server-list")))


def test_without_a_launch_command_the_page_says_props_cannot_tell(user_client):
    server = make_server("unknown", "", SHARED)
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "either one pool of 1,024 they share or 1,024 each" in page
    assert "/props cannot tell one shared pool" in page and "register the server's launch command" in page
    assert "sharing one pool" not in page


def test_a_launch_command_that_disagrees_with_the_server_is_not_trusted(user_client):
    server = make_server("stale", "llama-server -c 2048 -np 3", SHARED)  # the server reports 4 slots
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "the launch command gives 3 slots but the server reports 4" in page
    assert "× 1,024 cells each" not in page and "sharing one pool" not in page


def test_an_unprobed_server_shows_the_pool_its_command_gives(user_client):
    server = make_server("new", "llama-server -c 2048 -np 3", None)
    page = text(user_client.get(reverse("server-detail", args=[server.pk])))
    assert "3 slots × 768 cells each" in page and "from the launch command" in page


# -- 8. warn before the job fails ---------------------------------------------------------


def job_data(server: Server, **overrides: object) -> dict[str, object]:
    data = {
        "server": server.pk,
        "label": "repro",
        "prompt_source": "synthetic",
        "prompt_tokens": 300,
        "n_predict": 300,
        "concurrency": 3,
        "requests": 3,
        "repeats": 1,
        "timeout_s": 120,
    }
    return {**data, **overrides}


@pytest.fixture
def worker_up(monkeypatch):
    monkeypatch.setattr("benchmarks.jobs.views.worker_available", lambda: "")


def test_the_job_form_warns_that_a_shared_pool_will_fail_every_request_in_flight(user_client, worker_up):
    server = make_server("auto", "llama-server -c 1024", SHARED)
    response = user_client.post(reverse("job-new"), job_data(server))
    assert response.status_code == 200 and not Job.objects.exists()  # nothing submitted yet
    page = text(response)
    assert "This job will not run as asked: 4 slots sharing one pool of 1,024 cells" in page
    assert "3 concurrent requests of 300 + 300 tokens need 1,800 cells; the unified pool has 1,024" in page
    assert "HTTP 500 'Context size has been exceeded'" in page and "all in-flight requests" in page
    link = re.search(r'href="(/sizing/\?[^"]+)">Size this server for this workload', response.content.decode())
    assert link, "no link to the sizing page"
    query = parse_qs(urlsplit(html.unescape(link.group(1))).query)
    assert query == {
        "prompt_tokens": ["300"],
        "output_tokens": ["300"],
        "concurrency": ["3"],
        "command": ["llama-server -c 1024"],
    }
    # The user wants to reproduce the failure: ticked, the same form submits the job.
    response = user_client.post(reverse("job-new"), job_data(server, run_anyway="on"))
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.params["prompt_tokens"] == 300 and "run_anyway" not in job.params


def test_the_job_form_warns_that_a_prompt_longer_than_its_slot_gets_a_400(user_client, worker_up):
    server = make_server("per-slot", "llama-server -c 2048 -np 3", PER_SLOT)
    response = user_client.post(reverse("job-new"), job_data(server, prompt_tokens=900, n_predict=10))
    page = text(response)
    assert response.status_code == 200 and not Job.objects.exists()
    assert "3 slots × 768 cells each" in page and "the synthetic prompt has 900 tokens" in page
    assert "HTTP 400 exceed_context_size_error for that request only" in page


def test_a_job_that_fits_its_pool_is_submitted_without_a_warning(user_client, worker_up):
    server = make_server("per-slot", "llama-server -c 2048 -np 3", PER_SLOT)
    response = user_client.post(reverse("job-new"), job_data(server, prompt_tokens=300, n_predict=300))
    assert response.status_code == 302 and Job.objects.count() == 1


def test_without_a_launch_command_the_warning_says_it_depends_on_the_pool(user_client, worker_up):
    server = make_server("unknown", "", SHARED)
    page = text(user_client.post(reverse("job-new"), job_data(server)))
    assert "This job may fail" in page and "If the slots share one pool:" in page
    assert "/props cannot tell" in page and not Job.objects.exists()


def test_bench_refuses_what_the_form_warns_about_unless_told_to_reproduce_it(monkeypatch):
    make_server("auto", "llama-server -c 1024", SHARED)
    submitted = []
    monkeypatch.setattr(bench_command, "worker_available", lambda: "")
    monkeypatch.setattr(bench_command, "submit_job", lambda **kwargs: submitted.append(kwargs) or Job(pk=7))
    args = ["--server", "auto", "--prompt-tokens", "300", "--n-predict", "300", "--concurrency", "3", "--requests", "3"]
    with pytest.raises(CommandError) as refused:
        call_command("bench", *args, stdout=StringIO(), stderr=StringIO())
    message = str(refused.value)
    assert message.startswith("nothing was submitted: this job will not run as asked: 4 slots sharing one pool")
    assert "the synthetic prompt has 300 tokens" in message
    assert "3 concurrent requests of 300 + 300 tokens need 1,800 cells; the unified pool has 1,024" in message
    assert "Size it: /sizing/?prompt_tokens=300&output_tokens=300&concurrency=3&command=llama-server+-c+1024" in message
    assert message.endswith("--allow-failures runs it as it is") and submitted == []
    # told to reproduce the failure: the same warning on stderr, and the job submitted as asked
    out, err = StringIO(), StringIO()
    call_command("bench", *args, "--allow-failures", stdout=out, stderr=err)
    assert err.getvalue().startswith("warning: this job will not run as asked: 4 slots sharing one pool")
    assert len(submitted) == 1 and submitted[0]["params"]["concurrency"] == 3
    # what the pool holds runs without a word
    err = StringIO()
    call_command("bench", *args[:-4], "--concurrency", "1", "--requests", "1", stdout=StringIO(), stderr=err)
    assert err.getvalue() == "" and len(submitted) == 2


def test_the_run_anyway_box_is_shown_only_with_a_warning(user_client):
    server = make_server("auto", "llama-server -c 1024", SHARED)
    assert "run_anyway" not in user_client.get(reverse("job-new") + f"?server={server.pk}").content.decode()


# -- 9. outcomes are honest: how the job ran, apart from what it found -------------------


def finished_job(server: Server, *, state: str = "succeeded", ok: int, total: int, error: str = "") -> Job:
    params = {"requests": total, "repeats": 1, "concurrency": total, "n_predict": 300, "prompt_tokens": 300}
    job = Job.objects.create(
        server=server, base_url=server.base_url, label="original", params=params, state=state, error=error,
        n_total=total, n_done=total, n_failed=total - ok,
    )  # fmt: skip
    Run.objects.create(key=f"job-{job.pk}", model="tiny.gguf", job=job, n_requests=total, n_ok=ok)
    return job


def test_a_job_whose_requests_all_failed_completed_and_found_all_failed(client):
    server = make_server("auto", "llama-server -c 1024", SHARED)
    job = finished_job(server, ok=0, total=3)
    response = client.get(reverse("job-detail", args=[job.pk]))
    page = text(response)
    assert "Ran: completed" in page and "Found: all failed (3 recorded, 3 failed)" in page
    assert "succeeded" not in page
    body = response.content.decode()
    assert 'class="found outcome-failed"' in body and '<progress class="outcome-failed"' in body  # red, not blue
    assert "(all failed)" in page  # the run's own line
    listing = client.get(reverse("job-list")).content.decode()
    assert '<td class="ran-completed">completed</td><td class="found outcome-failed">all failed</td>' in listing


def test_a_job_with_every_request_ok_found_all_ok(client):
    job = finished_job(make_server("s", "", None), ok=3, total=3)
    page = text(client.get(reverse("job-detail", args=[job.pk])))
    assert "Ran: completed" in page and "Found: all requests ok" in page


def test_a_job_whose_worker_was_lost_says_so_and_what_it_kept(client):
    error = "the worker stopped sending heartbeats (last at 2026-01-01 00:00:00 UTC): it was killed or lost; 1 ..."
    job = finished_job(make_server("s", "", None), state="failed", ok=1, total=2, error=error)
    page = text(client.get(reverse("job-detail", args=[job.pk])))
    assert "Ran: worker lost" in page and "Found: some failed" in page
    failed_to_run = finished_job(make_server("t", "", None), state="failed", ok=0, total=0, error="not reachable")
    page = text(client.get(reverse("job-detail", args=[failed_to_run.pk])))
    assert "Ran: failed to run" in page and "Found: no requests" in page


def test_a_sweep_row_says_what_its_requests_found_not_only_that_it_ran(client, tmp_path):
    sweep = Sweep.objects.create(
        host=LaunchHost.objects.create(name="h", binaries=["/x"], models_dirs=[str(tmp_path)]),
        model_file="m.gguf", params={"requests": 3, "prompt_tokens": 300, "n_predict": 300, "concurrencies": [3]},
        state="succeeded",
    )  # fmt: skip
    for position, ok in enumerate((0, 3)):
        config = SweepConfig.objects.create(sweep=sweep, position=position, command=f"-c {1024 * (position + 1)}",
                                            outcome=SweepConfig.Outcome.RAN)  # fmt: skip
        job = Job.objects.create(base_url="http://127.0.0.1:9", params={}, sweep_config=config)
        Run.objects.create(key=f"sweep-{position}", model="m.gguf", job=job, n_requests=3, n_ok=ok)
    response = client.get(reverse("sweep-detail", args=[sweep.pk]))
    page = text(response)
    assert "Ran: completed" in page
    # how the flag set ran, apart from what its requests found: never "Ran: all failed"
    assert "Ran; found: all failed 0 / 3" in page and "Ran; found: all requests ok 3 / 3" in page
    assert "Ran: all failed" not in page
    assert 'class="found outcome-failed"' in response.content.decode()
    assert "completed" in text(client.get(reverse("sweep-list")))


@pytest.fixture
def fake():
    with TruthServer(max_hold_s=5.0) as server:
        yield server


def bench_here(monkeypatch, fake: FakeServer, behaviour: str, *extra: str) -> tuple[str, str]:
    """manage.py bench --wait, its job run in this process (the domain function; no queue)."""

    def submit_and_run(**kwargs):
        job = submit_job(**kwargs)
        execution.execute_job(job.pk, worker="test")
        return job

    monkeypatch.setattr(bench_command, "worker_available", lambda: "")
    monkeypatch.setattr(bench_command, "submit_job", submit_and_run)
    out, err = StringIO(), StringIO()
    args = ["--server", fake.url_for(behaviour), "--prompt-tokens", "5", "--n-predict", "3", "--concurrency", "3"]
    call_command("bench", *args, "--requests", "3", "--wait", *extra, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_bench_wait_exits_non_zero_when_requests_failed(monkeypatch, fake):
    with pytest.raises(CommandError, match=r"completed, but 3 of 3 requests failed \(all failed\); --allow-failures"):
        bench_here(monkeypatch, fake, "ctx500")
    out, _ = bench_here(monkeypatch, fake, "ctx500", "--allow-failures", "--json")
    summary = json.loads(out)
    assert (summary["state"], summary["ran"], summary["found"], summary["ok"]) == (
        "succeeded",
        "completed",
        "failed",
        0,
    )
    out, _ = bench_here(monkeypatch, fake, "normal")
    assert "ran: completed; found: all requests ok — 3/3 requests ok" in out


def test_sweep_wait_exits_non_zero_when_requests_failed(monkeypatch, tmp_path):
    announced_host("h", tmp_path)

    def create_and_finish(*args, **kwargs):
        sweep = create_sweep(*args, **kwargs)
        for config in sweep.configs.all():  # the worker's part, done here: the first flag set's 3 requests fail
            SweepConfig.objects.filter(pk=config.pk).update(outcome=SweepConfig.Outcome.RAN)
            job = Job.objects.create(base_url="http://127.0.0.1:9", params={}, sweep_config=config)
            Run.objects.create(key=f"s{config.pk}", model="m.gguf", job=job, n_requests=3, n_ok=3 * config.position)
        Sweep.objects.filter(pk=sweep.pk).update(state="succeeded")
        return sweep

    monkeypatch.setattr(sweep_command, "worker_available", lambda: "")
    monkeypatch.setattr(sweep_command, "create_sweep", create_and_finish)
    argv = ["sweep", "--host", "h", "--model", "m.gguf", "--flags", "-c 1024", "--flags", "-c 2048 -np 3", "--wait"]
    with pytest.raises(CommandError, match=r"requests failed \(-c 1024: 3 of 3 failed\); --allow-failures"):
        call_command(*argv, stdout=StringIO())
    out = StringIO()
    call_command(*argv, "--allow-failures", stdout=out)
    assert "llama-server -c 1024: ran: all failed, 0/3 ok" in out.getvalue()
    assert "sweep" in out.getvalue() and ": completed" in out.getvalue()


# -- 10. the live page is live ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_job_records_its_requests_as_they_stream(settings, client):
    settings.KVLAB_JOB_HEARTBEAT_S = 0.2
    with PacedServer(max_hold_s=10.0) as paced:
        server = Server.objects.create(name="paced", base_url=paced.url)
        params = {"prompt_tokens": 5, "n_predict": 150, "concurrency": 2, "requests": 3, "timeout_s": 30}
        job = submit_job(server=server, params=params)
        assert Job.objects.get(pk=job.pk).n_total == 3  # "0 of 3 done" before a worker takes it
        thread = run_in_background(job)
        seen: list[dict] = []
        page = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not seen:
            job.refresh_from_db()
            streaming = [r for r in job.live if r["state"] == "streaming" and r["tokens"] >= 10]
            if job.n_done == 0 and len(streaming) == 2:
                seen = job.live
                page = text(client.get(reverse("job-detail", args=[job.pk]), headers={"HX-Request": "true"}))
            time.sleep(0.05)
        thread.join(timeout=30)
    assert seen, "no heartbeat showed two requests streaming"
    assert [r["i"] for r in seen] == [0, 1]  # bounded by the concurrency: the third waits its turn
    for r in seen:
        assert r["tokens"] >= 10 and r["elapsed_s"] > r["ttft_s"] > 0 and r["tok_s"] > 0
    tokens_so_far = sum(r["tokens"] for r in seen)
    assert f"0 of 3 done, 0 failed, 2 running; {tokens_so_far} tokens generated." in page
    assert "#1 streaming" in page and "#2 streaming" in page and " tok/s" in page
    job.refresh_from_db()
    assert (job.state, job.n_done, job.tokens_out, job.live) == ("succeeded", 3, 450, [])


# -- 11. executed runs show what they measured --------------------------------------------


def run_job(fake: FakeServer, behaviour: str, **params: object) -> Job:
    server = Server.objects.create(name=f"fake-{behaviour}", base_url=fake.url_for(behaviour))
    defaults = {"prompt_tokens": 293, "n_predict": 4, "concurrency": 3, "requests": 3, "timeout_s": 5}
    job = submit_job(server=server, label=behaviour, params={**defaults, **params})
    execution.execute_job(job.pk, worker="test")
    job.refresh_from_db()
    return job


def test_failed_requests_record_the_prompt_they_sent(fake):
    job = run_job(fake, "ctx500")
    run = job.runs.get()
    assert list(run.requests.values_list("ok", "http_status", "prompt_tokens")) == [(False, 500, 293)] * 3
    assert run.prompt_tokens_max == 293


def test_failed_pasted_prompts_record_their_measured_length(fake):
    server = Server.objects.create(name="fake", base_url=fake.url)
    params = {"prompts": ["ctx500", "normal"], "n_predict": 4, "concurrency": 2, "requests": 2, "timeout_s": 5}
    job = submit_job(server=server, params=params)
    execution.execute_job(job.pk, worker="test")
    # the fake tokenizer counts words: each prompt is one token, as /tokenize said before the job ran
    assert sorted(RequestResult.objects.filter(run__job=job).values_list("ok", "prompt_tokens")) == [
        (False, 1),
        (True, 1),
    ]


def test_the_compare_table_does_not_flag_the_same_prompt_as_different(client, fake):
    failed, ok = run_job(fake, "ctx500"), run_job(fake, "normal")
    runs = [failed.runs.get(), ok.runs.get()]
    page = client.get(reverse("run-compare"), {"run": [r.pk for r in runs]}).content.decode()
    row = re.search(r"<tr( class=\"diff\")?><th>prompt tokens \(max\)</th>(.*?)</tr>", page)
    assert row and row.group(2) == "<td>293</td><td>293</td>" and not row.group(1)


def test_an_executed_run_page_shows_units_precision_and_a_table_of_extra_fields(client, fake):
    run = run_job(fake, "normal", requests=2, concurrency=1).runs.get()
    RequestResult.objects.filter(run=run, seq=0).update(ttft_s=1.4075675379999666)
    run.refresh_summary()
    response = client.get(reverse("run-detail", args=[run.pk]))
    body, page = response.content.decode(), text(response)
    assert "1.4075675379999666" not in body and ">1.408 s<" in body
    assert "aggregate throughput" in page and "tok/s" in page and "output tokens not recorded" not in page
    assert "{'" not in body and "&#x27;timings&#x27;" not in body  # no Python dict
    assert '<table class="extra">' in body and "<th><code>timings.predicted_n</code></th><td>4</td>" in body
    assert "<th><code>stop_type</code></th><td>limit</td>" in body or "<code>index</code>" in body


def test_a_run_whose_requests_all_failed_says_why_it_has_no_throughput(client, fake):
    run = run_job(fake, "ctx500").runs.get()
    page = text(client.get(reverse("run-detail", args=[run.pk])))
    assert "aggregate throughput — (no request succeeded)" in page
    assert "output tokens not recorded" not in page


@pytest.mark.django_db(transaction=True)
def test_the_overflow_names_its_requests_as_the_run_pages_table_numbers_them():
    # Sent first, the normal request streams 40 tokens (0.8 s); sent second, the other fails at its
    # third token: it finishes first, and is #1 of the run page's table, which lists the order they finished in.
    with PacedServer(max_hold_s=10.0) as paced:
        server = Server.objects.create(name="paced", base_url=paced.url, launch_command="llama-server -c 1024")
        params = {"prompts": ["normal", "error_event"], "n_predict": 40, "concurrency": 2, "requests": 2}
        job = submit_job(server=server, params={**params, "timeout_s": 30})
        execution.execute_job(job.pk, worker="test")
    run = Job.objects.get(pk=job.pk).runs.get()
    rows = list(run.requests.order_by("seq").values_list("seq", "ok", "extra"))
    assert [(seq, ok, extra["index"]) for seq, ok, extra in rows] == [(0, False, 1), (1, True, 0)]
    over = run.telemetry["overflow"]
    assert [r["i"] for r in over["requests"]] == [0]
    cells = rows[0][2]["at_error"]["cells"]
    pool = f"the {over['pool_cells']:,}-cell pool"  # the fake's /props: 4 slots of 4,096
    assert over["sentence"].startswith(f"At {over['t']:.2f} s {pool} was full: request 1 held {cells} cells;")
