"""How fast are the chart pages with 100,000 runs and 1,000,000 requests stored?

What is measured
----------------
A fresh, migrated SQLite database (in a temporary KVLAB_VAR_DIR) gets N runs (default
100,000) with 10 requests each (1,000,000), inserted with executemany on Django's
connection, in one transaction. The data is shaped like a lab's year of benchmarks:

* 30 config labels (a model and one of a few flag variants each, e.g.
  ``qwen3-30b-q8-cache``), each with its own model, main GPU and server flags; 1 run
  in 20 deviates from its label's flags (a one-off experiment), so the timeline's
  "configuration changed" diamonds appear as often as they would in practice.
  6 labels are kvlab-executed jobs with ``server_props`` (a llama.cpp build that
  changes every 10 days); the rest are imported, most with a reported wall time.
* started_at spread over the year that ends now; concurrency 1..64 (mostly powers
  of two); about 6 % of runs fail outright (0 ok) and 8 % lose 1-3 requests.
* every request has ok, HTTP status, error, tok/s, TTFT, elapsed, output tokens and a
  distinct content hash; per-request decode speed follows the model, GPU, KV cache
  type and concurrency. The runs' aggregates (n_ok, tok/s mean/min/max, throughput,
  TTFT p50/p95, E2E p95, effective wall time) come from benchmarks.metrics.summarize,
  exactly as an import computes them.

Then django.test.Client requests each chart in-process (middleware, view, template):

* timeline    /charts/timeline/ grouped by label (the default), grouped by config,
              and filtered to one model
* compare     /charts/compare/ with 12 runs (their 120 requests feed the strips)
* load curve  /charts/load/ for one model
* regressions /charts/regressions/ (no data endpoint)
* home        the dashboard (a 2,000-run trend and 30 days of failures)

each as the HTML page (which embeds the figure as json_script) and, where the view
has one, as the ``?format=json`` data download. Each case is requested once to warm
up, once to count its SQL queries (CaptureQueriesContext, not timed), then timed
``--requests`` times (default 10): median and p95 (nearest rank) of the server time.
Every response must be a 200 holding what it should, checked against plain SQL: the
figure's json_script with the expected number of points, or the expected JSON rows.

The aims (from the issue): under 300 ms server time (judged on the p95) and under
2 MB (2,000,000 bytes) of payload per chart. A row over either is marked OVER and
profiled with cProfile (top entries printed; ``--no-profile`` skips that); the
bytes of each figure are split by trace key to show where they go.

Browser render time
-------------------
The timeline (default) and compare pages are also opened in headless Chromium
(/usr/bin/chromium, driven by Playwright; never a downloaded browser) against
``manage.py runserver --noreload`` on the scratch database at a free port. An init
script wraps Plotly.react and records performance.now() (milliseconds since
navigation start) when the figure's ``plotly_afterplot`` fires, and again after the
next two animation frames (painted). One warm-up load (which caches plotly.min.js,
as a returning user has it), then ``--browser-repeats`` loads (default 3): median.
The page must report no console or page errors.

Usage (from the repository root)::

    .venv/bin/python bench/chart_speed.py [--runs N] [--requests N] [--browser-repeats N]
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import hashlib
import io
import json
import os
import platform
import pstats
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
AIM_MS = 300.0  # p95 server time
AIM_BYTES = 2_000_000  # payload per chart
REQUESTS_PER_RUN = 10
MAX_TIMELINE_POINTS = 10_000  # chart_views.MAX_TIMELINE_POINTS, checked at start
HOME_TREND_POINTS = 2_000
MARKER_TRACES = ("failed runs", "configuration changed")
FIGURE_RE = re.compile(rb'<script id="([\w-]+)" type="application/json">(.*?)</script>', re.S)

# --- the data ----------------------------------------------------------------------

MODELS = common.MODELS
GPUS = common.GPUS
# Single-stream decode tok/s on an RTX 4090 (Q4-ish quants; MoE models are fast).
MODEL_SPEED = dict(zip(MODELS, [48.0, 165.0, 140.0, 42.0, 19.0, 190.0, 36.0, 70.0], strict=True))
MODEL_SHORT = dict(
    zip(
        MODELS,
        ["devstral-24b", "qwen3-30b", "qwen3-coder", "gemma3-27b", "llama33-70b", "gpt-oss-20b", "mistral-24b", "phi4"],
        strict=True,
    )
)
GPU_SPEED = {"RTX 5060 Ti 16GB": 0.45, "RTX 4090": 1.0, "RTX 3090": 0.8, "RTX 5090": 1.35, "A100 80GB": 1.1}
CACHE_SPEED = {"f16": 1.0, "bf16": 1.0, "q8_0": 0.96, "q5_1": 0.93, "q4_0": 0.92, "iq4_nl": 0.9}
CONCURRENCY = [1, 1, 2, 4, 4, 8, 8, 16, 32, 64]
VARIANTS: dict[str, dict[str, Any]] = {  # flag overrides of each variant
    "baseline": {},
    "unified-kv": {"kv_unified": True, "parallel": 4},
    "q8-cache": {"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on"},
    "q4-cache": {"cache_type_k": "q4_0", "cache_type_v": "q4_0", "flash_attn": "on"},
    "fa-on": {"flash_attn": "on"},
    "big-ctx": {"ctx_size": 131072, "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
    "np8": {"parallel": 8, "kv_unified": False},
    "no-offload": {"kv_offload": False},
}
ERRORS = [  # (error_type, HTTP status, error)
    ("exceed_context_size", 400, "the request exceeds the available context size, try increasing it"),
    ("http_error", 500, "HTTP 500: slot unavailable"),
    ("timeout", None, "no data for 600.0 s"),
    ("disconnect", None, "Server disconnected"),
]
DOWN = ("other", None, "Cannot connect to host 127.0.0.1:8080 ssl:default [Connect call failed]")
REQUEST_COLUMNS = (  # the RequestResult columns this script writes, in order
    "run_id",
    "seq",
    "ts",
    "ok",
    "http_status",
    "error",
    "error_type",
    "prompt_tokens",
    "n_predict",
    "output_tokens",
    "tok_s",
    "elapsed_s",
    "ttft_s",
    "extra",
    "content_hash",
    "occurrence",
)


def make_labels(rng: random.Random, n: int = 30) -> list[dict[str, Any]]:
    """n config labels: a model with a flag variant each, its GPU, workload and activity."""
    combos = [(m, v) for m in MODELS for v in VARIANTS]
    labels = []
    for i, (model, variant) in enumerate(rng.sample(combos, n)):
        flags: dict[str, Any] = {
            "ctx_size": rng.choice([8192, 16384, 32768, 65536]),
            "parallel": rng.choice([1, 1, 2, 4]),
            "kv_unified": rng.choice([None, False]),
            "cache_type_k": "f16",
            "cache_type_v": "f16",
            "kv_offload": True,
            "flash_attn": rng.choice(["", "auto"]),
        }
        flags.update(VARIANTS[variant])
        gpu = rng.choice(list(GPUS))
        labels.append(
            {
                "name": f"{MODEL_SHORT[model]}-{variant}",
                "model": model,
                "gpu": gpu,
                "other_gpu": rng.choice([g for g in GPUS if g != gpu]),
                "flags": flags,
                "executed": i < 6,  # kvlab jobs, with server_props
                "n_predict": rng.choice([256, 512, 1024, 1024, 2048]),
                "prompt_max": min(int(flags["ctx_size"] * 0.6), rng.choice([2000, 8000, 30000])),
                "weight": rng.uniform(0.3, 3.0),
                "fail_rate": 0.15 if variant == "big-ctx" else 0.05,
            }
        )
    return labels


def make_requests(
    rng: random.Random, run_id: int, key: str, label: dict[str, Any], run: dict[str, Any], started: datetime
) -> tuple[list[tuple[Any, ...]], float | None]:
    """A run's 10 requests as REQUEST_COLUMNS tuples (ts still a datetime), and its reported wall time."""
    c = run["concurrency"]
    speed = (
        MODEL_SPEED[run["model"]]
        * GPU_SPEED[run["gpu"]]
        * CACHE_SPEED.get(run["cache_type_k"], 1.0)
        * (0.35 if run["kv_offload"] is False else 1.0)
        * run["drift"]
        / (1 + 0.15 * (c - 1))
    )
    prefill = speed * 45 * (1 + 0.15 * (c - 1))  # prompt tok/s, shared by the c requests
    outcome = rng.random()
    if outcome < label["fail_rate"]:  # the server was down: every request fails alike
        failing = set(range(REQUESTS_PER_RUN))
        kinds = [DOWN] * REQUESTS_PER_RUN
    else:
        n_fail = rng.randint(1, 3) if outcome < label["fail_rate"] + 0.08 else 0
        failing = set(rng.sample(range(REQUESTS_PER_RUN), n_fail))
        kinds = [rng.choice(ERRORS) for _ in range(REQUESTS_PER_RUN)]
    rows = []
    wave_start = 0.0
    wave_longest = 0.0
    for seq in range(REQUESTS_PER_RUN):
        if seq and seq % c == 0:
            wave_start += wave_longest
            wave_longest = 0.0
        ts = started + timedelta(seconds=wave_start + rng.uniform(0, 0.05) * (seq % c))
        prompt = rng.randint(min(200, label["prompt_max"]), label["prompt_max"])
        n_predict = label["n_predict"]
        if seq in failing:
            error_type, status, error = kinds[seq]
            elapsed = 600.0 if error_type == "timeout" else round(rng.uniform(0.002, 2.5), 4)
            row = (run_id, seq, ts, False, status, error, error_type, prompt, n_predict, None, None, elapsed, None)
        else:
            output = n_predict if rng.random() < 0.7 else rng.randint(n_predict // 4, n_predict)
            tok_s = round(speed * rng.lognormvariate(0, 0.08), 3)
            ttft = round(prompt / prefill * c**0.5 * rng.lognormvariate(0, 0.15), 4)
            elapsed = round(ttft + output / tok_s, 4)
            row = (run_id, seq, ts, True, 200, "", "", prompt, n_predict, output, tok_s, elapsed, ttft)
        wave_longest = max(wave_longest, elapsed)
        content_hash = hashlib.blake2b(f"{key}/{seq}/{prompt}".encode(), digest_size=16).hexdigest()
        rows.append((*row, "{}", content_hash, 0))
    reported = None
    if not label["executed"] and rng.random() < 0.7:
        reported = round((wave_start + wave_longest) * rng.uniform(1.0, 1.04) + 0.3, 2)
    return rows, reported


def make_chunk(
    rng: random.Random,
    labels: list[dict[str, Any]],
    weights: list[float],
    start: int,
    stop: int,
    n_runs: int,
    now: datetime,
) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
    """Runs start..stop-1 (ids start+1..) as attname dicts, and their requests as tuples."""
    from benchmarks.history.metrics import summarize

    first = now - timedelta(days=365)
    gap = 365 * 86400 / n_runs
    runs, requests = [], []
    for index in range(start, stop):
        run_id = index + 1
        label = rng.choices(labels, weights)[0]
        started = first + timedelta(seconds=index * gap + rng.uniform(0, gap * 0.6))
        flags = dict(label["flags"])
        if rng.random() < 0.05:  # a one-off experiment with other flags
            field = rng.choice(["ctx_size", "parallel", "cache_type_k", "flash_attn"])
            flags[field] = {
                "ctx_size": rng.choice(common.CTX_SIZES),
                "parallel": rng.choice([1, 2, 4, 8]),
                "cache_type_k": rng.choice(list(CACHE_SPEED)),
                "flash_attn": rng.choice(["on", "off", "auto"]),
            }[field]
            if field == "cache_type_k":
                flags["cache_type_v"] = flags["cache_type_k"]
        gpu = label["gpu"] if rng.random() < 0.9 else label["other_gpu"]
        days = (started - first).days
        run: dict[str, Any] = {
            "id": run_id,
            "source": "executed" if label["executed"] else "imported",
            "label": label["name"],
            "model": label["model"],
            "gpu": gpu,
            "vram_total_mib": GPUS[gpu],
            "concurrency": rng.choice(CONCURRENCY) if rng.random() < 0.9 else rng.randint(1, 64),
            "drift": (1 + 0.08 * days / 365) * (0.85 if days % 97 < 4 else 1.0),  # builds get faster; some regress
            **flags,
        }
        if label["executed"]:
            run["key"] = f"job-{run_id}-r1"
            build = 6000 + days // 10
            run["server_props"] = json.dumps(
                {
                    "reachable": True,
                    "health": {"status": 200, "body": {"status": "ok"}},
                    "props": {
                        "build_info": f"b{build}-{hashlib.sha1(str(build).encode()).hexdigest()[:7]}",
                        "model_path": f"/models/{label['model']}",
                        "total_slots": flags["parallel"],
                        "n_ctx_slot": flags["ctx_size"] // flags["parallel"],
                    },
                    "slots": [
                        {"id": s, "n_ctx": flags["ctx_size"] // flags["parallel"], "is_processing": False}
                        for s in range(flags["parallel"])
                    ],
                    "metrics_enabled": True,
                    "n_ctx_slot": flags["ctx_size"] // flags["parallel"],
                }
            )
        else:
            run["key"] = f"{label['name']}-{run_id:07d}"
            run["server_props"] = None
        rows, reported = make_requests(rng, run_id, run["key"], label, run, started)
        summary = summarize([r[2:13] for r in rows], reported)
        run.pop("drift")
        run.update(summary._asdict())
        run.update(
            wall_s=reported,
            vram_used_mib=rng.randint(GPUS[gpu] // 3, GPUS[gpu]) if rng.random() < 0.6 else None,
            created_at=started + timedelta(seconds=(summary.effective_wall_s or 0) + rng.randint(5, 3 * 86400)),
            first_import_id=None,
            job_id=None,
        )
        runs.append(run)
        requests.extend(rows)
    return runs, requests


def insert_data(n_runs: int, seed: int = 1_000_000, chunk: int = 10_000) -> dict[str, Any]:
    """Insert n_runs runs and their requests with executemany, in one transaction."""
    from django.db import connection, transaction

    from benchmarks.history.records import REQUEST_FIELD_NAMES
    from benchmarks.models import RequestResult, Run

    assert REQUEST_COLUMNS[2:13] == REQUEST_FIELD_NAMES, "the request fields changed; update this benchmark"
    request_fields = {f.attname for f in RequestResult._meta.concrete_fields if not f.primary_key}
    assert request_fields == set(REQUEST_COLUMNS), (
        f"RequestResult fields {sorted(request_fields ^ set(REQUEST_COLUMNS))} differ; update this benchmark"
    )
    run_fields = list(Run._meta.concrete_fields)
    q = connection.ops.quote_name
    run_sql = (
        f"INSERT INTO {q(Run._meta.db_table)} ({', '.join(q(f.column) for f in run_fields)}) "
        f"VALUES ({', '.join(['%s'] * len(run_fields))})"
    )
    request_sql = (
        f"INSERT INTO {q(RequestResult._meta.db_table)} ({', '.join(q(c) for c in REQUEST_COLUMNS)}) "
        f"VALUES ({', '.join(['%s'] * len(REQUEST_COLUMNS))})"
    )
    adapt = connection.ops.adapt_datetimefield_value
    rng = random.Random(seed)
    labels = make_labels(rng)
    weights = [label["weight"] for label in labels]
    now = datetime.now(UTC).replace(microsecond=0)
    n_requests = 0
    with transaction.atomic(), connection.cursor() as cursor:
        for start in range(0, n_runs, chunk):
            runs, requests = make_chunk(rng, labels, weights, start, min(start + chunk, n_runs), n_runs, now)
            missing = {f.attname for f in run_fields} - runs[0].keys()
            assert not missing, f"make_chunk does not set {sorted(missing)}; update this benchmark"
            cursor.executemany(
                run_sql,
                [
                    tuple(adapt(v) if isinstance(v, datetime) else v for v in (run[f.attname] for f in run_fields))
                    for run in runs
                ],
            )
            cursor.executemany(request_sql, [(*r[:2], adapt(r[2]), *r[3:]) for r in requests])
            n_requests += len(requests)
    return {"labels": [label["name"] for label in labels], "requests": n_requests, "now": now.isoformat()}


# --- what each page must show --------------------------------------------------------


def scalar(sql: str, params: tuple[Any, ...] = ()) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def pick_compare_runs(rng: random.Random, model: str) -> list[int]:
    """12 runs of one model, the latest at each of 12 concurrency/label combinations, one of them failed."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM benchmarks_run WHERE model = %s AND n_ok = 0 AND n_requests > 0 "
            "ORDER BY started_at DESC LIMIT 1",
            (model,),
        )
        failed = [cursor.fetchone()[0]]
        cursor.execute(
            "SELECT max(id) FROM benchmarks_run WHERE model = %s AND n_ok > 0 GROUP BY label, concurrency",
            (model,),
        )
        others = sorted(r[0] for r in cursor.fetchall())
    return failed + rng.sample(others, 11)


def make_cases(model: str, compare_ids: list[int]) -> list[dict[str, Any]]:
    dated = "started_at IS NOT NULL"
    n_all = scalar(f"SELECT count(*) FROM benchmarks_run WHERE {dated}")
    n_model = scalar(f"SELECT count(*) FROM benchmarks_run WHERE {dated} AND model = %s", (model,))
    placeholders = ", ".join(["%s"] * len(compare_ids))
    n_compare_requests = scalar(
        f"SELECT count(*) FROM benchmarks_requestresult WHERE run_id IN ({placeholders})", tuple(compare_ids)
    )
    n_strip_points = scalar(
        f"SELECT count(*) FROM benchmarks_requestresult WHERE run_id IN ({placeholders}) AND ok AND tok_s IS NOT NULL",
        tuple(compare_ids),
    )
    assert n_compare_requests == 12 * REQUESTS_PER_RUN, n_compare_requests
    n_levels = scalar(
        "SELECT count(DISTINCT concurrency) FROM benchmarks_run WHERE model = %s AND concurrency IS NOT NULL", (model,)
    )
    timeline = {"kind": "timeline", "url": "chart-timeline", "figure": "timeline-figure"}
    specs = [
        {**timeline, "case": "timeline label", "params": {}, "points": min(n_all, MAX_TIMELINE_POINTS)},
        {
            **timeline,
            "case": "timeline config",
            "params": {"group": "config"},
            "points": min(n_all, MAX_TIMELINE_POINTS),
        },
        {**timeline, "case": "timeline model", "params": {"model": model}, "points": min(n_model, MAX_TIMELINE_POINTS)},
        {
            "kind": "compare",
            "case": "compare 12 runs",
            "url": "chart-compare",
            "figure": "compare-figure",
            "params": {"run": compare_ids},
            "points": n_strip_points,
            "rows": 12,
        },
        {
            "kind": "load",
            "case": "load curve",
            "url": "chart-load",
            "figure": "load-figure",
            "params": {"model": model},
            "points": n_levels,
        },
        {"kind": "regressions", "case": "regressions", "url": "chart-regressions", "figure": None, "params": {}},
        {
            "kind": "home",
            "case": "home",
            "url": "home",
            "figure": "trend-figure",
            "params": {},
            "points": min(n_all, HOME_TREND_POINTS),
        },
    ]
    cases = []
    for spec in specs:
        assert spec["kind"] == "regressions" or spec["points"] > 0, f"{spec['case']}: no data to measure"
        cases.append({**spec, "format": "html"})
        if spec["kind"] in ("timeline", "compare", "load"):
            rows = spec.get("rows", spec["points"])
            cases.append({**spec, "format": "json", "params": {**spec["params"], "format": "json"}, "rows": rows})
    return cases


# --- checks ---------------------------------------------------------------------------


def figures(content: bytes) -> dict[str, tuple[int, Any]]:
    """Every json_script on the page: id -> (bytes, parsed figure)."""
    return {m.group(1).decode(): (len(m.group(2)), json.loads(m.group(2))) for m in FIGURE_RE.finditer(content)}


def check(case: dict[str, Any], response: Any) -> dict[str, Any]:
    """Assert the response is the real page; what it held."""
    name = f"{case['case']} ({case['format']})"
    assert response.status_code == 200, f"{name}: status {response.status_code}"
    content = response.content
    if case["format"] == "json":
        rows = json.loads(content)["rows"]
        assert len(rows) == case["rows"], f"{name}: {len(rows)} rows, expected {case['rows']}"
        return {"points": len(rows), "figure_bytes": None}
    assert b"<html" in content, f"{name}: not a full page"
    if case["kind"] == "regressions":
        found = content.count(b'<td class="num bad">')
        groups = re.search(rb"No regressions across (\d+) group", content)
        assert found or (groups and int(groups.group(1)) > 0), f"{name}: neither regressions nor groups shown"
        return {"points": found, "figure_bytes": None, "regressions": found}
    figs = figures(content)
    assert case["figure"] in figs, f"{name}: no {case['figure']} json_script"
    size, figure = figs[case["figure"]]
    traces = figure["data"]
    if case["kind"] in ("timeline", "home"):
        points = sum(len(t["x"]) for t in traces if t["name"] not in MARKER_TRACES)
        if case["kind"] == "timeline":
            assert f"{case['points']} runs".encode() in content, f"{name}: the summary does not say {case['points']}"
        else:
            assert "failures-figure" in figs, f"{name}: no failures figure"
            assert content.count(b'<tr class="outcome-') == 10, f"{name}: not 10 latest runs"
    elif case["kind"] == "compare":
        bars = [t for t in traces if t["type"] == "bar"]
        boxes = [t for t in traces if t["type"] == "box"]
        assert len(bars) == 5 and all(len(t["y"]) == 12 for t in bars), f"{name}: not 5 panels of 12 bars"
        assert len(boxes) == 12, f"{name}: {len(boxes)} strips, expected 12"
        points = sum(len(t["y"]) for t in boxes)
    else:
        assert len(traces) in (2, 3), f"{name}: {len(traces)} traces"  # TTFT p95 only when timed
        points = len(traces[0]["x"])
    assert points == case["points"], f"{name}: {points} points, expected {case['points']}"
    return {"points": points, "figure_bytes": size, "traces": len(traces), "bytes_by_key": bytes_by_key(traces)}


def bytes_by_key(traces: list[dict[str, Any]]) -> dict[str, int]:
    """Where a figure's bytes go: the JSON size of each trace key, summed over traces."""
    sizes: dict[str, int] = {}
    for trace in traces:
        for key, value in trace.items():
            sizes[key] = sizes.get(key, 0) + len(json.dumps(value))
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


# --- the server-side measurement -------------------------------------------------------


def measure(client: Any, case: dict[str, Any], n: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    url = reverse(case["url"])
    check(case, client.get(url, case["params"]))  # warm up
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, case["params"])
    queries = list(captured.captured_queries)
    held = check(case, response)
    db_ms = sum(common.rerun_ms(q["sql"]) for q in queries)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        response = client.get(url, case["params"])
        times.append((time.perf_counter() - start) * 1000)
        check(case, response)
    result = {
        **{k: v for k, v in case.items() if k != "params"},
        "query": {k: v for k, v in case["params"].items()},
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(common.nearest_rank(times, 95), 1),
        "min_ms": round(min(times), 1),
        "queries": len(queries),
        "db_ms": round(db_ms, 1),
        "bytes": len(response.content),
        "gzip_bytes": len(gzip.compress(response.content, 6)),  # for reference: kvlab does not compress
        **held,
        "sql": [q["sql"] for q in queries],
    }
    result["time_ok"] = result["p95_ms"] < AIM_MS
    result["size_ok"] = result["bytes"] < AIM_BYTES
    return result


def profile(client: Any, case: dict[str, Any], top: int = 18) -> str:
    """cProfile of 3 requests of the case: the top entries by own time and by cumulative time."""
    from django.urls import reverse

    url = reverse(case["url"])
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(3):
        client.get(url, case["params"])
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return re.sub(r"\S*/site-packages/", "", out.getvalue()).replace(str(ROOT) + "/", "")


# --- the browser measurement ---------------------------------------------------------

INIT_SCRIPT = """
window.__kv = {};
document.addEventListener("DOMContentLoaded", function () {
  window.__kv.dcl = performance.now();
  if (!window.Plotly) { window.__kv.error = "no Plotly at DOMContentLoaded"; return; }
  var react = window.Plotly.react;
  window.Plotly.react = function (gd) {
    window.__kv.react = performance.now();
    var done = react.apply(this, arguments);
    gd.on("plotly_afterplot", function () {
      if (window.__kv.afterplot) return;
      window.__kv.afterplot = performance.now();
      requestAnimationFrame(function () { requestAnimationFrame(function () {
        window.__kv.painted = performance.now();
      }); });
    });
    return done;
  };
}, true);
"""


def start_server(var_dir: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = common.free_port()
    env = {
        **os.environ,
        "KVLAB_VAR_DIR": str(var_dir),
        "KVLAB_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "KVLAB_LOG_LEVEL": "WARNING",
    }
    env.pop("DATABASE_URL", None)
    log = var_dir / "runserver.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(base + "/static/js/charts.js", timeout=5) as response:
                if response.status == 200:
                    return proc, base, log
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError(f"runserver did not start:\n{log.read_text()}")
        time.sleep(0.2)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def browser_times(base: str, pages: list[tuple[str, str, str]], repeats: int) -> list[dict[str, Any]]:
    """Open each page once to warm up, then `repeats` times: navigation start -> plotly_afterplot."""
    from playwright.sync_api import sync_playwright

    results = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            for name, path, selector in pages:
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                context.add_init_script(INIT_SCRIPT)
                page = context.new_page()
                errors: list[str] = []

                def console(message: Any, errors: list[str] = errors) -> None:
                    # The browser asks for /favicon.ico by itself, and kvlab has none: that 404 is no error.
                    url = message.location.get("url", "")
                    if message.type == "error" and not url.endswith("/favicon.ico"):
                        errors.append(f"{message.text} ({url})")

                page.on("console", console)
                page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
                samples = []
                for attempt in range(repeats + 1):
                    response = page.goto(base + path, wait_until="commit", timeout=120_000)
                    assert response is not None and response.status == 200, (
                        f"{name}: HTTP {response and response.status}"
                    )
                    page.wait_for_function(
                        "() => window.__kv && (window.__kv.painted || window.__kv.error)", timeout=120_000
                    )
                    kv = page.evaluate(
                        """sel => {
                            const el = document.querySelector(sel);
                            const nav = performance.getEntriesByType("navigation")[0];
                            return {...window.__kv, response_end: nav.responseEnd, transfer: nav.transferSize,
                                    traces: el && el.data ? el.data.length : 0, laid_out: !!(el && el._fullLayout),
                                    points: el && el.data ? el.data.reduce((n, t) => n + (t.x || t.y).length, 0) : 0};
                        }""",
                        selector,
                    )
                    assert not kv.get("error"), f"{name}: {kv['error']}"
                    assert kv["traces"] > 0 and kv["laid_out"] and kv["points"] > 0, f"{name}: nothing drawn: {kv}"
                    if attempt:  # the first load warms the cache (plotly.min.js) and the server
                        samples.append(kv)
                assert not errors, f"{name}: the page reported errors: {errors}"
                context.close()
                results.append(
                    {
                        "case": name,
                        "path": path,
                        "repeats": repeats,
                        "traces": samples[-1]["traces"],
                        "points": samples[-1]["points"],
                        **{
                            f"{k}_ms": round(statistics.median(s[k] for s in samples), 1)
                            for k in ("response_end", "dcl", "react", "afterplot", "painted")
                        },
                        "afterplot_all_ms": [round(s["afterplot"], 1) for s in samples],
                    }
                )
        finally:
            browser.close()
    return results


# --- the report ------------------------------------------------------------------------


def print_table(results: dict[str, Any]) -> None:
    print(
        f"\nChart pages with {results['runs']:,} runs and {results['requests']:,} requests; "
        f"{results['timed_requests']} timed requests per case after a warm-up"
    )
    header = (
        f"{'case':<17} {'format':<6} {'median ms':>9} {'p95 ms':>8} {'queries':>7} {'db ms':>7} "
        f"{'bytes':>11} {'figure bytes':>12} {'gzip':>9} {'points':>7}  {'time':<5} {'size':<5}"
    )
    print(header)
    print("-" * len(header))
    for r in results["cases"]:
        fig = f"{r['figure_bytes']:,}" if r.get("figure_bytes") is not None else "—"
        print(
            f"{r['case']:<17} {r['format']:<6} {r['median_ms']:>9.1f} {r['p95_ms']:>8.1f} {r['queries']:>7} "
            f"{r['db_ms']:>7.1f} {r['bytes']:>11,} {fig:>12} {r['gzip_bytes']:>9,} {r['points']:>7}  "
            f"{'PASS' if r['time_ok'] else 'OVER':<5} {'PASS' if r['size_ok'] else 'OVER':<5}"
        )
    print(f"(aims: p95 server time < {AIM_MS:.0f} ms, payload < {AIM_BYTES:,} bytes; db ms: the queries run again")
    print(" on the raw sqlite3 connection with every row fetched, best of 3; gzip: the body gzipped, for reference")
    print(" only, kvlab serves it uncompressed; points: figure points, JSON rows, or regressions found)")
    if results["browser"]:
        print(
            f"\nBrowser render, headless Chromium, median of {results['browser'][0]['repeats']} loads after a warm-up"
        )
        header = (
            f"{'case':<17} {'points':>7} {'traces':>6} {'response ms':>11} {'DOMContentLoaded':>16} "
            f"{'afterplot ms':>12} {'painted ms':>10}  all afterplot"
        )
        print(header)
        print("-" * len(header))
        for b in results["browser"]:
            print(
                f"{b['case']:<17} {b['points']:>7} {b['traces']:>6} {b['response_end_ms']:>11.0f} {b['dcl_ms']:>16.0f} "
                f"{b['afterplot_ms']:>12.0f} {b['painted_ms']:>10.0f}  {b['afterplot_all_ms']}"
            )
        print("(ms since navigation start; afterplot: Plotly's plotly_afterplot; painted: two frames later)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="runs in the database (10 requests each)")
    parser.add_argument("--requests", type=int, default=10, help="timed requests per case")
    parser.add_argument("--browser-repeats", type=int, default=3, help="timed page loads per page (0: no browser)")
    parser.add_argument("--no-profile", action="store_true", help="do not profile the cases over the aims")
    args = parser.parse_args(argv)
    if args.runs < 100 or args.requests < 1 or args.browser_repeats < 0:
        parser.error("--runs must be 100 or more, --requests positive, --browser-repeats not negative")
    if args.browser_repeats and not os.access(CHROMIUM, os.X_OK):
        parser.error(f"{CHROMIUM} is missing: install Debian's chromium, or pass --browser-repeats 0")

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvlab-chart-bench-") as tmp:
        common.setup_migrated_django(Path(tmp))
        from django.db import connections
        from django.test import Client

        from benchmarks.charts import views as chart_views

        assert chart_views.MAX_TIMELINE_POINTS == MAX_TIMELINE_POINTS, "the timeline's cap changed; update this"
        start = time.perf_counter()
        data = insert_data(args.runs)
        insert_s = time.perf_counter() - start
        print(f"inserted {args.runs:,} runs and {data['requests']:,} requests in {insert_s:.1f} s")

        model = MODELS[1]
        compare_ids = pick_compare_runs(random.Random(12), model)
        client = Client()
        measured, profiles = [], {}
        for case in make_cases(model, compare_ids):
            measured.append(measure(client, case, args.requests))
            m = measured[-1]
            print(f"  {m['case']:<17} {m['format']:<5} median {m['median_ms']:8.1f} ms  {m['bytes']:>11,} bytes")
            if not args.no_profile and not (m["time_ok"] and m["size_ok"]):
                profiles[f"{m['case']} ({m['format']})"] = profile(client, case)
        db_bytes = (Path(tmp) / "kvlab.sqlite3").stat().st_size
        connections.close_all()

        browser: list[dict[str, Any]] = []
        if args.browser_repeats:
            compare_query = "&".join(f"run={i}" for i in compare_ids)
            proc, base, _log = start_server(Path(tmp))
            try:
                browser = browser_times(
                    base,
                    [
                        ("timeline label", "/charts/timeline/", "#timeline-figure-plot"),
                        ("compare 12 runs", f"/charts/compare/?{compare_query}", "#compare-figure-plot"),
                    ],
                    args.browser_repeats,
                )
            finally:
                stop_server(proc)

    results = {
        "runs": args.runs,
        "requests": data["requests"],
        "labels": data["labels"],
        "data_until": data["now"],
        "insert_s": round(insert_s, 1),
        "db_bytes": db_bytes,
        "timed_requests": args.requests,
        "aims": {"p95_ms": AIM_MS, "bytes": AIM_BYTES},
        "filter_model": model,
        "compare_runs": compare_ids,
        "cases": measured,
        "browser": browser,
        "profiles": profiles,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "chromium": CHROMIUM.name if browser else None,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    for name, text in profiles.items():
        print(f"\n=== profile: {name} (3 requests) ===")
        print("\n".join(line for line in text.splitlines() if line.strip())[:6000])
    over = [r for r in measured if not r["size_ok"] and r.get("bytes_by_key")]
    for r in over:
        print(f"\nbytes of {r['case']} ({r['format']}) figure by trace key: {r['bytes_by_key']}")
    print_table(results)
    (OUT / "chart_speed.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"results written to {(OUT / 'chart_speed.json').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
