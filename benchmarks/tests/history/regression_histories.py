"""The regressions page's reference and the random histories it is checked on.

The reference is the window query over every run and its comparison, as the page ran them per request
before baselines were kept (a copy, so that neither can drift with the code under test). A history is
random runs imported in several files, some growing in a later file, and a job's runs reaped.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.urls import reverse
from django.utils import timezone

from benchmarks.charts import figure_common, regression_views
from benchmarks.history import baselines
from benchmarks.jobs import lifecycle
from benchmarks.models import FileImport, Job, RequestResult, Run, Server
from benchmarks.models.outcomes import with_success_rate
from benchmarks.records import catalogue
from benchmarks.records import series_keys as series
from benchmarks.tests.builders import flat, jsonl

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
