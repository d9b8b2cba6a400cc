"""Which of the runs table's indexes does any of kvlab's queries use?

Every index on benchmarks_run is maintained for every run an import inserts (at one request a
run, about 2 µs of SQLite's CPU each, 16 indexes). An index no query uses is cost with no
benefit; this script finds which queries use each one, so that none is dropped blindly.

What is run
-----------
A scratch SQLite database holds the synthetic lab (bench/synthetic.py: ``--runs`` runs, the
requests of the first 200), a job with runs of its own, and one import of a small kvlab file
(so runs point to a FileImport and to a Job, and the derived tables have something to count).
Then, while every statement is captured:

* every page bench/explain_plans.py fetches, every sort of the run list in both directions,
  alone and with a model filter, each filter of the run list, the value suggestions, a job's
  page, an import's page, a run's page and its export;
* an import of a kvlab.bench/2 file of new runs, whose derived catch-up runs inline (no Redis);
* the deletion of a Job and of a FileImport (their runs' SET NULL), rolled back.

Each captured SELECT, UPDATE or DELETE is run again under ``EXPLAIN QUERY PLAN``; the indexes
its plan names are counted. The script prints, for each index of benchmarks_run, how many
statements use it and the first of them; an index no statement uses is marked UNUSED.
PostgreSQL plans differently, but a query that uses an index on SQLite is one that needs it.

Usage (from the repository root)::

    .venv/bin/python bench/run_index_use.py [--runs N] [--smoke] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import synthetic

INDEX = re.compile(r"USING (?:COVERING )?INDEX (\w+)")
RUN_TABLE = "benchmarks_run"


def run_indexes() -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = %s", [RUN_TABLE])
        return sorted(row[0] for row in cursor.fetchall())


def urls() -> list[tuple[str, str]]:
    from django.urls import reverse
    from explain_plans import pages

    from benchmarks.history.forms import SORT_CHOICES, VALUE_FILTERS
    from benchmarks.models import FileImport, Job, Run

    first = Run.objects.order_by("pk").first()
    assert first is not None
    runs = reverse("run-list")
    found = list(pages())
    for sort, _label in SORT_CHOICES:
        found.append((f"run list by {sort}", f"{runs}?sort={sort}"))
        found.append((f"run list, a model, by {sort}", f"{runs}?sort={sort}&model={first.model}"))
    for name in VALUE_FILTERS:
        value = getattr(first, name) or "x"
        found.append((f"run list, {name} filter", f"{runs}?{name}={value}"))
        found.append((f"{name} suggestions", reverse("run-values") + f"?{name}={value[:2]}"))
    for outcome in ("ok", "partial", "failed", "unknown"):
        found.append((f"run list, {outcome}", f"{runs}?outcome={outcome}"))
    found.append(("run list, a run id", f"{runs}?run={first.key}"))
    found.append(("run list, part of a run id", f"{runs}?run={first.key[2:8]}"))
    job = Job.objects.filter(runs__isnull=False).first()
    assert job is not None
    found.append(("a job's page", reverse("job-detail", args=[job.pk])))
    file_import = FileImport.objects.order_by("-pk").first()
    assert file_import is not None
    found.append(("an import's page", reverse("import-detail", args=[file_import.pk])))
    found.append(("a run's export", reverse("run-export", args=[first.pk])))
    return found


def plan_indexes(sql: str, params: Any) -> set[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return {m.group(1) for row in cursor.fetchall() for m in INDEX.finditer(str(row[-1]))}


class Statements:
    """Every statement Django runs while open, with its parameters (for EXPLAIN)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, Any]] = []
        self.where = ""

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not many and re.match(r"\s*(SELECT|UPDATE|DELETE|WITH)\b", sql, re.IGNORECASE):
            self.seen.append((self.where, sql, params))
        return execute(sql, params, many, context)


def fill(runs: int, work: Path) -> Path:
    """The lab, a job with runs, and an import; returns a file of new runs to import while captured."""
    from django.db import connection

    from benchmarks.history.importer import import_path
    from benchmarks.models import Job, Run, Server

    synthetic.insert_lab(runs, requests_of_first=200)
    common.reset_id_sequences()
    server = Server.objects.create(name="gpu-box", base_url="http://127.0.0.1:8080")
    job = Job.objects.create(server=server, label="job", params={})
    Run.objects.filter(pk__in=Run.objects.order_by("pk").values("pk")[:5]).update(job=job)
    small, later = work / "small.jsonl", work / "later.jsonl"
    _export(small, 200, 4, "imported-")
    assert import_path(small, origin="command").n_new_runs == 50
    _export(later, 400, 2, "later-")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return later


def _export(path: Path, n_requests: int, per_run: int, prefix: str) -> None:
    """A kvlab.bench/2 export of the lab whose runs are new: their ids take a prefix the fill's lack."""
    import orjson

    synthetic.write_lab_export(path, n_requests, per_run)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for record in lines:
        record["run"]["id"] = prefix + record["run"]["id"]
    path.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    args = common.parse_args(parser, argv, smoke={"runs": 500})
    with tempfile.TemporaryDirectory(prefix="kvlab-index-use-") as tmp:
        work = Path(tmp)
        os.environ["KVLAB_REDIS_URL"] = "redis://127.0.0.1:9/0"  # none: an import catches up inline
        common.setup_migrated_django(work / "var")
        from django.db import connection, transaction
        from django.test import Client

        from benchmarks.history.importer import import_path
        from benchmarks.models import FileImport, Job

        later = fill(args.runs, work)
        statements = Statements()
        client = Client()
        with connection.execute_wrapper(statements):
            for name, url in urls():
                statements.where = name
                response = client.get(url)
                assert response.status_code == 200, f"{name}: {url} answered {response.status_code}"
            statements.where = "an import of new runs, with its catch-up"
            assert import_path(later, origin="command").n_new_runs == 200
            for name, doomed in (
                ("a job's deletion", Job.objects.filter(runs__isnull=False).first()),
                ("an import's deletion", FileImport.objects.order_by("-pk").first()),
            ):
                statements.where = name
                with transaction.atomic():
                    assert doomed is not None
                    doomed.delete()
                    transaction.set_rollback(True)
        users: dict[str, list[tuple[str, str]]] = {name: [] for name in run_indexes()}
        for where, sql, params in statements.seen:
            for index in plan_indexes(sql, params):
                if index in users:
                    users[index].append((where, sql))
    print(f"\nIndexes of {RUN_TABLE} and the statements whose plan uses them ({len(statements.seen)} statements)")
    for index, used in users.items():
        places = sorted({where for where, _ in used})
        verdict = f"{len(used):>4} statements" if used else "  UNUSED"
        print(f"  {index:<40} {verdict}  {'; '.join(places)[:150]}")
        if used:
            print(f"      e.g. {used[0][1][:200]}")
    results = {
        "runs": args.runs,
        "statements": len(statements.seen),
        "indexes": {index: sorted({where for where, _ in used}) for index, used in users.items()},
        **common.machine(),
    }
    common.write_results(args.out, "run_index_use", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
