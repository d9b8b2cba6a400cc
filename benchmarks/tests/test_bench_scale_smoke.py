"""bench/scale_fill.py and bench/scale_pages.py (the million-run benchmark) at their smoke size, so neither can rot.

`make bench` runs them at 1,000,000 runs on both engines (minutes). Here the pages script
runs with ``--smoke`` on SQLite in a child process, as a user starts it: it fills 2,000 runs
through scale_fill.py into a cache of its own, then fetches every page and checks each
answer (status, rows, order, figures), exiting non-zero when one is wrong. A second fill
must reuse the kept database, and a kept database must be filled again when a migration
(or the generator) changes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 180  # the smoke run takes well under a minute; this only stops a hung one


def run(script: str, *options: str) -> str:
    command = [sys.executable, str(ROOT / "bench" / script), "--smoke", *options]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{script} exited {done.returncode}\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def test_scale_pages_measures_every_page_of_the_filled_database_against_its_goal(tmp_path: Path) -> None:
    out, cache = tmp_path / "out", tmp_path / "cache"
    stdout = run("scale_pages.py", "--cache", str(cache), "--out", str(out))

    assert "[sqlite] filling 2,000 runs (no complete fill)" in stdout
    assert "Pages at scale on sqlite: 2,000 runs, 20,000 requests, 60 jobs, 110 sweeps, and 2 big runs of 20,000" in (
        stdout
    )
    assert "reproduce: .venv/bin/python bench/scale_pages.py --smoke" in stdout
    results = json.loads((out / "scale_pages_sqlite.json").read_text())
    assert results["wrong"] == []
    pages = {p["page"]: p for p in results["pages"]}
    assert {
        "run list, 50",
        "run list, sort -tok_s",
        "run list, outcome failed",
        "run list, one key",
        "run page",
    } <= set(pages)
    assert {
        "compare, 12 runs",
        "timeline by series",
        "timeline, last 30 days",
        "load curve",
        "regressions by gpu",
    } <= set(pages)
    assert {"home", "job list", "job list, last page", "sweep list"} <= set(pages)
    # two big runs: one's page, and their compare, whose chart draws an even sample of each
    assert {"run page, 20,000 requests", "compare, 2 runs of 20,000", "compare chart, 2 runs of 20,000"} <= set(pages)
    assert all(p["timed"] == 2 and p["p95_ms"] > 0 and p["queries"] > 0 for p in pages.values())
    assert all(p["gzip"] and p["wire_bytes"] < p["bytes"] for p in pages.values())  # gzip was asked and served
    assert all(p["time_ok"] == (p["p95_ms"] < p["goal_ms"]) for p in pages.values())
    assert {p["goal_ms"] for name, p in pages.items() if name.startswith("regressions")} == {50.0}
    assert all("slowest" in p for p in pages.values() if not p["time_ok"])

    again = run("scale_fill.py", "--cache", str(cache), "--out", str(out))
    assert "[sqlite] reusing the filled database" in again


def test_a_kept_database_is_refilled_when_a_migration_changes_or_the_generator_and_migrated_when_one_is_new() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from scale_fill import new_migrations_only, reusable
    finally:
        sys.path.remove(str(ROOT / "bench"))
    want = {"runs": 1_000_000, "generator": "g1"}
    applied = {"benchmarks.0001_initial": "a", "benchmarks.0002_more": "b"}
    held = want | {"migrations": applied}

    assert reusable(held, want, applied) == "fresh"
    assert reusable(held, want, applied | {"benchmarks.0003_new": "c"}) == "migration benchmarks.0003_new is new"
    assert reusable(held, want, applied | {"benchmarks.0002_more": "b2"}) == "migration benchmarks.0002_more changed"
    assert reusable(held, want, {"benchmarks.0001_initial": "a"}) == "migration benchmarks.0002_more changed"
    assert reusable(held, want | {"generator": "g2"}, applied) == "generator changed"
    assert reusable(None, want, applied) == "no complete fill"
    # a migration added since the fill is applied by migrate; one changed or removed needs a refill
    assert new_migrations_only(held, applied | {"benchmarks.0003_new": "c"})
    assert not new_migrations_only(held, applied | {"benchmarks.0002_more": "b2"})
    assert not new_migrations_only(held, {"benchmarks.0001_initial": "a"})


def test_scale_paint_times_the_timeline_in_chromium_on_the_kept_database(tmp_path: Path) -> None:
    out, cache = tmp_path / "out", tmp_path / "cache"
    run("scale_fill.py", "--cache", str(cache), "--out", str(out))
    stdout = run("scale_paint.py", "--cache", str(cache), "--out", str(out))

    assert "Timeline paint in Chromium, 2,000 runs (SQLite), 1 loads each after a warm-up" in stdout
    pages = json.loads((out / "scale_paint.json").read_text())["pages"]
    assert [p["case"] for p in pages] == ["timeline label", "timeline a month", "timeline a day", "timeline series"]
    assert all(p["painted_ms"] > 0 and p["points"] > 0 and p["traces"] > 0 for p in pages)
    assert all(p["paint_ok"] == (p["painted_ms"] < 500) for p in pages)
