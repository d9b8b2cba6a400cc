"""The run list (/runs/): what it shows of each run, how it filters, sorts, searches and pages,
that its cost stays bounded whatever the history holds, and what wrong input gets."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.history.forms import SORTS
from benchmarks.history.values import SUGGESTIONS
from benchmarks.models import Run
from benchmarks.records.schema import SCHEMA_V2
from benchmarks.tests.builders import jsonl
from kvlab import paging

from ..factories import make_sortable_runs, runs_named
from ..pages import TOP_CHOICES, offered_values, python_order, query_plan, typed_value
from ..tool_runs import guidellm_point, kvlab_job, load, no_placeholders, page, row_of, summary_record, v2_run, vllm_run

pytestmark = pytest.mark.django_db


def run_keys(html: str) -> list[str]:
    return re.findall(r"<small>([\w.-]+)</small></td>", html)


def make_runs(n: int, **fields) -> list[Run]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    runs = [
        Run(
            key=f"run-{i:05d}",
            label=fields.get("label", f"cfg-{i % 3}"),
            model=fields.get("model", "tiny.gguf"),
            gpu="RTX 4090",
            started_at=start + timedelta(hours=i),
            n_requests=2,
            n_ok=i % 3,
            tok_s_mean=float(i),
        )
        for i in range(n)
    ]
    for run in runs:
        run.n_ok = min(run.n_ok, run.n_requests)
    return Run.objects.bulk_create(runs)


def test_the_run_list_shows_every_demo_run_with_its_configuration(client, investigation):
    response = client.get(reverse("run-list"))
    html = response.content.decode()
    assert response.status_code == 200
    assert sorted(run_keys(html)) == sorted(Run.objects.values_list("key", flat=True))
    assert "6 runs" in html
    orig_row = html[html.index("orig-x3") :].split("</tr>")[0]
    for cell in ("RTX 5060 Ti 16GB", "16384", "f16 / f16", "0 / 3"):
        assert cell in orig_row
    c3p_row = html[html.index("c3p-single") :].split("</tr>")[0]
    assert "q8_0 / q8_0" in c3p_row and "25.70" in c3p_row and "1 / 1" in c3p_row


def test_the_newest_run_comes_first(client, investigation):
    keys = run_keys(client.get(reverse("run-list")).content.decode())
    assert keys[0] == "c3p-queue2" and keys[-1] == "orig-single"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"label": "C2"}, {"c2-single", "c2-x3"}),
        ({"outcome": "failed"}, {"orig-x3"}),
        ({"outcome": "ok", "label": "original"}, {"orig-single"}),
        ({"gpu": "RTX 5060 Ti 16GB", "label": "C3P"}, {"c3p-single", "c3p-queue2"}),
        ({"date_from": "2026-09-18", "date_to": "2026-09-18"}, None),
        ({"date_from": "2026-09-19"}, set()),
    ],
)
def test_filters_narrow_the_list(client, investigation, query, expected):
    html = client.get(reverse("run-list"), query).content.decode()
    keys = set(run_keys(html))
    assert keys == (expected if expected is not None else set(Run.objects.values_list("key", flat=True)))
    if not expected and expected is not None:
        assert "No runs match these filters" in html


def test_sorting_by_tok_s_puts_the_fastest_first_and_a_run_without_figures_sorts_lowest(client, investigation):
    # no value is the lowest on both engines (every sort walks an index): last going down, first going up
    keys = run_keys(client.get(reverse("run-list"), {"sort": "-tok_s"}).content.decode())
    assert keys[:2] == ["c3p-queue2", "c3p-single"] and keys[-1] == "orig-x3"
    keys = run_keys(client.get(reverse("run-list"), {"sort": "tok_s"}).content.decode())
    assert keys[0] == "orig-x3" and keys[1] == "c2-x3"


def test_the_list_is_paginated_on_the_server(client):
    make_runs(60)
    first = client.get(reverse("run-list"), {"per_page": 25}).content.decode()
    third = client.get(reverse("run-list"), {"per_page": 25, "page": 3}).content.decode()
    assert len(run_keys(first)) == 25 and run_keys(first)[0] == "run-00059"
    assert run_keys(third) == [f"run-{i:05d}" for i in range(9, -1, -1)]
    assert "page 3 of 3" in third and "per_page=25&amp;page=2" in third


def test_an_htmx_request_gets_only_the_table(client, investigation):
    response = client.get(reverse("run-list"), {"label": "C2"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html and html.strip().startswith('<div id="run-table">')
    assert set(run_keys(html)) == {"c2-single", "c2-x3"}


def test_the_full_page_loads_htmx_from_the_app_itself(client, investigation):
    html = client.get(reverse("run-list")).content.decode()
    assert '<script src="/static/django_htmx/htmx-2.min.js"' in html
    assert 'hx-push-url="true"' in html
    assert "http://" not in html and "https://" not in html


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"outcome": "great"}, "Select a valid choice"),
        ({"date_from": "yesterday"}, "Enter a valid date"),
        ({"date_from": "2026-09-19", "date_to": "2026-09-18"}, "&#x27;from&#x27; is after &#x27;to&#x27;"),
        ({"sort": "password"}, "Select a valid choice"),
        ({"page": "two"}, "Enter a whole number"),
        ({"per_page": "100000"}, "Select a valid choice"),
    ],
)
def test_bad_filter_values_get_a_form_error_not_a_500(client, investigation, query, message):
    response = client.get(reverse("run-list"), query)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert run_keys(response.content.decode()) == []


def test_the_run_list_issues_a_fixed_number_of_queries_whatever_the_page_size(client):
    make_runs(250)
    counts = []
    for per_page in (25, 200):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(reverse("run-list"), {"per_page": per_page})
        assert len(run_keys(response.content.decode())) == per_page
        counts.append(len(queries))
    # the model, GPU and label choices (the newest run; their count the first time, on a cold cache);
    # count; the page
    assert counts == [4, 3]


def test_wrong_method_is_refused(client):
    assert client.post(reverse("run-list")).status_code == 405


def test_the_list_finds_runs_by_part_of_their_id(client, investigation):
    keys = run_keys(client.get(reverse("run-list"), {"run": "x3"}).content.decode())
    assert sorted(keys) == ["c2-x3", "orig-x3"]


def test_a_list_longer_than_the_cap_counts_to_the_cap_and_says_there_are_more(client, monkeypatch):
    monkeypatch.setattr(paging, "LIST_CAP", 30)
    make_sortable_runs(60)
    with CaptureQueriesContext(connection) as queries:
        html = client.get(reverse("run-list"), {"per_page": 25, "page": 2}).content.decode()
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"]]
    assert len(counts) == 1 and re.search(r"LIMIT 31\b", counts[0]), counts  # never a count of every run
    assert "More than 30 runs match; the pages hold the first 30 in this order" in html
    assert "page 2 of 2+" in html
    assert len(run_keys(html)) == 5  # rows 26-30 of the capped list
    assert client.get(reverse("run-list"), {"per_page": 25, "page": 9}).content.decode().count("page 2 of 2+") == 1


def test_a_list_within_the_cap_is_counted_exactly(client, monkeypatch):
    monkeypatch.setattr(paging, "LIST_CAP", 30)
    make_sortable_runs(30)
    html = client.get(reverse("run-list"), {"per_page": 25}).content.decode()
    assert "30 runs" in html and "More than" not in html and "of 2+" not in html and "page 1 of 2" in html


@pytest.mark.parametrize("sort", [f"{sign}{name}" for name in SORTS for sign in ("", "-")])
def test_every_sort_of_the_run_list_walks_an_index_and_sorts_nothing(client, sort):
    make_sortable_runs(40)
    with CaptureQueriesContext(connection) as queries:
        html = client.get(reverse("run-list"), {"sort": sort, "per_page": 25}).content.decode()
    page_sql = [q["sql"] for q in queries if q["sql"].endswith("LIMIT 25")]
    assert len(page_sql) == 1, page_sql
    plan = query_plan(page_sql[0], ())  # the statement as the page sent it (no parameters: the sort has none)
    # no sort of the matching runs (PostgreSQL may still order ties of (label, started_at) by id: an
    # Incremental Sort over an index's presorted key, a few rows at a time)
    assert "TEMP B-TREE" not in plan and not re.search(r"(^|->)\s*Sort  \(", plan, re.MULTILINE), plan
    assert "INDEX" in plan.upper(), plan
    keys = run_keys(html)
    assert len(keys) == 25


@pytest.mark.parametrize("sort", ["tok_s", "-tok_s", "ctx", "-ctx", "date", "-date"])
def test_a_run_without_the_value_sorts_lowest_on_every_engine(client, sort):
    make_sortable_runs(12)
    keys = run_keys(client.get(reverse("run-list"), {"sort": sort}).content.decode())
    column = SORTS[sort.lstrip("-")]
    values = [getattr(Run.objects.get(key=k), column) for k in keys]
    missing = [v is None for v in values]
    # going up the runs without a value come first, going down last; the rest in order
    assert missing == sorted(missing, reverse=not sort.startswith("-")), (sort, values)
    present = [v for v in values if v is not None]
    assert present == sorted(present, reverse=sort.startswith("-"))


@pytest.mark.parametrize("sort", ["-tok_s", "tok_s", "-concurrency", "label", "-prompt"])
def test_a_filtered_list_sorted_by_a_value_is_in_order_whether_few_or_many_runs_match(client, monkeypatch, sort):
    from benchmarks.history import views as history_views

    make_sortable_runs(60)
    matching = [r for r in Run.objects.all() if r.model == "m1.gguf"]  # 15 runs
    expected = python_order(matching, sort)
    few = run_keys(client.get(reverse("run-list"), {"model": "m1.gguf", "sort": sort}).content.decode())
    assert few == expected  # found by the model's index, sorted: all of them, in order

    # more match than the list counts: the latest SORT_WINDOW of them are sorted
    monkeypatch.setattr(paging, "LIST_CAP", 10)
    monkeypatch.setattr(history_views, "SORT_WINDOW", 8)
    latest = set(python_order(matching, "-date")[:8])
    html = client.get(reverse("run-list"), {"model": "m1.gguf", "sort": sort}).content.decode()
    assert run_keys(html) == [k for k in expected if k in latest]
    assert "So many runs match that the latest 8 of them are sorted" in html


def test_a_whole_run_id_is_found_anywhere_and_a_part_of_one_among_the_latest_runs(client, monkeypatch):
    from benchmarks.history import forms

    monkeypatch.setattr(forms, "KEY_SEARCH_RUNS", 20)
    make_sortable_runs(60)  # run-00000 … run-00059, one hour apart; run-00007 has no date (the oldest, as listed)
    assert run_keys(client.get(reverse("run-list"), {"run": "run-00003"}).content.decode()) == ["run-00003"]
    found = run_keys(client.get(reverse("run-list"), {"run": "0003"}).content.decode())
    assert found == []  # run-00003 and run-00030 … 39 are all older than the latest 20 (40-59)
    page = client.get(reverse("run-list"), {"run": "-0005"}).content.decode()
    assert run_keys(page) == [f"run-0005{i}" for i in range(9, -1, -1)]  # the latest 20 are 40-59
    assert "a part of one among the latest 20 runs" in page  # the page says where it looked
    assert "key-search-note" not in client.get(reverse("run-list")).content.decode()


@pytest.mark.parametrize("name", ["model", "gpu", "label"])
def test_the_run_filters_offer_the_most_used_values_not_every_one(client, crowded_history, name):
    html = client.get(reverse("run-list")).content.decode()
    options = offered_values(html, name)
    assert len(options) <= TOP_CHOICES
    popular = {"model": "popular", "gpu": "gpu-popular", "label": "label-popular"}[name]
    assert popular in options


@pytest.mark.parametrize("name", ["model", "gpu", "label"])
def test_a_value_outside_the_offered_ones_still_filters_exactly(client, crowded_history, name):
    offered = offered_values(client.get(reverse("run-list")).content.decode(), name)
    value = next(
        v
        for v in (
            {"model": "m{:03d}", "gpu": "gpu-m{:03d}", "label": "label-m{:03d}"}[name].format(i) for i in range(300)
        )
        if v not in offered
    )
    response = client.get(reverse("run-list"), {name: value})
    assert response.status_code == 200
    html = response.content.decode()
    assert response.context["page"].paginator.count == 1
    assert getattr(response.context["page"][0], name) == value
    assert typed_value(html, name) == value  # the form shows what its result used
    assert len(offered_values(html, name)) <= TOP_CHOICES


def test_the_run_list_never_selects_the_server_props(client):
    run = runs_named(["tiny.gguf"])[0]
    Run.objects.filter(pk=run.pk).update(server_props={"slots": ["x" * 100_000]})
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("run-list"))
    assert response.status_code == 200
    assert response.context["page"].paginator.count == 1
    assert not any("server_props" in q["sql"] for q in queries.captured_queries)


def test_a_value_no_run_holds_filters_to_no_runs_and_says_so_without_an_error(client, crowded_history):
    response = client.get(reverse("run-list"), {"model": "no-such.gguf"})
    assert response.status_code == 200 and not response.context["form"].errors
    assert response.context["page"].paginator.count == 0
    text = " ".join(response.content.decode().split())
    assert "Model “no-such.gguf”: no run has a value that contains it, in any case" in text
    assert "No runs match these filters." in text


def test_a_part_of_a_value_in_any_case_filters_by_the_values_that_contain_it(client):
    runs_named(["Devstral-Small-2505-Q4_K_M.gguf", "devstral-medium.gguf", "tiny.gguf", "devstral-medium.gguf"])
    response = client.get(reverse("run-list"), {"model": "DEVSTRAL"})
    assert response.status_code == 200
    assert sorted(r.model for r in response.context["page"].object_list) == [
        "Devstral-Small-2505-Q4_K_M.gguf", "devstral-medium.gguf", "devstral-medium.gguf",
    ]  # fmt: skip
    text = " ".join(response.content.decode().split())
    assert (
        "Model “DEVSTRAL”: no run has it as a whole value, so the runs of the values that contain it are shown:"
        " <code>devstral-medium.gguf</code>, <code>Devstral-Small-2505-Q4_K_M.gguf</code>."
        in text  # in any case's order
    )
    exact = client.get(reverse("run-list"), {"model": "devstral-medium.gguf"})  # a whole value: that one alone
    assert [r.model for r in exact.context["page"].object_list] == ["devstral-medium.gguf"] * 2
    assert "value-match" not in exact.content.decode()


def test_a_part_matching_more_values_than_are_suggested_filters_by_the_first_and_says_so(client, crowded_history):
    response = client.get(reverse("run-list"), {"model": "m"})  # m000 … m299: more than SUGGESTIONS
    matched = response.context["form"].matched["model"]
    assert matched.values == tuple(f"m{i:03d}" for i in range(SUGGESTIONS)) and matched.more_possible
    assert response.context["page"].paginator.count == SUGGESTIONS
    assert f"(the first {SUGGESTIONS}: type more of it to narrow)" in response.content.decode()


def test_the_last_sane_day_still_filters(client):
    runs_named(["tiny.gguf"])
    response = client.get(reverse("run-list"), {"date_to": "9998-12-31"})
    assert response.status_code == 200
    assert response.context["page"].paginator.count == 1


def test_the_run_list_shows_each_runs_tool_and_engine_and_whether_it_holds_only_the_tools_summary(
    client: Client,
) -> None:
    vllm_run()
    guidellm_point()
    kvlab_job()

    html = page(client, "run-list")

    vllm = row_of(html, "vllm-c16")
    assert "vllm 0.9.1" in vllm and ">summary only<" in vllm and "98 / 100" in vllm
    assert 'class="outcome-partial"' in vllm
    guide = row_of(html, "guidellm-rate-4")
    assert "guidellm 0.3.0" in guide and "· vllm" in guide and ">sampled<" in guide and "200 / 200" in guide
    assert ">4 req/s</span>" in guide  # a load point at a request rate, in the concurrency column
    job = row_of(html, "kvlab-job-1")
    assert "summary only" not in job and "4 / 4" in job
    no_placeholders(html)


def test_outcome_filter_reads_a_summary_only_runs_own_counts(client: Client) -> None:
    vllm_run("vllm-partial")
    vllm_run("vllm-failed", n_ok=0, n_failed=100, output_tok_s=0.0)
    vllm_run("vllm-ok", n_ok=100, n_failed=0)

    shown = {
        outcome: re.findall(r"<small>(vllm-[a-z]+)</small>", page(client, "run-list", outcome=outcome))
        for outcome in ("ok", "partial", "failed")
    }

    assert shown == {"ok": ["vllm-ok"], "partial": ["vllm-partial"], "failed": ["vllm-failed"]}


def test_the_run_list_filters_by_tool_and_by_engine(client: Client) -> None:
    vllm_run()
    guidellm_point()
    kvlab_job()
    load(jsonl(summary_record(v2_run("sglang-1", engine="sglang", tool={"name": "sglang", "version": "0.4"}))))

    def keys(**params: str) -> list[str]:
        return sorted(re.findall(r"<small>([a-z0-9-]+)</small>", page(client, "run-list", **params)))

    assert keys(tool="vllm") == ["vllm-c16"]
    assert keys(tool="guidellm") == ["guidellm-rate-4"]
    assert keys(engine="vllm") == ["guidellm-rate-4", "vllm-c16"]
    assert keys(engine="sglang") == ["sglang-1"]
    assert keys(engine="vllm", tool="guidellm") == ["guidellm-rate-4"]
    assert keys(tool="VLL") == ["vllm-c16"]  # a part, in any case
    response = client.get(reverse("run-list"), {"tool": "nosuchtool"})
    assert response.status_code == 200 and "Tool “nosuchtool”: no run has a value that contains it" in (
        " ".join(response.content.decode().split())
    )


def test_the_tool_and_engine_boxes_suggest_the_values_stored(client: Client) -> None:
    vllm_run()
    guidellm_point()

    html = page(client, "run-list")
    assert re.search(r'<datalist id="id_tool-values">.*<option value="guidellm">.*<option value="vllm">', html, re.S)
    assert page(client, "run-values", tool="gu").count("<option") == 1
    assert 'value="vllm"' in page(client, "run-values", engine="vl")


def test_the_export_link_carries_the_filters_and_exports_summary_only_runs_as_kvlab_bench_2(client: Client) -> None:
    vllm_run()
    kvlab_job()

    html = page(client, "run-list", tool="vllm")
    link = re.search(r'<a href="([^"]*export\.jsonl[^"]*)" download title="kvlab.bench/2', html)
    assert link and "tool=vllm" in link.group(1)

    response = client.get(link.group(1).replace("&amp;", "&"))
    lines = [orjson.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert [(line["schema"], line["run"]["id"]) for line in lines] == [(SCHEMA_V2, "vllm-c16")]
    assert lines[0]["summary"]["n_requests"] == 100 and lines[0]["summary"]["ttft_ms"]["p95"] == 250.0


def test_the_outcome_filter_offers_counts_not_reported(client) -> None:
    load(jsonl(summary_record(v2_run("vllm-1"), n_requests=..., n_ok=..., n_failed=...)))
    run = Run.objects.get()
    page = client.get("/runs/", {"outcome": "unknown"}).content.decode()
    assert '<option value="unknown" selected>counts not reported</option>' in page
    assert f"/runs/{run.pk}/" in page
    ok_page = client.get("/runs/", {"outcome": "ok"}).content.decode()
    assert f"/runs/{run.pk}/" not in ok_page


@pytest.mark.parametrize("n", [2, 6])
def test_the_list_costs_the_same_queries_for_few_or_many_tool_runs(client, django_assert_num_queries, n) -> None:
    for i in range(n):
        vllm_run(f"vllm-{i}")
    for i in range(n):
        guidellm_point(f"guide-{i}")
    kvlab_job()

    # the choices of the five value boxes (the newest run, and their count: the cache is cold); count;
    # the page; which summary runs store requests
    with django_assert_num_queries(5):
        html = page(client, "run-list")
    assert html.count(">summary only<") == n and html.count(">sampled<") == n
    # filtered by tool and engine: the two values checked, the choices (the newest run: counted above),
    # count, page, rows stored
    with django_assert_num_queries(6):
        html = page(client, "run-list", tool="guidellm", engine="vllm")
    assert html.count(">sampled<") == n and ">summary only<" not in html
