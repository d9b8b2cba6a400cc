"""How much memory does importing a file of many small runs, or of one huge run, take, and does it
grow with the file?

What is measured
----------------
Two shapes, each at two sizes written to bench/out/:

* many runs: N one-request runs (default 1,000,000, about 40 MB, the hostile file of many tiny runs) and
  N/10. Each line is a minimal flat record (a run id, a short name of one of
  bench/synthetic.py's models, ok): the most runs per byte a valid file can hold, so the
  worst case for anything an importer keeps per run;
* one run: one run of M requests (default 1,000,000) and M/10, each line a
  minimal flat record of that run with a request of its own (its tok/s): the worst case for
  anything an importer keeps per request of a run.

Each file is imported by its own child process, started as a user starts a command:
Django on a freshly migrated scratch SQLite database, one one-line import first (so
every module the import uses is loaded), then its peak resident memory is read
(``ru_maxrss``), then ``import_bench_file`` imports the file, then the peak is read
again. The import's own peak is the difference; the child checks that every run was
stored. Only the import is timed.

How to read it
--------------
``growth = import peak at N / import peak at N/10``: 1.0 means the importer's memory
does not depend on the file's size (a constant plus one run, or one piece of a run of more
than 5,000 requests); 10 means it grows in proportion to the file. Each shape has its own growth.

Usage (from the repository root)::

    .venv/bin/python bench/import_memory.py [--runs N] [--requests M] [--smoke] [--out DIR]

``--smoke`` measures 20,000 and 2,000 runs, and one run of 20,000 and 2,000 requests (every
check still made; results in bench/out/smoke/), as ``make test`` does so the script cannot rot.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common  # bench/ is on sys.path when a script runs
import synthetic


def write_one_request_runs(path: Path, n_runs: int) -> None:
    models = list(synthetic.MODEL_SHORT.values())
    with path.open("w") as out:
        for i in range(n_runs):
            out.write(f'{{"run":"r{i:07d}","model":"{models[i % len(models)]}","ok":true}}\n')


def write_one_run(path: Path, n_requests: int) -> None:
    model = next(iter(synthetic.MODEL_SHORT.values()))
    with path.open("w") as out:
        for i in range(n_requests):
            out.write(f'{{"run":"huge","model":"{model}","ok":true,"tok_s":{i}}}\n')


SHAPES = {"many runs": write_one_request_runs, "one run": write_one_run}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# --- the child: one import, measured ---------------------------------------------------


def measure_import(path: Path, n_runs: int, n_requests: int) -> dict[str, Any]:
    """In the child process: import path (n_runs runs of n_requests in all) into a fresh database;
    its peak memory before and after."""
    with tempfile.TemporaryDirectory(prefix="kvlab-import-memory-") as tmp:
        common.setup_migrated_django(Path(tmp))
        from benchmarks.history.importer import import_bench_file
        from benchmarks.models import RequestResult, Run

        warm_up = Path(tmp) / "one.jsonl"
        write_one_request_runs(warm_up, 1)
        with warm_up.open("rb") as f:
            assert import_bench_file(f, filename=warm_up.name, origin="command").status == "imported"
        Run.objects.all().delete()

        before = peak_rss_mib()
        start = time.perf_counter()
        with path.open("rb") as f:
            file_import = import_bench_file(f, filename=path.name, origin="command")
        seconds = time.perf_counter() - start
        after = peak_rss_mib()
        assert file_import.status == "imported", f"the import was {file_import.status}"
        assert file_import.n_runs == n_runs == Run.objects.count(), f"{file_import.n_runs} of {n_runs} runs stored"
        assert RequestResult.objects.count() == n_requests == sum(Run.objects.values_list("n_requests", flat=True))
    return {
        "runs": n_runs,
        "requests": n_requests,
        "file_mib": round(path.stat().st_size / 2**20, 2),
        "peak_before_mib": round(before, 1),
        "peak_after_mib": round(after, 1),
        "import_peak_mib": round(after - before, 1),
        "seconds": round(seconds, 2),
    }


def run_child(path: Path, n_runs: int, n_requests: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(path), "--runs", str(n_runs), "--requests", str(n_requests)]
    done = subprocess.run(command, cwd=common.ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"the import of {path.name} failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.splitlines()[-1])


# --- running and reporting ---------------------------------------------------------


def print_table(results: dict[str, Any]) -> None:
    print("\nImport of a file in a fresh process; peak resident memory (ru_maxrss)")
    header = (
        f"{'shape':>10} {'runs':>10} {'requests':>10} {'file MiB':>9} {'peak before':>12} {'peak after':>11} "
        f"{'import peak':>12} {'seconds':>8}"
    )
    common.print_header(header)
    for shape in results["shapes"]:
        for r in shape["sizes"]:
            print(
                f"{shape['shape']:>10} {r['runs']:>10,} {r['requests']:>10,} {r['file_mib']:>9.1f} "
                f"{r['peak_before_mib']:>12.1f} {r['peak_after_mib']:>11.1f} {r['import_peak_mib']:>12.1f} "
                f"{r['seconds']:>8.2f}"
            )
    for shape in results["shapes"]:
        print(f"\n{shape['shape']}: growth (import peak at the larger file / at the smaller): {shape['growth']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000, help="one-request runs in the larger many-runs file")
    parser.add_argument(
        "--requests", type=int, default=1_000_000, help="requests of the run in the larger one-run file"
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # internal: import this file, print JSON
    args = common.parse_args(parser, argv, smoke={"runs": 20_000, "requests": 20_000})
    if args.child:
        print(json.dumps(measure_import(args.child, args.runs, args.requests)))
        return 0
    if args.runs < 10 or args.requests < 10:
        parser.error("--runs and --requests must be at least 10")

    args.out.mkdir(parents=True, exist_ok=True)
    shapes = []
    for shape, write in SHAPES.items():
        size = args.runs if shape == "many runs" else args.requests
        sizes = []
        for n in (size // 10, size):
            path = args.out / f"{shape.replace(' ', '_')}_{n}.jsonl"
            write(path, n)
            n_runs = n if shape == "many runs" else 1
            measured = run_child(path, n_runs, n)
            path.unlink()
            peak = measured["import_peak_mib"]
            print(f"  {shape}, {n:>10,} requests: import peak {peak:,.1f} MiB in {measured['seconds']} s")
            sizes.append(measured)
        small, large = sizes
        growth = round(large["import_peak_mib"] / max(small["import_peak_mib"], 1.0), 2)
        shapes.append({"shape": shape, "sizes": sizes, "growth": growth})
    results = {"shapes": shapes, **common.machine()}
    print_table(results)
    common.write_results(args.out, "import_memory", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
