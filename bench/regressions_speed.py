"""How fast is the regressions page on a large history, and what does keeping its baselines cost an import?

What is measured
----------------
* page: bench/synthetic.py's lab of ``--runs`` runs (default 200,000; requests of the first 1,000
  only: the page never reads requests) is inserted into a scratch database, ``rebuild_all``
  files it (timed), then the page is fetched ``--repeats`` times per grouping with Django's
  test client, at the default thresholds and at 1000 % (the lab still holds regressions beyond
  that: a timeout's latency), the server time's p50 and p95 in ms beside the goal (< 50 ms) and
  the time in SQL; then the query of the page's empty state (the series walked one by one to
  count them, up to 1,001) per family.
* hook (SQLite only): bench/import_speed.py's file (``--requests``, default 200,000: 20,000
  runs, nearly each its own series) imported into a fresh database (3 times at most); the
  seconds spent in ``history.derived.runs_changed`` (every derived table) and in
  ``history.baselines.runs_changed`` (this page's) beside the import's.

Usage (from the repository root)::

    .venv/bin/python bench/regressions_speed.py [--runs N] [--requests N] [--repeats N] [--smoke] [--out DIR]

With DATABASE_URL set (PostgreSQL) the page is measured there, in a database of that URL's
server named ``<name>_regressions`` (created, then dropped), and the hook is not measured.
``--smoke``: 3,000 runs, 5,000 requests, 2 repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import page_harness
import synthetic
from page_harness import Page

GOAL_MS = 50


def measure_page(runs: int, repeats: int) -> dict[str, Any]:
    from django.test import Client
    from django.urls import reverse

    from benchmarks.charts import regression_views
    from benchmarks.history import baselines, derived
    from benchmarks.records import catalogue

    started = time.perf_counter()
    synthetic.insert_lab(runs, requests_of_first=min(runs, 1_000))
    filled = time.perf_counter() - started
    started = time.perf_counter()
    derived.rebuild_all()
    rebuilt = time.perf_counter() - started
    print(f"  filled in {filled:.1f} s; rebuild_all {rebuilt:.1f} s")
    client = Client()
    pages: dict[str, Any] = {}
    at_most = {f"t_{m}": 1000 for m in catalogue.METRICS}
    url = reverse("chart-regressions")

    def check(response: Any) -> Page:
        assert response.status_code == 200, f"{url}: status {response.status_code}"
        return Page.of(response)

    for grouping in catalogue.GROUPINGS:
        for name, query in (("default", {}), ("at 1000 %", at_most)):
            params = {"group": grouping, **query}
            timed = page_harness.time_requests(
                lambda params=params: client.get(url, params), check, repeats, count="first timed", time_sql=True
            )
            pages[f"{grouping}, {name}"] = {
                "p50_ms": round(statistics.median(timed.times_ms), 1),
                "p95_ms": round(common.percentile(timed.times_ms, 95), 1),
                "sql_p50_ms": round(statistics.median(timed.sql_ms), 1),
                "says": "none" if "No regressions across" in timed.held.text else "regressions",
            }
            shown = pages[f"{grouping}, {name}"]
            print(f"  {grouping:7} {name:10}  p50 {shown['p50_ms']:7.1f} ms  p95 {shown['p95_ms']:7.1f} ms"
                  f"  (goal < {GOAL_MS} ms; in SQL, p50 {shown['sql_p50_ms']:.1f} ms)")  # fmt: skip
    # The lab always holds a regression beyond 1000 % (a timeout's latency): the page's empty state, which
    # walks the series one by one to count them, is timed as its one query, per family.
    walks = {}
    for family in ("series", "label", "server"):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            walked = baselines.series_sample(family, regression_views.MAX_COUNTED)
            times.append((time.perf_counter() - start) * 1000)
        walks[family] = {"p50_ms": round(statistics.median(times), 1), "series": len(walked)}
        print(
            f"  the empty state's walk over {family} series: p50 {walks[family]['p50_ms']:.1f} ms ({len(walked)} read)"
        )
    return {
        "runs": runs,
        "fill_s": round(filled, 1),
        "rebuild_all_s": round(rebuilt, 1),
        "pages": pages,
        "empty_state_walks": walks,
    }


def measure_hook(work: Path, n_requests: int, repeats: int) -> dict[str, Any]:
    """Import the lab's file into a fresh database `repeats` times: the import's seconds, those of
    history.derived.runs_changed (every derived table) and of history.baselines.runs_changed (this page's)."""
    from common import KvlabDatabases, kvlab_import

    from benchmarks.history import baselines, derived

    path = work / "bench_results.jsonl"
    synthetic.write_lab_jsonl(path, n_requests)
    dbs = KvlabDatabases(work)
    spent: dict[str, float] = {}
    hooks = {"derived": (derived, derived.runs_changed), "baselines": (baselines, baselines.runs_changed)}

    def timed(name: str, changed: Any) -> Any:
        def run(run_ids: Any, *rest: Any) -> None:  # runs_changed(ids[, were]) in either module
            start = time.perf_counter()
            changed(run_ids, *rest)
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

        return run

    for name, (module, changed) in hooks.items():
        module.runs_changed = timed(name, changed)  # type: ignore[attr-defined]
    imports: list[float] = []
    seconds: dict[str, list[float]] = {name: [] for name in hooks}
    try:
        for _ in range(repeats):
            dbs.fresh()
            spent.clear()
            start = time.perf_counter()
            kvlab_import(path)
            imports.append(time.perf_counter() - start)
            for name in hooks:
                seconds[name].append(spent.get(name, 0.0))
    finally:
        for module, changed in hooks.values():
            module.runs_changed = changed  # type: ignore[attr-defined]
    results: dict[str, Any] = {"requests": n_requests, "import_s": imports}
    for name in hooks:
        share = statistics.median(seconds[name]) / statistics.median(imports)
        results[name] = {"runs_changed_s": seconds[name], "share": round(share, 4)}
        print(f"  import {statistics.median(imports):.2f} s, of it {name}.runs_changed"
              f" {statistics.median(seconds[name]):.3f} s ({share:.1%})")  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200_000)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=10)
    args = common.parse_args(parser, argv, smoke={"runs": 3_000, "requests": 5_000, "repeats": 2})
    url = os.environ.get("DATABASE_URL")
    results: dict[str, Any] = {**common.machine(), "engine": "postgresql" if url else "sqlite"}
    with tempfile.TemporaryDirectory(prefix="kvlab-regressions-") as tmp:
        work = Path(tmp)
        if url:
            scratch = urllib.parse.urlsplit(url).path.strip("/") + "_regressions"
            with page_harness.scratch_database(work, "postgres", pg_url=url, pg_database=scratch):
                common.print_header(f"regressions page, PostgreSQL, {args.runs:,} runs")
                results["page"] = measure_page(args.runs, args.repeats)
        else:
            common.setup_django(work, allowed_hosts="testserver")
            common.print_header(f"the import hook, SQLite, {args.requests:,} requests")
            results["hook"] = measure_hook(work, args.requests, min(args.repeats, 3))
            from django.db import connections

            connections.close_all()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{connections['default'].settings_dict['NAME']}{suffix}").unlink(missing_ok=True)
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            common.print_header(f"regressions page, SQLite, {args.runs:,} runs")
            results["page"] = measure_page(args.runs, args.repeats)
    common.write_results(args.out, f"regressions_speed_{results['engine']}", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
