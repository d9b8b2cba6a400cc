"""Which of kvlab's page queries read a whole table? (the EXPLAIN check)

What is measured
----------------
A database holds the synthetic lab (bench/synthetic.py: ``--runs`` runs, the requests of
the first 200, a few jobs and sweeps): a scratch SQLite database (the default), or with
``--engine postgres`` a scratch PostgreSQL database (``--pg-database``) through the role
``scripts/ensure-postgres.sh`` sets up, analysed after the fill (what autovacuum does
within a minute of a bulk load). ``--database-url URL`` (``sqlite:///…`` or
``postgres://…``) reads an already filled database instead, e.g. the 1,000,000-run one of
``bench/scale_fill.py``, and changes nothing in it.

Each page that lists or charts a bounded slice of the history is fetched once with
Django's test client while its SQL is captured; every captured SELECT is run again:

* SQLite: under ``EXPLAIN QUERY PLAN``. A step ``SCAN <table>`` reads every row of the
  table unless it needs no sort (no ``TEMP B-TREE``) and stops at a LIMIT;
* PostgreSQL: under ``EXPLAIN (ANALYZE, FORMAT JSON)``, which runs it: the rows each scan
  of a kvlab table actually read (actual rows × loops), summed per statement. A page whose
  statements read more than ``--bound`` rows (default 25,000: the largest slice a page
  shows is 20,000 runs) is listed with its plan.

The script prints, per page, its queries and what they read; the results go to
bench/out/explain_plans_<engine>.json. It reports; it fails only when a page does not
answer 200.

Usage (from the repository root)::

    .venv/bin/python bench/explain_plans.py [--engine sqlite|postgres] [--runs N]
        [--database-url URL] [--bound ROWS] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import page_harness
import synthetic

SCAN = re.compile(r"\bSCAN (\w+)")
TABLES = ("benchmarks_", "sizing_", "auth_", "django_")  # kvlab's tables (not a subquery's co-routine)
LIMIT = re.compile(r"\bLIMIT (\d+)", re.IGNORECASE)


def pages() -> list[tuple[str, str]]:
    from django.urls import reverse

    from benchmarks.models import Run

    first, second = Run.objects.order_by("pk").values_list("pk", flat=True)[:2]
    model = Run.objects.order_by("pk").values_list("model", flat=True).first()
    label = Run.objects.order_by("pk").values_list("label", flat=True).first()
    runs = reverse("run-list")
    return [
        ("home", reverse("home")),
        ("run list", runs),
        ("run list, 200 rows", runs + "?per_page=200"),
        ("run list, 200, by tok/s ↓", runs + "?per_page=200&sort=-tok_s"),
        ("run list, 200, by tok/s ↑", runs + "?per_page=200&sort=tok_s"),
        ("run list, by label ↑", runs + "?sort=label"),
        ("run list, by concurrency ↓", runs + "?sort=-concurrency"),
        ("run list, a model's failed runs", runs + f"?model={model}&outcome=failed"),
        ("run list, a model by tok/s", runs + f"?model={model}&sort=-tok_s"),
        ("run list, no request counted", runs + "?outcome=unknown"),
        ("run list, a date range", runs + "?date_from=2026-03-01&date_to=2026-03-31"),
        ("run list, last page", runs + "?page=200"),
        ("run page", reverse("run-detail", args=[first])),
        ("compare", reverse("run-compare") + f"?run={first}&run={second}"),
        ("timeline", reverse("chart-timeline")),
        ("timeline, a label", reverse("chart-timeline") + f"?label={label}"),
        ("load curve", reverse("chart-load") + f"?model={model}"),
        ("regressions", reverse("chart-regressions")),
        ("jobs", reverse("job-list")),
        ("sweeps", reverse("sweep-list")),
        ("imports", reverse("import-list")),
    ]


def sqlite_plan(cursor: Any, sql: str) -> dict[str, Any] | None:
    cursor.execute("EXPLAIN QUERY PLAN " + sql)
    plan = [str(row[-1]) for row in cursor.fetchall()]
    tables = sorted({m.group(1) for line in plan for m in [SCAN.search(line)] if m and m.group(1).startswith(TABLES)})
    if not tables:
        return None
    # A scan in index order that stops at a LIMIT, with no sort, reads at most that many rows.
    limit = LIMIT.search(sql)
    bounded = limit is not None and not any("TEMP B-TREE" in line for line in plan)
    return {"sql": sql[:400], "tables": tables, "plan": plan, "reads_at_most": int(limit.group(1)) if bounded else None}


def _scanned(node: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(node type, relation, rows read) of every scan of a kvlab table under a plan node."""
    found = []
    relation = node.get("Relation Name", "")
    if relation.startswith(TABLES) and "Scan" in node["Node Type"]:
        rows = int(node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0))
        found.append((node["Node Type"], relation, rows * int(node.get("Actual Loops", 1))))
    for child in node.get("Plans", ()):
        found.extend(_scanned(child))
    return found


def postgres_plan(cursor: Any, sql: str) -> dict[str, Any]:
    cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
    raw = cursor.fetchone()[0]
    root = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    scans = _scanned(root["Plan"])
    cursor.execute("EXPLAIN " + sql)
    return {
        "sql": sql[:400],
        "rows_read": sum(rows for _, _, rows in scans),
        "scans": [{"node": n, "table": t, "rows": r} for n, t, r in scans],
        "ms": round(root.get("Execution Time", 0.0), 2),
        "plan": [row[0] for row in cursor.fetchall()],
    }


def plans(client: Any, url: str) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, f"{url}: status {response.status_code}"
    queries = [q["sql"] for q in captured.captured_queries]
    statements = []
    with connection.cursor() as cursor:
        for sql in queries:
            if not sql.lstrip().upper().startswith("SELECT"):
                continue
            found = sqlite_plan(cursor, sql) if connection.vendor == "sqlite" else postgres_plan(cursor, sql)
            if found:
                statements.append(found)
    return {"url": url, "queries": len(queries), "statements": statements}


def report_sqlite(found: dict[str, Any]) -> None:
    for name, result in found.items():
        full = [s for s in result["statements"] if s["reads_at_most"] is None]
        tables = sorted({t for s in full for t in s["tables"]})
        bounded = len(result["statements"]) - len(full)
        verdict = "no full scan" if not tables else "reads all of " + ", ".join(tables)
        if bounded:
            verdict += f" ({bounded} scan{'s' if bounded > 1 else ''} stopped by a LIMIT)"
        print(f"  {name:<34} {result['queries']:>3} queries  {verdict}")
        for scan in full:
            print(f"      {scan['sql'][:160]}")
            for line in scan["plan"]:
                print(f"        {line}")


def report_postgres(found: dict[str, Any], bound: int) -> None:
    print(f"  {'page':<34} {'queries':>7} {'rows read':>11} {'SQL ms':>8}  verdict (bound {bound:,} rows)")
    for name, result in found.items():
        rows = sum(s["rows_read"] for s in result["statements"])
        ms = sum(s["ms"] for s in result["statements"])
        result["rows_read"] = rows
        verdict = "bounded" if rows <= bound else "READS MORE"
        print(f"  {name:<34} {result['queries']:>7} {rows:>11,} {ms:>8.1f}  {verdict}")
        if rows > bound:
            for statement in sorted(result["statements"], key=lambda s: -s["rows_read"])[:2]:
                print(f"      {statement['rows_read']:,} rows: {statement['sql'][:160]}")
                for line in statement["plan"][:14]:
                    print(f"        {line}")


def fill(runs: int) -> None:
    """The lab, a few jobs and sweeps; then the planner's statistics."""
    from django.db import connection

    from benchmarks.models import Job, LaunchHost, Server, Sweep

    synthetic.insert_lab(runs, requests_of_first=200)
    server = Server.objects.create(name="gpu-box", base_url="http://127.0.0.1:8080")
    Job.objects.bulk_create(Job(server=server, label=f"job {i}", params={}) for i in range(500))
    host = LaunchHost.objects.create(name="gpu-host")
    Sweep.objects.bulk_create(Sweep(host=host, model_file="m.gguf", label=f"sweep {i}", params={}) for i in range(50))
    common.reset_id_sequences()  # insert_lab gives the ids itself
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


@contextlib.contextmanager
def database(args: argparse.Namespace, work: Path) -> Iterator[None]:
    """Django on the database named by --database-url (as it is), or on a migrated scratch one of the engine."""
    if not args.database_url:
        with page_harness.scratch_database(work, args.engine, pg_database=args.pg_database):
            yield
        return
    os.environ.update(common.scratch_env(work, allowed_hosts="testserver"))
    os.environ["DATABASE_URL"] = args.database_url  # never the database of the environment: the one named
    common.start_django()
    from django.db import connections

    try:
        yield
    finally:
        connections.close_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--database-url", help="an already filled database to read (nothing is written to it)")
    parser.add_argument("--bound", type=int, default=25_000, help="rows a bounded page may read (PostgreSQL)")
    parser.add_argument("--pg-database", default="kvlab_explain", help="the scratch PostgreSQL database's name")
    args = common.parse_args(parser, argv, smoke={"runs": 500})
    if args.database_url:
        args.engine = "sqlite" if args.database_url.startswith("sqlite") else "postgres"
    with tempfile.TemporaryDirectory(prefix="kvlab-explain-") as tmp, database(args, Path(tmp)):
        from django.test import Client

        from benchmarks.models import Run

        if not args.database_url:
            fill(args.runs)
        n_runs = Run.objects.count()
        found = {name: plans(Client(), url) for name, url in pages()}
    if args.engine == "sqlite":
        print(f"\nEXPLAIN QUERY PLAN of every page query, {n_runs:,} runs (SQLite)")
        report_sqlite(found)
    else:
        print(f"\nEXPLAIN ANALYZE of every page query, {n_runs:,} runs (PostgreSQL): rows read from kvlab's tables")
        report_postgres(found, args.bound)
    command = " ".join(argv if argv is not None else sys.argv[1:])
    command = re.sub(r"(://[^:/@\s]+:)[^@\s]+@", r"\1***@", command)  # a database password is never printed
    print(f"  (command: .venv/bin/python bench/explain_plans.py {command})")
    results = {"engine": args.engine, "runs": n_runs, "pages": found, **common.machine()}
    common.write_results(args.out, f"explain_plans_{args.engine}", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
