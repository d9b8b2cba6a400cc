"""Pages bounded whatever the history holds, and inputs at the edges that are a 4xx, not a 500.

STYLE 16: a list loads only the columns it shows; a filter of values from the data offers
the most used ones (plus a typed search, test_filter_search.py); a run page aggregates its requests in SQL.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.history import derived
from benchmarks.models import Job, Run, Server
from benchmarks.records.metrics import distribution

from .factories import run_with_requests, runs_named
from .pages import TOP_CHOICES, offered_values, typed_value

pytestmark = pytest.mark.django_db


def test_the_chart_filters_are_bounded_too(client, crowded_history):
    timeline = client.get(reverse("chart-timeline")).content.decode()
    assert len(offered_values(timeline, "model")) <= TOP_CHOICES
    load = client.get(reverse("chart-load")).content.decode()
    assert len(offered_values(load, "model")) <= TOP_CHOICES
    assert "popular" in offered_values(load, "model")
    response = client.get(reverse("chart-load"), {"model": "m299"})
    assert response.status_code == 200
    assert typed_value(response.content.decode(), "model") == "m299"


@pytest.mark.parametrize("url", ["run-list", "chart-timeline", "export"])
@pytest.mark.parametrize("query", [{"date_to": "9999-12-31"}, {"date_from": "9999-12-31"}, {"date_from": "0001-01-01"}])
def test_dates_at_the_end_of_the_calendar_are_a_form_error_not_a_500(client, url, query):
    runs_named(["tiny.gguf"])
    response = client.get(reverse(url), query)
    assert response.status_code == 400


@pytest.mark.parametrize("url", ["run-compare", "chart-compare"])
@pytest.mark.parametrize("huge", ["99999999999999999999", str(2**63), "-1", "0"])
def test_run_ids_beyond_the_database_range_are_a_400(client, url, huge):
    run = runs_named(["tiny.gguf"])[0]
    response = client.get(reverse(url), {"run": [huge, str(run.pk)]})
    assert response.status_code == 400


def test_the_largest_id_is_a_404_not_a_500(client):
    run = runs_named(["tiny.gguf"])[0]
    response = client.get(reverse("run-compare"), {"run": [str(2**63 - 1), str(run.pk)]})
    assert response.status_code == 404


# --- the job list and page never load the prompts ------------------------------------

PROMPTS = ["a long prompt " * 1000] * 50


def _reads_params_whole(sql: str) -> bool:
    """Does this query select the params column itself (not a key extracted from it)?"""
    return re.search(r'(?<!\()"benchmarks_job"\."params"(?!\s*(->|#>))', sql) is not None


@pytest.fixture
def job_with_prompts(db) -> Job:
    server = Server.objects.create(name="local", base_url="http://127.0.0.1:9")
    params = {"requests": 4, "concurrency": 2, "n_predict": 64, "prompts": PROMPTS}
    return Job.objects.create(server=server, params=params, label="big prompts", n_total=4)


def test_the_job_list_never_selects_the_params(client, job_with_prompts):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("job-list"))
    assert response.status_code == 200
    assert "big prompts" in response.content.decode()
    job_queries = [q["sql"] for q in queries.captured_queries if "benchmarks_job" in q["sql"]]
    assert job_queries
    assert not any(_reads_params_whole(sql) for sql in job_queries), job_queries
    assert not any('"benchmarks_job"."live"' in sql or '"benchmarks_job"."recent_errors"' in sql for sql in job_queries)


def test_the_job_page_reads_only_the_params_it_shows(client, job_with_prompts):
    user = User.objects.create_user("u", password="a-long-test-password")
    client = Client()
    client.force_login(user)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("job-detail", args=[job_with_prompts.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "4 requests × 1 at concurrency 2" in html
    assert "64 output tokens each" in html
    assert not any(_reads_params_whole(q["sql"]) for q in queries.captured_queries)
    assert "a long prompt" not in html


# --- a run page aggregates its requests in SQL -------------------------------------------


def test_a_run_page_shows_the_distributions_of_all_its_ok_requests(client):
    run = run_with_requests(150)
    ok = list(run.requests.filter(ok=True))
    expected = [
        distribution(r.ttft_s for r in ok),
        distribution(r.elapsed_s for r in ok),
        distribution(r.tok_s for r in ok),
        distribution(v if isinstance(v := r.extra.get("client_tok_s"), float) else None for r in ok),
    ]
    response = client.get(reverse("run-detail", args=[run.pk]))
    assert response.status_code == 200
    shown = [d for _, _, d, _ in response.context["distributions"]]
    assert len(shown) == 4
    for got, want in zip(shown, expected, strict=True):
        assert got.n == want.n
        assert got.mean == pytest.approx(want.mean)
        assert (got.minimum, got.maximum) == (want.minimum, want.maximum)
        assert got.percentiles == want.percentiles


def test_a_small_run_shows_only_its_median(client):
    run = run_with_requests(10)
    response = client.get(reverse("run-detail", args=[run.pk]))
    for _, _, d, _ in response.context["distributions"]:
        assert set(d.percentiles) == {50}


def test_a_run_page_never_loads_every_request(client):
    run = run_with_requests(300)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("run-detail", args=[run.pk]), {"page": 2})
    assert response.status_code == 200
    rows = [q["sql"] for q in queries.captured_queries if 'FROM "benchmarks_requestresult"' in q["sql"]]
    # The requests' values are selected only a page at a time; the rest are aggregates.
    for sql in rows:
        if re.search(r'(?<!\()"benchmarks_requestresult"\."(extra|ttft_s)"\s*(,|FROM)', sql):
            assert "LIMIT" in sql, sql


def _request_rows(response) -> list[str]:
    return re.findall(r'<tr class="(?:ok|failed)">', response.content.decode())


def test_a_run_page_takes_its_number_of_requests_from_the_run_not_a_count(client):
    run = run_with_requests(300)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("run-detail", args=[run.pk]), {"page": 2})
    assert len(_request_rows(response)) == 100 and "page 2 of 2" in response.content.decode()
    counts = [
        q["sql"] for q in queries.captured_queries if re.search(r'"__count" FROM "benchmarks_requestresult"', q["sql"])
    ]
    assert counts == []


def test_a_run_still_being_recorded_counts_its_requests(client):
    run = run_with_requests(250)
    Run.objects.filter(pk=run.pk).update(n_requests=0, n_ok=0)  # a job's run until the job ends
    response = client.get(reverse("run-detail", args=[run.pk]), {"page": 2})
    assert len(_request_rows(response)) == 50 and "page 2 of 2" in response.content.decode()


def test_a_run_pages_failures_by_type_read_only_the_failed_requests(client):
    run = run_with_requests(300)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("run-detail", args=[run.pk]))
    assert "timeout: 43" in response.content.decode()  # every 7th request, from the 4th
    (sql,) = [q["sql"] for q in queries.captured_queries if '"error_type"' in q["sql"] and "GROUP BY" in q["sql"]]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a test's table is small enough to scan
            cursor.execute("EXPLAIN " + sql)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "request_failed_idx" in plan, plan


def test_a_large_run_shows_an_even_sample_and_says_so(client, monkeypatch):
    monkeypatch.setattr("benchmarks.history.views.DISTRIBUTION_SAMPLE", 40)
    run = run_with_requests(300)
    Run.objects.filter(pk=run.pk).update(n_requests=300, n_ok=run.requests.filter(ok=True).count())
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("run-detail", args=[run.pk]))
    sample = [r for r in run.requests.filter(ok=True).order_by("seq") if r.seq % 8 == 0]  # every ceil(300/40)th
    shown = {name: d for name, _, d, _ in response.context["distributions"]}
    assert shown["E2E latency"] == distribution(r.elapsed_s for r in sample)
    assert shown["TTFT"].n <= 40
    assert "a sample: every 8th request" in response.content.decode()
    assert all(
        "LIMIT" in q["sql"]
        for q in queries.captured_queries
        if "benchmarks_requestresult" in q["sql"] and '"ok"' in q["sql"] and "COUNT" not in q["sql"]
    )


def test_the_regressions_page_shows_the_worst_hundred_and_says_how_many_more(client):

    from benchmarks.charts.regression_views import MAX_REGRESSIONS_SHOWN

    start = datetime(2026, 11, 1, tzinfo=UTC)
    runs = []
    for series in range(MAX_REGRESSIONS_SHOWN + 20):  # each its own configuration, each getting worse
        for i, tok_s in enumerate((100.0, 100.0, 50.0 - series / 10)):
            runs.append(
                Run(key=f"s{series}-{i}", label="nightly", model="m", ctx_size=1024 + series, parallel=1,
                    concurrency=1, started_at=start + timedelta(hours=i), n_requests=1, n_ok=1, tok_s_mean=tok_s)
            )  # fmt: skip
    Run.objects.bulk_create(runs)
    derived.rebuild_all()  # a bulk fill's runs, compared as the regressions page says to
    page = client.get(reverse("chart-regressions"), {"t_tok_s": 5}).content.decode()
    assert page.count('<td class="num bad">') == MAX_REGRESSIONS_SHOWN  # one metric regressed per series
    assert f"The {MAX_REGRESSIONS_SHOWN} largest of {MAX_REGRESSIONS_SHOWN + 20} regressions are shown" in page
    assert "s119-2" in page or f"/runs/{Run.objects.get(key='s119-2').pk}/" in page  # the worst is kept


def test_a_run_pages_counts_have_thousands_separators(client):
    run = run_with_requests(300)
    Run.objects.filter(pk=run.pk).update(n_requests=1_234_567, n_ok=1_200_000)
    page = " ".join(client.get(reverse("run-detail", args=[run.pk])).content.decode().split())
    assert "<dt>requests</dt><dd>1,234,567</dd>" in page
    assert "1,200,000 / 1,234,567 (97%)" in page
