"""The regressions page reads baselines kept up to date as runs arrive (history.baselines), and
answers exactly as the window query over the whole history it replaced did.

The reference in regression_histories.py is that query and its comparison, as they were (a copy, so that neither
can drift with the code under test). Histories are random: imports in several files, some
runs growing in a later file, a job reaped, runs deleted in the admin; every grouping, window
and a few thresholds are compared. Run once with DATABASE_URL set for PostgreSQL.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.charts import regression_views
from benchmarks.history import derived
from benchmarks.models import BaselineComparison, RequestResult, Run, SeriesRun
from benchmarks.tests.builders import flat, jsonl

from .regression_histories import (
    CONFIGS,
    METRICS,
    START,
    assert_page_agrees,
    import_in_files,
    random_runs,
    reaped_job_runs,
)

pytestmark = pytest.mark.django_db
LONG = [{**config, "prompt_tokens": 1000, "speed": 40.0} for config in CONFIGS[:2]]


@pytest.mark.parametrize(
    ("seed", "n_runs", "configs"),
    [(1, 90, CONFIGS), (2, 90, CONFIGS), (3, 90, CONFIGS), (4, 150, LONG)],  # the last: series of 70+ runs
)
def test_the_page_answers_as_the_window_query_over_every_run_did(user_client, import_bytes, seed, n_runs, configs):
    client = user_client  # the server grouping names its servers to a logged-in user only (kvlab.visibility)
    rng = random.Random(seed)
    import_in_files(import_bytes, random_runs(rng, n_runs, START, configs), rng)
    assert RequestResult.objects.values("run").distinct().count() == n_runs
    found = assert_page_agrees(client, rng)
    reaped_job_runs(rng, START, 4)  # a job's runs join the series of the imported ones (and its server's)
    assert SeriesRun.objects.filter(server_pk__gt=0).count() == 4
    found += assert_page_agrees(client, rng)
    doomed = Run.objects.filter(pk__in=rng.sample(list(Run.objects.values_list("pk", flat=True)), 10))
    admin.site._registry[Run].delete_queryset(None, doomed)  # type: ignore[arg-type]
    found += assert_page_agrees(client, rng)
    assert found > 20  # the histories hold regressions to find, not only empty pages


def test_an_import_compares_its_series_before_any_page_is_viewed(import_bytes):
    history = [flat(run=f"h{i}", ts=f"2026-10-{10 + i}T00:00:00Z", tok_s=40.0) for i in range(5)]
    import_bytes(jsonl(*history))
    assert SeriesRun.objects.count() == 5 and not BaselineComparison.objects.exists()
    import_bytes(jsonl(flat(run="slow", ts="2026-10-20T00:00:00Z", tok_s=30.0)))
    worse = BaselineComparison.objects.filter(family="label", window_size=10, metric="tok_s").get()
    assert (worse.latest, worse.baseline, worse.change, worse.history) == (30.0, 40.0, -0.25, 5)
    assert worse.latest_run == Run.objects.get(key="slow")


def test_a_run_alone_in_its_series_costs_one_row_and_no_comparison(import_bytes):
    import_bytes(jsonl(*[flat(run=f"r{i}", prompt_tokens=1000 + i) for i in range(20)]))
    assert SeriesRun.objects.count() == 20
    assert SeriesRun.objects.values("series_key").distinct().count() == 20
    assert not BaselineComparison.objects.exists()


def test_rebuild_all_gives_what_the_hooks_kept(import_bytes):
    rng = random.Random(7)
    import_in_files(import_bytes, random_runs(rng, 60, START), rng)
    kept = sorted(BaselineComparison.objects.values_list(*FIELDS))
    filed = sorted(SeriesRun.objects.values_list("run_id", "series_key", "label", "server_pk"))
    derived.rebuild_all()
    assert sorted(BaselineComparison.objects.values_list(*FIELDS)) == kept and kept
    assert sorted(SeriesRun.objects.values_list("run_id", "series_key", "label", "server_pk")) == filed


FIELDS = ("family", "series_key", "label", "server_pk", "window_size", "metric", "latest_run_id", "change", "spread")


def _steady_then_slower(n_series: int) -> None:
    runs = []
    for s in range(n_series):  # each its own configuration, each getting worse
        for i, tok_s in enumerate((100.0, 100.0, 50.0 - s / 10)):
            runs.append(
                Run(key=f"s{s}-{i}", label="nightly", model="m", ctx_size=1024 + s, parallel=1, concurrency=1,
                    started_at=START + timedelta(hours=i), n_requests=1, n_ok=1, tok_s_mean=tok_s)
            )  # fmt: skip
    Run.objects.bulk_create(runs)


def test_runs_stored_by_neither_an_import_nor_a_job_are_queued_for_the_worker_when_the_page_is_viewed(
    client, monkeypatch
):
    _steady_then_slower(3)
    page = client.get(reverse("chart-regressions")).content.decode()
    assert not SeriesRun.objects.exists() and "Catching up: 9 runs" in page  # a GET files nothing itself
    derived.catch_up()  # the worker
    page = client.get(reverse("chart-regressions")).content.decode()
    assert SeriesRun.objects.count() == 9 and page.count('<td class="num bad">') == 3
    _steady_then_slower_more = [
        Run(key=f"t{i}", model="m", started_at=START, n_requests=1, n_ok=1, tok_s_mean=1.0) for i in range(5)
    ]
    Run.objects.bulk_create(_steady_then_slower_more)
    monkeypatch.setattr(regression_views, "MAX_QUEUED_ON_VIEW", 4)  # more than a view queues at once: it says so
    page = " ".join(client.get(reverse("chart-regressions")).content.decode().split())
    assert "Catching up: 4 runs stored by neither an import nor a job (a bulk fill) are not compared yet" in page
    assert "4 at a time (more wait behind them)" in page
    assert SeriesRun.objects.count() == 9


def test_counts_past_the_cap_say_so(client, monkeypatch):
    _steady_then_slower(5)
    derived.rebuild_all()  # a bulk fill's runs, compared as the page says to
    monkeypatch.setattr(regression_views, "MAX_COUNTED", 3)
    monkeypatch.setattr(regression_views, "MAX_REGRESSIONS_SHOWN", 2)
    page = client.get(reverse("chart-regressions"), {"t_tok_s": 5}).content.decode()
    assert "The 2 largest of 3+ regressions are shown" in page
    assert page.count('<td class="num bad">') == 2 and f"/runs/{Run.objects.get(key='s4-2').pk}/" in page  # the worst
    page = client.get(reverse("chart-regressions"), {"t_tok_s": 1000}).content.decode()
    assert "No regressions across 3+ configuration × workload series" in page
    monkeypatch.setattr(regression_views, "MAX_COUNTED", 5)
    page = client.get(reverse("chart-regressions"), {"t_tok_s": 1000}).content.decode()
    assert "No regressions across 1 group (5 configuration × workload series)" in page


def test_with_no_runs_the_page_says_there_is_nothing_to_compare_not_that_nothing_regressed(client, import_bytes):
    page = client.get(reverse("chart-regressions")).content.decode()
    assert "No runs to compare yet" in page and "No regressions across" not in page
    rng = random.Random(9)
    import_in_files(import_bytes, random_runs(rng, 6, START), rng)
    page = client.get(reverse("chart-regressions"), {"t_tok_s": 1000}).content.decode()
    assert "No runs to compare yet" not in page and "No regressions across" in page


def test_a_window_the_page_does_not_keep_is_refused(client):
    response = client.get(reverse("chart-regressions"), {"window": 7})
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()


def test_the_page_reads_a_bounded_slice_in_one_query(client, import_bytes):
    rng = random.Random(4)
    import_in_files(import_bytes, random_runs(rng, 60, START), rng)
    for query, expected in (({"t_tok_s": 0}, 1), ({**{f"t_{m.key}": 1000 for m in METRICS}}, 2)):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(reverse("chart-regressions"), query, headers={"HX-Request": "true"})
        # besides, one look at the backlog a large import may have left (a few rows: history.derived.pending)
        backlog = [q for q in queries.captured_queries if "benchmarks_derivedbacklog" in q["sql"]]
        read = [q for q in queries.captured_queries if q not in backlog]
        assert response.status_code == 200 and len(read) == expected and len(backlog) == 1
        assert ('<td class="num bad">' in response.content.decode()) is (expected == 1)
        for captured in read:
            assert "LIMIT" in captured["sql"]
            if connection.vendor == "sqlite":
                with connection.cursor() as cursor:
                    cursor.execute("EXPLAIN QUERY PLAN " + captured["sql"])
                    plan = [row[-1] for row in cursor.fetchall()]
                scanned = [line for line in plan if line.startswith("SCAN") and not _derived_scan(line)]
                assert scanned == [], plan


def _derived_scan(line: str) -> bool:
    """A plan's SCAN of a CTE, a subquery or constant rows, or the first step of the walk over the series
    (the first entry of their index: ORDER BY it LIMIT 1), never of a table."""
    if line.startswith("SCAN x USING COVERING INDEX seriesrun_"):
        return True
    name = line.split()[1]
    return (
        name in {"top", "best", "picked", "n", "s", "f", "k", "u", "a", "CONSTANT"}
        or name[0] == "m"
        and name[1:].isdigit()
    )
