"""Runs with only a tool's aggregates are first-class in the UI, and every imported run says where its
numbers came from: the run list (tool/engine column, outcome, tool and engine filters, export), the run
page (the tool's summary, requests stored, provenance per field), the compare table, the charts.

Every run is stored through the real import pipeline, from kvlab.bench/2 records written here.
"""

from __future__ import annotations

import html as html_lib
import json
import re
from typing import Any

import pytest
from django.test import Client

from benchmarks.models import Run
from benchmarks.records.formats import Declared
from benchmarks.tests.builders import jsonl

from ..tool_runs import (
    MODEL,
    guidellm_point,
    kvlab_job,
    load,
    no_placeholders,
    page,
    summary_record,
    v2_run,
    vllm_run,
)

pytestmark = pytest.mark.django_db


# --- the run page ------------------------------------------------------------------------------


def test_a_summary_only_run_page_shows_the_tools_summary_in_ms_and_says_no_request_is_stored(client: Client) -> None:
    run = vllm_run()

    html = page(client, "run-detail", run.pk)

    assert "none stored — the tool's aggregates" in html and 'id="no-requests"' in html
    assert '<table class="requests">' not in html
    summary_html = html[html.index('id="tool-summary"') :]
    for name, value in [
        ("requests", "100"),
        ("ok", "98"),
        ("failed", "2"),
        ("duration", "50.0 s"),
        ("request rate (measured)", "2 req/s"),
        ("output throughput", "1,500.0 tok/s"),
        ("total throughput (input + output)", "3,500.0 tok/s"),
        ("input tokens", "100,000"),
        ("output tokens", "75,000"),
    ]:
        assert f'<tr><th>{name}</th><td class="num">{value}</td></tr>' in summary_html
    ttft = re.search(r"<tr><th>TTFT</th>(.*?)</tr>", summary_html).group(1)  # mean, median, p90, p95, p99
    assert re.findall(r">([^<]+)</td>", ttft) == ["120.0 ms", "110.0 ms", "200.0 ms", "250.0 ms", "400.0 ms"]
    itl = re.search(r"<tr><th>ITL</th>(.*?)</tr>", summary_html).group(1)
    assert re.findall(r">([^<]+)</td>", itl) == ["19.0 ms", "18.0 ms", "—", "—", "60.0 ms"]
    assert "<tr><th>TPOT</th>" in summary_html and "<tr><th>E2E latency</th>" in summary_html
    no_placeholders(html)


def test_a_run_page_names_the_tool_and_where_each_value_came_from(client: Client) -> None:
    run = vllm_run()

    html = page(client, "run-detail", run.pk)

    tool = html[html.index('id="tool"') : html.index("</dl>", html.index('id="tool"'))]
    assert "vllm 0.9.1" in tool and "vllm bench serve" in tool and "<dd>vllm" in tool
    assert 'H100 <small class="provenance" title="where this value came from">(declared)</small>' in html
    assert f'{MODEL} <small class="provenance" title="where this value came from">(from the file)</small>' in html
    assert '<code id="server-flags">--max-num-seqs 64</code>' in html
    # the figures: the tool's own, and the decode rate kvlab derived from its mean TPOT
    assert re.search(r"250\.0 ms|0\.250 s <abbr class=\"src src-tool\"", html)
    assert '50.00 tok/s <abbr class="src src-derived"' in html and "(1000 / mean TPOT)" in html
    assert '1,500.0 tok/s <abbr class="src src-tool"' in html
    assert "(the tool's duration)" in html


def test_a_sampled_run_page_says_how_many_of_the_tools_requests_are_stored(client: Client) -> None:
    run = guidellm_point(n_rows=3)

    html = page(client, "run-detail", run.pk)

    assert "sampled: 3 of 200 stored" in html
    assert "not recomputed from this sample" in html
    assert html.count('<tr class="ok">') == 3  # the sample is listed
    no_placeholders(html)


def test_a_run_page_of_a_run_that_failed_whole_shows_no_figure_and_no_placeholder(client: Client) -> None:
    zeros = {"mean": 0.0, "p50": 0.0, "p95": 0.0}
    run = vllm_run(n_ok=0, n_failed=100, output_tok_s=0.0, ttft_ms=zeros, e2e_ms=zeros, itl_ms=..., tpot_ms=...)

    html = page(client, "run-detail", run.pk)

    assert "0 / 100 (0%)" in html and "(no request succeeded)" in html
    assert "src-tool" in html  # the counts are the tool's
    no_placeholders(html)


def test_a_kvlab_run_page_is_unchanged_by_the_tool_columns(client: Client) -> None:
    run = kvlab_job()

    html = page(client, "run-detail", run.pk)

    assert 'id="tool-summary"' not in html and "none stored" not in html
    assert html.count('<tr class="ok">') == 4
    no_placeholders(html)


def test_the_run_page_of_a_summary_only_run_costs_a_fixed_number_of_queries(
    client: Client, django_assert_num_queries: Any
) -> None:
    run = vllm_run()
    # the run; the count of its stored rows (a summary's n_requests is the tool's); that page of rows
    # (none: skipped); failures by type; the ok requests' timings
    with django_assert_num_queries(4):
        html = page(client, "run-detail", run.pk)
    assert "none stored" in html


def json_of(html: str, element_id: str) -> Any:
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.S)
    assert match, f"no {element_id}"
    return json.loads(match.group(1))


# --- compare -----------------------------------------------------------------------------------


def compare_cells(html: str, name: str) -> list[str]:
    row = re.search(rf"<tr(?: class=\"diff\")?><th>{re.escape(name)}</th>(.*?)</tr>", html, re.S)
    assert row, f"no row {name}"
    return re.findall(r"<td>(.*?)</td>", row.group(1), re.S)


def text_of(cell: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", "", cell)).strip()


def test_compare_puts_a_vllm_run_a_guidellm_load_point_and_a_kvlab_job_side_by_side(client: Client) -> None:
    runs = [vllm_run(), guidellm_point(), kvlab_job()]

    html = page(client, "run-compare", run=[r.pk for r in runs])

    assert [text_of(c) for c in compare_cells(html, "measured by")] == ["vllm 0.9.1", "guidellm 0.3.0", "kvlab"]
    assert [text_of(c) for c in compare_cells(html, "outcome")] == [
        "some failed tool",
        "all requests ok tool",
        "all requests ok kvlab",
    ]
    ttft = compare_cells(html, "TTFT p50")
    assert ttft[0].startswith("0.110 s") and 'class="src src-tool"' in ttft[0]  # the tool's percentile
    assert ttft[1].startswith("0.110 s") and 'class="src src-tool"' in ttft[1]  # never the sample's 9 s
    assert ttft[2].startswith("0.200 s") and 'class="src src-requests"' in ttft[2]  # nearest rank of 4 rows
    assert [text_of(c) for c in compare_cells(html, "TTFT p95")] == ["0.250 s tool", "0.250 s tool", "0.400 s kvlab"]
    assert [text_of(c) for c in compare_cells(html, "E2E p95")] == ["9.000 s tool", "9.000 s tool", "5.000 s kvlab"]
    tok_s = compare_cells(html, "tok/s per request, mean")
    assert 'class="src src-derived"' in tok_s[0] and text_of(tok_s[2]) == "41.50 tok/s kvlab"
    assert text_of(compare_cells(html, "aggregate throughput")[0]) == "1,500.00 tok/s tool"
    assert [text_of(c) for c in compare_cells(html, "requests")] == [
        "none stored — the tool's aggregates",
        "sampled: 3 of 200 stored",
        "all 4 stored",
    ]
    assert [text_of(c) for c in compare_cells(html, "failed (the tool&#x27;s count)")] == ["2", "0", "not recorded"]
    assert "the tool's own (from its file" in html  # the legend
    no_placeholders(html)


def test_compare_warns_when_the_runs_are_not_like_with_like(client: Client) -> None:
    runs = [vllm_run(), guidellm_point(), kvlab_job()]

    html = page(client, "run-compare", run=[r.pk for r in runs])

    warning = html[html.index('id="like-with-like"') :]
    warning = warning[: warning.index("</div>")]
    assert "measured by different tools (vllm / guidellm / kvlab)" in warning
    assert "of different configurations (engine vllm / not recorded" in warning
    assert "server flags --max-num-seqs 64 / not recorded" in warning and "/ ?" not in warning
    assert (
        "under different workloads (concurrency 16 / not recorded; request rate not recorded / 4.0;"
        " prompt tokens not recorded / 1000;" in warning
    )


def test_two_runs_of_one_tool_configuration_and_workload_compare_without_a_warning(client: Client) -> None:
    runs = [vllm_run("vllm-a"), vllm_run("vllm-b", n_ok=100, n_failed=0)]

    html = page(client, "run-compare", run=[r.pk for r in runs])

    assert 'id="like-with-like"' not in html
    assert [text_of(c) for c in compare_cells(html, "ok / total")] == ["98 / 100 tool", "100 / 100 tool"]


def test_runs_whose_flags_differ_only_in_where_the_server_listens_are_one_configuration(client: Client) -> None:
    def served_with(run_id: str, flags: str) -> Run:
        load(jsonl(summary_record(v2_run(run_id, server={"flags": flags}))), Declared(gpu="H100"))
        return Run.objects.get(key=run_id)

    flags = "-c 16384 -np 3 --no-kv-unified"
    runs = [
        served_with("a", f"{flags} --host 0.0.0.0 --port 8080 -t 8 --alias devstral --metrics"),
        served_with("b", f"{flags} --port=8081 --threads 16 -v"),
    ]
    html = page(client, "run-compare", run=[r.pk for r in runs])
    assert 'id="like-with-like"' not in html
    other = served_with("c", "-c 8192 -np 3 --no-kv-unified --port 8082")
    html = page(client, "run-compare", run=[runs[0].pk, other.pk])
    warning = html[html.index('id="like-with-like"') :]
    assert "server flags -c 16384 -np 3 --no-kv-unified / -c 8192 -np 3 --no-kv-unified" in warning


def test_comparing_only_kvlab_runs_shows_no_source_markers(client: Client) -> None:
    runs = [kvlab_job("job-a"), kvlab_job("job-b")]

    html = page(client, "run-compare", run=[r.pk for r in runs])

    assert "src-" not in html and "<th>ok / total</th><td>4 / 4</td><td>4 / 4</td>" in html


# --- bounded -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 6])
def test_compare_costs_the_same_queries_for_few_or_many_tool_runs(
    client: Client, django_assert_num_queries: Any, n: int
) -> None:
    runs = [vllm_run(f"vllm-{i}") for i in range(n)] + [guidellm_point(f"guide-{i}") for i in range(n)]
    runs.append(kvlab_job())

    # the runs; their failures by type; the rows stored of those with a summary
    with django_assert_num_queries(3):
        html = page(client, "run-compare", run=[r.pk for r in runs[:12]])
    assert html.count("none stored") == min(n, 12)


def test_a_figure_the_tool_did_not_report_has_no_source_marker(client: Client) -> None:
    runs = [vllm_run(), kvlab_job()]

    html = page(client, "run-compare", run=[r.pk for r in runs])

    assert (
        compare_cells(html, "tok/s per request, min – max")[0] == "not recorded"
    )  # neither end recorded: never "— – —"


# --- charts ------------------------------------------------------------------------------------


def test_the_timeline_draws_summary_only_runs_with_the_tools_figures_and_its_hover_says_so(client: Client) -> None:
    vllm_run("vllm-a")
    load(jsonl(summary_record(v2_run("vllm-b", started_at="2026-11-02T10:00:00Z"), ttft_ms={"p95": 300.0})))
    kvlab_job()

    html = page(client, "chart-timeline", metric="ttft_p95", group="model")
    (line,) = [t for t in json_of(html, "timeline-figure")["data"] if t["name"] == MODEL]

    by_run = dict(zip(line["customdata"], line["y"], strict=True))
    runs = {r.key: r.pk for r in Run.objects.all()}
    assert by_run == {runs["kvlab-job-1"]: 0.4, runs["vllm-a"]: 0.25, runs["vllm-b"]: 0.3}
    facts = line["hover_facts"]
    notes = [facts["sources"][i] for i in facts["source"]]
    assert dict(zip(line["customdata"], notes, strict=True)) == {
        runs["kvlab-job-1"]: "kvlab, from the stored requests",
        runs["vllm-a"]: "vllm's own figure",
        runs["vllm-b"]: "vllm's own figure",
    }
    tok_s = json_of(page(client, "chart-timeline", metric="tok_s", group="model"), "timeline-figure")
    (line,) = [t for t in tok_s["data"] if t["name"] == MODEL]
    assert "derived from vllm's figures" in line["hover_facts"]["sources"]
    # the line mixes engines, tools' configurations and workloads: the page says so
    assert "engine not recorded / vllm;" in html and "server flags not recorded / --max-num-seqs 64" in html, html[
        html.find("mixed-warning") :
    ][:1500]


def test_a_timeline_of_kvlab_runs_alone_carries_no_source_notes(client: Client) -> None:
    kvlab_job("job-a")
    kvlab_job("job-b")

    fig = json_of(page(client, "chart-timeline", group="model"), "timeline-figure")

    assert all("sources" not in t.get("hover_facts", {}) for t in fig["data"])


def test_the_load_curve_by_request_rate_draws_guidellms_load_points_with_its_figures(client: Client) -> None:
    for rate, throughput in ((1.0, 400.0), (2.0, 780.0), (4.0, 800.0)):
        guidellm_point(f"guide-{rate:g}", rate=rate, n_rows=0, requests_sampled=..., output_tok_s=throughput)
    kvlab_job()  # concurrency only: not on a request-rate curve

    html = page(client, "chart-load", model=MODEL, x="request_rate")

    fig = json_of(html, "load-figure")
    assert fig["layout"]["xaxis"]["title"]["text"] == "request rate (req/s)"
    (line,) = [t for t in fig["data"] if t.get("yaxis") == "y" and t["mode"] == "lines+markers"]
    assert line["x"] == [1.0, 2.0, 4.0] and line["y"] == [400.0, 780.0, 800.0]
    assert line["text"] == ["guidellm's own figures"] * 3 and "%{text}" in line["hovertemplate"]
    assert "(guidellm)" in line["name"] and "vllm --max-num-seqs 64" in line["name"]
    assert "throughput stops growing (by 5% or more) after request rate 2" in html
    no_placeholders(html[: html.index('<script id="load-figure"')])


def test_the_load_curve_by_concurrency_keeps_tools_apart(client: Client) -> None:
    for c in (1, 4):
        load(jsonl(summary_record(v2_run(f"vllm-c{c}", workload={"concurrency": c}), output_tok_s=100.0 * c)))
        kvlab_job(f"job-c{c}", concurrency=c)

    fig = json_of(page(client, "chart-load", model=MODEL), "load-figure")

    lines = {t["name"]: t for t in fig["data"] if t.get("yaxis") == "y" and t["mode"] == "lines+markers"}
    assert len(lines) == 2
    (vllm,) = [t for name, t in lines.items() if "(vllm)" in name]
    assert vllm["x"] == [1, 4] and vllm["y"] == [100.0, 400.0] and vllm["text"] == ["vllm's own figures"] * 2
    (kvlab,) = [t for name, t in lines.items() if "(kvlab)" in name]
    assert "text" not in kvlab  # kvlab's own figures: the plain hover


def test_the_compare_chart_says_whose_figure_each_bar_is(client: Client) -> None:
    runs = [vllm_run(), guidellm_point(), kvlab_job()]

    html = page(client, "chart-compare", run=[r.pk for r in runs])

    fig = json_of(html, "compare-figure")
    bars = {t["name"]: t for t in fig["data"] if t["type"] == "bar"}
    assert bars["TTFT p95 (s)"]["y"] == [0.25, 0.25, 0.4]
    assert bars["TTFT p95 (s)"]["text"] == [
        "vllm's own figure",
        "guidellm's own figure",
        "kvlab, from the stored requests",
    ]
    assert bars["decode tok/s per request"]["text"][0] == "derived from vllm's figures"
    notes = [a["text"] for a in fig["layout"]["annotations"]]
    assert "no request stored: the tool's aggregates" in notes
    assert 'id="tools-warning"' in html and "(vllm / guidellm / kvlab)" in html


def test_the_charts_cost_the_same_queries_for_few_or_many_tool_runs(
    client: Client, django_assert_num_queries: Any
) -> None:
    for n in (2, 6):
        Run.objects.all().delete()
        for i in range(n):
            guidellm_point(f"guide-{i}", rate=float(i + 1), n_rows=0, requests_sampled=...)
            vllm_run(f"vllm-{i}", n_ok=100, n_failed=0)
        # the choices (the form is drawn: the newest run, and their count, as the runs are new); how
        # many runs the range holds (bounded); the points
        with django_assert_num_queries(4):
            html = page(client, "chart-timeline")
        assert f"{2 * n} runs" in html
        # does a run hold the model; the model choices (the newest run, and their count: only the
        # timeline's were counted); are there more runs than a curve reads; the points
        with django_assert_num_queries(5):
            html = page(client, "chart-load", model=MODEL, x="request_rate")
        assert 'id="load-figure-plot"' in html


def test_a_run_whose_tool_left_its_counts_out_reads_not_reported_not_ok_or_failed(client: Client) -> None:
    load(jsonl(summary_record(v2_run("bench-csv"), n_requests=None, n_ok=None, n_failed=None)))
    run = Run.objects.get(key="bench-csv")
    other = vllm_run()

    html = page(client, "run-detail", run.pk)
    assert "(the tool did not report its counts)" in html and "0 / 0" not in html
    # neither the request count nor the success rate reads as 0, or as computed by kvlab from requests
    assert "<dt>requests</dt><dd>— <small>(the tool did not report its counts)</small></dd>" in html
    assert not re.search(r"did not report its counts\)</small>\s*<abbr class=\"src src-requests\"", html)
    assert "none stored — the tool's aggregates" in html
    compare = page(client, "run-compare", run=[run.pk, other.pk])
    assert [text_of(c) for c in compare_cells(compare, "outcome")] == ["counts not reported tool", "some failed tool"]
    assert text_of(compare_cells(compare, "ok / total")[0]) == "—"
    assert re.findall(r"<small>(bench-csv|vllm-c16)</small>", page(client, "run-list", outcome="partial")) == [
        "vllm-c16"
    ]
    no_placeholders(html)
