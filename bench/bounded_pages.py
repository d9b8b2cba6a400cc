"""Do the pages a team opens daily answer in under 1 s, under 1 MiB, whatever the history holds?

What is measured
----------------
A fresh, migrated database — SQLite in a temporary KVLAB_VAR_DIR (the default), or with
``--engine postgres`` a scratch PostgreSQL database (``--pg-database``, default
``kvlab_bounded``) created through the role whose DATABASE_URL ``scripts/ensure-postgres.sh``
prints (or ``--pg-url``), dropped at the end — gets a hostile history:

* ``--runs`` runs (default 200,000) of bench/synthetic.py's lab, then each given its own
  model (``synthetic.make_models_distinct``): 200,000 distinct models. Only the first 1,000
  runs get their 10 requests (the list and the charts read the runs table alone);
* one run of ``--big-run`` requests (default 1,000,000; ``synthetic.insert_big_run``: the
  lab's first run drawn wave after wave, its aggregates computed as an import does), the
  run of a job that asked for them;
* ``--jobs`` jobs (default 20,000) on one server, each holding 4 prompts of 1 KiB in its
  params (the job list must never load them), and the big run's job.

On PostgreSQL the sequences are reset and ``VACUUM ANALYZE`` runs after the fill (what
autovacuum does within a minute of a bulk load).

Then django.test.Client requests each page in-process, through the whole middleware
stack, view and template: once to warm up, once more to count its SQL queries, then
``--requests`` times (default 10) timed. Every answer is checked — status 200 and what
the page must show (50 run rows; the one run of a model outside the offered values; the
timeline's figure of its latest 10,000 runs; 50 job rows; the big run's key, its first
200 requests and its sampled distributions; between 1 and 20 suggestions, each matching
the text) — so only real pages are measured:

* run list            /runs/ (the newest 50 runs; the filters offer the most used values)
* run list, 1 model   /runs/?model=<the oldest run's model>
* timeline            /charts/timeline/ (by config label: the latest 10,000 runs)
* job list            /jobs/ (the newest 50 jobs)
* run page            /runs/<the big run>/
* run page, last      /runs/<the big run>/?page=<its last page of requests>
* suggest by start    /runs/values/?model=<the start of the oldest run's model>
* suggest by part     /runs/values/?model=instruct (in the middle of most models, in another case)
* suggest, no text    /runs/values/?model=

The table gives each page's p95 and median server time (nearest rank), its response size,
its queries, and whether it meets the goal: p95 under 1 s and a response under 1 MiB.
A missed goal is reported, not an error: the script exits 1 only when a page answered
wrongly.

Usage (from the repository root)::

    .venv/bin/python bench/bounded_pages.py [--engine sqlite|postgres] [--runs N] [--big-run N]
        [--jobs N] [--requests N] [--pg-url URL] [--pg-database NAME] [--smoke] [--out DIR]

``--smoke`` fills 2,000 runs, a 20,000-request run and 50 jobs, and times 2 requests per
page (every check still made; results in bench/out/smoke/), as ``make test`` does so the
script cannot rot.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import page_harness
import synthetic
from page_harness import Column, Page

GOAL_MS = 1000.0  # p95 server time
GOAL_BYTES = 2**20  # one response
JOBS_PER_PAGE = 50  # the job list's page (jobs.views.job_list: no constant of its own to import)
PROMPT = "Summarise the following text in one paragraph. " * 21  # 1 KiB, 4 per job


# --- the fill --------------------------------------------------------------------------


def fill(args: argparse.Namespace) -> dict[str, Any]:
    """The hostile history: distinct models, a big run of a job, jobs with prompts. What the pages must show."""
    from django.db import connection
    from django.utils import timezone

    from benchmarks.charts import views as chart_views
    from benchmarks.models import Job, RequestResult, Run, Server

    timings = {}
    start = time.perf_counter()
    synthetic.insert_lab(args.runs, requests_of_first=min(args.runs, 1_000))
    n_models = synthetic.make_models_distinct()
    timings["runs_s"] = time.perf_counter() - start
    common.reset_id_sequences()  # insert_lab gives the ids itself

    start = time.perf_counter()
    server = Server.objects.create(name="gpu-box", base_url="http://127.0.0.1:8080")
    done = Job.State.SUCCEEDED
    big_job = Job.objects.create(
        server=server,
        base_url=server.base_url,
        label="a million requests",
        params={"requests": args.big_run, "concurrency": 64, "n_predict": 256, "prompts": [PROMPT] * 4},
        state=done,
        n_total=args.big_run,
        n_done=args.big_run,
        finished_at=timezone.now(),
    )
    big_run = synthetic.insert_big_run(args.big_run, job_id=big_job.pk, source="executed")
    timings["big_run_s"] = time.perf_counter() - start

    start = time.perf_counter()
    for first in range(0, args.jobs, 2_000):
        Job.objects.bulk_create(
            Job(
                server=server,
                base_url=server.base_url,
                label=f"nightly-{i}",
                params={"requests": 40, "concurrency": 4, "n_predict": 256, "prompts": [PROMPT] * 4},
                state=done,
                n_total=40,
                n_done=40,
                n_failed=i % 3,
                finished_at=timezone.now(),
            )
            for i in range(first, min(args.jobs, first + 2_000))
        )
    timings["jobs_s"] = time.perf_counter() - start
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")  # autocommit: outside a transaction, as VACUUM needs

    oldest = Run.objects.order_by("pk").values_list("model", flat=True).first()
    n_dated = Run.objects.exclude(started_at=None).count()
    n_requests = RequestResult.objects.filter(run_id=big_run).count()
    assert n_models == args.runs and n_requests == args.big_run, (n_models, n_requests)
    return {
        "big_run": big_run,
        "big_run_key": Run.objects.get(pk=big_run).key,
        "oldest_model": oldest,
        "timeline_points": min(n_dated, chart_views.MAX_TIMELINE_POINTS),
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
    }


# --- the pages -------------------------------------------------------------------------


def cases(data: dict[str, Any]) -> list[dict[str, Any]]:
    from django.urls import reverse

    from benchmarks.history.views import REQUESTS_PER_PAGE

    big, last = data["big_run"], -(-data["big_run_requests"] // REQUESTS_PER_PAGE)
    start = data["oldest_model"][:12]  # e.g. "Devstral-Sma": the lab's models share their starts
    part = "instruct"  # starts no model; part of most ("…-Instruct-…"), in another case
    return [
        {"page": "run list", "url": reverse("run-list"), "params": {}, "rows": 50},
        {"page": "run list, 1 model", "url": reverse("run-list"), "params": {"model": data["oldest_model"]}, "rows": 1},
        {"page": "timeline", "url": reverse("chart-timeline"), "params": {}, "points": data["timeline_points"]},
        {"page": "job list", "url": reverse("job-list"), "params": {}, "jobs": JOBS_PER_PAGE},
        {
            "page": "run page, big run",
            "url": reverse("run-detail", args=[big]),
            "params": {},
            "requests": REQUESTS_PER_PAGE,
        },
        {
            "page": "run page, its last page",
            "url": reverse("run-detail", args=[big]),
            "params": {"page": last},
            "requests": data["big_run_requests"] - (last - 1) * REQUESTS_PER_PAGE,
        },
        {"page": "suggest by start", "url": reverse("run-values"), "params": {"model": start}, "starts": start},
        {"page": "suggest by part", "url": reverse("run-values"), "params": {"model": part}, "contains": part},
        {"page": "suggest, no text", "url": reverse("run-values"), "params": {"model": ""}, "top": True},
    ]


def check(case: dict[str, Any], response: Any) -> None:
    """Assert the answer is the real page."""
    from benchmarks.history import values

    name = case["page"]
    assert response.status_code == 200, f"{name}: status {response.status_code}"
    page = Page.of(response)
    if "rows" in case:
        runs = page.rows("outcome-")  # templates/benchmarks/run_list.html
        assert len(runs) == case["rows"], f"{name}: {len(runs)} rows, not {case['rows']}"
        if case["params"].get("model"):
            cells = [td.text for tr in runs for td in tr.find_all("td")]
            assert case["params"]["model"] in cells, f"{name}: not the model's run"
    elif "points" in case:
        assert f"{case['points']:,} runs" in page.text, f"{name}: the summary does not say {case['points']:,} runs"
        assert "timeline-figure" in page.json_scripts(), f"{name}: no figure"
    elif "jobs" in case:
        found = page_harness.linked_ids(page.rows(), "job-detail")
        assert len(found) == case["jobs"], f"{name}: not {case['jobs']} job rows"
    elif "requests" in case:
        found = len(page.rows(classes=("ok", "failed")))  # templates/benchmarks/run_detail.html
        assert found == case["requests"], f"{name}: {found} request rows, not {case['requests']}"
        assert "a sample: every" in page.text, f"{name}: the distributions do not say they are a sample"
    else:
        offered = page.option_values()
        bound = values.TOP_CHOICES if case.get("top") else values.SUGGESTIONS
        assert 0 < len(offered) <= bound, f"{name}: {len(offered)} suggestions"
        if "starts" in case:
            assert all(v.startswith(case["starts"]) for v in offered), f"{name}: {offered}"
        if "contains" in case:
            assert all(case["contains"].casefold() in v.casefold() for v in offered), f"{name}: {offered}"


def measure(client: Any, case: dict[str, Any], n: int) -> dict[str, Any]:
    timed = page_harness.time_requests(
        lambda: client.get(case["url"], case["params"]), lambda response: check(case, response), n
    )
    p95 = common.percentile(timed.times_ms, 95)
    size = len(timed.response.content)
    summary = timed.summary()
    return {
        "page": case["page"],
        "path": case["url"] + (f"?{urllib.parse.urlencode(case['params'])}" if case["params"] else ""),
        "p95_ms": summary["p95_ms"],
        "median_ms": summary["median_ms"],
        "max_ms": summary["max_ms"],
        "bytes": size,
        "queries": len(timed.sql),
        "time_ok": p95 < GOAL_MS,
        "size_ok": size < GOAL_BYTES,
        "sql": timed.sql,
    }


def goal(page: dict[str, Any]) -> str:
    missed = [what for what, ok in (("time over", page["time_ok"]), ("size over", page["size_ok"])) if not ok]
    return ", ".join(missed) or "met"


COLUMNS = [
    Column("page", lambda p: p["page"], "<24"),
    Column("p95 ms", lambda p: p["p95_ms"], ">8.1f"),
    Column("median ms", lambda p: p["median_ms"], ">10.1f"),
    Column("bytes", lambda p: p["bytes"], ">11,"),
    Column("queries", lambda p: p["queries"], ">8"),
    Column("goal (<1 s, <1 MiB)", goal, gap="  "),
]


def print_table(results: dict[str, Any]) -> None:
    title = (
        f"Bounded pages on {results['engine']}: {results['runs']:,} runs of {results['runs']:,} distinct models, "
        f"a {results['big_run_requests']:,}-request run, {results['jobs']:,} jobs; "
        f"{results['timed_requests']} timed requests per page"
    )
    page_harness.print_table(title, COLUMNS, results["pages"])


# --- the engines -----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--runs", type=int, default=200_000, help="runs in the database, each of its own model")
    parser.add_argument("--big-run", type=int, default=1_000_000, help="requests of the one big run")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs, each with 4 KiB of prompts")
    parser.add_argument("--requests", type=int, default=10, help="timed requests per page")
    parser.add_argument("--pg-url", help="DATABASE_URL of a role that may create databases (default: ensure-postgres)")
    parser.add_argument("--pg-database", default="kvlab_bounded", help="the scratch PostgreSQL database's name")
    args = common.parse_args(parser, argv, smoke={"runs": 2_000, "big_run": 20_000, "jobs": 50, "requests": 2})
    if args.runs < 100 or args.big_run <= 10_000 or args.jobs < 50 or args.requests < 1:
        # over 10,000 requests the run page's distributions are a sample, and say so
        parser.error("--runs must be 100 or more, --big-run over 10,000, --jobs 50 or more, --requests positive")

    with (
        tempfile.TemporaryDirectory(prefix="kvlab-bounded-bench-") as tmp,
        page_harness.scratch_database(Path(tmp), args.engine, args.pg_url, args.pg_database),
    ):
        from django.test import Client

        version = page_harness.engine_version()
        print(
            f"[{args.engine}] filling {args.runs:,} runs of distinct models, a {args.big_run:,}-request run "
            f"and {args.jobs:,} jobs ...",
            flush=True,
        )
        data = fill(args) | {"big_run_requests": args.big_run}
        print(f"[{args.engine}] filled in {data['timings_s']}", flush=True)
        client = Client()
        pages = page_harness.measure_each(
            cases(data),
            lambda case: measure(client, case, args.requests),
            lambda p: f"  {p['page']:<24} p95 {p['p95_ms']:8.1f} ms  {p['bytes']:>11,} bytes",
        )

    results = {
        "engine": args.engine,
        "engine_version": version,
        "runs": args.runs,
        "big_run_requests": args.big_run,
        "jobs": args.jobs,
        "timed_requests": args.requests,
        "fill": data["timings_s"],
        "pages": pages,
        **common.machine(),
    }
    print_table(results)
    common.write_results(args.out, f"bounded_pages_{args.engine}", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
