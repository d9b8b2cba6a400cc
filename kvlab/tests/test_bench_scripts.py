"""Every benchmark script in bench/ runs end to end at its smoke size, so none can rot.

`make bench` runs them at full size (minutes each). Here each runs with ``--smoke`` in
a child process, started as a user starts it: small data, but every step and every
check the script makes of its own results (status codes, row counts, complete
streams), which exit non-zero when they fail. Results go to a temporary directory,
never over the figures in bench/out/.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 180  # a smoke run takes seconds; this only stops a hung one


def smoke(script: str, out: Path, *options: str, env: dict[str, str] | None = None) -> str:
    """Run bench/<script> --smoke [options], writing to out; its standard output, once it has exited 0."""
    command = [sys.executable, str(ROOT / "bench" / script), "--smoke", "--out", str(out), *options]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert done.returncode == 0, (
        f"{script} --smoke exited {done.returncode}\n--- stdout ---\n{done.stdout[-5000:]}\n"
        f"--- stderr ---\n{done.stderr[-5000:]}"
    )
    return done.stdout


def bench_module(name: str) -> Any:
    """A module of bench/, imported as its scripts import one another (bench/ on sys.path)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def results(out: Path, name: str) -> dict[str, Any]:
    return json.loads((out / f"{name}.json").read_text())


def test_import_speed_imports_every_shape_both_ways_as_a_user_runs_it_and_prints_the_ratios(tmp_path: Path) -> None:
    stdout = smoke("import_speed.py", tmp_path)

    assert "Import as a user runs it: 2,000 requests a file, a kvlab.bench/2 export" in stdout
    assert "worst ratio kvlab/floor (median wall time):" in stdout
    measured = results(tmp_path, "import_speed")
    assert (measured["requests"], measured["repeats"]) == (2_000, 1)
    shapes = {s["per_run"]: s for s in measured["shapes"]}
    assert {n: (s["runs"], s["lines"]) for n, s in shapes.items()} == {
        1: (2_000, 4_000),  # each run's summary, then its request
        4: (500, 2_500),
        10: (200, 2_200),
        1_000: (2, 2_002),
    }
    for shape in shapes.values():
        assert len(shape["floor"]["seconds"]) == len(shape["kvlab"]["seconds"]) == 1
        assert shape["kvlab"]["ratio"] > 0 and shape["floor"]["median_s"] > 0
    assert not list(tmp_path.glob("*.jsonl"))  # the generated files are removed


def test_import_memory_imports_both_files_in_their_own_processes_and_prints_the_growth(tmp_path: Path) -> None:
    stdout = smoke("import_memory.py", tmp_path)

    assert "one run: growth (import peak at the larger file / at the smaller):" in stdout
    shapes = results(tmp_path, "import_memory")["shapes"]
    assert [(shape["shape"], [(s["runs"], s["requests"]) for s in shape["sizes"]]) for shape in shapes] == [
        ("many runs", [(2_000, 2_000), (20_000, 20_000)]),
        ("one run", [(1, 2_000), (1, 20_000)]),
    ]
    assert all(s["import_peak_mib"] >= 0 and s["seconds"] > 0 for shape in shapes for s in shape["sizes"])
    assert all(shape["growth"] > 0 for shape in shapes)
    assert not list(tmp_path.glob("*.jsonl"))  # the generated files are removed


def test_regressions_speed_times_the_import_hook_and_the_page_at_both_sizes(tmp_path: Path) -> None:
    # The import hook is timed on SQLite only; with DATABASE_URL set the script measures the page alone.
    sqlite_env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    stdout = smoke("regressions_speed.py", tmp_path, env=sqlite_env)

    assert "of it derived.runs_changed" in stdout and "of it baselines.runs_changed" in stdout
    measured = results(tmp_path, "regressions_speed_sqlite")
    assert measured["hook"]["requests"] == 5_000 and len(measured["hook"]["import_s"]) == 2
    assert 0 < measured["hook"]["derived"]["share"] < 1  # the hook ran inside the import it is part of
    assert measured["page"]


def test_run_list_speed_measures_every_page_with_its_rows(tmp_path: Path) -> None:
    stdout = smoke("run_list_speed.py", tmp_path)

    assert "Run list with 1,000 runs, 2 timed requests per case" in stdout
    cases = results(tmp_path, "run_list_speed")["cases"]
    assert [(c["case"], c["per_page"]) for c in cases] == [
        (name, per_page) for per_page in (50, 200) for name in ("default", "filtered", "sorted", "deep", "htmx")
    ]
    assert all(c["expected_rows"] > 0 and c["queries"] > 0 and c["median_ms"] > 0 for c in cases)
    assert {c["expected_rows"] for c in cases if c["case"] == "default"} == {50, 200}


def test_compression_fetches_every_case_each_way_and_prints_the_ratios(tmp_path: Path) -> None:
    stdout = smoke("compression.py", tmp_path)

    assert "Compression with 1,000 runs, 2 timed requests per case" in stdout
    measured = results(tmp_path, "compression")
    cases = {c["case"]: c for c in measured["cases"]}
    assert "timeline ?format=json" in cases and "run export.jsonl" in cases and "plotly.min.js" in cases
    assert cases["run export.jsonl"]["streaming"] and cases["run export.jsonl"]["gzip_served"]
    assert all(c["gzip_bytes"] < c["plain_bytes"] for c in cases.values() if c["gzip_served"])
    assert all(
        c["br_only_bytes"] == c["plain_bytes"] for c in cases.values() if not c["content_type"].startswith("text/html")
    )
    assert not any(c["gzip_served"] for name, c in cases.items() if name.startswith("static"))
    assert all(c["plain_median_ms"] > 0 and c["gzip_median_ms"] > 0 for c in cases.values())
    assert [r["case"] for r in measured["static_production"]] == [
        "static (production) css/kvlab.css",
        "static (production) js/charts.js",
    ]


BOUNDED_PAGES = [
    "run list",
    "run list, 1 model",
    "timeline",
    "job list",
    "run page, big run",
    "run page, its last page",
    "suggest by start",
    "suggest by part",
    "suggest, no text",
]


def test_bounded_pages_measures_every_page_of_a_hostile_history_against_the_goal(tmp_path: Path) -> None:
    """SQLite always; PostgreSQL too when DATABASE_URL names one, as in `make test-postgres`."""
    stdout = smoke("bounded_pages.py", tmp_path)

    assert "Bounded pages on sqlite: 2,000 runs of 2,000 distinct models, a 20,000-request run, 50 jobs" in stdout
    pages = results(tmp_path, "bounded_pages_sqlite")["pages"]
    assert [p["page"] for p in pages] == BOUNDED_PAGES
    assert all(p["p95_ms"] > 0 and p["bytes"] > 0 and p["queries"] > 0 for p in pages)
    assert all(p["time_ok"] == (p["p95_ms"] < 1000) and p["size_ok"] == (p["bytes"] < 2**20) for p in pages)
    if os.environ.get("DATABASE_URL"):
        database = f"kvlab_bounded_smoke_{os.getpid()}"  # its own: another suite may run at once
        smoke("bounded_pages.py", tmp_path, "--engine", "postgres", "--pg-url", os.environ["DATABASE_URL"],
              "--pg-database", database)  # fmt: skip
        assert [p["page"] for p in results(tmp_path, "bounded_pages_postgres")["pages"]] == BOUNDED_PAGES


@pytest.mark.browser
def test_chart_speed_measures_every_chart_and_its_render_in_chromium(tmp_path: Path) -> None:
    stdout = smoke("chart_speed.py", tmp_path)

    assert "Chart pages with 1,000 runs and 10,000 requests" in stdout
    assert "Browser render, headless Chromium" in stdout
    measured = results(tmp_path, "chart_speed")
    assert {(c["case"], c["format"]) for c in measured["cases"]} == {
        ("timeline label", "html"),
        ("timeline label", "json"),
        ("timeline config", "html"),
        ("timeline config", "json"),
        ("timeline model", "html"),
        ("timeline model", "json"),
        ("compare 12 runs", "html"),
        ("compare 12 runs", "json"),
        ("load curve", "html"),
        ("load curve", "json"),
        ("regressions", "html"),
        ("home", "html"),
    }
    assert all(c["points"] > 0 for c in measured["cases"])
    assert [b["case"] for b in measured["browser"]] == [
        "timeline label",
        "timeline a month",
        "timeline a day",
        "timeline series",
        "compare 12 runs",
    ]
    assert all(b["points"] > 0 and b["afterplot_ms"] > 0 for b in measured["browser"])


def test_client_speed_streams_every_event_to_every_client_and_prints_the_ratio(tmp_path: Path) -> None:
    stdout = smoke("client_speed.py", tmp_path)

    assert "Streaming 8 requests x 50 events at concurrency 4" in stdout
    assert "every stream of every run delivered exactly 50 token events and its final event" in stdout
    measured = results(tmp_path, "client_speed")
    for client in ("baseline", "kvlab", "count-only"):
        assert len(measured[client]["events_per_s"]) == 1 and measured[client]["median_events_per_s"] > 0
    assert measured["ratio_median"] > 0


def test_load_test_serves_every_page_without_an_error_under_gunicorn(tmp_path: Path) -> None:
    """SQLite always; PostgreSQL too when DATABASE_URL names one, as in `make test-postgres`."""
    stdout = smoke("load_test.py", tmp_path)

    engines = results(tmp_path, "load_test")["engines"]
    expected = ["sqlite", "postgres"] if os.environ.get("DATABASE_URL") else ["sqlite"]
    assert list(engines) == expected
    assert "Load test: 500 runs / 5,000 requests stored" in stdout
    for engine in engines.values():
        assert engine["requests"] > 0 and engine["requests_per_s"] > 0
        assert engine["errors"] == engine["warmup_error_count"] == engine["access_log_non_200"] == 0
        assert engine["gunicorn_exit"] == 0
        assert engine["latency"]["all"]["requests"] == engine["requests"]
        assert set(engine["latency"]) <= {"home", "run list", "run page", "timeline", "compare 3", "all"}
        assert engine["rounds_requests_per_s"] == [engine["requests_per_s"]]  # --smoke: one round
        assert len(engine["cpu_pct_per_worker"]) == 2 and all(v >= 0 for v in engine["cpu_pct_per_worker"])


def test_sizing_speed_sizes_every_catalogue_model_and_reads_a_head_both_ways(tmp_path: Path) -> None:
    stdout = smoke("sizing_speed.py", tmp_path)

    assert "Full sizing of" in stdout and "catalogue models" in stdout
    assert "GGUF head of 1,000 tensors and 2,000 tokens" in stdout
    assert "ratio kvlab/gguf (median time):" in stdout
    measured = results(tmp_path, "sizing_speed")
    assert measured["sizing"]["models"] and all(m["median_ms"] > 0 for m in measured["sizing"]["models"])
    assert measured["sizing"]["largest"]["model"] in {m["model"] for m in measured["sizing"]["models"]}
    head = measured["head"]
    assert head["tensors"] == 1_000 and len(head["kvlab_ms"]) == len(head["gguf_ms"]) == 1
    assert head["ratio_median"] > 0


def test_explain_plans_reads_the_plan_of_every_page_query(tmp_path: Path) -> None:
    stdout = smoke("explain_plans.py", tmp_path)
    found = results(tmp_path, "explain_plans_sqlite")["pages"]
    assert {"run list", "timeline", "regressions", "run page", "jobs", "sweeps"} <= set(found)
    assert all(page["queries"] >= 1 for page in found.values())
    # every statement that reads a table is listed with its plan; the run list's page, a walk down
    # run_started_idx, is one that stops at its LIMIT (it was once a count of every run)
    listed = found["run list"]["statements"]
    assert listed and all(s["plan"] and s["tables"] for s in listed)
    assert any(s["reads_at_most"] == 50 for s in listed), listed
    assert "EXPLAIN QUERY PLAN of every page query" in stdout


def test_the_page_harness_reads_rows_links_figures_and_text_from_the_parsed_html() -> None:
    page_harness = bench_module("page_harness")
    html = """<!doctype html><html><body>
      <p class="empty">No regressions
        across 3 groups (9 configuration × workload series)</p>
      <table><thead><tr><th></th><th><a href="/runs/7/">a</a><br><small>k</small></th></tr></thead><tbody>
        <tr class="outcome-ok"><td>model-a</td>
          <td><a href="/imports/2/">file</a> <a href="/runs/12/?x=1">run</a></td></tr>
        <tr class="outcome-failed"><td><img src="x.png">model-b</td><td><a href="/runs/11/">run</a></td></tr>
        <tr class="ok"><td class="num bad">-12%</td></tr><tr class="failed"><td>no link</td></tr>
      </tbody></table>
      <script id="timeline-figure" type="application/json">{"data": [{"x": [1, 2], "name": "a<b"}]}</script>
      <datalist><option value="m1"></option><option value="m2"></option></datalist>
    </body></html>"""
    page = page_harness.Page(html.encode())

    assert page.is_full_page and not page_harness.Page("<tr><td>1</td></tr>").is_full_page
    runs = page.rows("outcome-")
    assert [tr.find("td").text for tr in runs] == ["model-a", "model-b"]  # an <img> holds no text and closes itself
    assert page_harness.linked_ids(runs, "run-detail") == [12, 11]  # the first link to a run, query string aside
    assert page_harness.linked_ids(page.find_all("th"), "run-detail") == [7]
    assert len(page.rows(classes=("ok", "failed"))) == 2 and len(page.rows()) == 5
    size, figure = page.json_scripts()["timeline-figure"]
    assert figure == {"data": [{"x": [1, 2], "name": "a<b"}]} and size == len(
        b'{"data": [{"x": [1, 2], "name": "a<b"}]}'
    )
    assert page.option_values() == ["m1", "m2"]
    assert "No regressions across 3 groups" in page.text  # white space collapsed
    assert page_harness.regressions_shown(page) == (1, 3)


def test_the_page_harness_lays_out_a_table_as_its_columns_say(capsys: pytest.CaptureFixture[str]) -> None:
    page_harness = bench_module("page_harness")
    columns = [
        page_harness.Column("page", lambda r: r["page"], "<8"),
        page_harness.Column("ms", lambda r: r["ms"], ">6.1f"),
        page_harness.Column("verdict", lambda r: "met" if r["ok"] else "MISSED", gap="  "),
    ]
    page_harness.print_table("Pages", columns, [{"page": "home", "ms": 12.345, "ok": True}])

    assert (
        capsys.readouterr().out == "\nPages\npage         ms  verdict\n------------------------\nhome       12.3  met\n"
    )
