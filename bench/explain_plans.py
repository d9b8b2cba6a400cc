"""Which of kvlab's page queries read a whole table? (the EXPLAIN check of issue 17)

What is measured
----------------
A scratch SQLite database holds the synthetic lab (bench/synthetic.py: ``--runs`` runs,
the requests of the first 200). Each page that lists or charts a bounded slice of the
history is fetched once with Django's test client while its SQL is captured; every
captured statement is then run again under ``EXPLAIN QUERY PLAN``. A plan step
``SCAN <table>`` that uses no index reads every row of that table: its cost grows with
the history, whatever the page shows. The script prints, per page, its queries, the
ones that scan a table, and their plans; the results go to bench/out/explain_plans.json.

It reports; it does not fail on a scan (issue 17 is about removing them). It fails
only when a page does not answer 200.

Usage (from the repository root)::

    .venv/bin/python bench/explain_plans.py [--runs N] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import synthetic

SCAN = re.compile(r"\bSCAN (\w+)")
TABLES = ("benchmarks_", "sizing_", "auth_", "django_")  # kvlab's tables (not a subquery's co-routine)
LIMIT = re.compile(r"\bLIMIT (\d+)", re.IGNORECASE)


def pages() -> list[tuple[str, str]]:
    from django.urls import reverse

    from benchmarks.models import Run

    first, second = Run.objects.order_by("pk").values_list("pk", flat=True)[:2]
    model = Run.objects.values_list("model", flat=True).first()
    return [
        ("home", reverse("home")),
        ("run list", reverse("run-list")),
        ("run list, 200, by tok/s", reverse("run-list") + "?per_page=200&sort=-tok_s"),
        ("run list, a model's failed runs", reverse("run-list") + f"?model={model}&outcome=failed"),
        ("run page", reverse("run-detail", args=[first])),
        ("compare", reverse("run-compare") + f"?run={first}&run={second}"),
        ("timeline", reverse("chart-timeline")),
        ("load curve", reverse("chart-load") + f"?model={model}"),
        ("regressions", reverse("chart-regressions")),
        ("jobs", reverse("job-list")),
        ("sweeps", reverse("sweep-list")),
    ]


def plans(client: Any, url: str) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, f"{url}: status {response.status_code}"
    queries = [q["sql"] for q in captured.captured_queries]
    scans = []
    with connection.cursor() as cursor:
        for sql in queries:
            if not sql.lstrip().upper().startswith("SELECT"):
                continue
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
            plan = [str(row[-1]) for row in cursor.fetchall()]
            tables = sorted(
                {m.group(1) for line in plan for m in [SCAN.search(line)] if m and m.group(1).startswith(TABLES)}
            )
            if tables:
                # A scan in rowid order that stops at a LIMIT, with no sort, reads at most that many rows.
                limit = LIMIT.search(sql)
                bounded = limit is not None and not any("TEMP B-TREE" in line for line in plan)
                scans.append(
                    {
                        "sql": sql[:400],
                        "tables": tables,
                        "plan": plan,
                        "reads_at_most": int(limit.group(1)) if bounded and limit else None,
                    }
                )
    return {"url": url, "queries": len(queries), "scans": scans}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    args = common.parse_args(parser, argv, smoke={"runs": 500})
    with tempfile.TemporaryDirectory(prefix="kvlab-explain-") as tmp:
        common.setup_migrated_django(Path(tmp))
        from django.test import Client

        synthetic.insert_lab(args.runs, requests_of_first=200)
        client = Client()
        found = {name: plans(client, url) for name, url in pages()}
    print(f"\nEXPLAIN QUERY PLAN of every page query, {args.runs:,} runs (SQLite)")
    for name, result in found.items():
        full = [scan for scan in result["scans"] if scan["reads_at_most"] is None]
        tables = sorted({t for scan in full for t in scan["tables"]})
        bounded = len(result["scans"]) - len(full)
        verdict = "no full scan" if not tables else "reads all of " + ", ".join(tables)
        if bounded:
            verdict += f" ({bounded} scan{'s' if bounded > 1 else ''} stopped by a LIMIT)"
        print(f"  {name:<34} {result['queries']:>3} queries  {verdict}")
        for scan in full:
            print(f"      {scan['sql'][:160]}")
            for line in scan["plan"]:
                print(f"        {line}")
    common.write_results(args.out, "explain_plans", {"runs": args.runs, "pages": found, **common.machine()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
