"""Lists whose cost does not grow with the history: a capped count, every sort an index walk."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.history.forms import SORTS
from benchmarks.models import Job, Run, Server
from kvlab import paging

from ..factories import make_sortable_runs, run_with_requests
from ..pages import python_order, query_plan

pytestmark = pytest.mark.django_db


def test_the_job_list_is_newest_first_by_id_and_capped(client, monkeypatch):
    monkeypatch.setattr(paging, "LIST_CAP", 60)
    server = Server.objects.create(name="box", base_url="http://127.0.0.1:8080")
    Job.objects.bulk_create(Job(server=server, label=f"job {i}", params={}) for i in range(70))
    with CaptureQueriesContext(connection) as queries:
        html = client.get(reverse("job-list")).content.decode()
    ids = [int(i) for i in re.findall(r'<tr><td><a href="/jobs/(\d+)/">', html)]
    assert ids == sorted(Job.objects.values_list("pk", flat=True), reverse=True)[:50]
    assert "page 1 of 2+ (the first 60 are paged)" in html
    listed = [q["sql"] for q in queries if '"benchmarks_job"' in q["sql"] and "ORDER BY" in q["sql"]]
    assert len(listed) == 1 and '"benchmarks_job"."id" DESC' in listed[0], listed


def test_a_load_curve_averages_the_latest_runs_of_its_model_and_says_older_ones_are_left_out(client, monkeypatch):
    from benchmarks.charts import views as chart_views

    monkeypatch.setattr(chart_views, "LOAD_CURVE_RUNS", 4)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    # two old runs at 10 tok/s, then four new ones at 100: concurrency 1 and 2, twice each
    speeds = [10.0, 10.0, 100.0, 100.0, 100.0, 100.0]
    Run.objects.bulk_create(
        Run(
            key=f"lc-{i}",
            model="m.gguf",
            gpu="g",
            started_at=start + timedelta(days=i),
            n_requests=1,
            n_ok=1,
            concurrency=1 + i % 2,
            tok_s_mean=speed,
            throughput_tok_s=speed,
        )
        for i, speed in enumerate(speeds)
    )
    response = client.get(reverse("chart-load"), {"model": "m.gguf", "format": "json"})
    points = response.json()["rows"]
    assert [(p["concurrency"], p["runs"], p["tok_s"]) for p in points] == [(1, 2, 100.0), (2, 2, 100.0)]
    html = client.get(reverse("chart-load"), {"model": "m.gguf"}).content.decode()
    assert "From the latest 4 runs of this model; older runs are left out" in html
    monkeypatch.setattr(chart_views, "LOAD_CURVE_RUNS", 6)
    html = client.get(reverse("chart-load"), {"model": "m.gguf"}).content.decode()
    assert "older runs are left out" not in html


def _seqs(html: str) -> list[int]:
    # the page shows seq + 1 (request 1 is seq 0)
    return [int(s) - 1 for s in re.findall(r'<tr class="(?:ok|failed)">\s*<td class="num">(\d+)</td>', html)]


@pytest.mark.parametrize("gaps", [False, True])
def test_a_run_page_past_the_first_is_found_by_its_seq_range_when_the_requests_are_numbered_without_gaps(client, gaps):
    from benchmarks.models import RequestResult

    run = run_with_requests(450)
    if gaps:  # a cancelled job's unsent requests: seq 10-19 never recorded
        RequestResult.objects.filter(run=run, seq__gte=10, seq__lt=20).delete()
        run.refresh_summary()
    with CaptureQueriesContext(connection) as queries:
        html = client.get(reverse("run-detail", args=[run.pk]), {"page": 2}).content.decode()
    expected = [s for s in range(450) if not (gaps and 10 <= s < 20)][200:400]
    assert _seqs(html) == expected  # the same page either way
    page_sql = [q["sql"] for q in queries if '"http_status"' in q["sql"] and "LIMIT 200" in q["sql"]]
    assert len(page_sql) == 1
    assert ("OFFSET" in page_sql[0]) == gaps, page_sql  # no rows skipped unless the numbers have gaps


def test_a_runs_day_is_its_utc_calendar_day_on_every_engine():
    from benchmarks.charts.days import UtcDay

    times = [
        datetime(2026, 3, 1, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 3, 2, 0, 0, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 30, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),  # the calendar's end
    ]
    Run.objects.bulk_create(Run(key=f"d{i}", model="m", started_at=t) for i, t in enumerate(times))
    days = dict(Run.objects.annotate(day=UtcDay("started_at")).values_list("key", "day"))
    assert days == {f"d{i}": t.date().isoformat() for i, t in enumerate(times)}


@pytest.mark.parametrize(
    ("url", "params", "marker"),
    [
        ("run-list", {"outcome": "failed"}, "SELECT COUNT(*)"),
        ("run-list", {"outcome": "partial", "model": "m1.gguf"}, "SELECT COUNT(*)"),
        ("home", {}, ' AS "day"'),
    ],
)
def test_an_outcome_is_found_through_an_index_never_a_scan_of_the_runs(client, url, params, marker):
    make_sortable_runs(40)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse(url), params).status_code == 200
    statements = [q["sql"] for q in queries if marker in q["sql"]]
    assert len(statements) == 1, [q["sql"][:120] for q in queries]
    plan = query_plan(statements[0], ())
    # through the n_ok index (failed: n_ok = 0) or a dated index that holds the counts (never the rows)
    assert re.search(r"(SEARCH|SCAN) benchmarks_run USING (COVERING )?INDEX run_|Index (Only )?Scan", plan), plan
    assert not re.search(r"SCAN benchmarks_run$|Seq Scan", plan, re.MULTILINE), plan
    if url == "home":  # a month of runs per day: from a dated index alone (each holds the counts), no run's row read
        # which dated index the planner picks on a 40-run table varies (PostgreSQL 18 may skip-scan run_engine_idx)
        assert re.search(r"COVERING INDEX run_\w+|Index Only Scan using run_\w+", plan), plan
        assert "Index Scan using" not in plan and "USING INDEX run_" not in plan, plan


@pytest.mark.parametrize("sort", [f"{sign}{name}" for name in SORTS for sign in ("", "-")])
def test_the_first_n_runs_of_a_sort_are_a_range_of_its_index_nulls_and_ties_included(sort):
    from benchmarks.history.forms import RunFilterForm, first_runs

    make_sortable_runs(60)  # NULL tok/s and ctx, ties in every column, one run without a date
    Run.objects.filter(pk__in=list(Run.objects.values_list("pk", flat=True)[:9])).update(started_at=None)
    form = RunFilterForm({"sort": sort})
    assert form.is_valid()
    everything = python_order(list(Run.objects.all()), sort)
    columns, descending = form.sort_columns()
    for n in (1, 7, 25, 59, 60, 61):
        chosen = set(Run.objects.filter(first_runs(columns, descending=descending, n=n)).values_list("key", flat=True))
        assert chosen == set(everything[:n]), (sort, n)
