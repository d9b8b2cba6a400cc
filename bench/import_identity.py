"""Does a change to the import store exactly what the code before it stored? A check, not a timing.

What is checked
---------------
Two copies of kvlab are made from git: the code at ``--against`` (default HEAD), and the same with
the files named by ``--files`` (default: the line reading's modules) taken from the working tree,
so that only their change is compared (other work in progress in the tree is left out). Each
copy migrates a fresh SQLite database of its own and runs ``manage.py import_bench`` on the same
files, in the same order, with no Redis to reach (so the command brings the derived tables up to
date itself, as bench/import_speed.py runs it):

* data/demo/bench_results.jsonl (a lab script's flat lines);
* kvlab.bench/2 exports of bench/synthetic.py's lab at 1, 4 and 10 requests a run;
* a file of varied lines written here: runs written by Python's json (spaces, escapes), a run
  whose lines another run's split (the careful path), failed requests, inter-token latencies,
  extras, kvlab.bench/1 lines, flat lines under aliases, and one file with lines to reject;
* the first export again (every request a duplicate).

Then every table of the two databases is compared row by row (every column but those that hold
the time of the import or of the migration: ``created_at``, ``applied``), and the commands' output
line by line. Any difference is printed and the script exits 1.

Usage (from the repository root)::

    .venv/bin/python bench/import_identity.py [--against REV] [--files PATH ...] [--requests N]
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import common  # bench/ is on sys.path when a script runs
import orjson
import synthetic
from import_speed import closed_port

LINE_READING = [
    "benchmarks/records/jsonl.py",
    "benchmarks/records/schema.py",
    "benchmarks/records/storable.py",
    "benchmarks/history/reader.py",
    "benchmarks/records/metrics.py",
    "benchmarks/records/summaries.py",
]
TIME_OF_IMPORT = {"created_at", "applied"}  # applied: django_migrations' time of the migration


def tree_at(revision: str, folder: Path, files: list[str]) -> Path:
    """kvlab at revision in folder, with files (paths in the repository) from the working tree."""
    archive = subprocess.run(["git", "archive", revision], cwd=common.ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    for name in files:
        shutil.copyfile(common.ROOT / name, folder / name)
    return folder


def varied_lines() -> list[bytes]:
    """Lines of every shape the reader takes, as other writers write them."""
    v2 = "kvlab.bench/2"
    run = {
        "id": "varied-a",
        "source": "imported",
        "label": "spaced é",
        "model": "m.gguf",
        "gpu": "RTX 4090",
        "wall_s": 30,
        "server": {"ctx_size": 8192, "parallel": 2, "flash_attn": True, "flags": "-c 8192 -np 2"},
        "workload": {"concurrency": 2, "request_rate": 1.5},
        "started_at": "2026-10-01T12:00:00+02:00",
        "tool": {"name": "vllm", "version": "0.10.1"},
        "engine": "llama.cpp",
        "provenance": {"model": "file", "server.flags": "declared"},
    }
    summary = {"n_requests": 3, "n_ok": 2, "n_failed": 1, "duration_s": 30.0, "ttft_ms": {"p99": 900.0, "mean": 1}}
    ok = {"ts": "2026-10-01T12:00:01Z", "ok": True, "http_status": 200, "prompt_tokens": 100, "output_tokens": 50}
    lines = [
        json.dumps({"schema": v2, "run": run, "summary": summary}).encode(),  # spaces, \\u escapes
        json.dumps({"schema": v2, "run": run, "request": {**ok, "itl_s": [0.01, 0.02, 0]}}).encode(),
        orjson.dumps({"schema": v2, "run": {**run, "id": "varied-b"}, "request": ok, "extra": {"note": "ü"}}),
        json.dumps({"schema": v2, "run": run, "request": {**ok, "ok": False, "http_status": 500, "error": "boom"}})
        .replace(", ", ",")
        .encode(),
        orjson.dumps({"schema": v2, "run": {**run, "id": "varied-b"}, "request": {**ok, "elapsed_s": 3}}),
        orjson.dumps({"schema": "kvlab.bench/1", "run": {"id": "v1", "model": "m.gguf"}, "request": ok}),
        orjson.dumps({"run_name": "flat", "model_name": "m.gguf", "np": 4, "success": True, "tps": 3.5, "ts": 1.7e9}),
        orjson.dumps({"run_name": "flat", "model_name": "m.gguf", "np": 4, "status": 503, "error": {"message": "x"}}),
    ]
    return lines


def rejected_lines() -> list[bytes]:
    good = orjson.dumps({"run": "rej", "model": "m.gguf", "ok": True})
    return [good, b'{"run": "rej", "model": "m.gguf", "ok": "yes"}', b"{not json", good.replace(b"m.gguf", b"n.gguf")]


def import_all(tree: Path, var: Path, inputs: list[Path]) -> list[str]:
    """Migrate a fresh database under var and import each input with the tree's manage.py; their output."""
    env = common.scratch_env(var)
    env["KVLAB_REDIS_URL"] = f"redis://127.0.0.1:{closed_port()}/0"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=tree, env=env, check=True)
    outputs = []
    for path in inputs:
        done = subprocess.run(
            [sys.executable, "manage.py", "import_bench", str(path)], cwd=tree, env=env, capture_output=True, text=True
        )
        # the catch-up's duration is a timing, not a result
        text = re.sub(r" in [\d.]+ s\b", " in … s", done.stdout + done.stderr)
        outputs.append(f"{path.name} (exit {done.returncode}):\n{text}")
    return outputs


def tables(db: Path) -> dict[str, tuple[list[str], list[tuple[object, ...]]]]:
    conn = sqlite3.connect(db)
    try:
        names = [
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        ]
        out = {}
        for name in sorted(names):
            cursor = conn.execute(f'SELECT * FROM "{name}" ORDER BY rowid')  # names from sqlite_master
            columns = [d[0] for d in cursor.description]
            kept = [i for i, c in enumerate(columns) if c not in TIME_OF_IMPORT]
            out[name] = ([columns[i] for i in kept], [tuple(row[i] for i in kept) for row in cursor])
        return out
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="HEAD", help="the revision to compare with (git)")
    parser.add_argument("--files", nargs="*", default=LINE_READING, help="files taken from the working tree")
    parser.add_argument("--requests", type=int, default=3_000, help="requests in each synthetic export")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        inputs = [common.ROOT / "data" / "demo" / "bench_results.jsonl"]
        for per_run in (1, 4, 10):
            path = tmp / f"lab-{per_run}-per-run.jsonl"
            synthetic.write_lab_export(path, args.requests, per_run)
            # runs of their own (the lab numbers its runs alike at every shape)
            path.write_bytes(path.read_bytes().replace(b'"run":{"id":"', b'"run":{"id":"%d-a-run-' % per_run))
            inputs.append(path)
        for name, lines in (("varied.jsonl", varied_lines()), ("rejected.jsonl", rejected_lines())):
            (tmp / name).write_bytes(b"\n".join(lines) + b"\n")
            inputs.append(tmp / name)
        inputs.append(inputs[1])
        before = tree_at(args.against, tmp / "before", [])
        after = tree_at(args.against, tmp / "after", args.files)
        out_before = import_all(before, tmp / "var-before", inputs)
        out_after = import_all(after, tmp / "var-after", inputs)
        db_before, db_after = tables(tmp / "var-before" / "kvlab.sqlite3"), tables(tmp / "var-after" / "kvlab.sqlite3")
    differences = [
        f"output of {a.splitlines()[0]}\n{a}\n--- against ---\n{b}"
        for a, b in zip(out_before, out_after, strict=True)
        if a != b
    ]
    for name in sorted(set(db_before) | set(db_after)):
        columns, rows = db_before.get(name, ([], []))
        columns_after, rows_after = db_after.get(name, ([], []))
        if columns != columns_after or len(rows) != len(rows_after):
            differences.append(f"{name}: {len(rows)} rows of {columns} against {len(rows_after)} of {columns_after}")
            continue
        for row, row_after in zip(rows, rows_after, strict=True):
            if repr(row) != repr(row_after):  # repr: 1 and 1.0 apart
                changed = [c for c, x, y in zip(columns, row, row_after, strict=True) if repr(x) != repr(y)]
                differences.append(f"{name}: row {row[0]!r} differs in {changed}: {row} against {row_after}")
                break
    counts = {name: len(rows) for name, (_, rows) in db_before.items() if rows}
    print(f"against {args.against}, with {', '.join(args.files) or 'no files'} from the working tree")
    print("rows compared:", ", ".join(f"{name} {n:,}" for name, n in counts.items()))
    print("\n".join(out_after))
    if differences:
        print("DIFFERENT:\n" + "\n".join(differences))
        return 1
    print("identical: every table, every row, every column but", ", ".join(sorted(TIME_OF_IMPORT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
