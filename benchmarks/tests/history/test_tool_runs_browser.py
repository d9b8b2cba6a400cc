"""In a real browser: a summary-only run on the timeline, its hover saying the figure is the tool's own."""

from __future__ import annotations

import pytest

from benchmarks.models import Run
from benchmarks.tests.builders import jsonl

from ..browser import Tab
from ..tool_runs import MODEL, kvlab_job, load, summary_record, v2_run

# Plotly throttles hovers (50 ms apart): wait before each, so a second hover is drawn, not dropped.
HOVER = """async ([sel, curve, point]) => { const el = document.querySelector(sel);
    await new Promise(done => setTimeout(done, 120));
    Plotly.Fx.hover(el, [{curveNumber: curve, pointNumber: point}]);
    return Array.from(el.querySelectorAll('.hoverlayer .hovertext text.nums tspan.line'), t => t.textContent); }"""


@pytest.mark.usefixtures("transactional_db")
def test_hovering_a_summary_only_run_on_the_timeline_says_the_figure_is_the_tools(tab: Tab) -> None:
    load(jsonl(summary_record(v2_run("vllm-c16"))))
    kvlab_job()
    runs = {run.key: run.pk for run in Run.objects.all()}

    tab.open("/charts/timeline/", {"metric": "ttft_p95", "group": "model"})
    tab.wait_for_plot("#timeline-figure-plot")
    traces = tab.traces("#timeline-figure-plot")
    curve = next(i for i, t in enumerate(traces) if t["name"] == MODEL)
    ids = traces[curve]["customdata"]

    vllm = tab.evaluate(HOVER, ["#timeline-figure-plot", curve, ids.index(runs["vllm-c16"])])
    assert vllm == [
        "98/100 ok · vllm --max-num-seqs 64 · concurrency 16 · prompt ? tok · n_predict ?",
        "vllm's own figure",
        "0.25",
    ]
    kvlab = tab.evaluate(HOVER, ["#timeline-figure-plot", curve, ids.index(runs["kvlab-job-1"])])
    assert kvlab[1:] == ["kvlab, from the stored requests", "0.4"]
    assert not any("undefined" in line or "None" in line for line in vllm + kvlab)
    tab.assert_no_errors()
