"""What reading, normalising and checking one line of a kvlab.bench/2 export costs, now against a revision.

What is measured
----------------
The part of ``import_bench`` that is pure Python and touches no database: for each line of a
synthetic kvlab.bench/2 export (bench/synthetic.py's lab as ``export_bench`` writes it, each run's
summary then its requests), ``reader.runs_as_read`` (split the lines, ``jsonl.decode_line``,
``records.normalize``, each run's lines merged into a ``ParsedRun``), then, per run, what the
importer computes from its records before it writes a row (``metrics.summarize`` and
``summaries.with_tool_summary``). The file is read from memory.

The same lines go through the working tree's ``benchmarks/history`` and through a copy of it at
``--against`` (default HEAD, extracted with ``git archive`` into a temporary folder), alternating
(old, new, new, old, ...) in this one process, so both see the same machine load; the time is
this process's CPU time (the machine may be shared), with the garbage collector paused as the
importer pauses it. Both must
produce the same runs (values, records, summaries: compared by repr), or the script stops.

Printed per shape (requests a run): microseconds a line, the median of ``--repeats``, and old/new.

Usage (from the repository root)::

    .venv/bin/python bench/line_reading_speed.py [--requests N] [--per-run 1,10] [--repeats N]
        [--against REV] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import common  # bench/ is on sys.path when a script runs
import synthetic

MODULES = ("jsonl", "records", "reader", "metrics", "summaries")


def history_at(revision: str, folder: Path) -> dict[str, ModuleType]:
    """benchmarks/history as it was at revision, imported under a package name of its own."""
    archive = subprocess.run(
        ["git", "archive", revision, "benchmarks/history"], cwd=common.ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    package = f"history_at_{abs(hash(revision))}"
    (folder / "benchmarks" / "history").rename(folder / package)
    sys.path.insert(0, str(folder))
    try:
        return {name: importlib.import_module(f"{package}.{name}") for name in MODULES}
    finally:
        sys.path.remove(str(folder))


def working_tree() -> dict[str, ModuleType]:
    return {name: importlib.import_module(f"benchmarks.history.{name}") for name in MODULES}


def read(history: dict[str, ModuleType], data: bytes, keep: bool = True) -> list[Any]:
    """Every run of the file as the importer has it before it writes: (parsed run, its aggregates).

    keep=False: each run is dropped once summarized, as the importer drops each batch once written.
    """
    reader, metrics, summaries = history["reader"], history["metrics"], history["summaries"]
    counts = reader.ReadCounts()
    wall, started = reader.RUN_FIELD_NAMES.index("wall_s"), reader.RUN_FIELD_NAMES.index("started_at")
    out = []
    n_records = 0
    for run in reader.runs_as_read(io.BytesIO(data), counts, max_line_bytes=1 << 20):
        aggregates = metrics.summarize(
            (record.request for _, record, _ in run.records),
            run.values[wall],
            (record.itl for _, record, _ in run.records),
        )
        applied = summaries.with_tool_summary(aggregates, run.summary, started_at=run.values[started])
        n_records += len(run.records) + run.n_summary_records
        if keep:
            out.append((run, applied))
    assert counts.n_records == n_records
    return out


def same_runs(new: list[Any], old: list[Any]) -> bool:
    def shape(runs: list[Any]) -> list[str]:
        return [
            repr(
                (run.key, run.first_line, run.values, run.records, run.occurrences, run.summary, run.summary_extra, agg)
            )
            for run, agg in runs
        ]

    return shape(new) == shape(old)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument("--per-run", default="1,10", help="requests a run, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", default="HEAD", help="the revision to compare with (git)")
    args = common.parse_args(parser, argv, {"requests": 2_000, "repeats": 1})
    with tempfile.TemporaryDirectory() as tmp:
        old, new = history_at(args.against, Path(tmp)), working_tree()
        print(f"{args.requests:,} requests; old = {args.against}, new = the working tree; microseconds a line")
        print(f"{'per run':>8} {'lines':>8} {'old us':>8} {'new us':>8} {'old/new':>8}")
        for per_run in (int(n) for n in args.per_run.split(",")):
            path = Path(tmp) / f"lab-{per_run}.jsonl"
            _runs, lines = synthetic.write_lab_export(path, args.requests, per_run)
            data = path.read_bytes()
            assert same_runs(read(new, data), read(old, data)), "the working tree reads the file differently"
            times: dict[str, list[float]] = {"old": [], "new": []}
            for i in range(args.repeats):
                for name, history in (("new", new), ("old", old)) if i % 2 else (("old", old), ("new", new)):
                    gc.collect()
                    gc.disable()  # as the importer reads (importer.gc_paused)
                    start = time.process_time()
                    read(history, data, keep=False)
                    times[name].append(time.process_time() - start)
                    gc.enable()
            old_us, new_us = (statistics.median(times[name]) / lines * 1e6 for name in ("old", "new"))
            print(f"{per_run:>8} {lines:>8,} {old_us:>8.1f} {new_us:>8.1f} {old_us / new_us:>7.2f}x")


if __name__ == "__main__":
    main()
