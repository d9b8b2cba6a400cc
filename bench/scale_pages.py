"""Does every page answer in under 300 ms and 1 MiB at 1,000,000 runs and 10,000,000 requests?

What is measured
----------------
The database bench/scale_fill.py fills (run first, in its own process: it reuses a kept
database that is current, or fills one) — bench/synthetic.py's lab at ``--runs`` runs (default
1,000,000) of 10 requests each, 20,000 jobs on one server, 2,000 sweeps and two big runs of
``--big-runs`` requests each (default 1,000,000) — on SQLite or, with ``--engine postgres``, PostgreSQL.

Then django.test.Client requests each page in-process, through the whole middleware stack
(gzip included: every request says ``Accept-Encoding: gzip``), view and template: once to
warm up, then ``--requests`` times (default 20) timed, the SQL queries of the first counted.
A page whose timed requests pass ``--max-case-s`` seconds (default 20) stops after 3 of
them (after 1 when its warm-up alone took longer), and its row says how many were timed.
The pages (per_page 200 unless named):

* run list: the default sort at 50 and 200 rows, a deep page; each sort of
  benchmarks.history.forms.SORTS in both directions; each filter — a model, a GPU, a label,
  a tool, an engine, each outcome, a date range (the lab's last 30 days), a run key's part
  (common) and a whole run key (one run) — and combinations (a model's failed runs, a model
  by tok/s, a label in a date range, partial runs by concurrency);
* run page (the newest run), compare (12 runs: the page and the chart);
* a big run's page, and compare of the two big runs (the page and the chart);
* timeline: the default, each grouping, a model, a zoomed range (x0/x1: the last 30 days),
  and its JSON download; load curve (a model); regressions: the default and each grouping;
  home; job list (first and last page); sweep list.

Every answer is checked, so only real pages are measured: status 200, and what the page must
show, against plain SQL — the run list's rows are as many as the filter matches (up to the
page size), every row matches the filter (a part of a run id: among the latest runs, as the
form says) and the rows come in the sort's order (no value lowest), the first holding the
extreme value (of the latest matches, where the page says it sorted only those); the run
page's 10 requests; compare's 12 runs, and a strip point for each of their ok requests; a big
run's first 200 requests and its distributions called a sample; the big runs' chart drawing an even
sample of each (the points plain SQL finds at seq 0, step, 2·step, …) and saying of how many; each
chart's figure with points; the home page's 10 latest runs; 50 job rows; 100 sweep rows; the
regressions found, or the groups searched.

The table gives each page's p95 and median server time (nearest rank) beside the goal — p95
under 300 ms (the regressions page: under 50 ms) — its bytes on the wire (gzip) beside the
goal of 1 MiB, and its queries. For a page that misses its time goal, each of its queries is
run again, timed, and the slowest is EXPLAINed (SQLite: EXPLAIN QUERY PLAN; PostgreSQL:
EXPLAIN (ANALYZE, BUFFERS)): in the results, and printed below the table. A missed goal is
reported, not an error: the script exits 1 only when a page answered wrongly.

Usage (from the repository root)::

    .venv/bin/python bench/scale_pages.py [--engine sqlite|postgres] [--runs N] [--requests N]
        [--max-case-s S] [--only TEXT] [fill options: see scale_fill.py] [--smoke] [--out DIR]

Results: bench/out/scale_pages_<engine>.json. ``--smoke`` fills 2,000 runs (60 jobs, 110 sweeps,
big runs of 20,000 requests) and times 2 requests a page, every check still made (results in
bench/out/smoke/).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.parse
from datetime import datetime, timedelta
from typing import Any

import common  # bench/ is on sys.path when a script runs
import page_harness
import scale_fill
import synthetic
from common import ROOT
from page_harness import Column, Page

GOAL_MS = 300.0  # p95 server time, every page
GOAL_REGRESSIONS_MS = 50.0  # the regressions page
GOAL_BYTES = 2**20  # on the wire
NO_RUNS = "No runs match these filters."  # run_list.html
# many matches sorted by a value: the latest N of them are sorted (history.views.SORT_WINDOW), and the page says so
SORT_WINDOW_NOTE = r"So many runs match that the latest ([\d,]+) of them are sorted"
MARKER_TRACES = ("failed runs", "configuration changed", "workload changed")
# The filters in plain SQL, independent of the view: what every row of the page must match.
OUTCOME_SQL = {
    "ok": "n_requests > 0 AND n_ok = n_requests",
    "partial": "n_ok > 0 AND n_ok < n_requests",
    "failed": "n_requests > 0 AND n_ok = 0",
    "unknown": "n_requests = 0 AND summary IS NOT NULL",  # the lab holds no tool summary: none
}


# --- the pages and what each must show ---------------------------------------------------


scalar = page_harness.scalar
rows = page_harness.rows


def run_list_case(name: str, params: dict[str, Any], where: list[tuple[str, tuple[Any, ...]]]) -> dict[str, Any]:
    """A run list page; `where`: its filter in plain SQL. The rows it must show are counted up to the page size."""
    from django.urls import reverse

    from benchmarks.history.forms import SORTS

    params = {"per_page": 200, **params}
    clause = " AND ".join(f"({sql})" for sql, _ in where) or "1 = 1"
    args = tuple(a for _, a_ in where for a in a_)
    per_page, page = params["per_page"], params.get("page", 1)
    reach = per_page * page
    matching = scalar(f"SELECT count(*) FROM (SELECT 1 FROM benchmarks_run WHERE {clause} LIMIT {reach}) AS m", args)
    if matching <= per_page * (page - 1):  # a page past the end shows the last page
        page = max(1, -(-matching // per_page))
    rows = max(0, min(per_page, matching - per_page * (page - 1)))
    sort = params.get("sort", "-date")
    column = SORTS[sort.lstrip("-")]
    extreme = None
    if page == 1 and rows:
        order = "DESC NULLS LAST" if sort.startswith("-") else "ASC NULLS FIRST"
        extreme = scalar(f"SELECT {column} FROM benchmarks_run WHERE {clause} ORDER BY {column} {order} LIMIT 1", args)
    return {
        "page": name,
        "kind": "run list",
        "url": reverse("run-list"),
        "params": params,
        "rows": rows,
        "where": (clause, args),
        "sort_column": column,
        "descending": sort.startswith("-"),
        "extreme": extreme,
    }


def cases(meta: dict[str, Any]) -> list[dict[str, Any]]:
    from django.db import connection
    from django.urls import reverse

    from benchmarks.history.forms import KEY_SEARCH_RUNS, SORTS
    from benchmarks.history.views import DISTRIBUTION_SAMPLE, REQUESTS_PER_PAGE
    from benchmarks.records import catalogue

    until = datetime.fromisoformat(meta["until"])
    adapt = connection.ops.adapt_datetimefield_value
    model, gpu = synthetic.MODELS[1], "RTX 4090"
    lab = synthetic.Lab(until=until)
    label = next(lab_label["name"] for lab_label in lab.labels if not lab_label["executed"])
    executed = next(lab_label["name"] for lab_label in lab.labels if lab_label["executed"])
    first_day, last_day = (until - timedelta(days=30)).date(), until.date()
    date_sql = (
        "started_at >= %s AND started_at < %s",
        (adapt(datetime.combine(first_day, datetime.min.time(), until.tzinfo)),
         adapt(datetime.combine(last_day + timedelta(days=1), datetime.min.time(), until.tzinfo))),
    )  # fmt: skip
    # a whole run id is found anywhere; a part of one among the latest KEY_SEARCH_RUNS runs (forms.RunFilterForm)
    one_key = scalar("SELECT key FROM benchmarks_run ORDER BY id LIMIT 1")
    newest_key = scalar("SELECT key FROM benchmarks_run WHERE key LIKE %s ORDER BY id DESC LIMIT 1", (f"{label}-%",))
    common_part = newest_key[: len(label) + 3]  # e.g. "gemma3-27b-np8-09": the label's recent runs
    latest = f"SELECT id FROM benchmarks_run ORDER BY started_at DESC, id DESC LIMIT {KEY_SEARCH_RUNS}"
    key_sql = f"key = %s OR (key LIKE %s AND id IN (SELECT id FROM ({latest}) AS latest))"
    by = {"model": ("model = %s", (model,)), "gpu": ("gpu = %s", (gpu,)), "label": ("label = %s", (label,))}
    run_lists = [
        run_list_case("run list, 50", {"per_page": 50}, []),
        run_list_case("run list, 200", {}, []),
        run_list_case("run list, page 1000 of 50", {"per_page": 50, "page": 1000}, []),
        *(
            run_list_case(f"run list, sort {sign}{name}", {"sort": f"{sign}{name}"}, [])
            for name in SORTS
            for sign in ("-", "")
        ),
        run_list_case("run list, a model", {"model": model}, [by["model"]]),
        run_list_case("run list, a GPU", {"gpu": gpu}, [by["gpu"]]),
        run_list_case("run list, a label", {"label": label}, [by["label"]]),
        run_list_case("run list, a job label", {"label": executed}, [("label = %s", (executed,))]),
        run_list_case("run list, tool kvlab", {"tool": "kvlab"}, [("tool = %s", ("kvlab",))]),
        run_list_case("run list, engine llama.cpp", {"engine": "llama.cpp"}, [("engine = %s", ("llama.cpp",))]),
        *(
            run_list_case(f"run list, outcome {outcome}", {"outcome": outcome}, [(sql, ())])
            for outcome, sql in OUTCOME_SQL.items()
        ),
        run_list_case(
            "run list, last 30 days", {"date_from": first_day.isoformat(), "date_to": last_day.isoformat()}, [date_sql]
        ),
        run_list_case("run list, key part", {"run": common_part}, [(key_sql, (common_part, f"%{common_part}%"))]),
        run_list_case("run list, one key", {"run": one_key}, [(key_sql, (one_key, f"%{one_key}%"))]),
        run_list_case(
            "run list, model + failed",
            {"model": model, "outcome": "failed"},
            [by["model"], (OUTCOME_SQL["failed"], ())],
        ),
        run_list_case("run list, model by -tok_s", {"model": model, "sort": "-tok_s"}, [by["model"]]),
        run_list_case(
            "run list, label + 30 days",
            {"label": label, "date_from": first_day.isoformat(), "date_to": last_day.isoformat()},
            [by["label"], date_sql],
        ),
        run_list_case(
            "run list, partial by concurrency",
            {"outcome": "partial", "sort": "concurrency"},
            [(OUTCOME_SQL["partial"], ())],
        ),
    ]
    big = [int(i) for i in meta["big_run_ids"]]
    not_big = f"id NOT IN ({', '.join(['%s'] * len(big))})"
    newest = scalar(f"SELECT max(id) FROM benchmarks_run WHERE {not_big}", tuple(big))
    compare_ids = [
        r[0]
        for r in rows(
            f"SELECT id FROM benchmarks_run WHERE model = %s AND {not_big} ORDER BY id DESC LIMIT 12", (model, *big)
        )
    ]
    assert len(compare_ids) == 12, "the lab has not 12 runs of the model"
    n_strip = scalar(
        f"SELECT count(*) FROM benchmarks_requestresult WHERE run_id IN ({', '.join(['%s'] * 12)}) "
        "AND ok AND tok_s IS NOT NULL",
        tuple(compare_ids),
    )
    big_strips = big_run_sample(big)
    zoom = {"x0": (until - timedelta(days=30)).isoformat(), "x1": until.isoformat()}
    n_jobs = scalar("SELECT count(*) FROM benchmarks_job")
    last_job_page = -(-n_jobs // 50)
    timeline = {"kind": "timeline", "url": reverse("chart-timeline"), "figure": "timeline-figure"}
    regressions = {"kind": "regressions", "url": reverse("chart-regressions"), "goal_ms": GOAL_REGRESSIONS_MS}
    return [
        *run_lists,
        {"page": "run page", "kind": "run page", "url": reverse("run-detail", args=[newest]), "params": {},
         "requests": synthetic.REQUESTS_PER_RUN},
        {"page": "compare, 12 runs", "kind": "compare page", "url": reverse("run-compare"),
         "params": {"run": compare_ids}, "runs": compare_ids},
        {"page": "compare chart, 12 runs", "kind": "compare chart", "url": reverse("chart-compare"),
         "params": {"run": compare_ids}, "points": n_strip},
        {"page": f"run page, {meta['big_runs']:,} requests", "kind": "run page",
         "url": reverse("run-detail", args=[big[0]]), "params": {},
         "requests": min(REQUESTS_PER_PAGE, meta["big_runs"]), "sampled": meta["big_runs"] > DISTRIBUTION_SAMPLE},
        {"page": f"compare, 2 runs of {meta['big_runs']:,}", "kind": "compare page", "url": reverse("run-compare"),
         "params": {"run": big}, "runs": big},
        {"page": f"compare chart, 2 runs of {meta['big_runs']:,}", "kind": "compare chart",
         "url": reverse("chart-compare"), "params": {"run": big}, "strips": big_strips},
        {**timeline, "page": "timeline", "params": {}},
        *({**timeline, "page": f"timeline by {group}", "params": {"group": group}}
          for group in catalogue.GROUPINGS if group != "label"),
        {**timeline, "page": "timeline, a model", "params": {"model": model}},
        {**timeline, "page": "timeline, last 30 days", "params": zoom},
        {**timeline, "kind": "timeline json", "page": "timeline JSON", "params": {"format": "json"}},
        {"page": "load curve", "kind": "load curve", "url": reverse("chart-load"), "params": {"model": model}},
        {**regressions, "page": "regressions", "params": {}},
        *({**regressions, "page": f"regressions by {group}", "params": {"group": group}}
          for group in catalogue.GROUPINGS if group != "label"),
        {"page": "home", "kind": "home", "url": reverse("home"), "params": {}},
        {"page": "job list", "kind": "jobs", "url": reverse("job-list"), "params": {}, "jobs": min(50, n_jobs)},
        {"page": "job list, last page", "kind": "jobs", "url": reverse("job-list"), "params": {"page": last_job_page},
         "jobs": n_jobs - (last_job_page - 1) * 50},
        {"page": "sweep list", "kind": "sweeps", "url": reverse("sweep-list"), "params": {}, "sweeps": 100},
    ]  # fmt: skip


def big_run_sample(big: list[int]) -> list[dict[str, Any]]:
    """What the compare chart of the two big runs must draw, in plain SQL: per run its ok requests with a
    tok/s at seq 0, step, 2·step, … (charts.views.COMPARE_BOX_POINTS shared between the two runs, step
    = ⌈its requests' span / its share⌉: history.sampling), and whether the page must call it a sample."""
    from benchmarks.charts.views import COMPARE_BOX_POINTS

    share = COMPARE_BOX_POINTS // len(big)
    strips = []
    for run_id in big:
        span = scalar("SELECT max(seq) + 1 FROM benchmarks_requestresult WHERE run_id = %s", (run_id,))
        step = max(1, -(-span // share))
        points = scalar(
            "SELECT count(*) FROM benchmarks_requestresult WHERE run_id = %s AND ok AND tok_s IS NOT NULL "
            "AND seq % %s = 0 AND seq < %s",
            (run_id, step, min(span, step * share)),
        )
        n_ok = scalar("SELECT n_ok FROM benchmarks_run WHERE id = %s", (run_id,))
        strips.append({"points": points, "step": step, "n_ok": n_ok})
    return strips


def points(figure: dict[str, Any]) -> int:
    return sum(len(t.get("x") or t.get("y") or []) for t in figure["data"] if t.get("name") not in MARKER_TRACES)


def check_run_list(case: dict[str, Any], page: Page) -> None:
    name = case["page"]
    ids = page_harness.linked_ids(page.rows("outcome-"), "run-detail")  # run_list.html: a run's row links it
    assert len(ids) == case["rows"], f"{name}: {len(ids)} rows, not {case['rows']}"
    if not ids:
        assert NO_RUNS in page.text, f"{name}: no rows and no word of it"
        return
    clause, args = case["where"]
    marks = ", ".join(["%s"] * len(ids))
    found = dict(
        rows(f"SELECT id, {case['sort_column']} FROM benchmarks_run WHERE id IN ({marks}) AND {clause}", (*ids, *args))
    )
    assert len(found) == len(ids), f"{name}: {len(ids) - len(found)} rows do not match the filter"
    values = [found[i] for i in ids]
    # the order of the page's values as the database sorts them (its collation), no value lowest
    column = case["sort_column"]
    in_order = f"SELECT DISTINCT {column} FROM benchmarks_run WHERE id IN ({marks}) ORDER BY {column} ASC NULLS FIRST"
    distinct = rows(in_order, tuple(ids))
    rank = {value: i for i, (value,) in enumerate(distinct)}
    keyed = [rank[v] for v in values]
    assert keyed == sorted(keyed, reverse=case["descending"]), f"{name}: the rows are not in the sort's order"
    if "page" not in case["params"]:
        window = page.search(SORT_WINDOW_NOTE)
        extreme = case["extreme"] if not window else latest_extreme(case, int(window.group(1).replace(",", "")))
        assert values[0] == extreme, f"{name}: first row holds {values[0]}, the extreme is {extreme}"


def latest_extreme(case: dict[str, Any], n: int) -> Any:
    """The sort's extreme value among the latest n runs the filter matches (what a page with the note sorts)."""
    key = f"extreme of the latest {n}"
    if key not in case:
        clause, args = case["where"]
        column, order = case["sort_column"], "DESC NULLS LAST" if case["descending"] else "ASC NULLS FIRST"
        latest = f"SELECT {column} FROM benchmarks_run WHERE {clause} ORDER BY started_at DESC NULLS LAST, id DESC"
        case[key] = scalar(f"SELECT {column} FROM ({latest} LIMIT {n}) AS w ORDER BY {column} {order} LIMIT 1", args)
    return case[key]


def check(case: dict[str, Any], response: Any) -> bytes:
    """Assert the answer is the real page; its body, decompressed."""
    from benchmarks.charts.load_curve_figure import MAX_CURVES

    name, kind = case["page"], case["kind"]
    assert response.status_code == 200, f"{name}: status {response.status_code}"
    body = page_harness.body_of(response)
    if kind == "timeline json":
        data = json.loads(body)
        assert data["rows"], f"{name}: no rows"
        return body
    page = Page(body)
    assert page.is_full_page, f"{name}: not a full page"
    if kind == "run list":
        check_run_list(case, page)
    elif kind == "run page":
        found = len(page.rows(classes=("ok", "failed")))  # run_detail.html
        assert found == case["requests"], f"{name}: {found} request rows, not {case['requests']}"
        if case.get("sampled"):
            assert "a sample: every" in page.text, f"{name}: the distributions do not say they are a sample"
    elif kind == "compare page":
        heads = [th for thead in page.find_all("thead") for th in thead.find_all("th")]
        shown = page_harness.linked_ids(heads, "run-detail")  # run_compare.html: a column per run
        assert shown == case["runs"], f"{name}: runs {shown}, not {case['runs']}"
    elif kind == "compare chart":
        figure = page.figures().get("compare-figure")
        assert figure, f"{name}: no figure"
        boxes = [t for t in figure["data"] if t.get("type") == "box"]
        if "strips" in case:  # the big runs: each an even sample, and the page says of how many
            assert [len(t["y"]) for t in boxes] == [s["points"] for s in case["strips"]], f"{name}: not the sample"
            for strip in (s for s in case["strips"] if s["step"] > 1):
                note = f"{strip['points']:,} of {strip['n_ok']:,} (every {strip['step']:,}th)"
                assert note in page.text, f"{name}: the page does not say {note!r}"
            return body
        assert len(boxes) == 12, f"{name}: {len(boxes)} strips, not 12"
        shown = sum(len(t["y"]) for t in boxes)
        assert shown == case["points"], f"{name}: {shown} strip points, not the {case['points']} ok requests"
    elif kind == "timeline":
        figure = page.figures().get(case["figure"])
        assert figure and points(figure) > 0, f"{name}: no figure, or no point on it"
    elif kind == "load curve":
        figure = page.figures().get("load-figure")
        assert figure, f"{name}: no figure"
        curves = [t for t in figure["data"] if t.get("mode") == "lines+markers" and t.get("yaxis", "y") == "y"]
        assert 1 <= len(curves) <= MAX_CURVES, f"{name}: {len(curves)} curves"
    elif kind == "regressions":
        found, groups = page_harness.regressions_shown(page)
        assert found or groups > 0, f"{name}: neither regressions nor groups shown"
    elif kind == "home":
        assert "trend-figure" in page.figures(), f"{name}: no trend figure"
        latest = page_harness.linked_ids(page.rows("outcome-"), "run-detail")
        assert len(latest) == 10, f"{name}: not the 10 latest runs"
    elif kind == "jobs":
        found = len(page_harness.linked_ids(page.rows(), "job-detail"))  # job_list.html
        assert found == case["jobs"], f"{name}: {found} job rows, not {case['jobs']}"
    elif kind == "sweeps":
        found = len(page_harness.linked_ids(page.rows(), "sweep-detail"))  # sweep_list.html
        assert found == case["sweeps"], f"{name}: {found} sweep rows, not {case['sweeps']}"
    return body


# --- the measurement ---------------------------------------------------------------------


def get(client: Any, case: dict[str, Any]) -> Any:
    return client.get(case["url"], case["params"], HTTP_ACCEPT_ENCODING="gzip")


def measure(client: Any, case: dict[str, Any], n: int, budget_s: float) -> dict[str, Any]:
    timed = page_harness.time_requests(
        lambda: get(client, case), lambda r: check(case, r), n, count="first timed", budget_s=budget_s
    )
    response, body, queries = timed.response, timed.held, timed.sql
    goal_ms = case.get("goal_ms", GOAL_MS)
    wire = len(response.content) if not response.streaming else None
    p95 = common.percentile(timed.times_ms, 95)
    summary = timed.summary()
    result = {
        "page": case["page"],
        "path": case["url"] + "?" + urllib.parse.urlencode(case["params"], doseq=True)
        if case["params"]
        else case["url"],
        "p95_ms": summary["p95_ms"],
        "median_ms": summary["median_ms"],
        "timed": len(timed.times_ms),
        "goal_ms": goal_ms,
        "wire_bytes": wire,
        "bytes": len(body),
        "gzip": response.get("Content-Encoding") == "gzip",
        "queries": len(queries),
        "time_ok": p95 < goal_ms,
        "size_ok": wire is not None and wire < GOAL_BYTES,
        "sql": queries,
    }
    if not result["time_ok"]:
        result["slowest"] = slowest_query(queries)
    return result


def slowest_query(queries: list[str]) -> dict[str, Any] | None:
    """Each query of a slow page run again (every row fetched), timed; the slowest with its plan."""
    from django.db import connection

    timed = []
    with connection.cursor() as cursor:
        for sql in queries:
            if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            start = time.perf_counter()
            cursor.execute(sql)
            cursor.fetchall()
            timed.append(((time.perf_counter() - start) * 1000, sql))
        if not timed:
            return None
        ms, sql = max(timed)
        explain = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN (ANALYZE, BUFFERS) "
        cursor.execute(explain + sql)
        plan = [str(row[-1]) if connection.vendor == "sqlite" else str(row[0]) for row in cursor.fetchall()]
    return {"ms": round(ms, 1), "of_all_ms": round(sum(t for t, _ in timed), 1), "sql": sql, "plan": plan}


def verdict(page: dict[str, Any]) -> str:
    missed = [what for what, ok in (("time", page["time_ok"]), ("size", page["size_ok"])) if not ok]
    return f"MISSED ({', '.join(missed)})" if missed else "met"


COLUMNS = [
    Column("page", lambda p: p["page"], "<34"),
    Column("p95 ms", lambda p: p["p95_ms"], ">8.1f"),
    Column("goal", lambda p: "<" + format(p["goal_ms"], ".0f"), ">6"),
    Column("median", lambda p: p["median_ms"], ">8.1f"),
    Column("timed", lambda p: p["timed"], ">5"),
    Column("wire B", lambda p: f"{p['wire_bytes']:,}" if p["wire_bytes"] is not None else "stream", ">10"),
    Column("goal", lambda p: "<1 MiB", ">8"),
    Column("queries", lambda p: p["queries"], ">7"),
    Column("verdict", verdict, gap="  "),
]


def print_table(results: dict[str, Any]) -> None:
    title = (
        f"Pages at scale on {results['engine']}: {results['runs']:,} runs, {results['requests']:,} requests, "
        f"{results['jobs']:,} jobs, {results['sweeps']:,} sweeps, and 2 big runs of {results['big_runs']:,} requests; "
        f"up to {results['timed_requests']} timed requests a page, gzip asked"
    )
    print(f"\n{title}")
    print(f"reproduce: {results['command']}")
    page_harness.print_table(None, COLUMNS, results["pages"])
    missed = [p for p in results["pages"] if not (p["time_ok"] and p["size_ok"])]
    print(f"{len(results['pages']) - len(missed)} of {len(results['pages'])} pages met both goals")
    for p in missed:
        slow = p.get("slowest")
        if slow:
            print(f"\n{p['page']}: slowest query {slow['ms']:.0f} ms of {slow['of_all_ms']:.0f} ms of SQL")
            print(f"  {slow['sql'][:300]}")
            for line in slow["plan"][:14]:
                print(f"    {line}")


# --- the command ---------------------------------------------------------------------------


def write_partial(args: argparse.Namespace, pages: list[dict[str, Any]], wrong: list[str]) -> None:
    """The pages measured so far, for whoever watches a run of many minutes (the last write is complete)."""
    args.out.mkdir(parents=True, exist_ok=True)
    partial = {"engine": args.engine, "complete": False, "pages": pages, "wrong": wrong}
    (args.out / f"scale_pages_{args.engine}.json").write_text(json.dumps(partial, indent=2, default=str) + "\n")


def fill(args: argparse.Namespace) -> dict[str, Any]:
    """Run scale_fill.py with the same options in its own process; what the filled database holds."""
    options = ["--engine", args.engine, "--runs", str(args.runs), "--jobs", str(args.jobs)]
    options += ["--sweeps", str(args.sweeps), "--cache", str(args.cache), "--pg-database", args.pg_database]
    options += ["--big-runs", str(args.big_runs)]
    options += ["--out", str(args.out)] + (["--pg-url", args.pg_url] if args.pg_url else [])
    options += ["--refill"] if args.refill else []
    subprocess.run([sys.executable, str(ROOT / "bench" / "scale_fill.py"), *options], cwd=ROOT, check=True)
    return json.loads((args.out / f"scale_fill_{args.engine}.json").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    scale_fill.add_arguments(parser)
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page")
    parser.add_argument("--max-case-s", type=float, default=20.0, help="a page's timing stops here (after 3)")
    parser.add_argument("--only", help="measure only the pages whose name holds this text")
    args = common.parse_args(parser, argv, smoke={**scale_fill.SMOKE, "requests": 2})
    args = scale_fill.finish_arguments(parser, args)
    if args.requests < 1:
        parser.error("--requests must be positive")

    meta = fill(args)
    engine = scale_fill.Sqlite(args) if args.engine == "sqlite" else scale_fill.Postgres(args)
    os.environ.update(engine.environment())
    if args.engine == "sqlite":
        os.environ.pop("DATABASE_URL", None)
    common.start_django()
    from django.db import connections
    from django.test import Client

    engine_version = page_harness.engine_version()
    client = Client()
    pages = []
    wrong = []
    for case in cases(meta):
        if args.only and args.only not in case["page"]:
            continue
        try:
            pages.append(measure(client, case, args.requests, args.max_case_s))
        except AssertionError as error:
            wrong.append(str(error))
            print(f"  {case['page']:<34} WRONG: {error}", flush=True)
            continue
        p = pages[-1]
        write_partial(args, pages, wrong)
        print(f"  {p['page']:<34} p95 {p['p95_ms']:8.1f} ms  {p['wire_bytes'] or 0:>10,} B  {verdict(p)}", flush=True)
    connections.close_all()

    given = argv if argv is not None else sys.argv[1:]
    results = {
        "engine": args.engine,
        "engine_version": engine_version,
        "command": shlex.join([".venv/bin/python", "bench/scale_pages.py", *given]),
        "runs": meta["runs"],
        "requests": meta["requests"],
        "jobs": meta["jobs"],
        "sweeps": meta["sweeps"],
        "big_runs": meta["big_runs"],
        "fill": {k: meta.get(k) for k in ("fill_s", "filled_at", "rebuild_derived", "size_bytes")},
        "timed_requests": args.requests,
        "goals": {"p95_ms": GOAL_MS, "regressions_p95_ms": GOAL_REGRESSIONS_MS, "wire_bytes": GOAL_BYTES},
        "complete": True,
        "pages": pages,
        "wrong": wrong,
        **common.machine(),
    }
    print_table(results)
    common.write_results(args.out, f"scale_pages_{args.engine}", results)
    if wrong:
        print(f"\n{len(wrong)} page(s) answered wrongly:\n  " + "\n  ".join(wrong))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
