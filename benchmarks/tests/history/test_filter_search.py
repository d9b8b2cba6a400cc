"""A filter offers the most used values and finds any other by a part of it, typed.

The run list, the timeline and the load curve draw each value filter (model, GPU, label) as a
text box with a datalist: the 50 most used values of the latest runs, then, as the user types,
the values /runs/values/ suggests — at most 20, whatever the history holds.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from playwright.sync_api import Page, expect

from benchmarks.history import values
from benchmarks.models import Run

pytestmark = pytest.mark.django_db

START = datetime(2026, 1, 1, tzinfo=UTC)
PREFIX = {"model": "m", "gpu": "gpu-m", "label": "label-m"}


def _runs(names: list[str]) -> list[Run]:
    """A run per name, oldest first; its model is the name, its GPU gpu-<name>, its label label-<name>."""
    return Run.objects.bulk_create(
        Run(
            key=f"run-{i:05d}",
            model=name,
            gpu=f"gpu-{name}",
            label=f"label-{name}",
            started_at=START + timedelta(minutes=i),
            n_requests=1,
            n_ok=1,
        )
        for i, name in enumerate(names)
    )


@pytest.fixture
def crowded_history() -> list[Run]:
    """300 runs of distinct models, GPUs and labels (m000 … m299), then 3 of one popular model."""
    return _runs([f"m{i:03d}" for i in range(300)] + ["popular"] * 3)


def _suggested(response: Any) -> list[str]:
    return re.findall(r'<option value="([^"]*)"></option>', response.content.decode())


def _offered(html: str, name: str) -> list[str]:
    datalist = re.search(rf'<datalist id="id_{name}-values">(.*?)</datalist>', html, re.S)
    assert datalist, f"no datalist for {name}"
    return re.findall(r'<option value="([^"]*)"', datalist.group(1))


@pytest.mark.parametrize("name", ["model", "gpu", "label"])
def test_a_value_outside_the_offered_ones_is_found_by_typing_part_of_it(client, crowded_history, name):
    wanted = f"{PREFIX[name]}299"
    assert wanted not in _offered(client.get(reverse("run-list")).content.decode(), name)

    by_start = _suggested(client.get(reverse("run-values"), {name: f"{PREFIX[name]}29"}))
    assert by_start == [f"{PREFIX[name]}29{i}" for i in range(10)]
    by_middle = _suggested(client.get(reverse("run-values"), {name: "299"}))
    assert by_middle == [wanted]
    in_any_case = _suggested(client.get(reverse("run-values"), {name: f"{PREFIX[name]}299".upper()}))
    assert in_any_case == [wanted]


def test_the_suggestions_are_bounded_whatever_the_history_holds(client, crowded_history):
    typed = client.get(reverse("run-values"), {"model": "m"})
    assert typed.status_code == 200
    assert _suggested(typed) == [f"m{i:03d}" for i in range(values.SUGGESTIONS)]
    nothing_typed = _suggested(client.get(reverse("run-values"), {"model": ""}))
    assert len(nothing_typed) == values.TOP_CHOICES
    assert nothing_typed == _offered(client.get(reverse("run-list")).content.decode(), "model")
    assert "popular" in nothing_typed


def test_a_value_held_by_many_runs_does_not_hide_the_next_ones(client):
    _runs(["qa"] * 500 + ["qb", "qc"] + ["x"] * 10)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("run-values"), {"model": "q"})
    assert _suggested(response) == ["qa", "qb", "qc"]
    assert len(queries) == 2  # the values that start with it (one seek each); the latest runs' values


def test_values_that_start_with_the_text_come_from_the_whole_history(client, crowded_history, monkeypatch):
    monkeypatch.setattr(values, "RECENT_RUNS", 10)  # only the latest 10 runs are searched by any part
    assert _suggested(client.get(reverse("run-values"), {"model": "m000"})) == ["m000"]  # the oldest run
    assert _suggested(client.get(reverse("run-values"), {"model": "000"})) == []  # by a part: too old
    assert _suggested(client.get(reverse("run-values"), {"model": "299"})) == ["m299"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"field": "model", "q": "m1"}, "Name one filter to search: model, gpu or label"),
        ({"nope": "m1"}, "Name one filter to search"),
        ({}, "Name one filter to search"),
        ({"model": "m1", "gpu": "g"}, "Name one filter to search"),
        ({"model": "m" * 201}, "Ensure this value has at most 200 characters (it has 201)."),
        ({"label": "m\x001"}, "Null characters are not allowed."),
    ],
)
def test_the_suggestions_refuse_a_bad_query_string_with_a_400_that_says_why(client, crowded_history, query, message):
    response = client.get(reverse("run-values"), query)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert _suggested(response) == []


def test_the_suggestions_answer_only_get(client, crowded_history):
    response = client.post(reverse("run-values"), {"model": "m"})
    assert response.status_code == 405
    assert _suggested(response) == []


def test_suggested_values_are_escaped(client):
    hostile = '"><script>alert(1)</script><b x="'
    _runs([hostile])
    for response in (client.get(reverse("run-values"), {"model": '"><scr'}), client.get(reverse("run-list"))):
        html = response.content.decode()
        assert "<script>alert(1)" not in html
        assert 'value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;b x=&quot;"' in html


@pytest.mark.parametrize(
    ("url", "names"), [("run-list", "model gpu label"), ("chart-timeline", "model gpu label"), ("chart-load", "model")]
)
def test_every_page_with_the_filter_draws_the_typed_search(client, crowded_history, url, names):
    html = client.get(reverse(url)).content.decode()
    for name in names.split():
        box = re.search(rf'<input type="text" name="{name}"[^>]*>', html)
        assert box, f"{url}: no text box for {name}"
        assert f'list="id_{name}-values"' in box.group(0)
        assert f'hx-get="{reverse("run-values")}"' in box.group(0)
        assert 'hx-trigger="input changed delay:250ms"' in box.group(0)
        assert f'hx-target="#id_{name}-values"' in box.group(0)
        assert 'hx-push-url="false"' in box.group(0)
        assert 0 < len(_offered(html, name)) <= values.TOP_CHOICES


@pytest.mark.parametrize("url", ["run-list", "chart-timeline", "chart-load"])
def test_a_value_typed_in_full_filters_without_javascript(client, crowded_history, url):
    response = client.get(reverse(url), {"model": "m299"})
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r'<input type="text" name="model" value="m299"', html)  # the form shows what it used
    if url == "run-list":
        assert [run.model for run in response.context["page"]] == ["m299"]
    elif url == "chart-timeline":
        assert "1 run" in html and response.context["n_points"] == 1
    else:
        assert "A load curve needs runs of one configuration at two or more concurrencies" in html


def test_the_results_swapped_by_htmx_do_not_count_the_offered_values(client, crowded_history):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("run-list"), {"model": "m299"}, headers={"HX-Request": "true"})
    assert [run.model for run in response.context["page"]] == ["m299"]
    assert "<datalist" not in response.content.decode()
    assert len(queries) == 3  # does m299 exist; the count; the page


@pytest.mark.parametrize(
    ("prefix", "after"),
    [("ab", "ac"), ("a\U0010ffff", "b"), ("\U0010ffff", None), ("x\ud7ff", "x\ue000"), ("", None)],
)
def test_the_end_of_a_prefix_range_is_the_next_string_in_code_point_order(prefix, after):
    assert values._after_prefix(prefix) == after


# --- in a browser ----------------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("path", "shown"), [("/runs/", "#run-table table.runs tbody tr"), ("/charts/timeline/", "")])
def test_typing_part_of_a_value_offers_it_and_picking_it_filters(tab: Any, path: str, shown: str) -> None:
    _runs([f"model-{i:02d}.gguf" for i in range(60) for _ in range(2)] + ["zeta-rare.gguf"])
    tab.open(path)
    tab.do(lambda page: page.evaluate("window.__marker = 1"))
    box, suggestions = "#id_model", "#id_model-values option"

    def type_and_pick(page: Page) -> None:
        expect(page.locator(suggestions)).to_have_count(values.TOP_CHOICES)
        expect(page.locator(f'{suggestions}[value="zeta-rare.gguf"]')).to_have_count(0)
        with page.expect_response(lambda r: "/runs/values/" in r.url and "model=rare" in r.url):
            page.locator(box).press_sequentially("rare", delay=30)
        expect(page.locator(suggestions)).to_have_count(1)
        expect(page.locator(suggestions)).to_have_attribute("value", "zeta-rare.gguf")
        with page.expect_response(lambda r: f"{path}?" in r.url and "model=zeta-rare.gguf" in r.url):
            page.locator(box).fill("zeta-rare.gguf")
            page.locator(box).press("Enter")
        if shown:
            expect(page.locator(shown)).to_have_count(1)
        else:
            expect(page.locator("#chart .summary")).to_contain_text(re.compile(r"\b1 run\b"))

    tab.do(type_and_pick)
    assert tab.query().get("model") == ["zeta-rare.gguf"]  # the filter's state is in the URL
    assert "/runs/values/" not in tab.do(lambda page: page.url)
    assert tab.do(lambda page: page.evaluate("window.__marker")) == 1, "the page was reloaded: not an htmx swap"
    tab.assert_no_errors()


# --- the most used values are counted once per newest run (the load test's finding) ------------


def _top_reads(queries: CaptureQueriesContext) -> int:
    """How many queries read the latest runs' filter columns (the count of the most used values)."""
    return sum('"tool"' in q["sql"] and '"engine"' in q["sql"] for q in queries.captured_queries)


def test_the_most_used_values_are_counted_once_until_a_run_arrives() -> None:
    _runs(["a", "a", "b"])
    columns = ("model", "gpu", "label", "tool", "engine")
    with CaptureQueriesContext(connection) as first:
        assert values.top_values(columns)["model"] == ["a", "b"]
    with CaptureQueriesContext(connection) as again:
        assert values.top_values(columns)["model"] == ["a", "b"]
    assert (_top_reads(first), len(first)) == (1, 2)  # the newest run, then the count
    assert (_top_reads(again), len(again)) == (0, 1)  # the newest run only: the same one
    Run.objects.create(key="run-new", model="c", gpu="gpu-c", label="label-c", started_at=START, n_requests=1, n_ok=1)
    with CaptureQueriesContext(connection) as after:
        assert values.top_values(columns)["model"] == ["a", "b", "c"]  # a new run is offered at once
    assert _top_reads(after) == 1


def test_an_edited_run_is_offered_once_the_counted_values_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(["a", "b"])
    assert values.top_values(("model",))["model"] == ["a", "b"]
    Run.objects.filter(pk=runs[0].pk).update(model="renamed")  # not the newest run: the same key
    assert values.top_values(("model",))["model"] == ["a", "b"]  # counted at most CHOICES_TTL_S ago
    monkeypatch.setattr(values, "CHOICES_TTL_S", 0)  # Django's cache keeps nothing for 0 s
    values.cache.clear()  # what expiry does
    assert values.top_values(("model",))["model"] == ["b", "renamed"]
    assert values.top_values(("model",))["model"] == ["b", "renamed"]


def test_no_runs_offer_nothing_without_counting() -> None:
    with CaptureQueriesContext(connection) as queries:
        assert values.top_values(("model", "gpu")) == {"model": [], "gpu": []}
    assert len(queries) == 1


def test_the_run_list_offers_a_new_runs_model_on_its_next_view(client: Any) -> None:
    _runs(["a", "b"])
    assert "c" not in _offered(client.get(reverse("run-list")).content.decode(), "model")
    Run.objects.create(key="run-new", model="c", gpu="gpu-c", label="label-c", started_at=START, n_requests=1, n_ok=1)
    assert _offered(client.get(reverse("run-list")).content.decode(), "model") == ["a", "b", "c"]
