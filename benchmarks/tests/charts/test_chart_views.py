"""Chart pages: their figures for known runs, fixed query counts, URL state, empty and bad input."""

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.history import baselines
from benchmarks.models import Run
from benchmarks.records import catalogue
from benchmarks.records import series_keys as series
from benchmarks.tests.builders import flat, jsonl
from benchmarks.tests.factories import runs_named

pytestmark = pytest.mark.django_db


def figure(response, figure_id: str) -> dict:
    match = re.search(
        rf'<script id="{figure_id}" type="application/json">(.*?)</script>', response.content.decode(), re.S
    )
    assert match, f"no {figure_id} in the page"
    return json.loads(match.group(1))


def traces(fig: dict) -> dict[str, dict]:
    return {t["name"]: t for t in fig["data"]}


def test_the_timeline_has_one_line_per_label_and_failed_runs_as_crosses(client, investigation):
    response = client.get(reverse("chart-timeline"), {"metric": "tok_s", "group": "label"})
    fig = traces(figure(response, "timeline-figure"))
    assert set(fig) == {"original", "C2", "C3P", "failed runs", "workload changed"}
    assert fig["C2"]["y"] == [7.93, 2.15] and fig["C3P"]["y"] == [25.7, 26.3]
    assert fig["original"]["y"] == [5.84, None]  # the failed run is a gap, not a zero
    orig_x3 = Run.objects.get(key="orig-x3").pk
    assert fig["failed runs"]["customdata"] == [orig_x3] and fig["failed runs"]["marker"]["symbol"] == "x"
    assert all(t["type"] == "scatter" for t in fig.values())  # WebGL only for large series


def test_a_change_of_flags_within_a_group_is_marked(client, investigation):
    fig = traces(figure(client.get(reverse("chart-timeline"), {"group": "model"}), "timeline-figure"))
    changes = fig["configuration changed"]["text"]
    assert any("ctx size: 16384 → 9216" in text for text in changes)
    assert any("K cache: f16 → q8_0" in text for text in changes)


def test_the_timeline_groups_by_configuration(client, investigation):
    fig = traces(
        figure(client.get(reverse("chart-timeline"), {"group": "config", "metric": "wall"}), "timeline-figure")
    )
    assert "-c 16384 -np 4 unified f16/f16 no KV offload" in fig and "-c 12288 -np 1 unified q8_0/q8_0 fa on" in fig


def test_the_timeline_issues_a_fixed_number_of_queries(client, import_bytes):
    import_bytes(
        jsonl(*[flat(run=f"r{i}", label=f"cfg{i % 7}", ts=f"2026-10-{1 + i % 28:02d}T00:00:00Z") for i in range(300)])
    )
    counts = []
    for query in ({}, {"group": "config"}, {"label": "cfg3"}):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("chart-timeline"), query).status_code == 200
        counts.append(len(queries))
    # the model, GPU and label choices (the newest run; the first time, on a cold cache, their count too);
    # how many runs the range holds, at most RAW_MAX + 1 (not when grouped by configuration: no overview
    # there); the points; with a label, does a run hold it
    assert counts == [4, 2, 4]


def test_chart_state_round_trips_through_the_url(client, investigation):
    query = {"metric": "success", "group": "gpu", "label": "C2", "date_from": "2026-09-18"}
    response = client.get(reverse("chart-timeline"), query)
    page = response.content.decode()
    assert 'value="success" selected' in page and 'value="gpu" selected' in page and 'name="label" value="C2"' in page
    assert 'value="2026-09-18"' in page
    fig = traces(figure(response, "timeline-figure"))
    assert set(fig) == {"RTX 5060 Ti 16GB", "workload changed"} and fig["RTX 5060 Ti 16GB"]["y"] == [1.0, 1.0]


def test_an_htmx_filter_change_returns_only_the_chart(client, investigation):
    response = client.get(reverse("chart-timeline"), {"label": "C3P"}, headers={"HX-Request": "true"})
    body = response.content.decode()
    assert body.strip().startswith('<div id="chart">') and "<html" not in body
    assert set(traces(figure(response, "timeline-figure"))) == {"C3P", "workload changed"}


def test_the_timeline_data_downloads_as_csv_and_json(client, investigation):
    csv_body = client.get(reverse("chart-timeline"), {"label": "C2", "format": "csv"}).content.decode()
    lines = csv_body.strip().splitlines()
    assert lines[0].startswith("pk,key,label") and lines[0].endswith(",tok_s") and len(lines) == 3
    data = client.get(reverse("chart-timeline"), {"label": "C2", "format": "json"}).json()
    assert [r["key"] for r in data["rows"]] == ["c2-single", "c2-x3"] and data["rows"][1]["tok_s"] == 2.15


def test_the_timeline_json_download_carries_each_runs_outcome_configuration_and_workload(client, investigation):
    (_, row) = client.get(reverse("chart-timeline"), {"label": "C2", "format": "json"}).json()["rows"]
    assert row == {
        "pk": Run.objects.get(key="c2-x3").pk,
        "key": "c2-x3",
        "label": "C2",
        "model": "Devstral-Small-2-24B-Q4_K_M.gguf",
        "gpu": "RTX 5060 Ti 16GB",
        "started_at": "2026-09-18 20:14:52+00:00",
        "n_ok": 3,
        "n_requests": 3,
        "ctx_size": 9216,
        "parallel": 3,
        "kv_unified": False,
        "cache_type_k": "f16",
        "cache_type_v": "f16",
        "kv_offload": False,
        "flash_attn": "",
        "concurrency": 3,
        "prompt_tokens_max": 4362,
        "n_predict_max": 1738,
        "tok_s": 2.15,
    }


def test_an_empty_chart_says_so(client, db):
    response = client.get(reverse("chart-timeline"))
    assert response.status_code == 200 and "No runs with a start time match these filters" in response.content.decode()


@pytest.mark.parametrize("query", [{"metric": "nope"}, {"group": "nope"}, {"date_from": "yesterday"}])
def test_bad_chart_filters_are_form_errors(client, investigation, query):
    response = client.get(reverse("chart-timeline"), query)
    assert response.status_code == 400 and 'class="error"' in response.content.decode()


def test_the_timeline_filters_by_a_part_of_a_model_and_says_what_it_matched(client, investigation):
    part = client.get(reverse("chart-timeline"), {"model": "devstral-small"})
    assert part.status_code == 200 and "timeline-figure" in part.content.decode()
    assert "<code>Devstral-Small-2-24B-Q4_K_M.gguf</code>" in part.content.decode()
    nothing = " ".join(client.get(reverse("chart-timeline"), {"model": "x"}).content.decode().split())
    assert "Model “x”: no run has a value that contains it, in any case" in nothing
    assert "No runs with a start time match these filters." in nothing


def test_compare_tells_the_demo_story(client, investigation):
    ids = [Run.objects.get(key=k).pk for k in ("orig-x3", "c2-x3", "c3p-queue2")]
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("chart-compare"), {"run": ids})
    assert len(queries) == 2  # the runs; their requests
    fig = figure(response, "compare-figure")
    bars = {t["name"]: t["y"] for t in fig["data"] if t["type"] == "bar"}
    assert bars["success rate"] == [0.0, 1.0, 1.0]
    assert bars["decode tok/s per request"] == [None, 2.15, 26.3]
    boxes = [t for t in fig["data"] if t["type"] == "box"]
    assert [len(b["y"]) for b in boxes] == [0, 3, 2] and boxes[2]["y"] == [26.3, 26.3]


@pytest.mark.parametrize(("query", "status"), [({}, 400), ({"run": ["1"]}, 400), ({"run": ["1", "99999"]}, 404)])
def test_compare_needs_two_known_runs(client, investigation, query, status):
    assert client.get(reverse("chart-compare"), query).status_code == status


def test_the_load_curve_marks_where_throughput_stops_growing(client, import_bytes):
    records = []
    for concurrency, throughput_tokens in ((1, 100), (2, 190), (4, 360), (8, 370), (16, 372)):
        for _ in range(2):
            records.append(
                flat(
                    run=f"c{concurrency}",
                    concurrency=concurrency,
                    output_tokens=throughput_tokens,
                    elapsed_s=1.0,
                    tok_s=50.0 / concurrency,
                )
            )
    import_bytes(jsonl(*records))
    response = client.get(reverse("chart-load"), {"model": "tiny.gguf"})
    page = response.content.decode()
    curve = "base: -c 8192 -np 2 per-slot f16/f16 fa on"
    assert f"{curve}: throughput stops growing (by 5% or more) after concurrency 4." in page
    (throughput,) = [t for t in figure(response, "load-figure")["data"] if t["yaxis"] == "y" and t["mode"] != "markers"]
    assert throughput["name"] == curve and throughput["x"] == [1, 2, 4, 8, 16]
    assert throughput["y"] == [200.0, 380.0, 720.0, 740.0, 744.0]


def test_a_load_curve_needs_two_concurrencies(client, investigation):
    page = client.get(reverse("chart-load"), {"model": "Devstral-Small-2-24B-Q4_K_M.gguf"}).content.decode()
    assert "load-figure" in page  # the demo has concurrency 1, 2 and 3
    nothing = client.get(reverse("chart-load"), {"model": "nope.gguf"})
    assert nothing.status_code == 200 and "load-figure" not in nothing.content.decode()
    assert "No run has a model that contains “nope.gguf”, in any case" in nothing.content.decode()


def test_the_load_curve_of_the_historys_one_model_opens_drawn_and_a_part_of_its_name_draws_it(client, investigation):
    opened = client.get(reverse("chart-load"))  # the demo holds one model: no "Pick a model."
    assert opened.context["form"].curve_model == "Devstral-Small-2-24B-Q4_K_M.gguf"
    assert "load-figure" in opened.content.decode() and "Pick a model" not in opened.content.decode()
    assert 'value="Devstral-Small-2-24B-Q4_K_M.gguf"' in opened.content.decode()  # the form shows what it drew
    part = client.get(reverse("chart-load"), {"model": "devstral"})
    assert part.context["form"].curve_model == "Devstral-Small-2-24B-Q4_K_M.gguf"
    assert "load-figure" in part.content.decode()
    cleared = client.get(reverse("chart-load"), {"model": ""})  # a model cleared by hand stays cleared
    assert "load-figure" not in cleared.content.decode()
    assert 'Pick a model — the most used: <a href="?model=Devstral-Small-2-24B-Q4_K_M.gguf">' in (
        cleared.content.decode()
    )


def test_a_part_of_several_models_names_lists_them_to_pick_one(client):
    runs_named(["devstral-a.gguf", "devstral-b.gguf", "tiny.gguf"])
    page = " ".join(
        client.get(reverse("chart-load"), {"model": "DEVSTRAL", "x": "concurrency"}).content.decode().split()
    )
    assert "No model is named “DEVSTRAL”; 2 contain it. A load curve is of one model: pick one —" in page
    assert '<a href="?model=devstral-a.gguf&amp;x=concurrency"><code>devstral-a.gguf</code></a>' in page
    assert "load-figure" not in page


def test_the_regressions_page_shows_its_defaults_and_draws_the_latest_run_against_its_baseline_band(
    client, import_bytes
):
    history = [
        flat(run=f"h{i}", label="nightly", ts=f"2026-10-{10 + i}T00:00:00Z", tok_s=40.0 + (i % 2)) for i in range(6)
    ]
    import_bytes(jsonl(*history, flat(run="latest", label="nightly", ts="2026-10-20T00:00:00Z", tok_s=30.0)))
    response = client.get(reverse("chart-regressions"))  # no query: the defaults, shown in the boxes
    page = response.content.decode()
    assert len(re.findall(r'name="t_\w+" value="5"', page)) == len(catalogue.METRICS)
    assert '<option value="10" selected>' in page
    assert '<option value="label" selected>' in page
    (found,) = [r for r in response.context["found"] if r.metric.key == "tok_s"]
    data = {t["name"]: t for t in figure(response, "regressions-figure")["data"]}
    row = data["latest run"]["y"].index(next(y for y in data["latest run"]["y"] if "decode tok/s" in y))
    assert data["latest run"]["x"][row] == pytest.approx(100 * found.change, abs=0.01)  # about -26 %
    assert found.change == pytest.approx(30.0 / 40.5 - 1, rel=1e-3)
    band = data["baseline band (median ± 2 spreads of the earlier runs)"]
    assert band["x"][row] == pytest.approx(4 * 100 * found.spread / found.baseline)  # median ± 2 spreads
    assert band["base"][row] == pytest.approx(-2 * 100 * found.spread / found.baseline)
    assert data["threshold"]["x"][row] == -5.0
    other = client.get(reverse("chart-regressions"), {"t_tok_s": "30"})  # a threshold typed: the others kept at 5
    assert 'name="t_tok_s" value="30"' in other.content.decode()
    assert not [r for r in other.context["found"] if r.metric.key == "tok_s"]


def test_regressions_list_groups_worse_than_their_history(client, import_bytes):
    history = [
        flat(run=f"h{i}", label="nightly", ts=f"2026-10-{10 + i}T00:00:00Z", tok_s=40.0 + (i % 2)) for i in range(6)
    ]
    latest = flat(run="latest", label="nightly", ts="2026-10-20T00:00:00Z", tok_s=30.0)
    steady = [flat(run=f"s{i}", label="steady", ts=f"2026-10-{10 + i}T00:00:00Z", tok_s=20.0) for i in range(4)]
    import_bytes(jsonl(*history, latest, *steady))
    page = client.get(reverse("chart-regressions")).content.decode()
    assert "<td>nightly</td>" in page and "<td>decode tok/s per request</td>" in page and "-26%" in page
    assert "<td>steady</td>" not in page
    relaxed = client.get(reverse("chart-regressions"), {"t_tok_s": 50}).content.decode()
    assert "<td>nightly</td>" not in relaxed
    assert client.get(reverse("chart-regressions"), {"t_tok_s": -1}).status_code == 400


def test_the_home_page_shows_the_daily_charts(client, investigation):
    page = client.get(reverse("home")).content.decode()
    assert "trend-figure" in page and "Latest runs" in page
    latest = page[page.index("<h2>Latest runs</h2>") :]
    assert latest.index("C3P") < latest.index("C2") < latest.index("original")  # newest first
    # the failure chart's 30 days end at the newest run, however long ago the investigation was
    assert "<h2>Failures, the 30 days to 2026-09-18 <small>(the newest run)</small></h2>" in page
    assert 'id="failures-figure"' in page and "No runs from" not in page
    assert '<script src="/vendor/plotly.min.js" defer></script>' in page


def test_plotly_is_served_by_the_app(client):
    response = client.get(reverse("plotly-js"))
    body = b"".join(response.streaming_content)
    assert response.status_code == 200 and b"plotly.js" in body[:2000] and len(body) > 1_000_000
    assert "immutable" in response["Cache-Control"]


def test_regression_detection_uses_the_spread_of_repeated_runs():
    noisy = [{"group": "g", "pk": i, "key": f"k{i}", "tok_s_mean": v} for i, v in enumerate([40, 30, 50, 35, 45, 36])]

    def worse(runs: list[dict]) -> list[baselines.Worse]:  # a window of 10, newest first as the page reads a series
        found = baselines.worse_than_before(runs[::-1], 10, [catalogue.METRICS["tok_s"]])
        return [w for w in found if -w.change > 0.05]  # beyond the page's 5 % threshold

    assert worse(noisy) == []  # within 2σ of a noisy past
    steady = [{"group": "g", "pk": i, "key": f"k{i}", "tok_s_mean": v} for i, v in enumerate([40, 40.5, 39.5, 40, 36])]
    (found,) = worse(steady)
    assert (found.latest, found.baseline, round(found.change, 3)) == (36, 40.0, -0.1)


def test_a_zoomed_range_in_the_url_is_applied_to_the_chart(client, investigation):
    query = {"x0": "2026-09-18T19:00:00", "x1": "2026-09-18T21:30:00"}
    fig = figure(client.get(reverse("chart-timeline"), query), "timeline-figure")
    assert fig["layout"]["xaxis"]["range"] == ["2026-09-18T19:00:00+00:00", "2026-09-18T21:30:00+00:00"]
    assert client.get(reverse("chart-timeline"), {"x0": "never"}).status_code == 400


def test_a_description_names_a_few_values_of_a_field_and_counts_the_rest():
    rows = [{"model": f"m{i}", "concurrency": 1 + i % 2} for i in range(300)]
    diff = series.differences(rows, series.SERIES_FIELDS)
    assert diff == {"model": [f"m{i}" for i in range(300)], "concurrency": ["1", "2"]}
    assert series.describe(diff) == "model m0 / m1 / m2 / m3 and 296 more; concurrency 1 / 2"
    assert series.describe({"model": ["a", "b", "c", "d"]}) == "model a / b / c / d"  # all, when only a few


def _one_line_of_distinct_runs(n: int) -> None:
    """n runs of one label, each of its own model and prompt size: as a lab that varies everything."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    Run.objects.bulk_create(
        Run(
            key=f"run-{i:05d}",
            label="nightly",
            model=f"lab-model-{i:05d}-Q4_K_M.gguf",
            gpu="RTX 4090",
            started_at=start + timedelta(minutes=i),
            n_requests=4,
            n_ok=4 if i % 10 else 0,
            ctx_size=8192,
            parallel=4,
            kv_unified=True,
            cache_type_k="q8_0",
            cache_type_v="q8_0",
            kv_offload=True,
            flash_attn="on",
            concurrency=1 + i % 8,
            prompt_tokens_max=10_000 + i,
            n_predict_max=256,
            tok_s_mean=20.0 + i % 7,
        )
        for i in range(Run.objects.count(), n)
    )


def test_the_timeline_grows_by_its_points_alone_when_every_run_has_its_own_model_and_prompt(client):
    # Past MAX_CHANGE_MARKERS changes the markers are counted, so from 600 to 1,200 runs
    # the page grows only by the points: time, value, run id and ~20 bytes of hover facts.
    sizes = {}
    for n in (600, 1200):
        _one_line_of_distinct_runs(n)
        page = client.get(reverse("chart-timeline")).content.decode()
        assert f"{n:,} runs" in page
        sizes[n] = len(page.encode())
    assert (sizes[1200] - sizes[600]) / 600 < 64  # bytes per run: 56 here, 180 when each point had its own hover string
    warning = re.search(r'<div class="warning" role="status" id="mixed-warning">(.*?)</div>', page, re.S)
    assert warning and len(warning.group(1)) < 1000  # names a few models, not all 1,200
    assert (
        "nightly mixes configurations (model lab-model-00000-Q4_K_M.gguf / lab-model-00001-Q4_K_M.gguf / "
        "lab-model-00002-Q4_K_M.gguf / lab-model-00003-Q4_K_M.gguf and 1,196 more) and workloads "
        "(concurrency 1 / 2 / 3 / 4 and 4 more; prompt tokens 10000 / 10001 / 10002 / 10003 and 1,196 more)"
    ) in warning.group(1)


def test_each_timeline_point_carries_its_outcome_flags_and_workload_for_its_hover(client, investigation):
    fig = traces(figure(client.get(reverse("chart-timeline"), {"label": "C2"}), "timeline-figure"))
    assert fig["C2"]["hover_facts"] == {
        "flags": ["-c 9216 -np 3 per-slot f16/f16 no KV offload"],  # one entry per distinct flags of the line
        "flag": [0, 0],
        "ok": [1, 3],
        "requests": [1, 3],
        "concurrency": [1, 3],
        "prompt": [4362, 4362],
        "n_predict": [1738, 1738],
    }


def test_compare_names_every_value_of_the_runs_it_compares(client, import_bytes):
    import_bytes(jsonl(*[flat(run=f"r{i}", model=f"m{i}.gguf") for i in range(6)]))
    ids = list(Run.objects.order_by("pk").values_list("pk", flat=True))
    page = client.get(reverse("chart-compare"), {"run": ids}).content.decode()
    assert "Configurations compared: model m0.gguf / m1.gguf / m2.gguf / m3.gguf / m4.gguf / m5.gguf." in page


def test_home_tells_the_investigations_story_in_the_order_it_was_tried(client, investigation):
    page = " ".join(client.get(reverse("home")).content.decode().split())
    story = re.search(r'<ol class="story">(.*?)</ol>', page)
    assert story, "no story on home"
    steps = re.sub(r"<[^>]+>", "", story.group(1)).replace(" 2026-09-18", " @")
    assert steps == "original: 0/3 ok, failed @ 19:20C2: 3/3 ok, 2.15 tok/s @ 20:14C3P: 2/2 ok, 26.30 tok/s @ 21:04"
