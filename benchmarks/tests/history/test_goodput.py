"""Goodput: the SQL count equals a recount in Python, one query per run, objectives validated."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.history.goodput import GoodputForm, goodput
from benchmarks.models import Job, RequestResult, Run, Server
from benchmarks.records.metrics import tpot

pytestmark = pytest.mark.django_db


def make_run(key: str, rng: random.Random, n: int, **fields) -> Run:
    run = Run.objects.create(key=key, model="m", wall_s=10.0, **fields)
    rows = []
    for seq in range(n):
        ok = rng.random() < 0.9
        ttft = rng.choice([None, rng.uniform(0.01, 2.0)]) if rng.random() < 0.1 else rng.uniform(0.01, 2.0)
        output = rng.choice([None, 0, 1, 2, rng.randint(3, 500)])
        elapsed = None if rng.random() < 0.05 else (ttft or 0) + rng.uniform(0, 5.0)
        rows.append(RequestResult(run=run, seq=seq, ok=ok, http_status=200 if ok else 500, ttft_s=ttft,
                                  elapsed_s=elapsed, output_tokens=output, content_hash=f"{key}-{seq}"))  # fmt: skip
    RequestResult.objects.bulk_create(rows)
    run.refresh_summary()
    return run


def recount(run: Run, ttft_s: float | None, tpot_s: float | None) -> tuple[int, int, int]:
    """The definition, row by row, in Python (vLLM: a request of < 2 tokens meets any TPOT objective)."""
    n = good = tokens = 0
    for r in run.requests.all():
        n += 1
        meets_ttft = ttft_s is None or (r.ttft_s is not None and r.ttft_s <= ttft_s)
        per_token = tpot(r.elapsed_s, r.ttft_s, r.output_tokens)
        short = r.output_tokens is not None and r.output_tokens < 2
        meets_tpot = tpot_s is None or short or (per_token is not None and per_token <= tpot_s)
        if r.ok and meets_ttft and meets_tpot:
            good += 1
            tokens += r.output_tokens or 0
    return n, good, tokens


def test_the_sql_goodput_equals_a_python_recount_on_random_runs():
    rng = random.Random(16)
    for i in range(6):
        run = make_run(f"g{i}", rng, 400)
        for ttft_s, tpot_s in ((0.5, None), (None, 0.01), (1.0, 0.02), (2.5, 5.0), (0.001, 0.0001)):
            result = goodput(run, ttft_s, tpot_s)
            n, good, tokens = recount(run, ttft_s, tpot_s)
            assert (result.n_requests, result.n_good, result.tokens_good) == (n, good, tokens)
            assert result.share == good / n and result.tok_s == tokens / run.effective_wall_s
    assert goodput(run, None, None) is None  # no objective, no figure


def test_goodput_is_one_query_whatever_the_request_count():
    rng = random.Random(1)
    small, large = make_run("small", rng, 10), make_run("large", rng, 3000)
    for run in (small, large):
        with CaptureQueriesContext(connection) as queries:
            goodput(run, 0.5, 0.01)
        assert len(queries.captured_queries) == 1


def test_a_summary_only_run_needs_the_requests(client):
    run = Run.objects.create(key="tool", model="m", summary={"n_requests": 50, "n_ok": 50}, n_requests=50, n_ok=50)
    result = goodput(run, 0.5, 0.02)
    assert result.needs_requests and result.share is None and result.tok_s is None
    page = client.get(reverse("run-detail", args=[run.pk]), {"slo_ttft_ms": "500"}).content.decode()
    assert "needs the requests" in page and "%" not in page.split('id="goodput"')[1].split("</section>")[0]


def test_the_run_page_shows_the_goodput_and_the_objectives_it_used(client):
    run = make_run("page", random.Random(3), 200)
    response = client.get(reverse("run-detail", args=[run.pk]), {"slo_ttft_ms": "800", "slo_tpot_ms": "20"})
    page = response.content.decode()
    n, good, _ = recount(run, 0.8, 0.02)
    assert response.status_code == 200
    assert f"{good} / {n}" in page and f"{good / n:.1%}" in page
    assert 'value="800"' in page and 'value="20"' in page  # the form shows what the figure used


def test_a_jobs_objectives_apply_when_the_query_string_sets_none(client):
    server = Server.objects.create(name="local", base_url="http://127.0.0.1:9")
    job = Job.objects.create(server=server, params={"slo_ttft_ms": 800, "prompts": ["x" * 1000]})
    run = make_run("job-1", random.Random(4), 100, job=job)
    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    n, good, _ = recount(run, 0.8, None)
    assert f"{good} / {n}" in page and 'value="800"' in page
    # the query string wins over the job's
    page = client.get(reverse("run-detail", args=[run.pk]), {"slo_ttft_ms": "100"}).content.decode()
    assert f"{recount(run, 0.1, None)[1]} / {n}" in page


def test_the_compare_page_shows_each_runs_goodput(client):
    rng = random.Random(5)
    a, b = make_run("a", rng, 50), make_run("b", rng, 60)
    response = client.get(reverse("run-compare"), {"run": [a.pk, b.pk], "slo_tpot_ms": "15"})
    page = response.content.decode()
    assert response.status_code == 200
    for run in (a, b):
        n, good, _ = recount(run, None, 0.015)
        assert f"{good} / {n}" in page
    assert f'name="run" value="{a.pk}"' in page  # the form keeps the compared runs


@pytest.mark.parametrize(
    "value",
    ["1e309", "1e300", "-5", "0", "nan", "NaN", "inf", "-inf", "5\x00", "\x00", "abc", "9" * 400, "3600001"],
)
def test_extreme_objectives_are_refused_with_a_message(client, value):
    form = GoodputForm({"slo_ttft_ms": value, "slo_tpot_ms": ""})
    assert not form.is_valid() and form.errors["slo_ttft_ms"]
    assert form.objectives == (None, None)
    run = Run.objects.create(key="v", model="m")
    response = client.get(reverse("run-detail", args=[run.pk]), {"slo_ttft_ms": value})
    assert response.status_code == 400
    assert 'role="alert"' in response.content.decode().split('id="goodput"')[1]
    response = client.get(reverse("run-compare"), {"run": [run.pk, run.pk + 1000], "slo_tpot_ms": value})
    assert response.status_code in (400, 404)


def test_a_valid_objective_at_the_bounds_is_accepted():
    assert GoodputForm({"slo_ttft_ms": "3600000", "slo_tpot_ms": "0.001"}).objectives == (3600.0, 0.001 / 1000)
