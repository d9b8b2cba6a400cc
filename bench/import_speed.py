"""How long does `manage.py import_bench FILE` take, as a user runs it, next to the simplest possible import?

What is measured
----------------
For each shape (``--per-run``, default 1, 4, 10 and 1,000 requests a run), a synthetic file of N
requests (default 200,000) is written to bench/out/: bench/synthetic.py's lab as kvlab's own
export writes it (kvlab.bench/2, `export_bench`): for each run its tool summary record (counts,
totals, TTFT and E2E statistics, as a vLLM bench run reports them), then one record per request.
Then, alternating (floor, kvlab, floor, kvlab, ...), each in a process of its own as a user
starts it, timed from the outside (wall time, and the CPU time of the process and its threads):

* floor: ``python bench/import_speed.py --floor FILE DB``: read the file, ``orjson.loads``
  each line and insert one row per request (the run's id, model, GPU and four server flags, nine
  request fields) and one per summary (the run's id, model, GPU, the summary as JSON) with
  ``sqlite3.executemany`` into two plain tables (no index, no validation) of a fresh SQLite
  database in WAL mode, in one transaction. The least work that still gets every record into SQLite.
* kvlab: ``python manage.py import_bench FILE`` on a fresh copy of a migrated database (SQLite,
  the default), with no Redis to reach (``KVLAB_REDIS_URL`` names a closed port): everything a
  user waits for, Django's start-up, the strict checks of every line, the runs with their
  aggregates, the requests, and, since no worker can take them, the derived tables (the
  timeline's buckets and the regression baselines) the command brings up to date before it exits.
  It must say every request was imported, and the database must then hold every request and run
  and no pending derived work, or the script stops.
* kvlab+redis (``--with-redis``, when redis-server is installed): the same with a Redis of the
  script's own to queue the catch-up on; no worker takes it, so the command still catches up.

How to read the ratio
---------------------
``ratio = kvlab median seconds / floor median seconds`` for the same file, wall time: how many
times longer a user waits for kvlab than for the floor. The target is 3.0 or less at every shape.
The catch-up the command reports (its own line on standard error) is shown beside it; it is
part of kvlab's time.

Usage (from the repository root)::

    .venv/bin/python bench/import_speed.py [--requests N] [--per-run 1,4,10,1000] [--repeats N]
        [--with-redis] [--profile] [--smoke] [--out DIR]

``--profile`` also runs one import of each shape in this process under cProfile
(``import_bench_file``, then the catch-up) and writes where the time goes.
``--smoke`` imports 2,000 requests of each shape once each way (every check still made; results
in bench/out/smoke/), as ``make test`` does so the script cannot rot.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import resource
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import synthetic

SHAPES = (1, 4, 10, 1_000)
TARGET = 3.0

# --- the floor: orjson + sqlite3.executemany, in a process of its own ----------------------

RUN_COLUMNS = ("id", "model", "gpu")
SERVER_COLUMNS = ("ctx_size", "parallel", "cache_type_k", "cache_type_v")
REQUEST_COLUMNS = (
    "ts",
    "ok",
    "http_status",
    "error",
    "prompt_tokens",
    "n_predict",
    "output_tokens",
    "tok_s",
    "elapsed_s",
)


def floor_import(path: Path, db_path: Path) -> tuple[int, int]:
    """Parse every line with orjson and insert one row per record into two plain tables, in one
    transaction; (requests, summaries) stored."""
    import orjson

    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    request_columns = ("run", "model", "gpu", *SERVER_COLUMNS, *REQUEST_COLUMNS)
    conn.execute(f"CREATE TABLE request (id INTEGER PRIMARY KEY, {', '.join(request_columns)})")
    conn.execute("CREATE TABLE summary (id INTEGER PRIMARY KEY, run, model, gpu, summary)")
    loads, dumps = orjson.loads, orjson.dumps
    requests, summaries = [], []
    with path.open("rb") as f:
        for line in f:
            record = loads(line)
            run = record["run"]
            request = record.get("request")
            if request is None:
                summaries.append((*map(run.get, RUN_COLUMNS), dumps(record["summary"])))
            else:
                server = run.get("server") or {}
                requests.append(
                    (*map(run.get, RUN_COLUMNS), *map(server.get, SERVER_COLUMNS), *map(request.get, REQUEST_COLUMNS))
                )
    conn.execute("BEGIN IMMEDIATE")
    marks = ", ".join("?" * len(request_columns))
    conn.executemany(f"INSERT INTO request ({', '.join(request_columns)}) VALUES ({marks})", requests)
    conn.executemany("INSERT INTO summary (run, model, gpu, summary) VALUES (?, ?, ?, ?)", summaries)
    conn.execute("COMMIT")
    stored = conn.execute("SELECT (SELECT count(*) FROM request), (SELECT count(*) FROM summary)").fetchone()
    conn.close()
    return stored


# --- timing a process as a user starts it ----------------------------------------------------


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Run command to its end; (wall seconds, CPU seconds of it and its threads, the finished process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=common.ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return wall, cpu, done


def time_floor(path: Path, work: Path, n_requests: int, n_runs: int) -> dict[str, Any]:
    db = work / "floor.sqlite3"
    wall, cpu, done = timed(
        [sys.executable, str(Path(__file__).resolve()), "--floor", str(path), str(db)], os.environ.copy()
    )
    assert done.stdout.split() == [str(n_requests), str(n_runs)], f"the floor stored {done.stdout!r}"
    return {"wall_s": wall, "cpu_s": cpu}


def closed_port() -> int:
    """A loopback port nothing listens on (a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Kvlab:
    """Fresh migrated SQLite databases for `manage.py import_bench`, each a copy of one migrated once."""

    def __init__(self, work: Path) -> None:
        self.template = work / "template"
        self.live = work / "live"
        self.template.mkdir()
        env = common.scratch_env(self.template)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=common.ROOT, env=env, check=True)
        assert not (self.template / "kvlab.sqlite3-wal").exists(), "WAL left after migrate"

    def fresh_env(self, redis_url: str | None) -> dict[str, str]:
        shutil.rmtree(self.live, ignore_errors=True)
        shutil.copytree(self.template, self.live)
        env = common.scratch_env(self.live)
        env["KVLAB_REDIS_URL"] = redis_url or f"redis://127.0.0.1:{closed_port()}/0"
        return env

    def time_import(self, path: Path, n_requests: int, n_runs: int, redis_url: str | None = None) -> dict[str, Any]:
        env = self.fresh_env(redis_url)
        wall, cpu, done = timed([sys.executable, "manage.py", "import_bench", str(path)], env)
        assert f"imported {n_requests}, duplicate 0, rejected 0 ({n_runs} runs" in done.stdout, done.stdout
        caught_up = re.search(r"brought up to date: ([\d,]+) runs in ([\d.]+) s", done.stderr)
        self.check(n_requests, n_runs)
        return {"wall_s": wall, "cpu_s": cpu, "catch_up_s": float(caught_up[2]) if caught_up else 0.0}

    def check(self, n_requests: int, n_runs: int) -> None:
        conn = sqlite3.connect(self.live / "kvlab.sqlite3")
        try:
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM benchmarks_requestresult), (SELECT count(*) FROM benchmarks_run),"
                " (SELECT count(*) FROM benchmarks_derivedbacklog),"
                " (SELECT count(*) FROM benchmarks_run WHERE started_at IS NOT NULL),"
                " (SELECT count(*) FROM benchmarks_seriesrun), (SELECT count(*) FROM benchmarks_timelinebucket)"
            ).fetchone()
        finally:
            conn.close()
        requests, runs, pending, dated, filed, buckets = counts
        assert (requests, runs) == (n_requests, n_runs), f"stored {requests} requests in {runs} runs"
        assert pending == 0 and filed == dated and buckets > 0, "the derived tables were not brought up to date"


class OwnRedis:
    """A redis-server of this script's own on a free port, nothing saved; None when not installed."""

    def __init__(self) -> None:
        self.port = closed_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        common.stop(self.proc)


# --- in this process, under cProfile ----------------------------------------------------------


def profile_shape(path: Path, top: int = 30) -> str:
    """One import_bench_file of the file and its catch-up, under cProfile, on a freshly migrated database
    (Django set up in this process on a scratch one: common.setup_django)."""
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    from benchmarks.history import derived
    from benchmarks.history.importer import import_bench_file

    connections.close_all()
    live = Path(settings.DATABASES["default"]["NAME"])
    for suffix in ("", "-wal", "-shm"):
        Path(f"{live}{suffix}").unlink(missing_ok=True)
    call_command("migrate", verbosity=0)
    profiler = cProfile.Profile()
    profiler.enable()
    with path.open("rb") as f:
        import_bench_file(f, filename=path.name, origin="command")
    derived.catch_up()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    out.write(f"=== {path.name}: import_bench_file, then derived.catch_up, under cProfile: top {top} cumulative ===\n")
    stats.sort_stats("cumulative").print_stats(top)
    out.write("=== the same profile: top 20 by own (total) time ===\n")
    stats.sort_stats("tottime").print_stats(20)
    return out.getvalue()


# --- running and reporting --------------------------------------------------------------------


def median(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 3)


def measure_shape(
    per_run: int, args: argparse.Namespace, work: Path, kvlab: Kvlab, redis: OwnRedis | None
) -> dict[str, Any]:
    path = args.out / f"bench_export_{per_run}_per_run.jsonl"
    start = time.perf_counter()
    n_runs, n_lines = synthetic.write_lab_export(path, args.requests, per_run)
    print(
        f"wrote {common.shown(path)}: {args.requests:,} requests in {n_runs:,} runs, {n_lines:,} lines "
        f"in {time.perf_counter() - start:.1f} s"
    )
    importers = ["floor", "kvlab"] + (["kvlab+redis"] if redis else [])
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in importers}
    for i in range(args.repeats):
        for name in importers:
            if name == "floor":
                result = time_floor(path, work, args.requests, n_runs)
            else:
                result = kvlab.time_import(path, args.requests, n_runs, redis.url if name == "kvlab+redis" else None)
            measured[name].append(result)
            catch_up = f", catch-up {result['catch_up_s']:.2f} s" if "catch_up_s" in result else ""
            print(
                f"  {per_run:>5} per run, repeat {i + 1}/{args.repeats} {name:<11} {result['wall_s']:7.2f} s"
                f"  (CPU {result['cpu_s']:.2f} s{catch_up})"
            )
    shape: dict[str, Any] = {
        "per_run": per_run,
        "requests": args.requests,
        "runs": n_runs,
        "lines": n_lines,
        "file_mib": round(path.stat().st_size / 2**20, 1),
    }
    for name, runs in measured.items():
        shape[name] = {
            "seconds": [round(r["wall_s"], 3) for r in runs],
            "cpu_seconds": [round(r["cpu_s"], 3) for r in runs],
            "median_s": median(runs, "wall_s"),
            "median_cpu_s": median(runs, "cpu_s"),
        }
        if name != "floor":
            shape[name]["catch_up_s"] = [r["catch_up_s"] for r in runs]
            shape[name]["median_catch_up_s"] = median(runs, "catch_up_s")
            shape[name]["ratio"] = round(shape[name]["median_s"] / shape["floor"]["median_s"], 2)
    if not args.keep_files:
        path.unlink()
    return shape


def print_table(results: dict[str, Any]) -> None:
    print(
        f"\nImport as a user runs it: {results['requests']:,} requests a file, a kvlab.bench/2 export "
        f"(each run's summary, then its requests), {results['repeats']} repeats each, alternating"
    )
    header = (
        f"{'per run':>7} {'runs':>8} {'lines':>8} {'MiB':>6}  {'floor s':>7} {'kvlab s':>7} {'ratio':>6}  "
        f"{'catch-up s':>10}  {'floor CPU':>9} {'kvlab CPU':>9}"
    )
    with_redis = any("kvlab+redis" in s for s in results["shapes"])
    if with_redis:
        header += f"  {'+redis s':>8} {'ratio':>6}"
    common.print_header(header)
    for s in results["shapes"]:
        floor, kvlab = s["floor"], s["kvlab"]
        line = (
            f"{s['per_run']:>7,} {s['runs']:>8,} {s['lines']:>8,} {s['file_mib']:>6.1f}  {floor['median_s']:>7.2f} "
            f"{kvlab['median_s']:>7.2f} {kvlab['ratio']:>5.2f}x  {kvlab['median_catch_up_s']:>10.2f}  "
            f"{floor['median_cpu_s']:>9.2f} {kvlab['median_cpu_s']:>9.2f}"
        )
        if with_redis:
            line += f"  {s['kvlab+redis']['median_s']:>8.2f} {s['kvlab+redis']['ratio']:>5.2f}x"
        print(line)
    worst = max(s["kvlab"]["ratio"] for s in results["shapes"])
    verdict = "within" if worst <= TARGET else "OVER"  # the worst shape decides
    print(
        f"\nworst ratio kvlab/floor (median wall time): {worst:.2f}x ({verdict} the {TARGET:g}x target at every shape)"
    )


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--floor"]:  # the floor, in a process of its own
        print(*floor_import(Path(sys.argv[2]), Path(sys.argv[3])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200_000, help="requests in each generated file")
    parser.add_argument(
        "--per-run",
        type=lambda text: [int(n) for n in text.split(",")],
        default=list(SHAPES),
        help="requests a run, one file each (default 1,4,10,1000)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each importer at each shape")
    parser.add_argument("--with-redis", action="store_true", help="also import with a Redis to queue the catch-up on")
    parser.add_argument("--profile", action="store_true", help="also profile one import of each shape (cProfile)")
    parser.add_argument("--keep-files", action="store_true", help="keep the generated files in --out")
    args = common.parse_args(parser, argv, smoke={"requests": 2_000, "repeats": 1})
    if args.requests < 1 or args.repeats < 1 or min(args.per_run) < 1:
        parser.error("--requests, --per-run and --repeats must be positive")
    if args.with_redis and shutil.which("redis-server") is None:
        parser.error("--with-redis: redis-server is not installed (scripts/ensure-redis.sh)")

    args.out.mkdir(parents=True, exist_ok=True)
    redis = OwnRedis() if args.with_redis else None
    try:
        with tempfile.TemporaryDirectory(prefix="kvlab-import-bench-") as tmp:
            work = Path(tmp)
            kvlab = Kvlab(work)
            shapes = [measure_shape(per_run, args, work, kvlab, redis) for per_run in args.per_run]
            profiles = ""
            if args.profile:
                common.setup_django(work / "profile-var")
                for per_run in args.per_run:
                    path = args.out / f"bench_export_{per_run}_per_run.jsonl"
                    synthetic.write_lab_export(path, args.requests, per_run)
                    profiles += profile_shape(path)
                    if not args.keep_files:
                        path.unlink()
    finally:
        if redis is not None:
            redis.stop()
    results = {"requests": args.requests, "repeats": args.repeats, "shapes": shapes, **common.machine()}
    print_table(results)
    common.write_results(args.out, "import_speed", results, profiles or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
