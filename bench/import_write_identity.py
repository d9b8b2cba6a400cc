"""Does a change to the importer's write path store exactly what it stored before?

bench/import_identity.py compares ``manage.py import_bench`` file by file; this one exercises
what the write path does besides: the second thread's batches and the single-thread path alike,
the path that adds to stored runs, and every other tool's file kvlab reads.

What is compared
----------------
The same sequence of imports is run by two versions of kvlab, each in a process of its own on
a fresh migrated SQLite database, and every row they leave is compared:

* before: the tree of ``--against`` (a commit, default HEAD), extracted with ``git archive``;
* after: the working tree, or with ``--only FILE …`` that commit's tree with just those files
  of the working tree laid over it (a change measured alone, without what others are editing).

The imports, in order, into one database (history.importer.import_path): the demo file
(data/demo/bench_results.jsonl), a flat lab file of runs of 10, kvlab.bench/2 exports at 1, 4
and 10 requests a run (each run's summary first), the 4-a-run export again (every line a
duplicate), a grown copy of it (more requests of its stored runs and new runs: the path that
adds to stored runs), a file with one bad line (rejected, nothing stored), and every file of
/work/shared/data/peer-results/ (vLLM, SGLang, GuideLLM, AIPerf, llmperf, llama-bench; those
kvlab does not read are rejected alike). Then the derived tables are brought up to date
(derived.catch_up). All of it twice: once with every file written from the second thread
(sqlite_batches.MIN_BYTES = 0), once in one thread (MIN_BYTES past every file).

Every table of the app (benchmarks_*) is dumped, each row with every column (floats bit for
bit), ordered by its id; the columns holding the wall clock of the import (created_at and the
like) are left out. The script prints, per table, the rows compared and any difference, and
exits 1 on one.

Usage (from the repository root)::

    .venv/bin/python bench/import_write_identity.py [--against COMMIT] [--only FILE ...] [--requests N] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEER_RESULTS = Path("/work/shared/data/peer-results")
# Columns that hold when a row was written, not what was imported.
WALL_CLOCK = {"created_at", "updated_at", "computed_at", "queued_at", "finished_at", "heartbeat_at"}


# --- the two trees -----------------------------------------------------------------------


def extract(commit: str, into: Path) -> None:
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    into.mkdir(parents=True)
    tar_path = into.parent / f"{into.name}.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    tar_path.unlink()


def overlay(tree: Path, files: list[str]) -> None:
    for name in files:
        source = ROOT / name
        target = tree / name
        if source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        else:
            target.unlink(missing_ok=True)


# --- the inputs ---------------------------------------------------------------------------


def write_inputs(work: Path, n_requests: int) -> list[Path]:
    """The files to import, in order (written once, by this tree's bench/synthetic.py)."""
    import orjson

    sys.path.insert(0, str(ROOT / "bench"))
    import synthetic

    files = [ROOT / "data" / "demo" / "bench_results.jsonl"]
    flat = work / "flat.jsonl"
    synthetic.write_lab_jsonl(flat, n_requests, seed=3)
    files.append(flat)
    for per_run in (1, 4, 10):
        path = work / f"export_{per_run}_per_run.jsonl"
        synthetic.write_lab_export(path, n_requests, per_run, seed=10 + per_run)
        lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        for record in lines:  # new runs, not the flat file's
            record["run"]["id"] = f"x{per_run}-{record['run']['id']}"
        path.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in lines))
        files.append(path)
    files.append(work / "export_4_per_run.jsonl")  # again: every line a duplicate
    files.append(grown(work / "export_4_per_run.jsonl", work / "grown.jsonl"))
    bad = work / "bad_line.jsonl"
    lines = (work / "export_10_per_run.jsonl").read_bytes().splitlines()
    bad.write_bytes(b"\n".join([*(line.replace(b'"x10-', b'"bad-') for line in lines[:30]), b"{not json"]) + b"\n")
    files.append(bad)
    if PEER_RESULTS.is_dir():
        for folder in sorted(PEER_RESULTS.iterdir()):
            if folder.is_dir():
                files.extend(sorted(p for p in folder.rglob("*") if p.is_file()))
    return files


def grown(source: Path, target: Path) -> Path:
    """The export with more: each stored run's requests again with another prompt (new requests of a
    stored run), and new runs."""
    import orjson

    lines = [orjson.loads(line) for line in source.read_bytes().splitlines()]
    out = []
    for record in lines:
        out.append(record)
        if "request" in record:
            extra = json.loads(json.dumps(record))
            extra["request"]["prompt_tokens"] = (extra["request"].get("prompt_tokens") or 0) + 1
            out.append(extra)
    for record in lines[: len(lines) // 4]:
        new = json.loads(json.dumps(record))
        new["run"]["id"] = "grown-" + new["run"]["id"]
        out.append(new)
    target.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in out))
    return target


# --- one tree's dump (run in a process of its own, in that tree) --------------------------------


def dump(tree: Path, files: list[Path], out: Path, threaded: bool) -> None:
    os.chdir(tree)
    sys.path.insert(0, str(tree))
    var = out.parent / f"var-{out.stem}"
    os.environ.update(
        {
            "KVLAB_VAR_DIR": str(var),
            "DJANGO_SETTINGS_MODULE": "kvlab.settings",
            "KVLAB_REDIS_URL": "redis://127.0.0.1:9/0",  # none: an import leaves the catch-up to the backlog
            "KVLAB_LOG_LEVEL": "ERROR",
        }
    )
    os.environ.pop("DATABASE_URL", None)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from benchmarks.history import derived, importer, sqlite_batches

    assert Path(importer.__file__).resolve().is_relative_to(tree.resolve()), importer.__file__
    call_command("migrate", verbosity=0)
    sqlite_batches.MIN_BYTES = 0 if threaded else 1 << 40
    outcomes = []
    for path in files:
        try:
            result = importer.import_path(path, origin="command", filename=path.name)
            outcomes.append([path.name, result.status, result.n_imported, result.n_new_runs, result.n_duplicate])
        except Exception as error:  # noqa: BLE001 — a file kvlab does not read: the same in both trees
            outcomes.append([path.name, "error", type(error).__name__, str(error)[:200]])
    derived.catch_up()
    tables: dict[str, Any] = {}
    with connection.cursor() as cursor:
        names = [name for name in connection.introspection.table_names(cursor) if name.startswith("benchmarks_")]
        for name in sorted(names):
            columns = [c.name for c in connection.introspection.get_table_description(cursor, name)]
            kept = [c for c in columns if c not in WALL_CLOCK]
            order = "id" if "id" in columns else ", ".join(kept)
            cursor.execute(f"SELECT {', '.join(map(connection.ops.quote_name, kept))} FROM {name} ORDER BY {order}")
            tables[name] = {"columns": kept, "rows": [list(map(_plain, row)) for row in cursor.fetchall()]}
    out.write_text(json.dumps({"imports": outcomes, "tables": tables}))


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return ["float", value.hex()]  # bit for bit: 0.0 and -0.0, neighbouring doubles
    if isinstance(value, bytes):
        return ["bytes", value.hex()]
    if hasattr(value, "isoformat"):  # a date or datetime the driver parsed
        return ["time", value.isoformat()]
    return value


# --- the comparison -------------------------------------------------------------------------


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    problems = []
    for a, b in zip(before["imports"], after["imports"], strict=True):
        if a != b:
            problems.append(f"import {a[0]}: before {a[1:]}, after {b[1:]}")
    for name in sorted(set(before["tables"]) | set(after["tables"])):
        a, b = before["tables"].get(name), after["tables"].get(name)
        if a is None or b is None:
            problems.append(f"{name}: only {'after' if a is None else 'before'}")
            continue
        if a["columns"] != b["columns"]:
            problems.append(f"{name}: columns differ: {a['columns']} / {b['columns']}")
            continue
        if len(a["rows"]) != len(b["rows"]):
            problems.append(f"{name}: {len(a['rows'])} rows before, {len(b['rows'])} after")
        for row_a, row_b in zip(a["rows"], b["rows"], strict=False):
            if row_a != row_b:
                diff = {c: (x, y) for c, x, y in zip(a["columns"], row_a, row_b, strict=True) if x != y}
                problems.append(f"{name}: row {row_a[0]!r} differs: {str(diff)[:300]}")
                break
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="HEAD", help="the commit whose importer is 'before' (default HEAD)")
    parser.add_argument("--only", nargs="*", help="the working tree's files laid over that commit as 'after'")
    parser.add_argument("--requests", type=int, default=6_000, help="requests in each synthetic file")
    parser.add_argument("--smoke", action="store_true", help="600 requests a synthetic file")
    parser.add_argument("--dump", nargs=3, metavar=("TREE", "FILES_JSON", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--threaded", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dump:
        tree, files, out = args.dump
        dump(Path(tree), [Path(p) for p in json.loads(Path(files).read_text())], Path(out), args.threaded)
        return 0
    n_requests = 600 if args.smoke else args.requests
    failed = False
    with tempfile.TemporaryDirectory(prefix="kvlab-write-identity-") as tmp:
        work = Path(tmp)
        before_tree = work / "before"
        extract(args.against, before_tree)
        if args.only is None:
            after_tree = ROOT
        else:
            after_tree = work / "after"
            extract(args.against, after_tree)
            overlay(after_tree, args.only)
        files = write_inputs(work, n_requests)
        files_json = work / "files.json"
        files_json.write_text(json.dumps([str(p) for p in files]))
        for threaded in (True, False):
            dumps = {}
            for name, tree in (("before", before_tree), ("after", after_tree)):
                out = work / f"{name}-{'threaded' if threaded else 'single'}.json"
                command = [sys.executable, str(Path(__file__).resolve()), "--dump", str(tree), str(files_json)]
                subprocess.run([*command, str(out), *(["--threaded"] if threaded else [])], check=True)
                dumps[name] = json.loads(out.read_text())
            problems = compare(dumps["before"], dumps["after"])
            shape = "written from the second thread" if threaded else "written in one thread"
            counted = ", ".join(f"{name} {len(t['rows'])}" for name, t in dumps["after"]["tables"].items() if t["rows"])
            statuses = [i[1] for i in dumps["after"]["imports"]]
            print(f"{len(files)} imports, {shape}: rows compared: {counted}")
            print(
                f"  imports: {statuses.count('imported')} imported, {statuses.count('rejected')} rejected, "
                f"{statuses.count('error')} not read"
            )
            for problem in problems:
                print("  DIFFERS:", problem)
            print("  identical" if not problems else f"  {len(problems)} differences")
            failed = failed or bool(problems)
    shown = " ".join(argv if argv is not None else sys.argv[1:])
    print(f"  (command: .venv/bin/python bench/import_write_identity.py {shown})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
