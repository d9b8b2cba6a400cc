"""The derived tables' catch-up at speed leaves exactly what a rebuild from the runs leaves.

A catch-up says its runs to SQL as a range of ids and the ids outside it (history.changed_runs), stages
the timeline's buckets to recount once per span, recounts every bucket when most runs changed
(rollups.RECOUNT_ALL_FROM), and copies the regression comparisons per family and window in SQL from one
row per comparison computed. Over a history with several labels, servers and series, failed runs,
runs a later import moved to other buckets, deleted runs and a bulk fill, each path's tables equal
derived.rebuild_all()'s row for row, and the regressions page and the timeline's overview answer alike.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.charts import timeline_data
from benchmarks.history import baselines, derived, rollups
from benchmarks.history.changed_runs import ChangedRuns
from benchmarks.models import BaselineComparison, DerivedBacklog, Run, SeriesRun, TimelineBucket
from benchmarks.records import catalogue
from benchmarks.tests.builders import flat, jsonl

from ..timeline_buckets import assert_same, figure, reference, stored
from .regression_histories import START, assert_page_agrees, import_in_files, random_runs, reaped_job_runs

pytestmark = pytest.mark.django_db


def table_rows() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the three derived tables, every column but the surrogate id, sorted."""
    rows = {}
    for model in (TimelineBucket, SeriesRun, BaselineComparison):
        columns = [f.attname for f in model._meta.concrete_fields if not (f.primary_key and f.attname == "id")]
        rows[model.__name__] = sorted(model.objects.values_list(*columns), key=repr)
    return rows


def page_answers(client: Any) -> dict[str, Any]:
    """The regressions page (each grouping and window, threshold 0) and the timeline's overview."""
    answers: dict[str, Any] = {}
    for group in ("label", "server", "model"):
        for window in baselines.WINDOWS:
            query = {"group": group, "window": window, **{f"t_{key}": 0 for key in catalogue.METRICS}}
            context = client.get(reverse("chart-regressions"), query).context
            answers[f"regressions {group} {window}"] = (
                [(r.group, r.metric.key, r.latest_run_id, r.change, r.history) for r in context["found"]],
                context["n_found"],
            )
    for group in ("label", "model"):
        page = client.get(reverse("chart-timeline"), {"metric": "tok_s", "group": group}).content.decode()
        answers[f"timeline {group}"] = figure(page)["data"]
    return answers


def mixed_history(import_bytes: Any, rng: random.Random) -> None:
    """Imports large enough to be left to the worker, one that moves stored runs to earlier buckets, a
    job's runs on a server, deletions, and a bulk fill queued as the regressions page queues one."""
    runs = random_runs(rng, 90, START)
    import_in_files(import_bytes, runs, rng)  # labels, no label, "(none)", series
    # every request failed: failed runs, counted in no metric
    import_bytes(jsonl(*(flat(run=f"down-{i}", ts=f"2026-10-0{1 + i}T01:00:00Z", ok=False, status=500,
                              error="HTTP 500", tok_s=None) for i in range(3))))  # fmt: skip
    # stored runs given an earlier request: they start earlier, in other buckets (the import's `were`)
    moved = [
        {**runs[i][0], "ts": (START - timedelta(days=3, hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ"), "tok_s": 20.0}
        for i in range(0, 40, 3)
    ]
    more = [flat(run=f"later-{i}", ts=f"2026-10-2{i % 8}T0{i % 9}:00:00Z", tok_s=40.0 - i) for i in range(15)]
    import_bytes(jsonl(*moved, *more))
    reaped_job_runs(rng, START, 4)  # a job's runs on a server, counted as it is reaped
    doomed = Run.objects.filter(pk__in=rng.sample(list(Run.objects.values_list("pk", flat=True)), 8))
    admin.site._registry[Run].delete_queryset(None, doomed)  # type: ignore[arg-type]
    template = Run.objects.filter(label="nightly").exclude(started_at=None).first()
    assert template is not None
    filled = Run.objects.bulk_create(
        Run(key=f"fill-{i}", label="nightly", model=template.model, gpu=template.gpu, ctx_size=template.ctx_size,
            concurrency=template.concurrency, started_at=START + timedelta(days=20, hours=i), n_requests=2,
            n_ok=2, tok_s_mean=10.0 + i)
        for i in range(12)
    )  # fmt: skip
    derived.defer([r.pk for r in filled])  # as the regressions page queues a bulk fill


@pytest.mark.parametrize("recount_all_from", [10**9, 1], ids=["bucket-by-bucket", "every-bucket-when-most-changed"])
def test_a_catch_up_leaves_what_a_rebuild_leaves_and_the_pages_answer_alike(
    user_client, import_bytes, monkeypatch, recount_all_from
):
    monkeypatch.setattr(derived, "INLINE_UP_TO", 10)  # the larger imports are left to the catch-up
    monkeypatch.setattr(rollups, "RECOUNT_ALL_FROM", recount_all_from)
    monkeypatch.setattr(timeline_data, "RAW_MAX", 20)  # the timeline draws its overview from the buckets
    rng = random.Random(11)
    mixed_history(import_bytes, rng)
    assert DerivedBacklog.objects.count() >= 4  # three files, the moving import, the bulk fill
    assert derived.catch_up() > 0
    caught_up, answers = table_rows(), page_answers(user_client)
    assert all(caught_up.values()) and BaselineComparison.objects.filter(history=1).exists()
    assert_same(stored(), reference())  # the buckets are the min, max and counts of their runs
    assert assert_page_agrees(user_client, rng) > 0  # the page answers as the window query over the runs

    derived.rebuild_all()
    assert table_rows() == caught_up
    assert page_answers(user_client) == answers


def rows_sent_one_by_one(capture: list[int]) -> Any:
    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if many:
            capture.append(len(params))
        return execute(sql, params, many, context)

    return wrapper


def sent_by_a_catch_up(import_bytes: Any, n_runs: int, concurrency: int) -> tuple[int, int]:
    """Three series of n_runs each, the newest run slower, imported and caught up: the rows the catch-up
    sent the database one at a time, and the comparisons it stored."""
    lines = [
        flat(run=f"s{concurrency + s}-{i}", concurrency=concurrency + s, ts=(START + timedelta(hours=i)).isoformat(),
             tok_s=40.0 + (i % 3) if i < n_runs - 1 else 10.0)
        for s in range(3)
        for i in range(n_runs)
    ]  # fmt: skip
    import_bytes(jsonl(*lines))
    before = BaselineComparison.objects.count()
    sent: list[int] = []
    with connection.execute_wrapper(rows_sent_one_by_one(sent)):
        assert derived.catch_up() == 3 * n_runs
    return sum(sent), BaselineComparison.objects.count() - before


def test_a_catch_up_sends_the_database_no_row_per_run(import_bytes, monkeypatch):
    """The rows a catch-up sends one at a time are its distinct comparisons and its series' (3 families),
    as many for 40 runs a series as for 160; the old catch-up sent every run's id, and every comparison
    once per family and window (3 x 4 copies of most)."""
    monkeypatch.setattr(derived, "INLINE_UP_TO", 10)
    monkeypatch.setattr(rollups, "RECOUNT_ALL_FROM", 10**9)
    few, few_stored = sent_by_a_catch_up(import_bytes, 40, concurrency=1)
    many, many_stored = sent_by_a_catch_up(import_bytes, 160, concurrency=10)
    assert few_stored == many_stored > 0  # each window compares the newest run with 5, 10, 20 and 39+ others
    assert few == many < few_stored
    assert few == few_stored // 3 + 3 * 3  # the three families' copies are made in SQL, one row per series each


def test_the_recount_reads_each_hours_runs_down_the_label_index():
    """Without statistics SQLite may read a bucket's runs down run_engine_idx, whose one value ('' or
    'llama.cpp') holds every run of the hour; the recount names run_label_idx."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's planner; PostgreSQL keeps statistics")
    sql, params = rollups._hours_from_runs(ChangedRuns(1, 10))
    with connection.cursor() as cursor:
        rollups._stage(cursor, ChangedRuns(1, 10), [])
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "run_label_idx" in plan and "run_engine_idx" not in plan and "run_tool_idx" not in plan


def test_a_change_of_most_runs_recounts_every_bucket_in_one_pass(import_bytes, monkeypatch):
    monkeypatch.setattr(rollups, "RECOUNT_ALL_FROM", 5)
    import_bytes(jsonl(*(flat(run=f"r{i}", ts=f"2026-10-0{1 + i % 9}T0{i % 7}:00:00Z") for i in range(12))))
    table = TimelineBucket._meta.db_table
    with CaptureQueriesContext(connection) as many_changed:
        rollups.runs_changed(Run.objects.values_list("pk", flat=True))
    assert any(q["sql"] == f'DELETE FROM "{table}"' for q in many_changed)  # every bucket, counted again
    assert_same(stored(), reference())
    with CaptureQueriesContext(connection) as few_changed:
        rollups.runs_changed(Run.objects.values_list("pk", flat=True)[:5])  # 5 of 12: their buckets only
    assert not any(q["sql"] == f'DELETE FROM "{table}"' for q in few_changed)
    assert_same(stored(), reference())


def test_sqlite_gets_a_larger_page_cache_while_a_large_change_is_counted_then_its_own_again(import_bytes, monkeypatch):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's page cache")
    monkeypatch.setattr(derived, "INLINE_UP_TO", 10)
    import_bytes(jsonl(*(flat(run=f"r{i}") for i in range(12))))
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        (before,) = cursor.fetchone()
        with CaptureQueriesContext(connection) as queries:
            derived.catch_up()
        cursor.execute("PRAGMA cache_size")
        assert cursor.fetchone() == (before,)
    assert f"PRAGMA cache_size = -{derived.CACHE_KIB}" in [q["sql"] for q in queries]


def test_a_run_at_the_end_of_the_calendar_is_in_no_bucket_however_it_is_counted(import_bytes, monkeypatch):
    """SQLite's strftime gives no seconds for 9999-12-31 23:59:59.999999: a rebuild stopped on a NULL start."""
    monkeypatch.setattr(rollups, "RECOUNT_ALL_FROM", 10**9)
    import_bytes(jsonl(flat(run="late", ts="9999-12-31T23:59:59.999999Z"), flat(run="on-time")))
    counted = stored()
    derived.rebuild_all()
    assert stored() == counted and {key[-1] for key in counted} != set()
    assert sum(row["runs"] for key, row in counted.items() if key[0] == 3600) == 1 + (connection.vendor != "sqlite")


# --- the changed runs as a range and the ids outside it ---------------------------------------------


def test_changed_runs_keep_the_longest_stretch_of_ids_as_their_range():
    assert ChangedRuns.of([9, 1, 2, 3, 5, 10, 2]) == ChangedRuns(1, 3, (5, 9, 10))
    assert ChangedRuns.of(range(4, 9)) == ChangedRuns(4, 8)
    assert ChangedRuns.of([]) == ChangedRuns(1, 0) and len(ChangedRuns.of([])) == 0
    assert ChangedRuns.of([7]) == ChangedRuns(7, 7)
    changed = ChangedRuns.joined(3, 6, [1, 4, 9, 9])  # a backlog entry: its range and its other runs
    assert changed == ChangedRuns(3, 6, (1, 9)) and len(changed) == 6 and sorted(changed) == [1, 3, 4, 5, 6, 9]
    assert ChangedRuns.joined(None, None, [5, 6]) == ChangedRuns(5, 6)


def test_changed_runs_select_exactly_their_runs(import_bytes):
    import_bytes(jsonl(*(flat(run=f"r{i}") for i in range(10))))
    pks = sorted(Run.objects.values_list("pk", flat=True))
    for ids in ([pks[1], pks[2], pks[3], pks[7]], [pks[4]], pks[2:], [pks[0], pks[9]], []):
        where, params = ChangedRuns.of(ids).where('"id"')
        with connection.cursor() as cursor:
            cursor.execute(f'SELECT "id" FROM "benchmarks_run" WHERE {where} ORDER BY "id"', params)
            assert [pk for (pk,) in cursor.fetchall()] == sorted(ids)
