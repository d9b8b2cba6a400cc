"""Lists whose cost does not grow with the history (issue 17): a capped count, every sort an index walk."""

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

from ..factories import make_sortable_runs
from ..pages import python_order, query_plan
from .test_views import run_keys

pytestmark = pytest.mark.django_db


def test_a_list_longer_than_the_cap_counts_to_the_cap_and_says_there_are_more(client, monkeypatch):
    monkeypatch.setattr(paging, "LIST_CAP", 30)
    make_sortable_runs(60)
    with CaptureQueriesContext(connection) as queries:
        html = client.get(reverse("run-list"), {"per_page": 25, "page": 2}).content.decode()
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"]]
    assert len(counts) == 1 and re.search(r"LIMIT 31\b", counts[0]), counts  # never a count of every run
    assert "More than 30 runs match; the pages hold the first 30 in this order" in html
    assert "page 2 of 2+" in html
    assert len(run_keys(html)) == 5  # rows 26-30 of the capped list
    assert client.get(reverse("run-list"), {"per_page": 25, "page": 9}).content.decode().count("page 2 of 2+") == 1


def test_a_list_within_the_cap_is_counted_exactly(client, monkeypatch):
    monkeypatch.setattr(paging, "LIST_CAP", 30)
    make_sortable_runs(30)
    html = client.get(reverse("run-list"), {"per_page": 25}).content.decode()
    assert "30 runs" in html and "More than" not in html and "of 2+" not in html and "page 1 of 2" in html


@pytest.mark.parametrize("sort", [f"{sign}{name}" for name in SORTS for sign in ("", "-")])
def test_every_sort_of_the_run_list_walks_an_index_and_sorts_nothing(client, sort):
    make_sortable_runs(40)
    with CaptureQueriesContext(connection) as queries:
        html = client.get(reverse("run-list"), {"sort": sort, "per_page": 25}).content.decode()
    page_sql = [q["sql"] for q in queries if q["sql"].endswith("LIMIT 25")]
    assert len(page_sql) == 1, page_sql
    plan = query_plan(page_sql[0], ())  # the statement as the page sent it (no parameters: the sort has none)
    # no sort of the matching runs (PostgreSQL may still order ties of (label, started_at) by id: an
    # Incremental Sort over an index's presorted key, a few rows at a time)
    assert "TEMP B-TREE" not in plan and not re.search(r"(^|->)\s*Sort  \(", plan, re.MULTILINE), plan
    assert "INDEX" in plan.upper(), plan
    keys = run_keys(html)
    assert len(keys) == 25


@pytest.mark.parametrize("sort", ["tok_s", "-tok_s", "ctx", "-ctx", "date", "-date"])
def test_a_run_without_the_value_sorts_lowest_on_every_engine(client, sort):
    make_sortable_runs(12)
    keys = run_keys(client.get(reverse("run-list"), {"sort": sort}).content.decode())
    column = SORTS[sort.lstrip("-")]
    values = [getattr(Run.objects.get(key=k), column) for k in keys]
    missing = [v is None for v in values]
    # going up the runs without a value come first, going down last; the rest in order
    assert missing == sorted(missing, reverse=not sort.startswith("-")), (sort, values)
    present = [v for v in values if v is not None]
    assert present == sorted(present, reverse=sort.startswith("-"))


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

    from ..test_bounded_pages import _run_with_requests

    run = _run_with_requests(450)
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


@pytest.mark.parametrize("sort", ["-tok_s", "tok_s", "-concurrency", "label", "-prompt"])
def test_a_filtered_list_sorted_by_a_value_is_in_order_whether_few_or_many_runs_match(client, monkeypatch, sort):
    from benchmarks.history import views as history_views

    make_sortable_runs(60)
    matching = [r for r in Run.objects.all() if r.model == "m1.gguf"]  # 15 runs
    expected = python_order(matching, sort)
    few = run_keys(client.get(reverse("run-list"), {"model": "m1.gguf", "sort": sort}).content.decode())
    assert few == expected  # found by the model's index, sorted: all of them, in order

    # more match than the list counts: the latest SORT_WINDOW of them are sorted
    monkeypatch.setattr(paging, "LIST_CAP", 10)
    monkeypatch.setattr(history_views, "SORT_WINDOW", 8)
    latest = set(python_order(matching, "-date")[:8])
    html = client.get(reverse("run-list"), {"model": "m1.gguf", "sort": sort}).content.decode()
    assert run_keys(html) == [k for k in expected if k in latest]
    assert "So many runs match that the latest 8 of them are sorted" in html


def test_a_whole_run_id_is_found_anywhere_and_a_part_of_one_among_the_latest_runs(client, monkeypatch):
    from benchmarks.history import forms

    monkeypatch.setattr(forms, "KEY_SEARCH_RUNS", 20)
    make_sortable_runs(60)  # run-00000 … run-00059, one hour apart; run-00007 has no date (the oldest, as listed)
    assert run_keys(client.get(reverse("run-list"), {"run": "run-00003"}).content.decode()) == ["run-00003"]
    found = run_keys(client.get(reverse("run-list"), {"run": "0003"}).content.decode())
    assert found == []  # run-00003 and run-00030 … 39 are all older than the latest 20 (40-59)
    page = client.get(reverse("run-list"), {"run": "-0005"}).content.decode()
    assert run_keys(page) == [f"run-0005{i}" for i in range(9, -1, -1)]  # the latest 20 are 40-59
    assert "a part of one among the latest 20 runs" in page  # the page says where it looked
    assert "key-search-note" not in client.get(reverse("run-list")).content.decode()


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
