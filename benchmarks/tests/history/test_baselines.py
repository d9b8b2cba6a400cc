"""The regressions page reads baselines kept up to date as runs arrive (history.baselines), and
answers exactly as the window query over the whole history it replaced did.

The reference below is that query and its comparison, as they were (a copy, so that neither
can drift with the code under test). Histories are random: imports in several files, some
runs growing in a later file, a job reaped, runs deleted in the admin; every grouping, window
and a few thresholds are compared. Run once with DATABASE_URL set for PostgreSQL.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.db import connection
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from benchmarks.charts import figure_common, regression_views
from benchmarks.history import baselines, derived
from benchmarks.jobs import lifecycle
from benchmarks.models import BaselineComparison, FileImport, Job, RequestResult, Run, SeriesRun, Server
from benchmarks.models.outcomes import with_success_rate
from benchmarks.records import catalogue
from benchmarks.records import series_keys as series
from benchmarks.tests.builders import flat, jsonl

pytestmark = pytest.mark.django_db
METRICS = list(catalogue.METRICS.values())


# --- the reference: the window query and the comparison the page used to run per request -----------


def _old_regressions(rows: Sequence[Mapping[str, Any]], thresholds: Mapping[str, float], window: int) -> list[Any]:
    by_series: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        by_series.setdefault((row["group"], *series.key(row)), []).append(row)
    found = []
    for runs in by_series.values():
        latest, earlier = runs[-1], runs[-1 - window : -1]
        for metric in METRICS:
            now = latest.get(metric.column)
            past = [r[metric.column] for r in earlier if r.get(metric.column) is not None]
            if now is None or not past:
                continue
            base = statistics.median(past)
            if base == 0:
                continue
            change = (now - base) / abs(base)
            worse = -change if metric.higher_is_better else change
            spread = statistics.stdev(past) if len(past) >= 3 else None
            if worse > thresholds.get(metric.key, 0.05) and (spread is None or abs(now - base) > 2 * spread):
                found.append(
                    (
                        latest["group"],
                        f"{latest.get('model') or '?'} on {latest.get('gpu') or '?'}: " + series.flags_label(latest),
                        series.workload_label(latest),
                        metric.key,
                        now,
                        base,
                        change if metric.higher_is_better else -change,
                        spread,
                        latest["pk"],
                        len(past),
                    )
                )
    return found


def reference(grouping: str, window: int, thresholds: Mapping[str, float]) -> tuple[list[Any], int, int]:
    """The regressions, groups and series as the window query over every run found them."""
    fields = catalogue.GROUPINGS[grouping][1]
    columns = [m.column for m in METRICS]
    partition = list(dict.fromkeys((*fields, *series.SERIES_FIELDS)))
    ranked = with_success_rate(Run.objects.exclude(started_at=None)).annotate(
        rank=Window(
            RowNumber(), partition_by=[F(f) for f in partition], order_by=[F("started_at").desc(), F("id").desc()]
        )
    )
    rows = list(ranked.filter(rank__lte=window + 1).values("pk", "key", "started_at", *partition, *columns))
    rows.sort(key=lambda r: (r["started_at"], r["pk"]))
    for row in rows:
        row["group"] = figure_common.group_name(row, grouping)
    found = _old_regressions(rows, thresholds, window)
    n_groups = len({r["group"] for r in rows})
    n_series = len({(r["group"], *series.key(r)) for r in rows})
    return found, n_groups, n_series


def shown(found: Sequence[regression_views.Regression]) -> list[Any]:
    return [
        (
            r.group,
            r.configuration,
            r.workload,
            r.metric.key,
            r.latest,
            r.baseline,
            r.change,
            r.spread,
            r.latest_run_id,
            r.history,
        )
        for r in found
    ]


def by_change(found: list[Any]) -> list[Any]:
    return sorted(found, key=lambda f: (f[6], f[8], f[3]))


def assert_page_agrees(client: Any, rng: random.Random) -> int:
    """Every grouping and window, with random thresholds; how many regressions the reference found in all."""
    total = 0
    for grouping in catalogue.GROUPINGS:
        for window in baselines.WINDOWS:
            percent = {m.key: rng.choice([0, 0, 5, 20]) for m in METRICS}
            response = client.get(
                reverse("chart-regressions"),
                {"group": grouping, "window": window, **{f"t_{k}": v for k, v in percent.items()}},
            )
            assert response.status_code == 200
            expected, n_groups, n_series = reference(grouping, window, {k: v / 100 for k, v in percent.items()})
            context = response.context
            assert by_change(shown(context["found"])) == by_change(expected)[: regression_views.MAX_REGRESSIONS_SHOWN]
            assert context["n_found"] == len(expected)
            if not expected:
                assert (context["n_groups"], context["n_series"]) == (n_groups, n_series)
            total += len(expected)
    return total


# --- random histories ------------------------------------------------------------------------------

CONFIGS = [  # (label, model, gpu, flags, workload)
    {"label": "nightly", "model": "a.gguf", "gpu": "RTX 4090", "ctx_size": 8192, "concurrency": 1},
    {"label": "nightly", "model": "a.gguf", "gpu": "RTX 4090", "ctx_size": 8192, "concurrency": 4},
    {"label": "", "model": "a.gguf", "gpu": "RTX 4090", "ctx_size": 8192, "concurrency": 1},
    {"label": "(none)", "model": "a.gguf", "gpu": "RTX 4090", "ctx_size": 8192, "concurrency": 1},  # merges with ""
    {"label": "adhoc", "model": "b.gguf", "gpu": "", "ctx_size": None, "kv_unified": None, "concurrency": 2},
    {"label": "adhoc", "model": "b.gguf", "gpu": "", "ctx_size": 4096, "request_rate": 0.5, "concurrency": 2},
    {"label": "q8", "model": "a.gguf", "gpu": "RTX 3090", "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
]


def random_runs(
    rng: random.Random, n: int, start: datetime, configs: Sequence[dict[str, Any]] = CONFIGS
) -> list[list[dict[str, Any]]]:
    """n runs, each a list of flat records: a configuration, a start on a coarse grid (ties happen), 1-3 requests."""
    runs = []
    for i in range(n):
        config = dict(rng.choice(configs))
        config["label"] = config["label"] or ...  # no label at all
        prompt = config.pop("prompt_tokens", None) or rng.choice([1000, 1000, 2000])
        ts = start + timedelta(hours=rng.randrange(n // 2))
        speed = config.pop("speed", None) or rng.choice([40.0, 40.0, 41.0, 30.0, 55.0]) * rng.uniform(0.97, 1.03)
        if i >= n - 2:  # the last runs drawn are the newest, and slower: a regression beyond any window's spread
            ts, speed = start + timedelta(hours=n // 2 + i - n), speed * 0.5
        records = []
        for j in range(rng.randint(1, 3)):
            ok = rng.random() > 0.1
            records.append(
                flat(
                    run=f"run-{i}",
                    ts=(ts + timedelta(seconds=j)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    ok=ok,
                    status=200 if ok else 500,
                    error=None if ok else "HTTP 500",
                    tok_s=round(speed * rng.uniform(0.9, 1.1), 3) if ok else None,
                    elapsed_s=round(rng.uniform(2, 9), 3),
                    prompt_tokens=prompt,
                    **config,
                )
            )
        runs.append(records)
    return runs


def import_in_files(
    import_bytes: Callable[..., FileImport], runs: list[list[dict[str, Any]]], rng: random.Random
) -> None:
    """The runs in three files, in a shuffled order; some runs' later requests only in a later file (they grow)."""
    order = runs[:]
    rng.shuffle(order)
    files: list[list[dict[str, Any]]] = [[], [], []]
    for i, records in enumerate(order):
        part = i % 3
        if len(records) > 1 and rng.random() < 0.3 and part < 2:
            files[part] += records[:1]
            files[part + 1] += records[1:]  # the same run again, with more requests: it is touched
        else:
            files[part] += records
    for n, records in enumerate(files):
        imported = import_bytes(jsonl(*records), filename=f"part-{n}.jsonl")
        assert imported.status == FileImport.Status.IMPORTED, list(imported.rejected_lines.values_list("reason"))


def reaped_job_runs(rng: random.Random, start: datetime, n: int) -> list[Run]:
    """A job on a server, its runs recorded but not summarised when its worker was lost, then reaped."""
    server = Server.objects.create(name="box", base_url="http://127.0.0.1:9")
    job = Job.objects.create(
        server=server,
        label="nightly",
        params={"requests": 2, "repeats": 1, "concurrency": 1, "n_predict": 200, "prompt_tokens": 1000},
        state=Job.State.RUNNING,
        heartbeat_at=timezone.now() - timedelta(hours=1),
    )
    runs = []
    for i in range(n):
        run = Run.objects.create(
            key=f"job-{job.pk}-{i}", label="nightly", model="a.gguf", gpu="RTX 4090", ctx_size=8192, parallel=2,
            kv_unified=False, cache_type_k="f16", cache_type_v="f16", kv_offload=True, flash_attn="on",
            concurrency=1, job=job, source=Run.Source.EXECUTED,
        )  # fmt: skip
        ts = start + timedelta(hours=rng.randrange(70, 80))
        RequestResult.objects.bulk_create(
            RequestResult(
                run=run, seq=seq, ts=ts + timedelta(seconds=seq), ok=True, http_status=200, prompt_tokens=1000,
                n_predict=200, output_tokens=200, tok_s=rng.uniform(20, 45), elapsed_s=5.0, content_hash=f"{i}-{seq}",
            )
            for seq in range(2)
        )  # fmt: skip
        runs.append(run)
    assert lifecycle.reap_stale_jobs(max_silence_s=60) == [job.pk]
    return runs


START = datetime(2026, 10, 1, tzinfo=UTC)
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
