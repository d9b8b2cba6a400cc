"""The charts tell the truth: like is compared with like, and empty or failed data is drawn as such.

A load curve is one configuration across concurrencies, a
regression is one configuration under one workload getting worse, and a chart that
mixes them says so; a metric nobody recorded is "not recorded", a 0 % success rate is
visible, the failure chart has day ticks and its red in front, and models of very
different speeds each get their own axis.
"""

import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from benchmarks.models import Run
from benchmarks.tests.builders import flat, jsonl

pytestmark = pytest.mark.django_db

DEMO_MODEL = "Devstral-Small-2-24B-Q4_K_M.gguf"
# The demo's three configurations, as the charts name them.
ORIGINAL = "original: -c 16384 -np 4 unified f16/f16 no KV offload"
C2 = "C2: -c 9216 -np 3 per-slot f16/f16 no KV offload"
C3P = "C3P: -c 12288 -np 1 unified q8_0/q8_0 fa on"


def figure(response, figure_id: str) -> dict:
    match = re.search(
        rf'<script id="{figure_id}" type="application/json">(.*?)</script>', response.content.decode(), re.S
    )
    assert match, f"no {figure_id} in the page"
    return json.loads(match.group(1))


def demo_like(**overrides):
    """A request record of the demo's C2 configuration at concurrency 3."""
    record = flat(
        model=DEMO_MODEL,
        gpu="RTX 5060 Ti 16GB",
        label="C2",
        ctx_size=9216,
        parallel=3,
        kv_unified=False,
        kv_offload=False,
        flash_attn=None,
        concurrency=3,
        prompt_tokens=4362,
        n_predict=1738,
    )
    return {**record, **overrides}


# --- 12. Compare like with like -------------------------------------------------------


def test_the_load_curve_draws_each_configuration_not_their_mean(client, investigation):
    response = client.get(reverse("chart-load"), {"model": DEMO_MODEL})
    fig = figure(response, "load-figure")
    drawn = [y for t in fig["data"] for y in t["y"]]
    assert 13.16 not in drawn, "concurrency 1 is the mean of three configurations (5.84, 7.93, 25.7)"
    per_request = {t["name"]: t for t in fig["data"] if t.get("yaxis") == "y2" and t["mode"] == "lines+markers"}
    assert per_request[ORIGINAL]["x"] == [1, 3] and per_request[ORIGINAL]["y"] == [5.84, None]
    assert per_request[C2]["x"] == [1, 3] and per_request[C2]["y"] == [7.93, 2.15]
    assert per_request[C3P]["x"] == [1, 2] and per_request[C3P]["y"] == [25.7, 26.3]
    # The original configuration failed every request at concurrency 3: a red cross, not a zero.
    (failed,) = [t for t in fig["data"] if t["name"] == "every run failed"]
    assert failed["x"] == [3] and failed["text"] == [f"{ORIGINAL}: every run at concurrency 3 failed"]
    page = response.content.decode()
    assert "3 configurations" in page and "every run failed at concurrency 3" in page


def test_each_load_curve_has_its_own_knee(client, import_bytes):
    records = []
    for concurrency, fast, slow in ((1, 100, 50), (2, 190, 52), (4, 360, 53), (8, 370, 53)):
        records.append(flat(run=f"fast-{concurrency}", concurrency=concurrency, output_tokens=fast, elapsed_s=1.0))
        records.append(
            flat(
                run=f"slow-{concurrency}",
                label="q8",
                cache_type_k="q8_0",
                cache_type_v="q8_0",
                concurrency=concurrency,
                output_tokens=slow,
                elapsed_s=1.0,
            )
        )
    import_bytes(jsonl(*records))
    response = client.get(reverse("chart-load"), {"model": "tiny.gguf"})
    page = response.content.decode()
    assert (
        "base: -c 8192 -np 2 per-slot f16/f16 fa on: throughput stops growing (by 5% or more) after concurrency 4"
        in page
    )
    assert (
        "q8: -c 8192 -np 2 per-slot q8_0/q8_0 fa on: throughput stops growing (by 5% or more) after concurrency 1"
        in page
    )
    knees = {t["name"]: t["x"] for t in figure(response, "load-figure")["data"] if t["name"].startswith("knee: ")}
    assert knees == {
        "knee: base: -c 8192 -np 2 per-slot f16/f16 fa on": [4],
        "knee: q8: -c 8192 -np 2 per-slot q8_0/q8_0 fa on": [1],
    }


def test_concurrency_3_against_concurrency_1_is_no_regression(client, investigation):
    page = client.get(reverse("chart-regressions")).content.decode()
    assert "-73%" not in page, "C2 at concurrency 3 (2.15 tok/s) compared with C2 at concurrency 1 (7.93)"
    assert "No regressions across 3 groups (6 configuration × workload series)" in page


def test_a_regression_is_the_same_configuration_and_workload_getting_worse(client, investigation, import_bytes):
    # C2 at concurrency 3 again, slower than its one earlier run at concurrency 3 (2.15 tok/s).
    import_bytes(jsonl(*[demo_like(run="c2-x3-again", ts="2026-09-19T10:00:00Z", tok_s=1.5) for _ in range(3)]))
    page = client.get(reverse("chart-regressions")).content.decode()
    row = re.search(r"<tr><td>C2</td>.*?</tr>", page, re.S)
    assert row, "the slower C2 run at concurrency 3 is a regression"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
    assert cells[1] == f"{DEMO_MODEL} on RTX 5060 Ti 16GB: -c 9216 -np 3 per-slot f16/f16 no KV offload"
    assert cells[2] == "concurrency 3 · prompt 4362 tok · n_predict 1738"
    assert "1.500" in row.group(0) and "2.150" in row.group(0) and "-30%" in row.group(0)
    assert "<th>config label</th><th>configuration</th><th>workload</th>" in page


def test_within_a_label_each_workload_has_its_own_baseline(client, import_bytes):
    history = [flat(run=f"h{i}", label="nightly", ts=f"2026-10-{10 + i}T00:00:00Z", concurrency=1) for i in range(4)]
    # The latest nightly run asked for four requests at once: slower per request, as expected.
    busier = flat(run="busier", label="nightly", ts="2026-10-20T00:00:00Z", concurrency=4, tok_s=12.0)
    import_bytes(jsonl(*history, busier))
    assert "<td>nightly</td>" not in client.get(reverse("chart-regressions")).content.decode()
    # A latest run at concurrency 1 that is slower is one.
    import_bytes(jsonl(flat(run="slower", label="nightly", ts="2026-10-21T00:00:00Z", concurrency=1, tok_s=30.0)))
    page = client.get(reverse("chart-regressions")).content.decode()
    assert "<td>nightly</td>" in page and "<td>concurrency 1 · prompt 1000 tok · n_predict 200</td>" in page


def test_the_timeline_warns_when_a_line_mixes_workloads(client, investigation):
    response = client.get(reverse("chart-timeline"), {"group": "label"})
    page = response.content.decode()
    assert 'id="mixed-warning"' in page and "3 lines mix runs of different configurations or workloads" in page
    assert "C2 mixes workloads (concurrency 1 / 3)" in page and "C3P mixes workloads (concurrency 1 / 2)" in page
    fig = figure(response, "timeline-figure")
    changed = {t["name"]: t for t in fig["data"]}["workload changed"]
    assert "C2: concurrency: 1 → 3" in changed["text"]
    assert "not like for like" in fig["layout"]["legend"]["title"]["text"]  # a saved PNG says it too


def test_grouped_by_configuration_and_workload_the_timeline_is_like_for_like(client, investigation):
    response = client.get(reverse("chart-timeline"), {"group": "series"})
    assert 'id="mixed-warning"' not in response.content.decode()
    fig = figure(response, "timeline-figure")
    names = {t["name"] for t in fig["data"]}
    assert "-c 9216 -np 3 per-slot f16/f16 no KV offload · concurrency 3 · prompt 4362 tok · n_predict 1738" in names
    assert len(names - {"failed runs"}) == 6 and "title" not in fig["layout"]["legend"]  # no warning heads its legend


def test_the_compare_chart_warns_when_the_runs_ran_different_workloads(client, investigation):
    ids = [Run.objects.get(key=k).pk for k in ("orig-x3", "c2-x3", "c3p-queue2")]
    page = client.get(reverse("chart-compare"), {"run": ids}).content.decode()
    assert 'id="workload-warning"' in page and "different workloads (concurrency 3 / 2)" in page
    same = [Run.objects.get(key=k).pk for k in ("orig-x3", "c2-x3")]
    assert 'id="workload-warning"' not in client.get(reverse("chart-compare"), {"run": same}).content.decode()


def test_the_home_trend_warns_when_a_label_mixes_workloads(client, investigation):
    page = client.get(reverse("home")).content.decode()
    assert 'id="trend-mixed-warning"' in page and "C2 (Devstral-Small-2-24B-Q4_K_M.gguf) mixes workloads" in page


# --- 13. Empty and failed data drawn as such ------------------------------------------


def compare_demo(client) -> dict:
    ids = [Run.objects.get(key=k).pk for k in ("orig-x3", "c2-x3", "c3p-queue2")]
    return figure(client.get(reverse("chart-compare"), {"run": ids}), "compare-figure")


def test_a_metric_no_run_recorded_is_a_panel_saying_so_without_axes(client, investigation):
    fig = compare_demo(client)
    layout = fig["layout"]
    notes = {(a.get("xref"), a["text"]) for a in layout["annotations"]}
    # panels 3, 4, 5: aggregate throughput, TTFT p95, E2E p95: the demo recorded none of them
    for i in (3, 4, 5):
        assert (f"x{i} domain", "not recorded") in notes, f"panel {i} has no 'not recorded' note"
        assert layout[f"yaxis{i}"]["showticklabels"] is False and layout[f"xaxis{i}"]["showticklabels"] is False
    # panel 2, decode tok/s: recorded for two runs; the failed one says why it has no bar
    assert ("x2 domain", "not recorded") not in notes and layout["yaxis2"].get("showticklabels", True)
    (failed_note,) = [a for a in layout["annotations"] if a.get("xref") == "x2"]
    assert failed_note["text"] == "failed" and failed_note["x"] == "original (orig-x3)"


def test_a_zero_success_rate_is_drawn(client, investigation):
    fig = compare_demo(client)
    (zero,) = [t for t in fig["data"] if t["name"] == "0 % success"]
    assert zero["x"] == ["original (orig-x3)"] and zero["y"] == [0] and zero["text"] == ["0 %<br>(0/3 ok)"]
    assert zero["marker"]["line"]["color"] == "#b3261e" and zero["xaxis"] == "x1"
    assert fig["layout"]["yaxis1"]["range"][0] == 0 and fig["layout"]["yaxis1"]["tickformat"] == ".0%"


def recent_runs(import_bytes, *runs: tuple[str, int, bool]) -> None:
    """Runs of (key, days ago, failed) inside the home page's last 30 days."""
    now = timezone.now().replace(microsecond=0)
    records = []
    for key, days_ago, failed in runs:
        ts = (now - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        records.append(flat(run=key, ts=ts, **({"ok": False, "status": 500, "tok_s": None} if failed else {})))
    import_bytes(jsonl(*records))


def test_the_failure_chart_has_day_ticks_and_its_failures_in_front(client, import_bytes):
    recent_runs(import_bytes, ("a", 1, True), ("b", 1, False), ("c", 1, False), ("d", 3, False))
    fig = figure(client.get(reverse("home")), "failures-figure")
    xaxis = fig["layout"].get("xaxis", {})
    assert (xaxis.get("type"), xaxis.get("tickformat"), xaxis.get("dtick")) == ("date", "%Y-%m-%d", 86_400_000)
    assert fig["layout"]["barmode"] == "stack", "overlaid, the grey total hides the red failures"
    failed, without = fig["data"]  # drawn in this order: the red at the bottom of each stack
    assert (failed["name"], failed["marker"]["color"]) == ("runs with failures", "#b3261e")
    assert failed["y"] == [0, 1] and without["y"] == [1, 2]  # three days ago: 1 run; yesterday: 3, one failed
    assert failed["x"] == without["x"] and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", day) for day in failed["x"])


def test_the_home_trend_gives_each_model_its_own_axis(client, investigation, import_bytes):
    fast = [flat(run=f"fast-{i}", model="qwen-0.5b.gguf", label="tiny", tok_s=2000.0 + i) for i in range(3)]
    import_bytes(jsonl(*fast))
    fig = figure(client.get(reverse("home")), "trend-figure")
    axes = {t["name"]: t.get("yaxis", "y") for t in fig["data"] if t["mode"] == "lines+markers"}
    assert axes["C3P"] != axes["tiny"], "26 tok/s and 2,000 tok/s on one axis"
    assert {axes["C3P"], axes["C2"], axes["original"]} == {axes["C3P"]}
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert f"<b>{DEMO_MODEL}</b>" in titles and "<b>qwen-0.5b.gguf</b>" in titles
    domains = [fig["layout"][k]["domain"] for k in ("yaxis", "yaxis2")]
    assert domains[0][0] > domains[1][1], "the panels overlap"


def test_a_chart_with_too_many_changes_to_mark_counts_them_in_its_legend():
    from datetime import UTC, datetime, timedelta

    from benchmarks.charts import timeline_figure
    from benchmarks.records import catalogue

    start = datetime(2026, 1, 1, tzinfo=UTC)
    n = timeline_figure.MAX_CHANGE_MARKERS + 10
    rows = [
        {"pk": i, "key": f"r{i}", "label": "nightly", "model": "m", "gpu": "g",
         "started_at": start + timedelta(hours=i), "n_ok": 1, "n_requests": 1, "ctx_size": 1024, "parallel": 1,
         "kv_unified": False, "cache_type_k": "f16", "cache_type_v": "f16", "kv_offload": True, "flash_attn": "on",
         "concurrency": 1 + i % 2,
         "prompt_tokens_max": 100, "n_predict_max": 10, "value": 10.0, "build": None}
        for i in range(n + 1)
    ]  # fmt: skip
    figure = timeline_figure.timeline(rows, catalogue.METRICS["tok_s"], "label")
    markers = [t for t in figure["data"] if t["name"].startswith("workload changed")]
    assert [(t["name"], t["x"], t.get("visible")) for t in markers] == [
        (f"workload changed {n:,} times: too many to mark", [], "legendonly")
    ]
