"""The common file is stored as it is read; any other is rolled back and read again the careful way."""

import io

import pytest

from benchmarks.history import importer
from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.tests.builders import flat, jsonl

pytestmark = pytest.mark.django_db


@pytest.fixture
def spills(monkeypatch):
    """The files that took the careful path (read_bench_file) during the test."""
    calls: list[int] = []
    read_bench_file = importer.read_bench_file

    def counted(*args, **kwargs):
        calls.append(1)
        return read_bench_file(*args, **kwargs)

    monkeypatch.setattr(importer, "read_bench_file", counted)
    return calls


def test_a_file_whose_runs_are_contiguous_is_stored_as_it_is_read(import_bytes, spills):
    result = import_bytes(jsonl(flat(run="a"), flat(run="a", tok_s=1.0), b"", flat(run="b")))

    assert (result.status, result.n_read, result.n_blank, result.n_runs, result.n_imported) == (
        "imported",
        3,
        1,
        2,
        3,
    )
    assert len(result.sha256) == 64 and result.size_bytes > 0
    again = import_bytes(jsonl(flat(run="a")))
    assert (again.status, again.n_imported, again.n_duplicate) == ("imported", 0, 1)
    assert spills == []


def test_a_run_that_comes_back_after_many_others_is_stored_once(import_bytes, small_batches, spills):
    # Run "a" is stored, batches later, before its second line is read: the import starts
    # over the careful way, and nothing of the first attempt is kept.
    others = [flat(run=f"x{i}") for i in range(350)]
    result = import_bytes(jsonl(flat(run="a"), *others, flat(run="a", tok_s=1.0)))

    assert (result.status, result.n_runs, result.n_imported, result.n_new_runs) == ("imported", 351, 352, 351)
    assert Run.objects.count() == 351 and FileImport.objects.count() == 1 and spills == [1]
    tok_s = RequestResult.objects.filter(run__key="a").order_by("seq").values_list("tok_s", flat=True)
    assert list(tok_s) == [40.0, 1.0]


def test_a_rejected_line_after_stored_batches_leaves_nothing_stored(import_bytes, small_batches, spills):
    others = [flat(run=f"x{i}") for i in range(350)]
    result = import_bytes(jsonl(*others, b'{"run": "y", "ok": NaN}'))

    assert (result.status, result.n_rejected, result.n_read) == ("rejected", 1, 351)
    assert "finite" in result.rejected_lines.get().reason
    assert Run.objects.count() == 0 and RequestResult.objects.count() == 0 and spills == [1]


class _Pipe(io.RawIOBase):
    """A stream that can be read once, like stdin."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def test_a_stream_that_cannot_be_read_twice_takes_the_careful_path(spills):
    good = importer.import_bench_file(_Pipe(jsonl(flat(run="a"), flat(run="b"))), filename="-", origin="command")
    bad = importer.import_bench_file(_Pipe(jsonl(flat(run="c"), b"{oops")), filename="-", origin="command")

    assert (good.status, good.n_runs, good.n_imported) == ("imported", 2, 2)
    assert (bad.status, bad.n_rejected) == ("rejected", 1)
    assert not Run.objects.filter(key="c").exists() and spills == [1, 1]
