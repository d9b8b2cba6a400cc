"""How fast are the chart pages with 100,000 runs and 1,000,000 requests stored?

What is measured
----------------
A fresh, migrated SQLite database (in a temporary KVLAB_VAR_DIR) gets N runs (default
100,000) with 10 requests each (1,000,000) of bench/synthetic.py's lab, inserted with
executemany on Django's connection, in one transaction. The lab is shaped like a lab's
year of benchmarks (synthetic.py describes it): 30 config labels, each a model with
its GPU and server flags, 1 run in 20 deviating from them (the timeline's
"configuration changed" diamonds); 6 labels of kvlab-executed jobs with
``server_props``; started_at over the year that ends now; concurrency 1..64; about
6 % of runs failing outright and 8 % losing 1-3 requests; every request with ok,
status, error, tok/s, TTFT, elapsed and output tokens, and the runs' aggregates from
benchmarks.records.metrics.summarize, exactly as an import computes them.

Then django.test.Client requests each chart in-process (middleware, view, template):

* timeline    /charts/timeline/ grouped by label (the default), grouped by config,
              and filtered to one model: past RAW_MAX runs each line's min and max per
              bucket (charts.timeline_data), checked to count every run once
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

The aims: under 300 ms server time (judged on the p95) and under
2 MB (2,000,000 bytes) of payload per chart. A row over either is marked OVER and
profiled with cProfile (top entries printed; ``--no-profile`` skips that); the
bytes of each figure are split by trace key to show where they go.

Browser render time
-------------------
The timeline (the default, a month, a day, grouped by configuration + workload: ``timeline_paint``,
judged against PAINT_AIM_MS) and compare pages are also opened in headless Chromium
(/usr/bin/chromium, driven by Playwright; never a downloaded browser) against
``manage.py runserver --noreload`` on the scratch database at a free port. An init
script wraps Plotly.react and records performance.now() (milliseconds since
navigation start) when the figure's ``plotly_afterplot`` fires, and again after the
next two animation frames (painted). Every afterplot counts: the load is read once no
other has come for PAINT_QUIET_MS after the last one's frames, so a redraw Plotly starts
by itself (margins pushed by the legend, a resize) is timed to its end (``afterplots``
says how many there were; there has been one). One warm-up load (which caches plotly.min.js,
as a returning user has it), then ``--browser-repeats`` loads (default 3): median.
The page must report no console or page errors.

Usage (from the repository root)::

    .venv/bin/python bench/chart_speed.py [--runs N] [--requests N] [--browser-repeats N] [--smoke] [--out DIR]

``--smoke`` measures 1,000 runs with 2 timed requests per case and 1 browser load per
page (every check still made; results in bench/out/smoke/), as ``make test`` does so
the script cannot rot.
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import io
import json
import os
import pstats
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import page_harness
import synthetic
from common import ROOT
from page_harness import Column, Page

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
PAINT_AIM_MS = 500.0  # the timeline paints in Chromium: navigation start to painted
HOME_TREND_POINTS = 2_000  # the home page's trend (charts.views.home: no constant of its own to import)
MARKER_TRACES = ("failed runs", "configuration changed", "workload changed")

# --- what each page must show --------------------------------------------------------


scalar = page_harness.scalar


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


def _raw(n: int) -> int | None:
    """The points of a timeline of n runs drawn one by one; None past RAW_MAX (buckets: checked by their counts)."""
    from benchmarks.charts.timeline_data import RAW_MAX

    return n if n <= RAW_MAX else None


def make_cases(model: str, compare_ids: list[int]) -> list[dict[str, Any]]:
    from benchmarks.charts.timeline_data import RAW_MAX

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
    assert n_compare_requests == 12 * synthetic.REQUESTS_PER_RUN, n_compare_requests
    n_levels = scalar(
        "SELECT count(DISTINCT concurrency) FROM benchmarks_run WHERE model = %s AND concurrency IS NOT NULL", (model,)
    )
    timeline = {"kind": "timeline", "url": "chart-timeline", "figure": "timeline-figure"}
    specs = [
        # past RAW_MAX runs: the buckets of all of them (the config grouping has no buckets: the latest RAW_MAX)
        {**timeline, "case": "timeline label", "params": {}, "runs": n_all, "points": _raw(n_all)},
        {**timeline, "case": "timeline config", "params": {"group": "config"}, "points": min(n_all, RAW_MAX)},
        {**timeline, "case": "timeline model", "params": {"model": model}, "runs": n_model, "points": _raw(n_model)},
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
            "points": None,  # configurations × their concurrencies: checked curve by curve
            "levels": n_levels,
        },
        {"kind": "regressions", "case": "regressions", "url": "chart-regressions", "figure": None, "params": {}},
        {
            "kind": "home",
            "case": "home",
            "url": "home",
            "figure": "trend-figure",
            "params": {},
            "points": None,  # the latest runs of the models given a panel: checked against the cap
            "max_points": min(n_all, HOME_TREND_POINTS),
        },
    ]
    cases = []
    for spec in specs:
        assert spec["kind"] == "regressions" or (
            spec["points"] or spec.get("levels") or spec.get("max_points") or spec.get("runs")
        ), f"{spec['case']}: no data to measure"
        cases.append({**spec, "format": "html"})
        if spec["kind"] in ("timeline", "compare", "load"):
            rows = spec.get("rows", spec["points"])
            cases.append({**spec, "format": "json", "params": {**spec["params"], "format": "json"}, "rows": rows})
    return cases


# --- checks ---------------------------------------------------------------------------


def check(case: dict[str, Any], response: Any) -> dict[str, Any]:
    """Assert the response is the real page; what it held."""
    from benchmarks.charts.load_curve_figure import MAX_CURVES
    from benchmarks.charts.timeline_data import MAX_DRAWN, RAW_MAX
    from benchmarks.records.catalogue import COMPARE_METRICS

    name = f"{case['case']} ({case['format']})"
    assert response.status_code == 200, f"{name}: status {response.status_code}"
    if case["format"] == "json":
        rows = json.loads(response.content)["rows"]
        if case.get("runs") and case["runs"] > RAW_MAX:  # the timeline's buckets: every run counted once
            assert sum(r["runs"] for r in rows) == case["runs"], f"{name}: the buckets do not count every run"
        elif case["rows"] is None:  # the load curve: a row per configuration and concurrency
            assert rows and all(r["concurrency"] for r in rows), f"{name}: {len(rows)} rows"
        else:
            assert len(rows) == case["rows"], f"{name}: {len(rows)} rows, expected {case['rows']}"
        return {"points": len(rows), "figure_bytes": None}
    page = Page.of(response)
    assert page.is_full_page, f"{name}: not a full page"
    if case["kind"] == "regressions":
        found, groups = page_harness.regressions_shown(page)
        assert found or groups > 0, f"{name}: neither regressions nor groups shown"
        return {"points": found, "figure_bytes": None, "regressions": found}
    figs = page.json_scripts()
    assert case["figure"] in figs, f"{name}: no {case['figure']} json_script"
    size, figure = figs[case["figure"]]
    traces = figure["data"]
    if case["kind"] in ("timeline", "home"):
        points = sum(len(t["x"]) for t in traces if t["name"] not in MARKER_TRACES)
        if case["kind"] == "timeline" and case.get("runs", 0) > RAW_MAX:
            # each line's min and max per bucket (2 points a bucket at most), every run in one bucket
            lines = [t["reduced"] for t in traces if "lo" in t.get("reduced", {})]
            assert "min and max of its runs per" in page.text, f"{name}: not the buckets"
            assert sum(sum(r["runs"]) for r in lines) == case["runs"], f"{name}: the buckets do not count every run"
            assert f"{case['runs']:,} runs" in page.text, f"{name}: the summary does not say {case['runs']:,}"
            points = 2 * sum(len(r["lo"]) for r in lines)
            assert points <= 2 * MAX_DRAWN, f"{name}: {points} points"
        elif case["kind"] == "timeline":
            assert f"{case['points']:,} runs" in page.text, f"{name}: the summary does not say {case['points']:,}"
        else:
            assert "failures-figure" in figs, f"{name}: no failures figure"
            assert 0 < points <= case["max_points"], f"{name}: {points} points, cap {case['max_points']}"
            assert len(page.rows("outcome-")) == 10, f"{name}: not 10 latest runs"
    elif case["kind"] == "compare":
        bars = [t for t in traces if t["type"] == "bar"]
        boxes = [t for t in traces if t["type"] == "box"]
        from benchmarks.records.catalogue import COMPARE_METRICS

        panels = len(COMPARE_METRICS)
        assert len(bars) == panels and all(len(t["y"]) == 12 for t in bars), f"{name}: not {panels} panels of 12 bars"
        assert len(boxes) == 12, f"{name}: {len(boxes)} strips, expected 12"
        points = sum(len(t["y"]) for t in boxes)
    else:
        # One curve per configuration (at most MAX_CURVES), each over distinct, ascending concurrencies.
        curves = [t for t in traces if t.get("mode") == "lines+markers" and t.get("yaxis", "y") == "y"]
        assert 1 <= len(curves) <= MAX_CURVES, f"{name}: {len(curves)} throughput curves"
        for curve in curves:
            assert curve["x"] == sorted(set(curve["x"])) and len(curve["x"]) <= case["levels"], f"{name}: {curve}"
        points = sum(len(t["x"]) for t in curves)
    if case["points"] is not None:
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
    from django.urls import reverse

    url = reverse(case["url"])
    timed = page_harness.time_requests(lambda: client.get(url, case["params"]), lambda r: check(case, r), n)
    db_ms = sum(common.rerun_ms(sql) for sql in timed.sql)
    response = timed.response
    summary = timed.summary()
    result = {
        **{k: v for k, v in case.items() if k != "params"},
        "query": {k: v for k, v in case["params"].items()},
        "median_ms": summary["median_ms"],
        "p95_ms": summary["p95_ms"],
        "min_ms": summary["min_ms"],
        "queries": len(timed.sql),
        "db_ms": round(db_ms, 1),
        "bytes": len(response.content),
        "gzip_bytes": len(gzip.compress(response.content, 6)),  # for reference: kvlab does not compress
        **timed.held,
        "sql": timed.sql,
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
window.__kv = {afterplots: 0};
document.addEventListener("DOMContentLoaded", function () {
  window.__kv.dcl = performance.now();
  if (!window.Plotly) { window.__kv.error = "no Plotly at DOMContentLoaded"; return; }
  var react = window.Plotly.react;
  window.Plotly.react = function (gd) {
    var kv = window.__kv;
    if (!kv.react) kv.react = performance.now();
    var done = react.apply(this, arguments);
    if (gd.__kvTimed) return done;
    gd.__kvTimed = true;
    // Every plotly_afterplot counts: a redraw Plotly starts by itself (margins pushed, a resize) ends later
    // than the first, and the figure is drawn when the last one has fired and its frame has been painted.
    gd.on("plotly_afterplot", function () {
      var n = ++kv.afterplots;
      kv.afterplot = performance.now();
      if (n === 1) kv.first_afterplot = kv.afterplot;
      requestAnimationFrame(function () { requestAnimationFrame(function () {
        if (kv.afterplots === n) { kv.painted = performance.now(); kv.painted_n = n; }
      }); });
    });
    return done;
  };
}, true);
"""
PAINT_QUIET_MS = 300  # after the figure is painted, how long no further plotly_afterplot must come
PAINTED = "() => window.__kv && (window.__kv.painted_n === window.__kv.afterplots || window.__kv.error)"


def start_server(var_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """manage.py runserver on the scratch database, at a free loopback port."""
    from django.templatetags.static import static

    base = f"http://127.0.0.1:{common.free_port()}"
    proc = common.serve(
        [sys.executable, "manage.py", "runserver", "--noreload", base.removeprefix("http://")],
        common.scratch_env(var_dir, allowed_hosts="127.0.0.1,localhost"),
        var_dir / "runserver.log",
        probe_url=base + static("js/charts.js"),
    )
    return proc, base


def browser_times(base: str, pages: list[tuple[str, str, str]], repeats: int) -> list[dict[str, Any]]:
    """Open each page once to warm up, then `repeats` times: navigation start -> the last plotly_afterplot
    (and the frame after it painted)."""
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
                    page.wait_for_function(PAINTED, timeout=120_000)
                    page.wait_for_timeout(PAINT_QUIET_MS)  # a later redraw, if Plotly starts one, is timed too
                    page.wait_for_function(PAINTED, timeout=120_000)
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
                        "first_afterplot_ms": round(statistics.median(s["first_afterplot"] for s in samples), 1),
                        "afterplots": max(s["afterplots"] for s in samples),
                    }
                )
        finally:
            browser.close()
    return results


def timeline_paint(base: str, repeats: int, until: str) -> list[dict[str, Any]]:
    """The timeline painted in Chromium against a kvlab serving at `base` whose runs end at `until` (ISO):
    the overview, a month, one day before the end, and grouped by configuration + workload; each with
    `paint_ok` (painted within PAINT_AIM_MS of navigation start). bench/scale_pages.py can call it on its
    1,000,000-run database."""
    from django.urls import reverse

    end = datetime.fromisoformat(until)
    day = f"x0={end - timedelta(days=2):%Y-%m-%d+%H:%M:%S}&x1={end - timedelta(days=1):%Y-%m-%d+%H:%M:%S}"
    month = f"date_from={end - timedelta(days=31):%Y-%m-%d}&date_to={end:%Y-%m-%d}"
    timeline = reverse("chart-timeline")
    pages = [
        ("timeline label", timeline),
        ("timeline a month", f"{timeline}?{month}"),
        ("timeline a day", f"{timeline}?{day}"),
        ("timeline series", f"{timeline}?group=series"),
    ]
    results = browser_times(base, [(name, path, "#timeline-figure-plot") for name, path in pages], repeats)
    return [{**r, "paint_ok": r["painted_ms"] < PAINT_AIM_MS} for r in results]


# --- the report ------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "OVER"


COLUMNS = [
    Column("case", lambda r: r["case"], "<17"),
    Column("format", lambda r: r["format"], "<6"),
    Column("median ms", lambda r: r["median_ms"], ">9.1f"),
    Column("p95 ms", lambda r: r["p95_ms"], ">8.1f"),
    Column("queries", lambda r: r["queries"], ">7"),
    Column("db ms", lambda r: r["db_ms"], ">7.1f"),
    Column("bytes", lambda r: r["bytes"], ">11,"),
    Column("figure bytes", lambda r: f"{r['figure_bytes']:,}" if r.get("figure_bytes") is not None else "—", ">12"),
    Column("gzip", lambda r: r["gzip_bytes"], ">9,"),
    Column("points", lambda r: r["points"], ">7"),
    Column("time", lambda r: verdict(r["time_ok"]), "<5", gap="  "),
    Column("size", lambda r: verdict(r["size_ok"]), "<5"),
]
BROWSER_COLUMNS = [
    Column("case", lambda b: b["case"], "<17"),
    Column("points", lambda b: b["points"], ">7"),
    Column("traces", lambda b: b["traces"], ">6"),
    Column("response ms", lambda b: b["response_end_ms"], ">11.0f"),
    Column("DOMContentLoaded", lambda b: b["dcl_ms"], ">16.0f"),
    Column("afterplot ms", lambda b: b["afterplot_ms"], ">12.0f"),
    Column("painted ms", lambda b: b["painted_ms"], ">10.0f"),
    Column("paint", lambda b: "" if "paint_ok" not in b else verdict(b["paint_ok"]), "<5"),
    Column("all afterplot", lambda b: b["afterplot_all_ms"], gap="  "),
]


def print_table(results: dict[str, Any]) -> None:
    title = (
        f"Chart pages with {results['runs']:,} runs and {results['requests']:,} requests; "
        f"{results['timed_requests']} timed requests per case after a warm-up"
    )
    page_harness.print_table(title, COLUMNS, results["cases"])
    print(f"(aims: p95 server time < {AIM_MS:.0f} ms, payload < {AIM_BYTES:,} bytes; db ms: the queries run again")
    print(" on the raw sqlite3 connection with every row fetched, best of 3; bytes: the body as the test client gets")
    print(" it, uncompressed; gzip: the same body gzipped, what a browser that asks gets (kvlab compresses them")
    print(" with gzip); points: figure points, JSON rows, or regressions found)")
    if results["browser"]:
        title = f"Browser render, headless Chromium, median of {results['browser'][0]['repeats']} loads after a warm-up"
        page_harness.print_table(title, BROWSER_COLUMNS, results["browser"])
        print("(ms since navigation start; afterplot: Plotly's last plotly_afterplot; painted: two frames later;")
        print(f" paint: the timeline painted within {PAINT_AIM_MS:.0f} ms)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="runs in the database (10 requests each)")
    parser.add_argument("--requests", type=int, default=10, help="timed requests per case")
    parser.add_argument("--browser-repeats", type=int, default=3, help="timed page loads per page (0: no browser)")
    parser.add_argument("--no-profile", action="store_true", help="do not profile the cases over the aims")
    args = common.parse_args(parser, argv, smoke={"runs": 1_000, "requests": 2, "browser_repeats": 1})
    if args.runs < 100 or args.requests < 1 or args.browser_repeats < 0:
        parser.error("--runs must be 100 or more, --requests positive, --browser-repeats not negative")
    if args.browser_repeats and not os.access(CHROMIUM, os.X_OK):
        parser.error(f"{CHROMIUM} is missing: install Debian's chromium, or pass --browser-repeats 0")

    with tempfile.TemporaryDirectory(prefix="kvlab-chart-bench-") as tmp:
        common.setup_migrated_django(Path(tmp))
        from django.db import connections
        from django.test import Client
        from django.urls import reverse

        from benchmarks.history import derived

        start = time.perf_counter()
        data = synthetic.insert_lab(args.runs)
        derived.rebuild_all()  # the timeline's buckets, the regressions' baselines: as an import keeps them
        insert_s = time.perf_counter() - start
        print(f"inserted {args.runs:,} runs and {data['requests']:,} requests in {insert_s:.1f} s")

        model = synthetic.MODELS[1]
        compare_ids = pick_compare_runs(random.Random(12), model)
        client = Client()
        cases = make_cases(model, compare_ids)
        measured = page_harness.measure_each(
            cases,
            lambda case: measure(client, case, args.requests),
            lambda m: f"  {m['case']:<17} {m['format']:<5} median {m['median_ms']:8.1f} ms  {m['bytes']:>11,} bytes",
        )
        profiles = {
            f"{m['case']} ({m['format']})": profile(client, case)
            for case, m in zip(cases, measured, strict=True)
            if not args.no_profile and not (m["time_ok"] and m["size_ok"])
        }
        db_bytes = (Path(tmp) / "kvlab.sqlite3").stat().st_size
        connections.close_all()

        browser: list[dict[str, Any]] = []
        if args.browser_repeats:
            compare_query = "&".join(f"run={i}" for i in compare_ids)
            proc, base = start_server(Path(tmp))
            try:
                browser = timeline_paint(base, args.browser_repeats, until=data["now"]) + browser_times(
                    base,
                    [("compare 12 runs", f"{reverse('chart-compare')}?{compare_query}", "#compare-figure-plot")],
                    args.browser_repeats,
                )
            finally:
                common.stop(proc)

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
        "chromium": CHROMIUM.name if browser else None,
        **common.machine(),
    }
    for name, text in profiles.items():
        print(f"\n=== profile: {name} (3 requests) ===")
        print("\n".join(line for line in text.splitlines() if line.strip())[:6000])
    over = [r for r in measured if not r["size_ok"] and r.get("bytes_by_key")]
    for r in over:
        print(f"\nbytes of {r['case']} ({r['format']}) figure by trace key: {r['bytes_by_key']}")
    print_table(results)
    common.write_results(args.out, "chart_speed", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
