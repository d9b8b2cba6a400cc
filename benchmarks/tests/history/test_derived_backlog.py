"""A large import leaves its runs to a worker (history.derived): the import commits without counting
them into the timeline's buckets and the regression baselines, the pages say what they do not count
yet, and a catch-up (a real Celery worker on a real Redis, or import_bench from the shell) counts
them exactly as a rebuild from the runs would."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from benchmarks.charts import timeline_data
from benchmarks.history import derived
from benchmarks.models import BaselineComparison, DerivedBacklog, Run, SeriesRun, TimelineBucket
from benchmarks.tests.builders import flat, jsonl, record_lines, records

from ..timeline_buckets import assert_same, reference, stored

pytestmark = pytest.mark.django_db


def derived_tables() -> tuple[Any, ...]:
    """What the derived tables hold, comparable across a catch-up and a rebuild."""
    return (
        stored(),
        sorted(SeriesRun.objects.values_list("run_id", "series_key", "label", "server_pk")),
        sorted(
            BaselineComparison.objects.values_list(
                "family", "latest_run_id", "window_size", "metric", "change", "baseline"
            )
        ),
    )


@pytest.fixture
def deferred(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(derived, "INLINE_UP_TO", 10)  # an import of more than 10 runs is "large"


def test_a_small_import_is_counted_in_its_own_transaction(import_bytes):
    import_bytes(records(10))
    assert not DerivedBacklog.objects.exists()
    assert_same(stored(), reference())
    assert SeriesRun.objects.count() == Run.objects.count() == 10


def test_a_large_import_commits_first_and_a_catch_up_counts_its_runs_as_a_rebuild_would(
    import_bytes, deferred, django_capture_on_commit_callbacks
):
    import_bytes(records(20, prefix="old"))  # counted later too: the baselines compare new runs with these
    derived.catch_up()
    with django_capture_on_commit_callbacks() as callbacks:
        result = import_bytes(records(40))
    assert len(callbacks) == 1  # the worker is asked once the import commits
    new = sorted(Run.objects.filter(first_import=result).values_list("pk", flat=True))
    entry = DerivedBacklog.objects.get()
    assert (entry.first_run_id, entry.last_run_id, entry.n_runs) == (new[0], new[-1], 40)
    assert not SeriesRun.objects.filter(run_id__in=new).exists()  # not counted by the import
    assert sum(b["runs"] for k, b in stored().items() if k[0] == 3600) == 20
    assert derived.pending()[0] == 40

    assert derived.catch_up() == 40
    assert not DerivedBacklog.objects.exists() and derived.pending() == (0, None)
    caught_up = derived_tables()
    assert_same(caught_up[0], reference())
    derived.rebuild_all()
    assert derived_tables() == caught_up


def test_a_large_import_that_adds_to_stored_runs_leaves_them_too(import_bytes, deferred):
    first = record_lines(12)
    import_bytes(jsonl(*first))
    derived.catch_up()
    import_bytes(jsonl(*({**line, "ts": "2026-10-01T05:00:00Z", "ok": False} for line in first[::2])))
    entry = DerivedBacklog.objects.get()  # no new run: the 12 stored runs it added a failed request to
    assert entry.first_run_id is None and len(entry.run_ids) == 12 and entry.n_runs == 12
    derived.catch_up()
    assert_same(stored(), reference())  # r0..r11 gained a failed request each: their buckets recounted


def test_the_pages_say_how_many_runs_they_do_not_count_yet(client, import_bytes, deferred, monkeypatch):
    monkeypatch.setattr(timeline_data, "RAW_MAX", 5)  # the timeline draws its overview from the buckets
    import_bytes(records(12, prefix="old"))
    derived.catch_up()
    import_bytes(records(30))
    since = DerivedBacklog.objects.get().created_at.strftime("%Y-%m-%d %H:%M:%S")
    timeline = client.get(reverse("chart-timeline"), {"group": "label"}).content.decode()
    assert f"30 runs imported since {since} UTC are not counted here yet" in timeline
    assert "adding them to this overview" in timeline
    regressions = client.get(reverse("chart-regressions")).content.decode()
    assert f"30 runs imported since {since} UTC are not counted here yet" in regressions
    assert "stored by neither an import nor a job" not in regressions  # the worker files them, not the page
    assert not SeriesRun.objects.filter(run__key__startswith="r").exists()  # the GET filed nothing
    derived.catch_up()
    for url in ("chart-timeline", "chart-regressions"):
        assert "not counted here yet" not in client.get(reverse(url), {"group": "label"}).content.decode()


def test_import_bench_from_the_shell_catches_up_and_says_so(tmp_path, deferred):
    path = tmp_path / "big.jsonl"
    path.write_bytes(records(25))
    out, err = io.StringIO(), io.StringIO()
    call_command("import_bench", str(path), "--json", stdout=out, stderr=err)
    assert out.getvalue().count("\n") == 1  # one JSON object for the one input, nothing else
    assert "timeline and regressions brought up to date: 25 runs in" in err.getvalue()
    assert not DerivedBacklog.objects.exists() and SeriesRun.objects.count() == 25


def test_rebuild_all_settles_what_was_pending(import_bytes, deferred):
    import_bytes(records(15))
    derived.rebuild_all()
    assert not DerivedBacklog.objects.exists()
    assert_same(stored(), reference())


def test_with_no_broker_the_import_stands_and_its_runs_wait_for_the_beat(
    import_bytes, deferred, django_capture_on_commit_callbacks, monkeypatch, caplog
):
    from benchmarks import enqueue

    def refused(**_: Any) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(enqueue, "catch_up_derived", refused)
    with django_capture_on_commit_callbacks(execute=True):
        result = import_bytes(records(11))
    for thread in threading.enumerate():  # the import returned without waiting for the broker
        if thread.name == derived.PUBLISHER:
            thread.join(10)
    assert result.status == "imported" and Run.objects.count() == 11
    assert DerivedBacklog.objects.get().n_runs == 11
    assert "could not queue the catch-up (ConnectionRefusedError)" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_catches_up_just_after_the_commit(worker, import_bytes, monkeypatch):  # noqa: F811
    """The message goes through Redis to a Celery worker process, which counts the runs in the database."""
    monkeypatch.setattr(derived, "INLINE_UP_TO", 10)
    import_bytes(records(30))  # its own transaction: committed, then the worker is asked
    deadline = time.monotonic() + 60
    while DerivedBacklog.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not DerivedBacklog.objects.exists(), "the worker did not catch up within 60 s"
    assert SeriesRun.objects.count() == 30
    assert_same(stored(), reference())
    assert TimelineBucket.objects.exists()


def test_a_run_an_import_moves_leaves_its_old_buckets(import_bytes):
    """An earlier request moves a stored run's start to another hour; a filled label to another line."""
    import_bytes(jsonl(flat(run="x", label="", ts="2026-10-05T10:30:00Z"), flat(run="y", ts="2026-10-05T10:40:00Z")))
    assert_same(stored(), reference())
    import_bytes(jsonl(flat(run="x", label="", ts="2026-10-03T01:00:00Z", ok=False)))
    assert Run.objects.get(key="x").started_at.day == 3
    assert_same(stored(), reference())  # counted on the 3rd, no longer on the 5th


def test_a_run_deleted_in_the_admin_leaves_its_buckets(admin_client, import_bytes):
    import_bytes(records(6))
    one, *rest = Run.objects.order_by("pk")
    response = admin_client.post(reverse("admin:benchmarks_run_delete", args=[one.pk]), {"post": "yes"})
    assert response.status_code == 302 and not Run.objects.filter(pk=one.pk).exists()
    assert_same(stored(), reference())
    response = admin_client.post(
        reverse("admin:benchmarks_run_changelist"),
        {"action": "delete_selected", "_selected_action": [r.pk for r in rest[:3]], "post": "yes"},
    )
    assert response.status_code == 302 and Run.objects.count() == 2
    assert_same(stored(), reference())
    assert SeriesRun.objects.count() == 2
