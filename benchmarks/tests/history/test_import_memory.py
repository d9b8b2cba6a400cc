"""An import's memory is a constant plus one run, whatever the file's size and layout."""

import pytest
from django.db import IntegrityError
from django.test import Client
from django.urls import reverse

from benchmarks.history import importer, importer_rows, reader
from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.tests.builders import flat, jsonl, traced_import

pytestmark = pytest.mark.django_db


def import_peak_bytes(n_runs: int) -> int:
    """The most memory Python held at once while importing n_runs one-request runs."""
    result, peak = traced_import(jsonl(*(flat(run=f"{n_runs}-{i}") for i in range(n_runs))), "many.jsonl")
    assert (result.status, result.n_runs, result.n_imported) == ("imported", n_runs, n_runs)
    return peak


def test_the_memory_an_import_takes_does_not_grow_with_its_runs(small_batches):
    import_peak_bytes(10)  # the first import loads what every import shares
    peak_small, peak_large = import_peak_bytes(1_000), import_peak_bytes(4_000)

    # Holding every run, four times the runs took 3.3 to 4 times the memory. Bounded, it is 0.9 to
    # 1.5 times, depending on what earlier tests left cached (the test order is random).
    assert peak_large < 2 * peak_small, f"{peak_large:,} bytes for 4,000 runs, {peak_small:,} for 1,000"
    assert Run.objects.count() == RequestResult.objects.count() == 5_010


def test_the_lines_of_interleaved_runs_are_merged_in_file_order(import_bytes, small_batches):
    lines = []
    for i in range(3):
        lines.append(flat(run="a", tok_s=float(i), **({"run_wall_s": 9.0} if i == 2 else {})))
        lines.append(flat(run="b", tok_s=float(10 + i), ctx_size=... if i == 0 else 8192))
    result = import_bytes(jsonl(*lines, flat(run="a", tok_s=0.0)))

    assert (result.status, result.n_runs, result.n_imported) == ("imported", 2, 7)
    assert list(Run.objects.order_by("pk").values_list("key", "wall_s", "ctx_size", "n_requests")) == [
        ("a", 9.0, 8192, 4),
        ("b", None, 8192, 3),
    ]
    a_requests = RequestResult.objects.filter(run__key="a").order_by("seq")
    assert list(a_requests.values_list("seq", "tok_s", "occurrence")) == [
        (0, 0.0, 0),
        (1, 1.0, 0),
        (2, 2.0, 0),
        (3, 0.0, 1),  # the same request again: its second occurrence
    ]


def test_an_interleaved_line_that_describes_its_run_differently_is_rejected(import_bytes):
    data = jsonl(flat(run="a"), flat(run="b"), flat(run="a", tok_s=1.0), flat(run="b", gpu="RTX 3090"))
    result = import_bytes(data)

    assert (result.status, result.n_rejected) == ("rejected", 1)
    rejected = result.rejected_lines.get()
    assert rejected.line_no == 4
    assert rejected.reason.startswith("run 'b': 'gpu' is 'RTX 3090' here but 'RTX 4090' on line 2")
    assert rejected.excerpt.startswith('{"ts":"2026-10-01T12:00:00Z","run":"b"')
    assert Run.objects.count() == 0


def test_a_file_of_many_bad_lines_keeps_the_first_thousand_reasons_and_counts_the_rest(import_bytes):
    data = jsonl(flat(), *([b"{oops"] * 2_500), flat(run="r2"))
    result = import_bytes(data)

    assert (result.status, result.n_read, result.n_rejected) == ("rejected", 2_502, 2_500)
    kept = list(result.rejected_lines.values_list("line_no", flat=True))
    assert kept == list(range(2, 1_002))
    assert Run.objects.count() == 0
    page = Client().get(reverse("import-detail", args=[result.pk])).content.decode()
    assert "The first 1000 of 2500 rejected lines are kept with their reasons" in page


def test_requests_added_to_many_stored_runs_continue_each_run(import_bytes, small_batches, monkeypatch):
    monkeypatch.setattr(importer_rows, "INSERT_BATCH", 5)
    first = [flat(run=f"run-{i}", tok_s=float(k)) for i in range(12) for k in range(3)]
    import_bytes(jsonl(*first))
    again = import_bytes(jsonl(*first, *(flat(run=f"run-{i}", tok_s=99.0) for i in range(12))))

    assert (again.n_imported, again.n_duplicate, again.n_runs) == (12, 36, 12)
    run = Run.objects.get(key="run-7")
    assert list(run.requests.values_list("seq", "tok_s")) == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 99.0)]
    assert (run.n_requests, run.tok_s_max) == (4, 99.0)


def test_an_import_that_lost_a_race_is_retried_from_its_spilled_lines(import_bytes, monkeypatch):
    real_insert_new_runs = importer._insert_new_runs
    calls = []

    def lose_the_first_race(runs, file_import):
        calls.append(len(runs))
        real_insert_new_runs(runs, file_import)
        if len(calls) == 1:
            raise IntegrityError("UNIQUE constraint failed: benchmarks_run.key")

    monkeypatch.setattr(importer, "_insert_new_runs", lose_the_first_race)
    result = import_bytes(jsonl(flat(), flat(run="r2"), flat(tok_s=1.0)))

    assert calls == [2, 2]
    assert (result.status, result.n_imported, result.n_runs) == ("imported", 3, 2)
    assert FileImport.objects.get() == result and RequestResult.objects.count() == 3


def test_a_run_spilled_in_several_pieces_is_read_back_whole(import_bytes, monkeypatch):
    monkeypatch.setattr(reader, "SPILL_BATCH", 2)
    lines = [flat(tok_s=float(i), ctx_size=... if i < 4 else 8192) for i in range(5)]
    result = import_bytes(jsonl(*lines, flat(run="r2"), flat(tok_s=9.0)))

    assert (result.status, result.n_runs, result.n_imported) == ("imported", 2, 7)
    run = Run.objects.get(key="r1")
    assert (run.ctx_size, run.n_requests) == (8192, 6)
    assert list(run.requests.values_list("tok_s", flat=True)) == [0.0, 1.0, 2.0, 3.0, 4.0, 9.0]
