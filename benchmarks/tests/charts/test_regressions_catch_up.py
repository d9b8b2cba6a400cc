"""Runs stored behind kvlab's back (a bulk fill: neither an import nor a job filed them) are compared by
the worker, never by the regressions page while it serves a GET: the page queues the catch-up through
history.derived's backlog (the Celery task an import's large catch-up uses), says it is catching up and
for how many runs, and once the worker has caught up shows what a rebuild from the runs would.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from benchmarks.charts import regression_views
from benchmarks.history import derived
from benchmarks.models import BaselineComparison, DerivedBacklog, Run, SeriesRun

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 1, tzinfo=UTC)
BAD = '<td class="num bad">'


def bulk_filled(n_series: int, prefix: str = "s") -> list[Run]:
    """n_series configurations of three runs each, the last one slower: one regression a series."""
    runs = []
    for s in range(n_series):
        for i, tok_s in enumerate((100.0, 100.0, 50.0 - s / 10)):
            runs.append(
                Run(key=f"{prefix}{s}-{i}", label="nightly", model="m", ctx_size=1024 + s, parallel=1, concurrency=1,
                    started_at=START + timedelta(hours=i), n_requests=1, n_ok=1, tok_s_mean=tok_s)
            )  # fmt: skip
    return Run.objects.bulk_create(runs)


def derived_rows() -> tuple[int, int]:
    return SeriesRun.objects.count(), BaselineComparison.objects.count()


def page(client) -> str:
    return " ".join(client.get(reverse("chart-regressions")).content.decode().split())


def test_a_view_writes_no_derived_row_it_queues_the_catch_up_and_says_so(client, django_capture_on_commit_callbacks):
    bulk_filled(3)
    with django_capture_on_commit_callbacks() as asked:
        shown = page(client)
    assert derived_rows() == (0, 0)  # the GET compared nothing itself
    assert len(asked) == 1  # the worker is asked once the view's transaction commits
    entry = DerivedBacklog.objects.get()
    assert entry.n_runs == 9 and (entry.first_run_id, entry.last_run_id) == tuple(
        Run.objects.order_by("pk").values_list("pk", flat=True)[i] for i in (0, 8)
    )
    assert "Catching up: 9 runs stored by neither an import nor a job (a bulk fill) are not compared yet" in shown
    assert BAD not in shown

    with django_capture_on_commit_callbacks() as asked_again:
        shown = page(client)  # a second look while the worker has not caught up: nothing queued twice
    assert asked_again == [] and DerivedBacklog.objects.count() == 1
    assert "Catching up: 9 runs" in shown

    assert derived.catch_up() == 9  # what the worker's task runs
    shown = page(client)
    assert shown.count(BAD) == 3 and "Catching up" not in shown and DerivedBacklog.objects.count() == 0
    caught_up = sorted(BaselineComparison.objects.values_list("latest_run_id", "window_size", "metric", "change"))
    derived.rebuild_all()
    assert sorted(BaselineComparison.objects.values_list("latest_run_id", "window_size", "metric", "change")) == (
        caught_up
    )


def test_more_runs_than_a_view_queues_are_caught_up_a_batch_at_a_time(client, monkeypatch):
    monkeypatch.setattr(regression_views, "MAX_QUEUED_ON_VIEW", 4)
    bulk_filled(3)
    shown = page(client)
    assert "Catching up: 4 runs" in shown and "4 at a time (more wait behind them)" in shown
    assert derived_rows() == (0, 0)
    batches = 0
    while "Catching up" in shown:
        derived.catch_up()
        batches += 1
        shown = page(client)
    assert batches == 3 and SeriesRun.objects.count() == 9 and shown.count(BAD) == 3


def test_an_imports_pending_runs_are_still_called_imported(client, monkeypatch, import_bytes):
    from ..builders import records

    monkeypatch.setattr(derived, "INLINE_UP_TO", 10)
    import_bytes(records(12))
    shown = page(client)
    assert "12 runs imported since" in shown and "Catching up" not in shown


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_compares_what_the_page_queued(client, worker):  # noqa: F811
    """The view's commit sends the task through Redis to a Celery worker process, which files the runs."""
    bulk_filled(3)
    assert "Catching up: 9 runs" in page(client)
    deadline = time.monotonic() + 60
    while DerivedBacklog.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not DerivedBacklog.objects.exists(), "the worker did not catch up within 60 s"
    shown = page(client)
    assert shown.count(BAD) == 3 and "Catching up" not in shown and SeriesRun.objects.count() == 9
