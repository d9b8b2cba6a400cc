"""The timeline past RAW_MAX runs: buckets kept in SQL equal a plain Python count of the runs, the
page reads a bounded number of rows whatever the history holds, and zooming reads the runs."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.charts import timeline_data, timeline_figure
from benchmarks.history import rollups
from benchmarks.models import Run, TimelineBucket
from benchmarks.models.rollups import ROLLED_COLUMNS, SPANS
from benchmarks.tests.builders import flat, jsonl

from ..timeline_buckets import assert_same, figure, reference, stored

pytestmark = pytest.mark.django_db
START = datetime(2026, 3, 1, tzinfo=UTC)


def random_runs(rng: random.Random, n: int, first_id: int = 0, days: int = 30) -> list[Run]:
    runs = []
    for i in range(first_id, first_id + n):
        n_requests = rng.choice([0, 3, 5, 5, 5])
        n_ok = rng.choice([0, n_requests, n_requests, max(n_requests - 1, 0)])
        runs.append(
            Run(
                key=f"run-{i}",
                label=rng.choice(["nightly", "q8-cache", ""]),
                model=rng.choice(["m1.gguf", "m2.gguf"]),
                gpu=rng.choice(["RTX 4090", ""]),
                tool=rng.choice(["", "vllm"]),
                engine=rng.choice(["", "llama.cpp"]),
                started_at=None if rng.random() < 0.03 else START + timedelta(seconds=rng.randrange(days * 86400)),
                n_requests=n_requests,
                n_ok=n_ok,
                **{
                    c: (None if rng.random() < 0.2 else round(rng.uniform(0.01, 300), 3))
                    for c in ROLLED_COLUMNS
                    if c != "success_rate"
                },
            )
        )
    return Run.objects.bulk_create(runs)


def test_the_buckets_are_the_min_max_and_counts_of_their_runs_for_every_span():
    random_runs(random.Random(1), 600)
    rollups.rebuild_all()
    want = reference()
    assert {key[0] for key in want} == set(SPANS) and len(want) > 600  # every span, many buckets
    assert_same(stored(), want)


def test_runs_changed_recounts_the_buckets_of_new_and_changed_runs_only_as_they_are_now():
    rng = random.Random(2)
    random_runs(rng, 400)
    rollups.rebuild_all()
    new = random_runs(rng, 150, first_id=400)
    changed = list(Run.objects.exclude(started_at=None).order_by("?")[:30])
    for run in changed:
        run.tok_s_mean, run.n_ok = rng.uniform(1, 500), 0 if rng.random() < 0.3 else run.n_ok
    Run.objects.bulk_update(changed, ["tok_s_mean", "n_ok"])
    assert stored() != reference()  # the new and changed runs are not counted yet
    rollups.runs_changed([r.pk for r in new] + [r.pk for r in changed] + [10**9])  # an unknown id: ignored
    assert_same(stored(), reference())


def test_an_import_keeps_the_buckets_of_its_runs_and_of_the_runs_it_added_to(import_bytes):
    rng = random.Random(5)
    records = [
        flat(run=f"r{i}", label=rng.choice(["a", "b"]), ts=f"2026-10-{1 + i % 9:02d}T{i % 24:02d}:30:00Z",
             ok=rng.random() < 0.8, concurrency=1 + i % 3)
        for i in range(60)
    ]  # fmt: skip
    import_bytes(jsonl(*records))
    assert_same(stored(), reference())
    import_bytes(jsonl(flat(run="r3", ts="2026-10-04T03:31:00Z", ok=False), flat(run="new", ts="2026-10-20T00:00:00Z")))
    assert_same(stored(), reference())  # r3 got a failed request (its values changed); a new run, a new bucket


@pytest.fixture
def many(monkeypatch: pytest.MonkeyPatch) -> list[Run]:
    """400 runs over 30 days, bucketed; the timeline draws at most 50 runs one by one."""
    monkeypatch.setattr(timeline_data, "RAW_MAX", 50)
    runs = random_runs(random.Random(3), 400)
    rollups.rebuild_all()
    return runs


def test_past_raw_max_runs_each_line_is_its_min_and_max_per_bucket_read_with_bounded_queries(client, many):
    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("chart-timeline"), {"metric": "tok_s", "group": "label"}).content.decode()
    # the choices (the newest run, and their count: the cache is cold); how many runs (at most 51); the
    # first and last week bucket; the buckets; the backlog of runs a large import left for the worker to
    # count (history.derived.pending)
    assert len(queries) == 6
    for query in queries:  # no query reads the runs without a bound
        sql = query["sql"]
        assert sql.count('FROM "benchmarks_run"') <= sql.count("LIMIT"), sql
    dated = [r for r in many if r.started_at]
    first, last = (int(f(r.started_at for r in dated).timestamp()) for f in (min, max))
    span = 6 * 3600  # 30 days are 720 hours, 120 six-hour buckets: at most MAX_BUCKETS
    assert "min and max of its runs per 6 hours" in page and f"{len(dated)} runs" in page
    lines = {t["name"]: t["reduced"] for t in figure(page)["data"] if t["name"] != "failed runs"}
    assert set(lines) == {f"{name} (min/max per 6 hours)" for name in ("nightly", "q8-cache", "(none)")}
    # each line: per bucket the min and max over its runs of every model, GPU, tool and engine
    want: dict[str, dict[int, list[Any]]] = defaultdict(dict)
    for (s, label, *_, start), row in reference().items():
        if s != span or not first - span < start <= last:
            continue
        have = want[label or "(none)"].setdefault(start, [None, None, 0, 0])
        low, high = row["tok_s_mean_min"], row["tok_s_mean_max"]
        have[0] = low if have[0] is None else min(have[0], low) if low is not None else have[0]
        have[1] = high if have[1] is None else max(have[1], high) if high is not None else have[1]
        have[2] += row["tok_s_mean_n"]
        have[3] += row["runs"]
    for label, buckets in want.items():
        line = lines[f"{label} (min/max per 6 hours)"]
        assert line["span"] == span and line["start"] == sorted(buckets)
        got = list(zip(line["lo"], line["hi"], line["valued"], line["runs"], strict=True))
        # min and max to 4 significant digits, as the raw points are drawn
        assert got == [
            (*(None if v is None else float(f"{v:.4g}") for v in buckets[s][:2]), *buckets[s][2:])
            for s in sorted(buckets)
        ]
    failed = next(t for t in figure(page)["data"] if t["name"] == "failed runs")
    assert all(re.search(r"\d+ of \d+ runs failed, 2026-\S+ \S+ … 2026-\S+ \S+ UTC", text) for text in failed["text"])


def test_a_zoom_into_a_range_of_few_runs_reads_them_raw(client, many):
    dated = sorted((r for r in many if r.started_at), key=lambda r: r.started_at)
    x0, x1 = dated[100].started_at, dated[130].started_at
    query = {"x0": x0.strftime("%Y-%m-%d %H:%M:%S"), "x1": x1.strftime("%Y-%m-%d %H:%M:%S")}
    rows = client.get(reverse("chart-timeline"), {**query, "format": "json"}).json()["rows"]
    assert sorted(r["pk"] for r in rows) == sorted(r.pk for r in dated[100:131])
    page = client.get(reverse("chart-timeline"), query).content.decode()
    assert "31 runs in the range" in page and "min and max" not in page
    assert all("reduced" not in t for t in figure(page)["data"])


def test_the_overview_download_says_it_holds_buckets_not_runs(client, many):
    rows = client.get(reverse("chart-timeline"), {"format": "json", "group": "label"}).json()["rows"]
    assert set(rows[0]) == {
        "label", "bucket_from", "bucket_to", "runs", "failed_runs", "runs_with_tok_s", "min_tok_s", "max_tok_s"
    }  # fmt: skip
    assert sum(r["runs"] for r in rows) == sum(1 for r in many if r.started_at)


def test_a_filter_the_buckets_cannot_express_draws_the_latest_runs_and_says_why(client, many):
    page = client.get(reverse("chart-timeline"), {"outcome": "ok"}).content.decode()
    assert (
        "among the latest 20,000 of the range — the latest 50 (filtered by outcome: no overview of older runs)" in page
    )
    assert all("reduced" not in t for t in figure(page)["data"])


def test_buckets_lagging_the_runs_fall_back_to_the_latest_runs(client, many):
    TimelineBucket.objects.all().delete()  # runs stored behind the hook's back, no rebuild_derived yet
    page = client.get(reverse("chart-timeline")).content.decode()
    assert "the latest 50 (the overview is not built: no overview of older runs)" in page
    assert all("reduced" not in t for t in figure(page)["data"])


@pytest.mark.browser
def test_a_reduced_point_says_so_on_hover_and_a_click_on_it_loads_its_runs(tab, many):
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    traces = tab.traces("#timeline-figure-plot")
    curve = next(i for i, t in enumerate(traces) if t["name"] == "nightly (min/max per 6 hours)")
    point = next(i for i, text in enumerate(traces[curve]["text"]) if text.startswith("<b>max</b>"))
    shown = tab.evaluate(
        """([sel, curve, point]) => { const el = document.querySelector(sel);
               Plotly.Fx.hover(el, [{curveNumber: curve, pointNumber: point}]);
               return Array.from(el.querySelectorAll('.hoverlayer .hovertext text.nums tspan.line'),
                                 t => t.textContent); }""",
        ["#timeline-figure-plot", curve, point],
    )
    start = traces[curve]["customdata"][point]  # a bucket's start, not a run id
    begin, end = (datetime.fromtimestamp(s, UTC) for s in (start, start + 6 * 3600))
    in_bucket = sorted(r.pk for r in many if r.started_at and begin <= r.started_at <= end and r.label == "nightly")
    assert re.fullmatch(
        rf"max of {traces[curve]['text'][point].split(' of ')[1].split(' run')[0]} runs?( \(\d+ with a value\))? · "
        rf"{begin:%Y-%m-%d %H:%M} … {end:%Y-%m-%d %H:%M} UTC · click to zoom in",
        shown[0],
    ), shown

    tab.evaluate(  # a click on the point, as Plotly reports it
        """([sel, curve, point]) => { const el = document.querySelector(sel);
               el.emit('plotly_click', {points: [{curveNumber: curve, pointNumber: point,
                   customdata: el.data[curve].customdata[point], data: el.data[curve]}]}); }""",
        ["#timeline-figure-plot", curve, point],
    )
    tab.do(lambda page: page.wait_for_url("**x0=**"))
    tab.do(
        lambda page: page.wait_for_function(
            "() => { const el = document.querySelector('#timeline-figure-plot');"
            " return el && el.data && el.data.length && el.data.every(t => !t.reduced); }"
        )
    )
    assert tab.query()["x0"] == [f"{begin:%Y-%m-%d %H:%M:%S}"] and in_bucket
    zoomed = {t["name"]: t for t in tab.traces("#timeline-figure-plot")}
    assert sorted(zoomed["nightly"]["customdata"]) == in_bucket  # the bucket's runs, each its own point
    tab.assert_no_errors()


def test_a_chart_of_many_buckets_draws_its_strokes_without_markers(client, many, monkeypatch):
    def modes() -> set[str]:
        fig = figure(client.get(reverse("chart-timeline"), {"metric": "tok_s", "group": "label"}).content.decode())
        return {t["mode"] for t in fig["data"] if "lo" in t.get("reduced", {})}

    monkeypatch.setattr(timeline_figure, "MARKED_POINTS", 10_000)
    monkeypatch.setattr(timeline_figure, "MARKED_BUCKETS", 10_000)
    assert modes() == {"lines+markers"}  # a few buckets: each stroke's ends marked
    monkeypatch.setattr(timeline_figure, "MARKED_BUCKETS", 10)
    assert modes() == {"lines"}  # many: the strokes alone, each an SVG path, not three nodes


@pytest.mark.browser
@pytest.mark.parametrize("marked", [False, True])
def test_a_bucket_of_one_value_is_drawn_on_its_own_never_joined_to_the_next(tab, many, monkeypatch, marked):
    monkeypatch.setattr(timeline_figure, "MARKED_POINTS", 10_000)
    monkeypatch.setattr(timeline_figure, "MARKED_BUCKETS", 10_000 if marked else 0)
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    found = 0
    modes = tab.evaluate("sel => Array.from(document.querySelector(sel).data, t => t.mode)", "#timeline-figure-plot")
    for trace, mode in zip(tab.traces("#timeline-figure-plot"), modes, strict=True):
        if trace["name"] == "failed runs":
            continue
        assert mode == ("lines+markers" if marked else "lines")
        text, x, y = trace["text"], trace["x"], trace["y"]
        for i, said in enumerate(text):
            first = not i or text[i - 1] != said  # a dash's second end says it again
            if first and said.startswith(("1 run · ", "the only value of", "<b>min = max</b>")):
                found += 1
                if marked:  # a point, then a gap
                    assert y[i] is not None and y[i + 1] is None
                else:  # a short dash at the value (a point would not show without markers), then a gap
                    assert y[i] == y[i + 1] and text[i + 1] == said and x[i] < x[i + 1] and y[i + 2] is None
    assert found
    tab.assert_no_errors()


def test_past_max_drawn_buckets_neighbours_in_a_line_are_merged():
    rng = random.Random(4)
    rows = []
    for line in ("a", "b"):
        for i in range(7):
            lo = None if rng.random() < 0.3 else rng.uniform(0, 10)
            rows.append(
                {"label": line, "start": 100 * i, "end": 100 * i + 100, "runs": 3, "failed": i % 2,
                 "valued": 0 if lo is None else 2, "lo": lo, "hi": None if lo is None else lo + 1}
            )  # fmt: skip
    merged = timeline_data.merged(rows, 3, "label")
    assert [(m["label"], m["start"], m["end"], m["runs"], m["failed"]) for m in merged] == [
        (line, start, end, runs, failed)
        for line in ("a", "b")
        for start, end, runs, failed in ((0, 300, 9, 1), (300, 600, 9, 2), (600, 700, 3, 0))
    ]
    for m in merged:
        inside = [r for r in rows if r["label"] == m["label"] and m["start"] <= r["start"] < m["end"]]
        lows = [r["lo"] for r in inside if r["lo"] is not None]
        assert m["lo"] == (min(lows) if lows else None) and m["valued"] == sum(r["valued"] for r in inside)
        assert m["hi"] == (max(r["hi"] for r in inside if r["hi"] is not None) if lows else None)
    assert timeline_data.merged(rows, 1, "label") is rows


def test_past_max_lines_the_smallest_lines_are_drawn_together_as_grey_points(client):
    # 81 lines: one of 40 runs, 60 of two runs, 20 of one run
    prompts = [100] * 40 + [1000 + i // 2 for i in range(120)] + [5000 + i for i in range(20)]
    Run.objects.bulk_create(
        Run(key=f"r{i}", label="nightly", model="m.gguf", started_at=START + timedelta(minutes=i), n_requests=2,
            n_ok=2 if i % 9 else 0, prompt_tokens_max=prompt, tok_s_mean=10.0 + i)
        for i, prompt in enumerate(prompts)
    )  # fmt: skip
    fig = figure(client.get(reverse("chart-timeline"), {"group": "series"}).content.decode())
    names = [t["name"] for t in fig["data"]]
    assert len(names) == timeline_figure.MAX_LINES + 2  # the lines, the grey points, the failed runs
    assert "31 more lines, as grey points" in names  # 50 drawn: the 40-run line and 49 of two runs
    grey = next(t for t in fig["data"] if t["name"] == "31 more lines, as grey points")
    lines = fig["data"][: timeline_figure.MAX_LINES]
    drawn = {pk for t in lines for pk in t["customdata"]}
    assert sorted(len(t["customdata"]) for t in lines) == [2] * 49 + [40]
    assert len(grey["customdata"]) == 11 * 2 + 20 and not drawn & set(grey["customdata"])
    assert len(drawn) + len(grey["customdata"]) == 180  # every run drawn once
    failed = next(t for t in fig["data"] if t["name"] == "failed runs")
    assert sorted(failed["customdata"]) == sorted(Run.objects.filter(n_ok=0).values_list("pk", flat=True))
    # a grey point's hover text (its flags and workload) is its line's name: no table of names sent
    assert "lines" not in grey["hover_facts"] and "its line: the flags and workload above" in grey["hovertemplate"]


def test_past_max_lines_a_line_of_one_run_is_a_grey_point_not_a_trace_of_its_own(client):
    """The latest 2,000 of a million runs grouped by configuration + workload were 1,994 lines of one or two
    runs: 50 of them picked by name took 50 traces and legend entries (~100 ms of Chromium's paint)."""
    prompts = [100, 100, 100] + [1000 + i for i in range(60)]  # a line of 3 runs, 60 of one
    Run.objects.bulk_create(
        Run(key=f"r{i}", label="nightly", model="m.gguf", started_at=START + timedelta(minutes=i), n_requests=2,
            n_ok=2, prompt_tokens_max=prompt, concurrency=4, request_rate=2.5 if i == 5 else None, tok_s_mean=10.0)
        for i, prompt in enumerate(prompts)
    )  # fmt: skip
    fig = figure(client.get(reverse("chart-timeline"), {"group": "series"}).content.decode())
    line, grey = fig["data"]
    assert len(line["customdata"]) == 3 and line["mode"] == "lines+markers"
    assert grey["name"] == "60 more lines, as grey points" and len(grey["customdata"]) == 60
    facts = grey["hover_facts"]
    # the request rate is part of a line's workload: the hover gives it where a run has one
    assert facts["rate"] == [2.5 if pk == Run.objects.get(key="r5").pk else None for pk in grey["customdata"]]
    assert facts["prompt"] == list(range(1000, 1060))


def sixty_labels() -> None:
    """60 labels: 5 of two runs, 55 of one."""
    Run.objects.bulk_create(
        Run(key=f"r{i}", label=f"<b>lab-{i % 60}</b>", model="m.gguf", started_at=START + timedelta(minutes=i),
            n_requests=2, n_ok=2, tok_s_mean=10.0 + i)
        for i in range(65)
    )  # fmt: skip


def test_past_max_lines_grouped_by_label_a_grey_points_hover_names_its_line(client):
    sixty_labels()
    fig = figure(client.get(reverse("chart-timeline"), {"group": "label"}).content.decode())
    *lines, grey = fig["data"]
    assert len(lines) == 5 and grey["name"] == "55 more lines, as grey points"
    facts = grey["hover_facts"]
    labels = dict(Run.objects.values_list("pk", "label"))
    assert [facts["lines"][i] for i in facts["line"]] == [
        f"&lt;b&gt;{labels[pk][3:-4]}&lt;/b&gt;" for pk in grey["customdata"]
    ]  # each label once, escaped: Plotly shows it as written
    assert grey["hovertemplate"] == "%{text}<br>%{y}<extra>%{hovertext}</extra>"


@pytest.mark.browser
def test_hovering_a_grey_point_names_its_line(tab):
    sixty_labels()
    tab.open("/charts/timeline/", {"metric": "tok_s", "group": "label"})
    tab.wait_for_plot("#timeline-figure-plot")
    traces = tab.traces("#timeline-figure-plot")
    curve = next(i for i, t in enumerate(traces) if t["name"] == "55 more lines, as grey points")
    point = traces[curve]["customdata"].index(Run.objects.get(key="r7").pk)
    shown = tab.evaluate(
        """([sel, curve, point]) => { const el = document.querySelector(sel);
               Plotly.Fx.hover(el, [{curveNumber: curve, pointNumber: point}]);
               return Array.from(el.querySelectorAll('.hoverlayer .hovertext'), e => ({
                   lines: Array.from(e.querySelectorAll('text.nums tspan.line'), t => t.textContent),
                   name: e.querySelector('text.name').textContent})); }""",
        ["#timeline-figure-plot", curve, point],
    )
    assert shown == [
        {
            "lines": ["2/2 ok · -c ? -np ? ? ?/? · concurrency ? · prompt ? tok · n_predict ?", "17"],
            "name": "<b>lab-7</b>",
        }
    ]
    tab.assert_no_errors()


def test_past_raw_max_failed_runs_are_counted_per_bucket(client, many):
    page = client.get(reverse("chart-timeline"), {"outcome": "failed", "group": "label"}).content.decode()
    failed = [r for r in many if r.started_at and r.n_requests and not r.n_ok]
    assert len(failed) > timeline_data.RAW_MAX and f"{len(failed)} runs" in page
    (crosses,) = figure(page)["data"]  # no line: failed runs have no value
    counts = [int(re.search(r": (\d+) of \1 runs failed", text).group(1)) for text in crosses["text"]]
    assert crosses["name"] == "failed runs" and sum(counts) == len(failed)
