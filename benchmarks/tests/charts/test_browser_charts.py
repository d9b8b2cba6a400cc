"""The chart pages in a real browser: Debian's Chromium, driven by Playwright, against a live server.

What only a browser shows: that Plotly draws each figure with no console error, the traces
it holds (read from the plot element's `.data`), and that a filter change re-draws the
timeline through htmx without a page load. Each chart page is saved as a PNG under
var/screenshots/ for review.

Playwright drives /usr/bin/chromium and never downloads a browser; `make test` installs
Debian's chromium when it is missing (scripts/ensure-chromium.sh).
"""

from __future__ import annotations

import io
import re
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from benchmarks.history.importer import import_bench_file
from benchmarks.models import RequestResult, Run
from benchmarks.records import catalogue as charts
from benchmarks.records import series_keys as series
from benchmarks.tests.browser import Tab
from benchmarks.tests.builders import flat, jsonl
from benchmarks.tests.investigation import FILENAME, investigation_bytes

pytestmark = pytest.mark.browser


@pytest.fixture
def demo(transactional_db: None) -> dict[str, Run]:
    """The investigation imported (transactional tests flush the database after each test), runs by key."""
    import_bench_file(io.BytesIO(investigation_bytes()), filename=FILENAME, origin="command")
    return {run.key: run for run in Run.objects.all()}


def expected_timeline(runs: list[Run]) -> dict[str, int]:
    """Trace name → number of points: one trace per config label, one for the failed runs, one
    for the runs whose workload differs from the one before them in their label's line."""
    dated = sorted((r for r in runs if r.started_at is not None), key=lambda r: (r.started_at, r.pk))
    expected = dict(Counter(r.label or "(none)" for r in dated))
    failed = [r for r in dated if r.n_requests and not r.n_ok]
    if failed:
        expected["failed runs"] = len(failed)
    changes, previous = 0, {}
    for run in dated:
        workload = (run.concurrency, run.prompt_tokens_max, run.n_predict_max)
        changes += run.label in previous and previous[run.label] != workload
        previous[run.label] = workload
    if changes:
        expected["workload changed"] = changes
    return expected


def test_timeline_draws_one_trace_per_label_and_one_for_failed_runs(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    traces = tab.traces("#timeline-figure-plot")

    expected = expected_timeline(list(demo.values()))
    assert {t["name"]: len(t["x"]) for t in traces} == expected
    assert set(expected) == {"original", "C2", "C3P", "failed runs", "workload changed"}
    assert all(len(t["y"]) == len(t["x"]) for t in traces)
    by_name = {t["name"]: t for t in traces}
    # The failed run is a red cross, not a zero: a gap in its label's line.
    failed = demo["orig-x3"]
    assert by_name["failed runs"]["customdata"] == [failed.pk]
    original = by_name["original"]
    assert original["y"][original["customdata"].index(failed.pk)] is None
    # The points are the runs' decode tok/s, each trace in start order.
    for name in ("original", "C2", "C3P"):
        runs = sorted((r for r in demo.values() if r.label == name), key=lambda r: r.started_at)
        assert by_name[name]["customdata"] == [r.pk for r in runs]
        assert by_name[name]["y"] == [
            None if r.n_requests and not r.n_ok else pytest.approx(r.tok_s_mean, rel=1e-3) for r in runs
        ]
    tab.do(lambda page: expect(page.locator("#chart .summary")).to_contain_text(f"{len(demo)} runs"))
    # Every label mixes workloads (concurrency 1 with 3, or with 2): the page and the figure say so.
    tab.do(
        lambda page: expect(page.locator("#mixed-warning")).to_contain_text("C2 mixes workloads (concurrency 1 / 3)")
    )
    heading = tab.evaluate("() => document.querySelector('#timeline-figure-plot .legendtitletext').textContent")
    assert "not like for like" in heading  # the legend's heading: a saved PNG carries it
    tab.screenshot("timeline")
    tab.assert_no_errors()


def test_hovering_a_timeline_point_shows_its_outcome_flags_and_workload(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    traces = tab.traces("#timeline-figure-plot")
    runs = {r.pk: r for r in demo.values()}
    lines = [t for t in traces if t["name"] in {"original", "C2", "C3P"}]
    # charts.js writes each point's text from the compact hover facts: as series writes the labels.
    for trace in lines:
        assert trace["text"] == [
            f"{runs[pk].n_ok}/{runs[pk].n_requests} ok · {series.flags_label(vars(runs[pk]))}"
            f" · {series.workload_label(vars(runs[pk]))}"
            for pk in trace["customdata"]
        ]
    c2 = traces.index(next(t for t in traces if t["name"] == "C2"))
    x3 = traces[c2]["customdata"].index(demo["c2-x3"].pk)
    shown = tab.evaluate(
        """([sel, curve, point]) => { const el = document.querySelector(sel);
               Plotly.Fx.hover(el, [{curveNumber: curve, pointNumber: point}]);
               return Array.from(el.querySelectorAll('.hoverlayer .hovertext'), e => ({
                   lines: Array.from(e.querySelectorAll('text.nums tspan.line'), t => t.textContent),
                   name: e.querySelector('text.name').textContent})); }""",
        ["#timeline-figure-plot", c2, x3],
    )
    assert shown == [
        {
            "lines": [
                "3/3 ok · -c 9216 -np 3 per-slot f16/f16 no KV offload · concurrency 3 · prompt 4362 tok"
                " · n_predict 1738",
                "2.15",
            ],
            "name": "C2",
        }
    ]
    tab.assert_no_errors()


def test_a_filter_change_redraws_the_timeline_through_htmx_without_a_page_load(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")

    tab.evaluate("window.__marker = 1")
    headers = tab.change_filter("label", "C2")
    assert headers.get("hx-request") == "true", "the filter change was not an htmx request"
    tab.wait_for_plot("#timeline-figure-plot")

    assert tab.query().get("label") == ["C2"]  # hx-push-url
    c2 = sorted((r for r in demo.values() if r.label == "C2"), key=lambda r: r.started_at)
    traces = tab.traces("#timeline-figure-plot")
    # C2 ran alone, then three at once: the second run's workload changed.
    assert [(t["name"], t["customdata"]) for t in traces] == [
        ("C2", [r.pk for r in c2]),
        ("workload changed", [c2[1].pk]),
    ]
    assert len(c2) == 2
    assert tab.evaluate("window.__marker") == 1, "the page was reloaded: the filter change was not an htmx swap"
    tab.do(lambda page: expect(page.locator("#chart-form input[name=label]")).to_have_value("C2"))
    tab.assert_no_errors()


def test_a_part_of_a_model_typed_in_any_case_filters_the_run_list_and_the_timeline(
    tab: Tab, demo: dict[str, Run]
) -> None:
    model = demo["orig-x3"].model  # Devstral-Small-2-24B-Q4_K_M.gguf
    tab.open("/runs/")

    def type_and_enter(page) -> int:
        with page.expect_response(lambda r: "/runs/" in r.url and "model=devstral" in r.url) as swap:
            box = page.locator("#filters [name=model]")
            box.fill("devstral")
            box.press("Enter")
        return swap.value.status

    assert tab.do(type_and_enter) == 200  # not a 400 "No run has devstral as its model"
    tab.do(lambda page: expect(page.locator(".value-match")).to_contain_text("Model “devstral”: no run has it"))
    tab.do(lambda page: expect(page.locator(".value-match code")).to_have_text(model))
    rows = tab.evaluate("() => document.querySelectorAll('#run-table table.runs tbody tr').length")
    assert rows == len(demo)
    tab.screenshot("run-list-partial-model")

    tab.open("/charts/timeline/", {"model": "DEVSTRAL"})
    tab.wait_for_plot("#timeline-figure-plot")
    points = sum(
        len(t["customdata"]) for t in tab.traces("#timeline-figure-plot") if t["name"] in ("original", "C2", "C3P")
    )
    assert points == len(demo)
    tab.assert_no_errors()


@pytest.mark.parametrize("button", ["Compare selected", "Chart selected"])
def test_the_run_list_compares_runs_in_the_order_they_were_ticked(tab: Tab, demo: dict[str, Run], button: str) -> None:
    order = [demo["c3p-queue2"], demo["orig-x3"], demo["c2-x3"]]  # not the table's order (newest first)
    tab.open("/runs/")

    def tick_and_compare(page) -> None:
        for run in order:
            page.get_by_label(f"select {run.key}").check()
        page.get_by_role("button", name=button).click()
        page.wait_for_url("**/compare/?*")
        page.wait_for_load_state("networkidle")

    tab.do(tick_and_compare)
    assert tab.query()["run"] == [str(r.pk) for r in order]
    if button == "Compare selected":
        heads = tab.evaluate(
            "() => Array.from(document.querySelectorAll('table.compare thead small'), e => e.textContent)"
        )
        assert heads == [r.key for r in order]
    else:
        tab.wait_for_plot("#compare-figure-plot")
        boxes = [t["name"] for t in tab.traces("#compare-figure-plot") if t["type"] == "box"]
        assert boxes == [f"{r.label} ({r.key})" for r in order]
    tab.assert_no_errors()


def test_compare_draws_a_bar_per_metric_panel_and_a_box_per_run(tab: Tab, demo: dict[str, Run]) -> None:
    runs = [demo["orig-x3"], demo["c2-x3"], demo["c3p-queue2"]]
    tab.open("/charts/compare/", [("run", r.pk) for r in runs])
    tab.wait_for_plot("#compare-figure-plot")
    traces = tab.traces("#compare-figure-plot")

    bars = [t for t in traces if t["type"] == "bar"]
    boxes = [t for t in traces if t["type"] == "box"]
    assert [t["name"] for t in traces if t["type"] == "scatter"] == ["0 % success"]
    assert len(traces) == len(bars) + len(boxes) + 1
    assert [b["name"] for b in bars] == [charts.METRICS[k].label for k in charts.COMPARE_METRICS]
    assert all(b["customdata"] == [r.pk for r in runs] for b in bars)
    success = next(b for b in bars if b["name"] == charts.METRICS["success"].label)
    assert success["y"] == [r.n_ok / r.n_requests for r in runs] == [0, 1, 1]  # 0/3 vs 3/3 vs 2/2
    # One box per run, holding its ok requests' tok/s.
    assert len(boxes) == len(runs)
    for box, run in zip(boxes, runs, strict=True):
        assert box["name"] == f"{run.label} ({run.key})"
        ok = RequestResult.objects.filter(run=run, ok=True).exclude(tok_s=None).count()
        assert len(box["y"]) == ok
    assert [len(b["y"]) for b in boxes] == [0, 3, 2]
    tab.do(lambda page: expect(page.locator("#workload-warning")).to_contain_text("concurrency 3 / 2"))
    tab.screenshot("compare")
    tab.assert_no_errors()


def test_compare_draws_empty_and_failed_data_as_such(tab: Tab, demo: dict[str, Run]) -> None:
    runs = [demo["orig-x3"], demo["c2-x3"], demo["c3p-queue2"]]
    tab.open("/charts/compare/", [("run", r.pk) for r in runs])
    tab.wait_for_plot("#compare-figure-plot")
    plot = "#compare-figure-plot"

    # The demo recorded no throughput, TTFT, E2E latency or ITL: four panels say so, with no axes of 0-4.
    notes = tab.annotations(plot)
    assert notes.count("not recorded") == 4, notes
    for axis in ("y3", "y4", "y5", "y6", "x3", "x4", "x5", "x6"):
        assert tab.tick_labels(plot, axis) == [], f"the empty panel's {axis} axis has ticks"
    assert tab.tick_labels(plot, "y2"), "decode tok/s was recorded: its axis keeps its ticks"
    # The failed run's missing bars say why; its 0 % success is a red mark with its count.
    assert "failed" in notes and "failed: no ok request" in notes
    assert tab.tick_labels(plot, "y")[-1] == "100%"
    zero = tab.evaluate(
        """sel => { const t = Array.from(document.querySelectorAll(sel + ' .scatterlayer .trace'))
                      .find(t => t.querySelector('.textpoint'));
                    const mark = t.querySelector('.point').getBoundingClientRect();
                    return {text: t.querySelector('.textpoint').textContent, width: mark.width,
                            stroke: getComputedStyle(t.querySelector('.point')).stroke}; }""",
        plot,
    )
    assert zero["text"] == "0 %(0/3 ok)" and zero["width"] > 10 and zero["stroke"] == "rgb(179, 38, 30)"
    tab.screenshot("compare-empty-and-failed")
    tab.assert_no_errors()


def test_the_home_page_draws_the_decode_trend(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/")
    tab.wait_for_plot("#trend-figure-plot")
    traces = tab.traces("#trend-figure-plot")
    assert {t["name"]: len(t["x"]) for t in traces} == expected_timeline(list(demo.values()))
    tab.do(lambda page: expect(page.locator("section table tbody tr")).to_have_count(len(demo)))
    tab.screenshot("home")
    tab.assert_no_errors()


def test_the_home_page_reads_as_the_investigation(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/")
    steps = tab.do(lambda page: page.locator("#story li").all_inner_texts())
    assert [" ".join(s.split()[:5]) for s in steps] == [
        "original: 0/3 ok, failed 2026-09-18",
        "C2: 3/3 ok, 2.15 tok/s",
        "C3P: 2/2 ok, 26.30 tok/s",
    ]
    tab.screenshot("home")
    tab.assert_no_errors()


def test_the_home_page_draws_failures_by_day_and_a_panel_per_model(tab: Tab, demo: dict[str, Run]) -> None:
    # Recent runs (the failure chart covers 30 days) of a model 80 times faster than the demo's.
    now = timezone.now().replace(microsecond=0)
    records = []
    for i, (days_ago, failed) in enumerate([(1, True), (1, False), (1, False), (2, False), (4, True)]):
        ts = (now - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        records.append(
            flat(run=f"tiny-{i}", model="qwen-0.5b.gguf", label="tiny", ts=ts, tok_s=2000.0 + 10 * i)
            | ({"ok": False, "status": 500, "tok_s": None} if failed else {})
        )
    import_bench_file(io.BytesIO(jsonl(*records)), filename="tiny.jsonl", origin="command")
    tab.open("/")
    tab.wait_for_plot("#failures-figure-plot")
    tab.wait_for_plot("#trend-figure-plot")

    # Failures per day: one tick per day, as a date, and the red failures stacked, not hidden.
    failures = "#failures-figure-plot"
    ticks = tab.tick_labels(failures, "x")
    days = sorted({(now - timedelta(days=d)).astimezone().strftime("%Y-%m-%d") for d in (1, 2, 4)})
    assert set(days) <= set(ticks) and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", t) for t in ticks), ticks
    red = tab.evaluate(
        """sel => Array.from(document.querySelectorAll(sel + ' .barlayer .trace')[0].querySelectorAll('.point path'),
                             p => { const b = p.getBoundingClientRect();
                                    return {height: b.height, fill: getComputedStyle(p).fill}; })""",
        failures,
    )
    drawn = [bar for bar in red if bar["height"] > 0]
    assert len(drawn) == 2 and {bar["fill"] for bar in drawn} == {"rgb(179, 38, 30)"}, red
    assert tab.evaluate("sel => document.querySelector(sel)._fullLayout.barmode", failures) == "stack"

    # The decode trend: each model on its own axis, so the demo's 26 tok/s is not a line at zero.
    trend = "#trend-figure-plot"
    axes = {
        t["name"]: t
        for t in tab.evaluate(
            "sel => document.querySelector(sel)._fullData.map(t => ({name: t.name, yaxis: t.yaxis}))", trend
        )
    }
    assert axes["C3P"]["yaxis"] != axes["tiny"]["yaxis"]
    ranges = tab.evaluate(
        "sel => { const l = document.querySelector(sel)._fullLayout; return [l.yaxis.range, l.yaxis2.range]; }", trend
    )
    slow, fast = (ranges[0], ranges[1]) if axes["C3P"]["yaxis"] == "y" else (ranges[1], ranges[0])
    assert slow[1] < 40 and fast[1] > 2000, ranges
    notes = tab.annotations(trend)
    assert "Devstral-Small-2-24B-Q4_K_M.gguf" in notes and "qwen-0.5b.gguf" in notes
    tab.screenshot("home-failures-and-models")
    tab.assert_no_errors()


BAND = """([sel, name]) => { const el = document.querySelector(sel), l = el._fullLayout;
    const failed = el._fullData.find(t => t.name === name);
    const values = Object.keys(l).filter(k => /^yaxis\\d*$/.test(k) && k !== "yaxis20").map(k => l[k].domain);
    return {axis: failed.yaxis, y: Array.from(failed.y), band: l.yaxis20.domain, values,
            ticks: Array.from(el.querySelectorAll(".y20tick text"), t => t.textContent),
            xAnchor: l.xaxis.anchor}; }"""


@pytest.mark.parametrize(
    ("path", "params", "plot", "name"),
    [
        ("/", {}, "#trend-figure-plot", "failed runs"),
        ("/charts/timeline/", {"metric": "tok_s"}, "#timeline-figure-plot", "failed runs"),
        ("/charts/load/", {}, "#load-figure-plot", "every run failed"),
    ],
    ids=["home", "timeline", "load curve"],
)
def test_failed_runs_are_drawn_on_one_labelled_band_under_the_value_axes(
    tab: Tab, demo: dict[str, Run], path: str, params: dict, plot: str, name: str
) -> None:
    tab.open(path, params)
    tab.wait_for_plot(plot)
    drawn = tab.evaluate(BAND, [plot, name])
    assert drawn["axis"] == "y20" and set(drawn["y"]) == {0.5}  # never a place on a value axis
    assert drawn["ticks"] == ["failed"] and drawn["xAnchor"] == "y20"  # labelled; the x axis under it
    assert all(drawn["band"][1] < lo for lo, _ in drawn["values"]), drawn  # below every value panel
    tab.assert_no_errors()


def test_the_load_curve_draws_one_curve_per_configuration(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/load/")  # the history's one model: the page opens on its curves, the form showing it
    model = demo["orig-x3"].model
    tab.wait_for_plot("#load-figure-plot")
    tab.do(lambda page: expect(page.locator("#id_model")).to_have_value(model))
    traces = tab.evaluate(
        """sel => document.querySelector(sel)._fullData.map(t => ({
               name: t.name, yaxis: t.yaxis, mode: t.mode, x: Array.from(t.x), y: Array.from(t.y)}))""",
        "#load-figure-plot",
    )
    lines = [t for t in traces if t["mode"] == "lines+markers"]
    # One line per configuration and panel; the demo timed no TTFT, so there is no TTFT panel.
    assert {t["yaxis"] for t in lines} == {"y", "y2"}
    per_request = {t["name"].split(":")[0]: t for t in lines if t["yaxis"] == "y2"}
    for label in ("original", "C2", "C3P"):
        runs = sorted((r for r in demo.values() if r.label == label), key=lambda r: r.concurrency)
        assert per_request[label]["x"] == [r.concurrency for r in runs]
        assert per_request[label]["y"] == [None if not r.n_ok else pytest.approx(r.tok_s_mean, rel=1e-3) for r in runs]
    assert all(abs(y - 13.16) > 0.01 for t in lines for y in t["y"] if y is not None), "a mean over configurations"
    # Nothing recorded the aggregate throughput: its panel says so, with no ticks; the failed level is a cross.
    assert "not recorded" in tab.annotations("#load-figure-plot")
    assert tab.tick_labels("#load-figure-plot", "y") == [] and tab.tick_labels("#load-figure-plot", "y2")
    failed = next(t for t in traces if t["name"] == "every run failed")
    assert failed["x"] == [demo["orig-x3"].concurrency]
    tab.do(lambda page: expect(page.locator("#knees li")).to_have_count(3))
    tab.screenshot("load-curve")
    tab.assert_no_errors()


def test_regressions_compare_one_configuration_under_one_workload(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/regressions/")
    tab.do(lambda page: expect(page.locator("h1")).to_have_text("Regressions"))
    # C2 at concurrency 3 (2.15 tok/s per request) against C2 alone (7.93) is no regression.
    tab.do(lambda page: expect(page.locator("#chart .empty")).to_contain_text("No regressions across 3 groups"))
    # C2 at concurrency 3 again, slower than before: that is one.
    c2 = demo["c2-x3"]
    again = [
        flat(
            run="c2-x3-again",
            ts="2026-09-19T10:00:00Z",
            label="C2",
            model=c2.model,
            gpu=c2.gpu,
            ctx_size=c2.ctx_size,
            parallel=c2.parallel,
            kv_unified=c2.kv_unified,
            kv_offload=c2.kv_offload,
            flash_attn=None,
            concurrency=c2.concurrency,
            prompt_tokens=c2.prompt_tokens_max,
            n_predict=c2.n_predict_max,
            tok_s=1.5,
        )
    ] * 3
    import_bench_file(io.BytesIO(jsonl(*again)), filename="again.jsonl", origin="command")
    tab.open("/charts/regressions/")
    row = tab.do(lambda page: page.locator("tbody tr", has_text=charts.METRICS["tok_s"].label).filter(has_text="C2"))
    tab.do(lambda page: expect(row).to_have_count(1))
    cells = tab.do(lambda page: row.locator("td").all_inner_texts())
    assert cells[:3] == [
        "C2",
        f"{c2.model} on {c2.gpu}: -c 9216 -np 3 per-slot f16/f16 no KV offload",
        "concurrency 3 · prompt 4362 tok · n_predict 1738",
    ]
    assert cells[4:7] == ["1.500", "2.150", "-30%"]
    tab.screenshot("regressions")
    tab.assert_no_errors()


def nightly() -> bytes:
    """Six nightly runs at 40-41 tok/s, then one at 30: a regression against the baseline band."""
    history = [
        flat(run=f"h{i}", label="nightly", ts=f"2026-10-{10 + i}T00:00:00Z", tok_s=40.0 + (i % 2)) for i in range(6)
    ]
    return jsonl(*history, flat(run="latest", label="nightly", ts="2026-10-20T00:00:00Z", tok_s=30.0))


@pytest.mark.usefixtures("transactional_db")
def test_the_regressions_page_opens_with_its_defaults_and_draws_the_latest_run_against_its_band(tab: Tab) -> None:
    import_bench_file(io.BytesIO(nightly()), filename="nightly.jsonl", origin="command")
    tab.open("/charts/regressions/")
    tab.wait_for_plot("#regressions-figure-plot")
    tab.do(lambda page: expect(page.locator("#id_t_tok_s")).to_have_value("5"))
    tab.do(lambda page: expect(page.locator("#id_window")).to_have_value("10"))
    traces = {t["name"]: t for t in tab.traces("#regressions-figure-plot")}
    row = next(i for i, y in enumerate(traces["latest run"]["y"]) if "decode tok/s" in y)
    assert traces["latest run"]["x"][row] == pytest.approx(100 * (30.0 / 40.5 - 1), abs=0.01)
    tab.screenshot("regressions")
    tab.assert_no_errors()


def test_a_zoom_in_the_browser_survives_a_filter_change(tab: Tab, demo: dict[str, Run]) -> None:
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    tab.evaluate(
        "sel => Plotly.relayout(document.querySelector(sel),"
        " {'xaxis.range[0]': '2026-09-18 19:00:00', 'xaxis.range[1]': '2026-09-18 20:30:00'})",
        "#timeline-figure-plot",
    )
    tab.do(lambda page: page.wait_for_url("**x0=**"))
    assert tab.query().get("x0") == ["2026-09-18 19:00:00"]

    tab.change_filter("metric", "success")
    tab.wait_for_plot("#timeline-figure-plot")
    assert tab.query().get("metric") == ["success"]
    shown = tab.evaluate("sel => document.querySelector(sel)._fullLayout.xaxis.range", "#timeline-figure-plot")
    assert tab.query().get("x0") == ["2026-09-18 19:00:00"], f"the zoom was lost: the chart now shows {shown}"
    assert shown[0].replace("T", " ").startswith("2026-09-18 19:00")


LAYOUT = """() => { const h = document.querySelector("header.top"), n = h.querySelector("nav");
    const hb = h.getBoundingClientRect(), nb = n.getBoundingClientRect();
    const cut = Array.from(document.querySelectorAll("main p, main h1, main h2, .plot"))
        .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).map(e => e.id || e.tagName);
    return {scroll: document.documentElement.scrollWidth, width: window.innerWidth,
            nav_inside: nb.bottom <= hb.bottom + 1 && nb.right <= window.innerWidth + 1, cut}; }"""


@pytest.mark.parametrize("width", [1400, 390])
def test_every_page_holds_its_layout_at_a_desktop_and_a_phone_width(tab: Tab, demo: dict[str, Run], width: int) -> None:
    tab.do(lambda page: page.set_viewport_size({"width": width, "height": 900}))
    for path in ("/", "/runs/", "/charts/timeline/", "/charts/load/", "/charts/regressions/", "/sizing/"):
        tab.open(path)
        tab.do(lambda page: page.wait_for_load_state("networkidle"))
        layout = tab.evaluate(LAYOUT)
        assert layout["scroll"] <= layout["width"], (path, layout)  # nothing spills sideways: tables scroll in place
        assert layout["nav_inside"], (path, layout)  # the navigation stays in the header
        assert layout["cut"] == [], (path, layout)  # no heading, note or chart cut at the edge
        if width == 390:
            tab.screenshot(f"phone-{path.strip('/').replace('/', '-') or 'home'}")
    tab.assert_no_errors()


# What a reader sees as one piece of a chart: a legend, an axis title, a tick label, a note, a bar's text;
# and each subplot's plot area. Plotly places each on its own and never checks them against each other.
PIECES = """sel => { const el = document.querySelector(sel);
    const box = e => { const r = e.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom}; };
    const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
    const all = (q, kind, name) => Array.from(el.querySelectorAll(q)).filter(shown)
        .map(e => ({kind, name: name(e), text: e.textContent, ...box(e)}));
    const axisOf = e => (e.closest("[class$='tick']") || e.closest("[class^='g-']")).getAttribute("class")
        .replace(/^g-/, "").replace(/(tick|title)$/, "");
    return {svg: box(el.querySelector(".main-svg")), pieces: [
        ...all(".legend .bg", "legend", e => "legend"),
        ...all(".infolayer [class$='title'] text", "title", axisOf),
        ...all("[class$='tick'] > text", "tick", axisOf),
        ...all(".annotation-text-g", "note", e => "note"),
        ...all(".textpoint text", "text", e => "text"),
    ], areas: Array.from(el.querySelectorAll(".nsewdrag")).map(e => ({name: e.dataset.subplot, ...box(e)}))}; }"""


def overlaps(drawn: dict) -> list[str]:
    """Pairs of pieces a reader sees one over the other, pieces cut at the figure's edge, and axis
    titles over another subplot's plot area."""

    def meet(a: dict, b: dict) -> bool:
        return min(a["r"], b["r"]) - max(a["l"], b["l"]) > 1 and min(a["b"], b["b"]) - max(a["t"], b["t"]) > 1

    svg, pieces = drawn["svg"], drawn["pieces"]
    found = [
        f"{p['kind']} {p['text']!r} cut at the edge"
        for p in pieces
        if p["l"] < svg["l"] - 1 or p["r"] > svg["r"] + 1 or p["t"] < svg["t"] - 1 or p["b"] > svg["b"] + 1
    ]
    for i, a in enumerate(pieces):
        for b in pieces[i + 1 :]:
            if a["kind"] == b["kind"] == "tick" and a["name"] == b["name"]:
                continue  # an axis's own ticks: Plotly spaces them
            if meet(a, b):
                found.append(f"{a['kind']} {a['text']!r} ({a['name']}) over {b['kind']} {b['text']!r} ({b['name']})")
    for title in (p for p in pieces if p["kind"] == "title"):
        for area in drawn["areas"]:
            axis = title["name"]
            own = area["name"].startswith(axis) if axis.startswith("x") else area["name"].endswith(axis)
            if not own and meet(title, area):
                found.append(f"title {title['text']!r} ({axis}) over the plot area {area['name']}")
    return found


def many_lines(n: int) -> bytes:
    """A history of n configuration labels, three runs each over three weeks (the overview of a large lab)."""
    lines = []
    for label in range(n):
        for day in range(3):
            lines.append(
                flat(
                    run=f"l{label}-d{day}",
                    label=f"config-{label:02d}",
                    ts=f"2026-10-{1 + 7 * day:02d}T12:00:00Z",
                    tok_s=30.0 + label + day,
                )
            )
    return jsonl(*lines)


@pytest.mark.parametrize("width", [1400, 390])
@pytest.mark.parametrize(
    ("path", "params", "plot"),
    [
        ("/", {}, "#trend-figure-plot"),
        ("/charts/timeline/", {"metric": "tok_s"}, "#timeline-figure-plot"),
        ("/charts/timeline/", {"metric": "tok_s", "group": "label"}, "#timeline-figure-plot"),
        ("/charts/load/", {}, "#load-figure-plot"),
        ("/charts/compare/", "three", "#compare-figure-plot"),
        ("/charts/regressions/", "nightly", "#regressions-figure-plot"),
    ],
    ids=["home", "timeline", "timeline by label", "load curve", "compare", "regressions"],
)
def test_no_axis_title_legend_or_label_is_drawn_over_another(
    tab: Tab, demo: dict[str, Run], path: str, params: Any, plot: str, width: int
) -> None:
    if params == "three":
        params = [("run", demo[k].pk) for k in ("orig-x3", "c2-x3", "c3p-queue2")]
    elif params == "nightly":
        import_bench_file(io.BytesIO(nightly()), filename="nightly.jsonl", origin="command")
        params = {}
    tab.do(lambda page: page.set_viewport_size({"width": width, "height": 900}))
    tab.open(path, params)
    tab.wait_for_plot(plot)
    tab.screenshot(f"readable-{plot.strip('#').removesuffix('-figure-plot')}-{width}")
    found = overlaps(tab.evaluate(PIECES, plot))
    assert found == [], "\n".join(found)
    tab.assert_no_errors()


@pytest.mark.parametrize("width", [1400, 390])
@pytest.mark.usefixtures("transactional_db")
def test_a_timeline_of_31_lines_keeps_its_legend_clear_of_the_axes(tab: Tab, width: int) -> None:
    import_bench_file(io.BytesIO(many_lines(31)), filename="lab.jsonl", origin="command")
    tab.do(lambda page: page.set_viewport_size({"width": width, "height": 900}))
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    assert len([t for t in tab.traces("#timeline-figure-plot") if t["name"].startswith("config-")]) == 31
    tab.screenshot(f"timeline-31-lines-{width}")
    found = overlaps(tab.evaluate(PIECES, "#timeline-figure-plot"))
    assert found == [], "\n".join(found)
    tab.assert_no_errors()
