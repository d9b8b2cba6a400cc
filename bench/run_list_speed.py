"""How long does the run list take to serve with 100,000 runs stored?

What is measured
----------------
A fresh, migrated SQLite database (in a temporary KVLAB_VAR_DIR) gets N runs (default
100,000) with realistic, varied configurations and request aggregates, inserted
directly with executemany (requests are not needed: the list reads only the runs
table). Then django.test.Client requests reverse("run-list") in-process, through the
whole middleware stack, view and template, for these pages, each with per_page 50
and 200:

* default   the first page, newest first
* filtered  one model, outcome=failed
* sorted    sort=-tok_s (mean tok/s, descending)
* deep      page=1000 (with 200 per page there are only 500 pages: the last is shown)
* htmx      the default page as an htmx request (only the table partial is rendered)

Every case is requested once to warm up, once more to count its SQL queries
(CaptureQueriesContext; that request is not timed), then timed 20 times. The table
shows the median and p95 (nearest rank) of those 20 server times in milliseconds,
the queries per request and the time SQLite needs for them (each captured query run
again on the raw connection with every row fetched). Every response must be a
200 with exactly the number of table rows the page should hold, so only real pages
are measured.

Usage (from the repository root)::

    .venv/bin/python bench/run_list_speed.py [--runs N] [--requests N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
ROW_MARKER = b'<tr class="outcome-'  # one per run row in templates/benchmarks/run_list.html

MODELS = common.MODELS
GPUS: dict[str, int | None] = {**common.GPUS, "": None}  # blank GPUs too
LABELS = [*common.LABELS, ""]
CACHE_TYPES = ["f16", "f16", "q8_0", "q8_0", "q4_0", "bf16", "q5_1", "iq4_nl", ""]
FLASH_ATTN = ["", "on", "off", "auto"]
CTX_SIZES = [*common.CTX_SIZES, None]


# --- the database ------------------------------------------------------------------


def make_run(rng: random.Random, index: int, first: datetime) -> dict[str, Any]:
    """One Run row (by attname) with aggregates that agree with each other."""
    gpu = rng.choice(list(GPUS))
    label = rng.choice(LABELS)
    started = first + timedelta(seconds=index * 300 + rng.randint(0, 240))
    n_requests = rng.choice([0] + [1, 3, 5, 10, 10, 10, 20, 50] * 10)  # about 1 in 80 runs is empty
    outcome = rng.random()
    if n_requests == 0:
        n_ok = 0
    elif outcome < 0.70:
        n_ok = n_requests
    elif outcome < 0.85:
        n_ok = 0
    else:
        n_ok = rng.randint(1, n_requests - 1) if n_requests > 1 else 0
    speed = rng.uniform(4.0, 140.0)
    rates = sorted(round(speed * rng.uniform(0.8, 1.2), 2) for _ in range(min(n_ok, 3)))
    reported_wall = round(rng.uniform(30, 3600), 1) if rng.random() < 0.3 else None
    wall = reported_wall if reported_wall is not None else (round(rng.uniform(5, 3000), 2) if n_requests else None)
    output_total = sum(rng.randint(50, 2048) for _ in range(n_ok)) if n_ok and rng.random() < 0.8 else None
    return {
        "key": f"{label or 'run'}-{index:07d}",
        "source": "imported" if rng.random() < 0.9 else "executed",
        "label": label,
        "model": rng.choice(MODELS),
        "gpu": gpu,
        "vram_total_mib": GPUS[gpu],
        "vram_used_mib": rng.randint(4000, GPUS[gpu]) if GPUS[gpu] and rng.random() < 0.5 else None,
        "wall_s": reported_wall,
        "ctx_size": rng.choice(CTX_SIZES),
        "parallel": rng.choice([1, 2, 4, 8, None]),
        "kv_unified": rng.choice([True, False, None]),
        "cache_type_k": rng.choice(CACHE_TYPES),
        "cache_type_v": rng.choice(CACHE_TYPES),
        "kv_offload": rng.choice([True, True, False, None]),
        "flash_attn": rng.choice(FLASH_ATTN),
        "concurrency": rng.choice([1, 2, 3, 4, 8, None]),
        "created_at": started + timedelta(days=rng.randint(0, 30)),
        "first_import_id": None,
        "started_at": started if n_requests else None,
        "n_requests": n_requests,
        "n_ok": n_ok,
        "prompt_tokens_max": rng.randint(200, 100_000) if n_requests else None,
        "n_predict_max": rng.choice([256, 512, 1024, 1738, 2048, -1]) if n_requests else None,
        "output_tokens_total": output_total,
        "tok_s_mean": round(sum(rates) / len(rates), 3) if rates else None,
        "tok_s_min": rates[0] if rates else None,
        "tok_s_max": rates[-1] if rates else None,
        "effective_wall_s": wall,
        "effective_wall_source": "" if wall is None else ("reported" if reported_wall is not None else "derived"),
        "throughput_tok_s": round(output_total / wall, 3) if output_total is not None and wall else None,
        "ttft_p50": round(rng.uniform(0.05, 2.0), 3) if n_ok else None,
        "ttft_p95": round(rng.uniform(2.0, 8.0), 3) if n_ok else None,
        "e2e_p95": round(rng.uniform(5.0, 120.0), 3) if n_ok else None,
        "job_id": None,
        "server_props": None,
    }


def insert_runs(n_runs: int, seed: int = 100_000) -> None:
    """Insert n_runs runs with one executemany, in one transaction."""
    from django.db import connection, transaction

    from benchmarks.models import Run

    fields = [f for f in Run._meta.concrete_fields if not f.primary_key]
    rng = random.Random(seed)
    first = datetime(2025, 1, 1, tzinfo=UTC)
    adapt = connection.ops.adapt_datetimefield_value
    rows = []
    for i in range(n_runs):
        run = make_run(rng, i, first)
        missing = {f.attname for f in fields} - run.keys()
        assert not missing, f"make_run does not set {sorted(missing)}; update this benchmark"
        rows.append(tuple(adapt(v) if isinstance(v, datetime) else v for v in (run[f.attname] for f in fields)))
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = (
        f"INSERT INTO {connection.ops.quote_name(Run._meta.db_table)} ({columns}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def insert_sample_requests(n_runs: int, per_run: int = 10) -> int:
    """A few requests for the first runs, so the requests table is not empty."""
    from benchmarks.models import RequestResult, Run

    rows = []
    for run in Run.objects.order_by("id")[:n_runs]:
        for seq in range(per_run):
            ok = seq < run.n_ok
            rows.append(
                RequestResult(
                    run=run,
                    seq=seq,
                    ts=run.started_at,
                    ok=ok,
                    http_status=200 if ok else 500,
                    error="" if ok else "Context size has been exceeded.",
                    error_type="" if ok else "context_exceeded",
                    prompt_tokens=run.prompt_tokens_max,
                    n_predict=run.n_predict_max,
                    tok_s=run.tok_s_mean if ok else None,
                    content_hash=f"{run.pk:016x}{seq:016x}",
                )
            )
    RequestResult.objects.bulk_create(rows, batch_size=500)
    return len(rows)


# --- the measurement ---------------------------------------------------------------


def count_runs(where: str = "", params: tuple[Any, ...] = ()) -> int:
    """Count runs with plain SQL, independently of the view, to know what each page must show."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM benchmarks_run {where}", params)
        return cursor.fetchone()[0]


def rows_on_page(total: int, per_page: int, page: int) -> int:
    """What Paginator.get_page shows: a page past the end is the last page."""
    if total == 0:
        return 0
    last = math.ceil(total / per_page)
    page = min(page, last)
    return min(per_page, total - (page - 1) * per_page)


def cases(filter_model: str) -> list[dict[str, Any]]:
    total = count_runs()
    failed = count_runs("WHERE model = %s AND n_ok = 0 AND n_requests > 0", (filter_model,))
    result = []
    for per_page in (50, 200):
        pages = [
            ("default", {}, False, rows_on_page(total, per_page, 1)),
            ("filtered", {"model": filter_model, "outcome": "failed"}, False, rows_on_page(failed, per_page, 1)),
            ("sorted", {"sort": "-tok_s"}, False, rows_on_page(total, per_page, 1)),
            ("deep", {"page": 1000}, False, rows_on_page(total, per_page, 1000)),
            ("htmx", {}, True, rows_on_page(total, per_page, 1)),
        ]
        for name, params, htmx, expected in pages:
            assert expected > 0, f"{name}: the data gives an empty page; the benchmark would measure nothing"
            result.append(
                {
                    "case": name,
                    "per_page": per_page,
                    "params": {**params, "per_page": per_page},
                    "htmx": htmx,
                    "expected_rows": expected,
                }
            )
    return result


def fetch(client: Any, url: str, case: dict[str, Any]) -> Any:
    headers = {"HTTP_HX_REQUEST": "true"} if case["htmx"] else {}
    response = client.get(url, case["params"], **headers)
    assert response.status_code == 200, f"{case['case']}: status {response.status_code}"
    rows = response.content.count(ROW_MARKER)
    assert rows == case["expected_rows"], (
        f"{case['case']}/{case['per_page']}: {rows} rows, expected {case['expected_rows']}"
    )
    is_full_page = b"<html" in response.content
    assert is_full_page != case["htmx"], f"{case['case']}: htmx={case['htmx']} but full page={is_full_page}"
    return response


def measure_case(client: Any, url: str, case: dict[str, Any], n: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fetch(client, url, case)  # warm up
    with CaptureQueriesContext(connection) as captured:
        response = fetch(client, url, case)
    queries = list(captured.captured_queries)  # read now: the next request clears the log
    sql = [{"ms": round(common.rerun_ms(q["sql"]), 2), "sql": q["sql"]} for q in queries]
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fetch(client, url, case)
        times.append((time.perf_counter() - start) * 1000)
    return {
        **case,
        "median_ms": round(statistics.median(times), 2),
        "p95_ms": round(common.nearest_rank(times, 95), 2),
        "min_ms": round(min(times), 2),
        "queries": len(queries),
        "db_ms": round(sum(q["ms"] for q in sql), 2),
        "response_kib": round(len(response.content) / 1024, 1),
        "sql": sql,
    }


def print_table(results: dict[str, Any]) -> None:
    print(f"\nRun list with {results['runs']:,} runs, {results['timed_requests']} timed requests per case")
    header = (
        f"{'case':<9} {'per_page':>8} {'rows':>5} {'median ms':>10} {'p95 ms':>8} {'queries':>8} "
        f"{'db ms':>7} {'KiB':>6}  query string"
    )
    print(header)
    print("-" * len(header))
    for r in results["cases"]:
        query = "&".join(f"{k}={v}" for k, v in r["params"].items()) + ("  [HX-Request]" if r["htmx"] else "")
        print(
            f"{r['case']:<9} {r['per_page']:>8} {r['expected_rows']:>5} {r['median_ms']:>10.1f} {r['p95_ms']:>8.1f} "
            f"{r['queries']:>8} {r['db_ms']:>7.1f} {r['response_kib']:>6.0f}  {query}"
        )
    print("(db ms: that page's queries run again on the raw sqlite3 connection, all rows fetched, best of 3;")
    print(" the rest of the median is Python: form, paginator, template)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="runs in the database")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per case")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.requests < 1:
        parser.error("--runs and --requests must be positive")

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvlab-runlist-bench-") as tmp:
        common.setup_migrated_django(Path(tmp))
        from django.test import Client
        from django.urls import reverse

        start = time.perf_counter()
        insert_runs(args.runs)
        n_sample = insert_sample_requests(min(100, args.runs))
        print(f"inserted {args.runs:,} runs (+{n_sample} sample requests) in {time.perf_counter() - start:.1f} s")

        client = Client()
        url = reverse("run-list")
        measured = []
        for case in cases(filter_model=MODELS[0]):
            measured.append(measure_case(client, url, case, args.requests))
            m = measured[-1]
            print(f"  {m['case']:<9} per_page={m['per_page']:<4} median {m['median_ms']:7.1f} ms")
        from django.db import connections

        connections.close_all()

    results = {
        "runs": args.runs,
        "timed_requests": args.requests,
        "cases": measured,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print_table(results)
    (OUT / "run_list_speed.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {(OUT / 'run_list_speed.json').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
