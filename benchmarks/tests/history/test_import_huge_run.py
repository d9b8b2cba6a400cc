"""A run of more requests than reader.RUN_PIECE is read, checked and stored a piece at a time.

Every way a file is stored (the writer thread, as read in one thread, the careful path) stores a
run in pieces exactly as it stores the run read whole, floats bit for bit: its requests, their
occurrences and inter-token latencies, the values its later lines fill, the summary that ends it,
its aggregates. A run read again adds nothing; a run that grows gains only its new requests; a
later piece that contradicts its run or the stored run rejects the whole file. And the memory of
one run's import no longer grows with the run.
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from benchmarks.history import importer, reader, sqlite_batches
from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.records.metrics import RunTally, summarize
from benchmarks.records.schema import SCHEMA_V2
from benchmarks.tests.builders import flat, jsonl, stored_rows, traced_import

pytestmark = pytest.mark.django_db

PIECE = 7  # requests a piece in these tests (RUN_PIECE is 5,000)
WHOLE = 10**9  # no run is split


def _v2(run: dict[str, Any], **record: Any) -> dict[str, Any]:
    return {"schema": SCHEMA_V2, "run": run, **record}


def huge_file(n: int, *, rng: random.Random | None = None) -> bytes:
    """Small runs around two large ones: a flat run of n requests whose gpu and wall time its later lines
    give, with identical requests in it, and a kvlab.bench/2 run of n requests with latencies and its
    summary at the end."""
    rng = rng or random.Random(5)
    lines: list[dict[str, Any]] = [flat(run="before", tok_s=1.0), flat(run="before", tok_s=2.0)]
    for i in range(n):
        later = i >= min(PIECE + 2, n - 2)  # in the second piece, where there is one
        lines.append(
            flat(
                run="big-flat",
                gpu="RTX 4090" if later else ...,
                run_wall_s=123.5 if i == n - 1 else ...,
                tok_s=float(i % 5) if i % 3 == 0 else rng.uniform(0, 100),  # every third repeats one of five
                elapsed_s=0.5 if i % 3 == 0 else rng.uniform(0.1, 9.0),
                ok=i % 11 != 4,
                status=200 if i % 11 != 4 else 500,
                error=None if i % 11 != 4 else "Context size has been exceeded",
            )
        )
    run = {"id": "big-v2", "model": "m.gguf", "tool": {"name": "vllm", "version": "0.9", "format": "x"}}
    for i in range(n):
        itl = [rng.uniform(0.001, 0.05) for _ in range(rng.randint(0, 4))]
        request = {
            "ok": True,
            "ts": f"2026-10-01T12:{i // 60 % 60:02d}:{i % 60:02d}Z",
            "ttft_s": rng.uniform(0.01, 0.5),
            "elapsed_s": rng.uniform(0.5, 3.0),
            "output_tokens": rng.randint(1, 50),
            "itl_s": itl,
        }
        lines.append(_v2(run if i == 0 else {"id": "big-v2", "model": "m.gguf"}, request=request))
    lines.append(_v2({"id": "big-v2", "model": "m.gguf"}, summary={"n_requests": n, "n_ok": n, "duration_s": 42.0}))
    lines.append(flat(run="after"))
    return jsonl(*lines)


PATHS = ["writer thread", "in this thread", "careful"]


def import_by(path: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[bytes], FileImport]:
    """An import that takes the given path."""
    if path == "writer thread":
        if connection.vendor != "sqlite":
            pytest.skip("the second-thread path is SQLite's")
        monkeypatch.setattr(sqlite_batches, "MIN_BYTES", 0)
    else:
        monkeypatch.setattr(sqlite_batches, "available", lambda: False)

    def run(data: bytes) -> FileImport:
        relabel = (lambda error: error) if path == "careful" else None  # a joined stream is read carefully
        return importer.import_bench_file(io.BytesIO(data), filename="huge.jsonl", origin="command", relabel=relabel)

    return run


def counts(result: FileImport) -> tuple[Any, ...]:
    return (
        result.status,
        result.n_runs,
        result.n_new_runs,
        result.n_imported,
        result.n_duplicate,
        result.n_summaries,
        result.n_rejected,
    )


def imported_both_ways(
    monkeypatch: pytest.MonkeyPatch, path: str, files: list[bytes]
) -> tuple[list[tuple[Any, ...]], tuple[Any, ...], tuple[Any, ...]]:
    """Import files in turn with runs in pieces, then again into an empty history with each run
    whole: each import's counts both ways, and what was stored both ways (asserted the same)."""
    do_import = import_by(path, monkeypatch)
    stored = []
    results: list[list[tuple[Any, ...]]] = []
    for piece in (PIECE, WHOLE):
        monkeypatch.setattr(reader, "RUN_PIECE", piece)
        Run.objects.all().delete()
        FileImport.objects.all().delete()
        results.append([counts(do_import(data)) for data in files])
        stored.append(stored_rows())
    in_pieces, whole = results
    assert in_pieces == whole
    assert stored[0][0] == stored[1][0], "runs stored differently"
    assert stored[0][1] == stored[1][1], "requests stored differently"
    return in_pieces, stored[0][0], stored[0][1]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n", [PIECE - 1, PIECE, 3 * PIECE, 3 * PIECE + 4])
def test_a_run_stored_in_pieces_is_stored_as_the_run_read_whole(monkeypatch, path, n):
    results, runs, requests = imported_both_ways(monkeypatch, path, [huge_file(n)])

    assert results == [("imported", 4, 4, 2 * n + 3, 0, 1, 0)]
    big = Run.objects.get(key="big-flat")
    assert (big.gpu, big.wall_s, big.n_requests) == ("RTX 4090", 123.5, n)  # the values its last lines gave
    assert big.n_ok == sum(i % 11 != 4 for i in range(n))
    occurrences = list(big.requests.order_by("seq").values_list("occurrence", flat=True))
    assert max(occurrences) == (n - 1) // 15  # an identical request again, across pieces
    v2 = Run.objects.get(key="big-v2")
    assert (v2.n_requests, v2.wall_s, v2.summary["duration_s"]) == (n, None, 42.0)
    assert v2.requests.exclude(itl_s=None).count() > 0


@pytest.mark.parametrize("path", PATHS)
def test_a_run_in_pieces_read_again_adds_nothing_and_grown_gains_only_its_new_requests(monkeypatch, path):
    n = 4 * PIECE + 3
    grown = huge_file(n)
    lines = grown.splitlines(keepends=True)
    first_part = b"".join(lines[: 2 + 2 * PIECE + 1])  # "before", then the first 2 pieces and 1 of big-flat

    results, _, _ = imported_both_ways(monkeypatch, path, [first_part, first_part, grown, grown])

    assert results[0] == ("imported", 2, 2, 2 * PIECE + 3, 0, 0, 0)
    assert results[1] == ("imported", 2, 0, 0, 2 * PIECE + 3, 0, 0)
    assert results[2] == ("imported", 4, 2, 2 * n + 3 - (2 * PIECE + 3), 2 * PIECE + 3, 1, 0)
    assert results[3] == ("imported", 4, 0, 0, 2 * n + 4, 0, 0)  # the summary too is read again
    big = Run.objects.get(key="big-flat")
    assert (big.n_requests, big.wall_s, big.gpu) == (n, 123.5, "RTX 4090")
    assert list(big.requests.order_by("seq").values_list("seq", flat=True)) == list(range(n))


@pytest.mark.parametrize("path", PATHS)
def test_two_large_runs_whose_lines_alternate_are_each_stored_whole(monkeypatch, path):
    # Interleaved runs take the careful path whichever path was tried: each run's lines are merged in
    # line order from the spill file, a piece at a time.
    lines = []
    for i in range(3 * PIECE + 2):
        lines.append(flat(run="a", tok_s=float(i), elapsed_s=0.5 + i))
        lines.append(flat(run="b", tok_s=float(i % 4), elapsed_s=1.0, ctx_size=... if i < 2 * PIECE else 8192))

    results, _, _ = imported_both_ways(monkeypatch, path, [jsonl(*lines)])

    assert results == [("imported", 2, 2, 2 * (3 * PIECE + 2), 0, 0, 0)]
    a, b = Run.objects.get(key="a"), Run.objects.get(key="b")
    assert (a.n_requests, b.n_requests, b.ctx_size) == (3 * PIECE + 2, 3 * PIECE + 2, 8192)
    assert list(a.requests.order_by("seq").values_list("tok_s", flat=True)) == [float(i) for i in range(3 * PIECE + 2)]
    assert list(b.requests.order_by("seq").values_list("occurrence", flat=True)) == [
        i // 4 for i in range(3 * PIECE + 2)
    ]


@pytest.mark.parametrize("path", PATHS)
def test_a_later_piece_that_contradicts_its_run_rejects_the_whole_file(monkeypatch, path):
    do_import = import_by(path, monkeypatch)
    monkeypatch.setattr(reader, "RUN_PIECE", PIECE)
    lines = huge_file(3 * PIECE).splitlines(keepends=True)
    lines.insert(2 + 2 * PIECE + 3, jsonl(flat(run="big-flat", gpu="RTX 3090")))  # in the third piece

    result = do_import(b"".join(lines))

    assert (result.status, result.n_rejected) == ("rejected", 1)
    rejected = result.rejected_lines.get()
    assert rejected.line_no == 2 + 2 * PIECE + 4
    assert rejected.reason.startswith("run 'big-flat': 'gpu' is 'RTX 3090' here but 'RTX 4090' on line 12")
    assert Run.objects.count() == RequestResult.objects.count() == 0


@pytest.mark.parametrize("path", PATHS)
def test_a_later_piece_that_contradicts_the_stored_run_rejects_the_whole_file(monkeypatch, path):
    do_import = import_by(path, monkeypatch)
    monkeypatch.setattr(reader, "RUN_PIECE", PIECE)
    stored = jsonl(*(flat(run="big", gpu="RTX 4090", tok_s=float(i)) for i in range(3 * PIECE)))
    assert do_import(stored).status == "imported"
    before = stored_rows()
    # the same run, whose gpu only its third piece gives, and differently
    again = jsonl(
        *(flat(run="big", gpu=... if i < 2 * PIECE else "RTX 3090", tok_s=float(i)) for i in range(3 * PIECE))
    )

    result = do_import(again)

    assert (result.status, result.n_rejected) == ("rejected", 1)
    assert "is already stored with 'gpu' = 'RTX 4090'; this file says 'RTX 3090'" in result.rejected_lines.get().reason
    assert stored_rows() == before


def test_a_tally_in_pieces_gives_what_summarize_gives_bit_for_bit():
    rng = random.Random(3)
    for n in (0, 1, 2, 13, 500):
        rows, itl = [], []
        for _ in range(n):
            ok = rng.random() < 0.8
            rows.append(
                (
                    None,
                    ok,
                    200,
                    None,
                    None,
                    rng.choice([None, 5, 100]),
                    rng.choice([None, -1, 10]),
                    rng.choice([None, 0, 1, 2, 50]) if rng.random() < 0.9 else None,
                    rng.choice([None, rng.random() * 100, 0.0]),
                    rng.choice([None, rng.random() * 10, -0.0, 0.0]),
                    rng.choice([None, rng.random()]),
                )
            )
            itl.append(rng.choice([None, (), tuple(rng.random() for _ in range(3))]))
        for wall in (None, 12.5):
            tally = RunTally()
            for i in range(0, n, 7):
                tally.add(rows[i : i + 7], itl[i : i + 7])
            pieces, whole = tally.result(wall), summarize(rows, wall, itl)
            assert [struct.pack("<d", v) if type(v) is float else v for v in pieces] == [
                struct.pack("<d", v) if type(v) is float else v for v in whole
            ], n


def _import_peak(n: int) -> int:
    lines = (flat(run="one", tok_s=float(i % 997), elapsed_s=float(i % 13)) for i in range(n))
    result, peak = traced_import(jsonl(*lines), "one-run.jsonl")
    assert (result.status, result.n_runs, result.n_imported) == ("imported", 1, n)
    return peak


def test_the_memory_of_one_runs_import_does_not_grow_with_the_run(monkeypatch, small_batches):
    monkeypatch.setattr(reader, "RUN_PIECE", 100)
    _import_peak(10)  # the first import loads what every import shares
    Run.objects.all().delete()
    small = _import_peak(1_000)
    Run.objects.all().delete()
    large = _import_peak(8_000)

    # Read whole, eight times the requests took about eight times the memory (each request's record
    # and row). In pieces what grows is the run's tally and occurrences: tens of bytes a request.
    assert large < 2 * small, f"{large:,} bytes for one run of 8,000 requests, {small:,} for 1,000"
    assert Run.objects.get().n_requests == RequestResult.objects.count() == 8_000
