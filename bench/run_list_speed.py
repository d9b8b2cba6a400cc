"""How long does the run list take to serve with 100,000 runs stored?

What is measured
----------------
A fresh, migrated SQLite database (in a temporary KVLAB_VAR_DIR) gets N runs (default
100,000) of bench/synthetic.py's lab (varied configurations and request aggregates,
described there), inserted directly with executemany; only the first 100 runs get
their requests (the list reads only the runs table). Then django.test.Client requests
reverse("run-list") in-process, through the whole middleware stack, view and template,
for these pages, each with per_page 50 and 200:

* default   the first page, newest first
* filtered  one model (the lab's first), outcome=failed
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

    .venv/bin/python bench/run_list_speed.py [--runs N] [--requests N] [--smoke] [--out DIR]

``--smoke`` measures 1,000 runs with 2 timed requests per case (every check still
made; results in bench/out/smoke/), as ``make test`` does so the script cannot rot.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import page_harness
import synthetic
from page_harness import Column, Page

# --- the measurement ---------------------------------------------------------------


def count_runs(where: str = "", params: tuple[Any, ...] = ()) -> int:
    """Count runs with plain SQL, independently of the view, to know what each page must show."""
    return page_harness.scalar(f"SELECT count(*) FROM benchmarks_run {where}", params)


def rows_on_page(total: int, per_page: int, page: int) -> int:
    """What Paginator.get_page shows: a page past the end is the last page."""
    if total == 0:
        return 0
    last = math.ceil(total / per_page)
    page = min(page, last)
    return min(per_page, total - (page - 1) * per_page)


def page_sizes() -> tuple[int, int]:
    """The run list's default page size and its largest (history.forms)."""
    from benchmarks.history.forms import PAGE_SIZES, RunFilterForm

    return RunFilterForm.base_fields["per_page"].empty_value, max(PAGE_SIZES)


def cases(filter_model: str) -> list[dict[str, Any]]:
    total = count_runs()
    failed = count_runs("WHERE model = %s AND n_ok = 0 AND n_requests > 0", (filter_model,))
    result = []
    for per_page in page_sizes():
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
    return client.get(url, case["params"], **headers)


def check(case: dict[str, Any], response: Any) -> None:
    assert response.status_code == 200, f"{case['case']}: status {response.status_code}"
    page = Page.of(response)
    rows = len(page.rows("outcome-"))  # one per run row in templates/benchmarks/run_list.html
    assert rows == case["expected_rows"], (
        f"{case['case']}/{case['per_page']}: {rows} rows, expected {case['expected_rows']}"
    )
    assert page.is_full_page != case["htmx"], f"{case['case']}: htmx={case['htmx']} but full page={page.is_full_page}"


def measure_case(client: Any, url: str, case: dict[str, Any], n: int) -> dict[str, Any]:
    timed = page_harness.time_requests(lambda: fetch(client, url, case), lambda response: check(case, response), n)
    sql = [{"ms": round(common.rerun_ms(q), 2), "sql": q} for q in timed.sql]
    summary = timed.summary(digits=2)
    return {
        **case,
        "median_ms": summary["median_ms"],
        "p95_ms": summary["p95_ms"],
        "min_ms": summary["min_ms"],
        "queries": len(timed.sql),
        "db_ms": round(sum(q["ms"] for q in sql), 2),
        "response_kib": round(len(timed.response.content) / 1024, 1),
        "sql": sql,
    }


def query_string(r: dict[str, Any]) -> str:
    return "&".join(f"{k}={v}" for k, v in r["params"].items()) + ("  [HX-Request]" if r["htmx"] else "")


COLUMNS = [
    Column("case", lambda r: r["case"], "<9"),
    Column("per_page", lambda r: r["per_page"], ">8"),
    Column("rows", lambda r: r["expected_rows"], ">5"),
    Column("median ms", lambda r: r["median_ms"], ">10.1f"),
    Column("p95 ms", lambda r: r["p95_ms"], ">8.1f"),
    Column("queries", lambda r: r["queries"], ">8"),
    Column("db ms", lambda r: r["db_ms"], ">7.1f"),
    Column("KiB", lambda r: r["response_kib"], ">6.0f"),
    Column("query string", query_string, gap="  "),
]


def print_table(results: dict[str, Any]) -> None:
    title = f"Run list with {results['runs']:,} runs, {results['timed_requests']} timed requests per case"
    page_harness.print_table(title, COLUMNS, results["cases"])
    print("(db ms: that page's queries run again on the raw sqlite3 connection, all rows fetched, best of 3;")
    print(" the rest of the median is Python: form, paginator, template)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="runs in the database")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per case")
    args = common.parse_args(parser, argv, smoke={"runs": 1_000, "requests": 2})
    if args.runs < 1 or args.requests < 1:
        parser.error("--runs and --requests must be positive")

    with tempfile.TemporaryDirectory(prefix="kvlab-runlist-bench-") as tmp:
        common.setup_migrated_django(Path(tmp))
        from django.db import connections
        from django.test import Client
        from django.urls import reverse

        start = time.perf_counter()
        data = synthetic.insert_lab(args.runs, requests_of_first=100)
        print(f"inserted {args.runs:,} runs (+{data['requests']} requests) in {time.perf_counter() - start:.1f} s")

        client = Client()
        url = reverse("run-list")
        measured = page_harness.measure_each(
            cases(filter_model=synthetic.MODELS[0]),
            lambda case: measure_case(client, url, case, args.requests),
            lambda m: f"  {m['case']:<9} per_page={m['per_page']:<4} median {m['median_ms']:7.1f} ms",
        )
        connections.close_all()

    results = {
        "runs": args.runs,
        "timed_requests": args.requests,
        "cases": measured,
        **common.machine(),
    }
    print_table(results)
    common.write_results(args.out, "run_list_speed", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
