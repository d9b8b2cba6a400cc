"""How fast does kvlab import a large bench_results.jsonl, next to the simplest possible import?

What is measured
----------------
A synthetic file of N requests (default 200,000: 20,000 runs of 10 requests, in the
flat lab shape of data/demo/bench_results.jsonl; the runs of bench/synthetic.py's lab,
described there) is written to bench/out/. Then, in one process and alternating
(baseline, kvlab, baseline, kvlab, ...), each on a fresh SQLite database in WAL mode
on the same disk:

* baseline: read the file, ``orjson.loads`` each line, pick 16 columns, and insert one
  row per request with ``sqlite3.executemany`` into a plain table (no indexes, no
  validation, no runs table) in one transaction, then commit. This is the floor: the
  least work that still gets every request into SQLite.
* kvlab: ``benchmarks.history.importer.import_bench_file`` on a freshly migrated kvlab
  database: strict parsing and validation of every line, content hashes for
  idempotent re-imports, the runs table with its aggregates, the constraints and
  indexes, and the FileImport record. The import must report status "imported" with
  every request stored, or the script stops. An import of more than 2,000 runs leaves the
  derived tables (the timeline's buckets, the regression baselines) to a worker that catches
  up just after the commit (benchmarks.history.derived): that catch-up is timed apart, after
  each kvlab import, and printed beside the table, not in the ratio.
* kvlab-1t: the same import without its SQLite writer thread (benchmarks.history.
  sqlite_batches): every step in the one thread, what a single core would see.

Each importer's CPU time (``time.process_time``, all its threads) is reported beside its
wall time: kvlab on SQLite stores its batches from a second thread while it parses the
next ones, so its wall time is shorter than its CPU time when a second core is free.

Schema creation (CREATE TABLE / migrate) and opening the connection are not timed;
reading and parsing the file, the inserts and the commit are.

How to read the ratio
---------------------
``ratio = kvlab median seconds / baseline median seconds``: how many times longer
kvlab takes than the floor for the same file, as a user waits for it (wall time).
1.0 would mean kvlab's checks and bookkeeping cost nothing; the working target is 3.0
or less. The one-core ratio (kvlab-1t) and the CPU-time ratio are printed beside it.

Usage (from the repository root)::

    .venv/bin/python bench/import_speed.py [--requests N] [--repeats N] [--profile] [--smoke] [--out DIR]

``--profile`` also runs one kvlab import under cProfile and prints where the time
goes (top 25 by cumulative time, then the top functions by own time).
``--smoke`` imports 2,000 requests once each way (every check still made; results
in bench/out/smoke/), as ``make test`` does so the script cannot rot.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import synthetic

# --- the baseline: orjson + sqlite3.executemany ------------------------------------

BASELINE_COLUMNS = (
    "run",
    "model",
    "gpu",
    "ctx_size",
    "parallel",
    "cache_type_k",
    "cache_type_v",
    "ts",
    "ok",
    "status",
    "error",
    "prompt_tokens",
    "n_predict",
    "output_tokens",
    "tok_s",
    "elapsed_s",
)


def baseline_connect(db_path: Path) -> sqlite3.Connection:
    """A fresh database with one plain table; not timed."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"CREATE TABLE request (id INTEGER PRIMARY KEY, {', '.join(BASELINE_COLUMNS)})")
    return conn


def baseline_import(path: Path, conn: sqlite3.Connection) -> int:
    """Parse every line with orjson and insert one row per request, in one transaction."""
    import orjson

    loads = orjson.loads
    with path.open("rb") as f:
        rows = [tuple(map(loads(line).get, BASELINE_COLUMNS)) for line in f if line.strip()]
    placeholders = ", ".join("?" * len(BASELINE_COLUMNS))
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(f"INSERT INTO request ({', '.join(BASELINE_COLUMNS)}) VALUES ({placeholders})", rows)
    conn.execute("COMMIT")
    return len(rows)


def time_baseline(path: Path, db_path: Path, n_expected: int) -> tuple[float, float]:
    conn = baseline_connect(db_path)
    try:
        gc.collect()
        start, cpu_start = time.perf_counter(), time.process_time()
        n = baseline_import(path, conn)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        stored = conn.execute("SELECT count(*) FROM request").fetchone()[0]
    finally:
        conn.close()
    assert n == stored == n_expected, f"baseline stored {stored} of {n_expected} rows"
    return elapsed, cpu


# --- kvlab's importer --------------------------------------------------------------


class KvlabDatabases:
    """Migrate once, keep a copy, and restore that copy for every measurement."""

    def __init__(self, work: Path) -> None:
        from django.conf import settings
        from django.core.management import call_command
        from django.db import connections

        self.live = Path(settings.DATABASES["default"]["NAME"])
        self.template = work / "migrated-template.sqlite3"
        call_command("migrate", verbosity=0)
        connections.close_all()  # the last close checkpoints and removes the WAL
        assert not Path(f"{self.live}-wal").exists(), "WAL left after close; the template would be incomplete"
        shutil.copyfile(self.live, self.template)

    def fresh(self) -> None:
        from django.db import connection, connections

        connections.close_all()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.live}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(self.template, self.live)
        connection.ensure_connection()  # connect (and run the PRAGMAs) outside the timing


def kvlab_import(path: Path) -> Any:
    from benchmarks.history.importer import import_bench_file

    with path.open("rb") as f:
        return import_bench_file(f, filename=path.name, origin="command")


def check_kvlab_result(file_import: Any, n_expected: int, n_runs: int) -> None:
    from benchmarks.models import RequestResult, Run

    assert file_import.status == "imported", f"kvlab import was {file_import.status}, not imported"
    assert file_import.n_imported == n_expected, f"kvlab imported {file_import.n_imported} of {n_expected}"
    assert file_import.n_runs == n_runs, f"kvlab stored {file_import.n_runs} runs, expected {n_runs}"
    assert RequestResult.objects.count() == n_expected
    assert Run.objects.count() == n_runs


def time_kvlab(
    path: Path, dbs: KvlabDatabases, n_expected: int, n_runs: int, *, one_thread: bool = False
) -> tuple[float, float]:
    """kvlab's import; one_thread: without the SQLite writer thread (sqlite_batches), as on one core."""
    from benchmarks.history import sqlite_batches

    dbs.fresh()
    available = sqlite_batches.available
    if one_thread:
        sqlite_batches.available = lambda: False  # type: ignore[assignment]
    try:
        gc.collect()
        start, cpu_start = time.perf_counter(), time.process_time()
        file_import = kvlab_import(path)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        sqlite_batches.available = available  # type: ignore[method-assign]
    check_kvlab_result(file_import, n_expected, n_runs)
    CATCH_UP_S.append(time_catch_up(n_runs))
    return elapsed, cpu


CATCH_UP_S: list[float] = []  # each kvlab import's catch-up of the derived tables, after it returned


def time_catch_up(n_runs: int) -> float:
    """What a worker does just after a large import commits (history.derived.catch_up): count its runs
    into the timeline's buckets and the regression baselines. Not part of the import's time; 0 when the
    import counted them itself (INLINE_UP_TO runs or fewer)."""
    from benchmarks.history import derived
    from benchmarks.models import SeriesRun

    gc.collect()
    start = time.perf_counter()
    counted = derived.catch_up()
    elapsed = time.perf_counter() - start
    assert counted in (0, n_runs), f"the catch-up counted {counted} runs of {n_runs}"
    assert SeriesRun.objects.count() == n_runs, "the derived tables do not count every run"
    return elapsed if counted else 0.0


def time_read_phase(path: Path, n_expected: int) -> float:
    """kvlab's first phase alone: read, decode and validate every line, and spill it to disk (no database)."""
    from django.conf import settings

    from benchmarks.history.reader import read_bench_file

    gc.collect()
    start = time.perf_counter()
    with path.open("rb") as f, read_bench_file(f, max_line_bytes=settings.KVLAB_IMPORT_MAX_LINE_BYTES) as parsed:
        elapsed = time.perf_counter() - start
        assert not parsed.rejects and parsed.n_records == n_expected, "the reader rejected lines of the generated file"
    return elapsed


def profile_kvlab(path: Path, dbs: KvlabDatabases, n_expected: int, n_runs: int, top: int = 25) -> str:
    dbs.fresh()
    profiler = cProfile.Profile()
    profiler.enable()
    file_import = kvlab_import(path)
    profiler.disable()
    check_kvlab_result(file_import, n_expected, n_runs)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    out.write(f"=== kvlab import under cProfile: top {top} by cumulative time ===\n")
    stats.sort_stats("cumulative").print_stats(top)
    out.write("=== the same profile: top 15 by own (total) time ===\n")
    stats.sort_stats("tottime").print_stats(15)
    return out.getvalue()


# --- running and reporting ---------------------------------------------------------

IMPORTERS = ("baseline", "kvlab", "kvlab-1t")


def summarize(times: list[float], n_rows: int, cpu: list[float]) -> dict[str, Any]:
    return {
        "seconds": [round(t, 4) for t in times],
        "cpu_seconds": [round(t, 4) for t in cpu],
        "median_cpu_s": round(statistics.median(cpu), 4),
        "best_s": round(min(times), 4),
        "median_s": round(statistics.median(times), 4),
        "best_rows_per_s": round(n_rows / min(times)),
        "median_rows_per_s": round(n_rows / statistics.median(times)),
    }


def print_table(results: dict[str, Any]) -> None:
    n = results["requests"]
    print(
        f"\nImport of {n:,} requests in {results['runs']:,} runs ({results['file_mib']:.1f} MiB), "
        f"{results['repeats']} repeats each, alternating"
    )
    header = f"{'importer':<10} {'best s':>8} {'median s':>9} {'median CPU s':>13} {'median rows/s':>14}  all runs (s)"
    common.print_header(header)
    for name in IMPORTERS:
        r = results[name]
        runs = ", ".join(f"{t:.3f}" for t in r["seconds"])
        print(
            f"{name:<10} {r['best_s']:>8.3f} {r['median_s']:>9.3f} {r['median_cpu_s']:>13.3f} "
            f"{r['median_rows_per_s']:>14,}  {runs}"
        )
    verdict = "within" if results["ratio_median"] <= 3.0 else "OVER"
    print(f"\nratio kvlab/baseline (median time): {results['ratio_median']:.2f}x  ({verdict} the 3x target)")
    print(
        f"on one core (kvlab-1t: no writer thread): {results['ratio_one_thread']:.2f}x; "
        f"CPU time, kvlab/baseline: {results['ratio_cpu']:.2f}x"
    )
    catch_up = results.get("kvlab_catch_up_s")
    if catch_up:
        print(
            f"then a worker's catch-up of the derived tables (timeline buckets, regression baselines), "
            f"after the import commits: median {statistics.median(catch_up):.2f} s (not in the ratio)"
        )
    phases = results.get("kvlab_phases")
    if phases:
        print(
            f"kvlab phases (no profiler): read+validate+spill {phases['read_validate_s']:.2f} s, "
            f"store about {phases['store_s_estimate']:.2f} s (median total minus read)"
        )


def measure(path: Path, work: Path, n_requests: int, n_runs: int, repeats: int, profile: bool) -> dict[str, Any]:
    dbs = KvlabDatabases(work)
    baseline_db = work / "baseline.sqlite3"
    timings: dict[str, list[float]] = {name: [] for name in IMPORTERS}
    cpu: dict[str, list[float]] = {name: [] for name in IMPORTERS}
    steps: list[tuple[str, Callable[[], tuple[float, float]]]] = [
        ("baseline", lambda: time_baseline(path, baseline_db, n_requests)),
        ("kvlab", lambda: time_kvlab(path, dbs, n_requests, n_runs)),
        ("kvlab-1t", lambda: time_kvlab(path, dbs, n_requests, n_runs, one_thread=True)),
    ]
    for i in range(repeats):
        for name, step in steps:
            seconds, cpu_seconds = step()
            timings[name].append(seconds)
            cpu[name].append(cpu_seconds)
            print(
                f"  repeat {i + 1}/{repeats} {name:<8} {seconds:7.3f} s  {n_requests / seconds:>10,.0f} rows/s"
                f"  (CPU {cpu_seconds:.3f} s)"
            )
    baseline, kvlab, one_thread = (summarize(timings[name], n_requests, cpu[name]) for name in IMPORTERS)
    results: dict[str, Any] = {
        "requests": n_requests,
        "runs": n_runs,
        "file_mib": round(path.stat().st_size / 2**20, 2),
        "repeats": repeats,
        "baseline": baseline,
        "kvlab": kvlab,
        "kvlab-1t": one_thread,
        "ratio_median": round(kvlab["median_s"] / baseline["median_s"], 2),
        "ratio_one_thread": round(one_thread["median_s"] / baseline["median_s"], 2),
        "ratio_cpu": round(kvlab["median_cpu_s"] / baseline["median_cpu_s"], 2),
        "ratio_best": round(kvlab["best_s"] / baseline["best_s"], 2),
        "kvlab_catch_up_s": [round(t, 3) for t in CATCH_UP_S],
        **common.machine(),
    }
    if profile:
        read_s = time_read_phase(path, n_requests)
        results["kvlab_phases"] = {
            "read_validate_s": round(read_s, 3),
            "store_s_estimate": round(kvlab["median_s"] - read_s, 3),
            "note": "read = benchmarks.history.reader.read_bench_file alone (read, validate, spill; no profiler); "
            "store = kvlab median - read",
        }
        results["profile"] = profile_kvlab(path, dbs, n_requests, n_runs)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200_000, help="requests in the generated file")
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each importer")
    parser.add_argument("--profile", action="store_true", help="also profile one kvlab import (cProfile)")
    args = common.parse_args(parser, argv, smoke={"requests": 2_000, "repeats": 1})
    if args.requests < 1 or args.repeats < 1:
        parser.error("--requests and --repeats must be positive")

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "bench_results.jsonl"
    start = time.perf_counter()
    n_runs = synthetic.write_lab_jsonl(path, args.requests)
    print(
        f"wrote {common.shown(path)}: {args.requests:,} requests, {n_runs:,} runs "
        f"in {time.perf_counter() - start:.1f} s"
    )

    with tempfile.TemporaryDirectory(prefix="kvlab-import-bench-") as tmp:
        work = Path(tmp)
        common.setup_django(work)
        results = measure(path, work, args.requests, n_runs, args.repeats, args.profile)

    print_table(results)
    profile_text = results.pop("profile", None)
    common.write_results(args.out, "import_speed", results, profile_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
