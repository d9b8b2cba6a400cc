"""On SQLite a file's new runs are written from a second thread, one JSON batch per statement
(sqlite_batches): it must store exactly what the single-thread path stores, roll back whole on
a failure, and leave a file that adds to stored runs to the path that can."""

from __future__ import annotations

import random
import sqlite3
import struct
from typing import Any

import pytest
from django.db import connection

from benchmarks.history import importer, importer_rows, sqlite_batches
from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.records.schema import MAX_INT, SCHEMA_V2
from benchmarks.tests.builders import flat, jsonl, stored_rows

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "sqlite", reason="the second-thread path is SQLite's"),
]


LABEL = 'ünïcødé ✓ \u2028 "quoted" back\\slash'
HARD_FLOATS = [
    5e-324,
    2.2250738585072011e-308,
    1.7976931348623157e308,
    0.1 + 0.2,
    1 / 3,
    9007199254740993.0,
    123456.78901234567,
    1e-7,
    0.0,
]


def _random_float(rng: random.Random) -> float:
    while True:
        value = abs(struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0])
        if value < 1e300:
            return value


def _lines(rng: random.Random) -> list[dict[str, Any] | bytes]:
    lines: list[dict[str, Any] | bytes] = []
    for i, value in enumerate(HARD_FLOATS):
        lines.append(flat(run=f"hard-{i}", elapsed_s=value, tok_s=min(value, 1e6), run_wall_s=value or None))
    for i in range(40):
        lines.append(
            flat(
                run=f"random-{i // 4}",
                elapsed_s=_random_float(rng),
                tok_s=rng.uniform(0, 1e6),
                ts=f"2026-10-01T12:{i % 60:02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}+02:00",
                prompt_tokens=rng.choice([0, 1, MAX_INT]),
                n_predict=rng.choice([-1, 0, MAX_INT]),
                output_tokens=rng.choice([None, 0, MAX_INT]),
            )
        )
    lines += [
        flat(run="text", label=LABEL, error="boom: \t\n ✗", ok=False, status=500),
        flat(run="text", label=LABEL, ok=False, status=None, error="Context size has been exceeded.", more=[1, 2.5]),
        flat(run="text", label=LABEL, ok=None, status=503, error=None),
        flat(run="epoch", ts=1_790_000_000.123456),
        {
            "schema": SCHEMA_V2,
            "run": {
                "id": "v2",
                "model": "m.gguf",
                "started_at": "9999-12-31T23:59:59Z",
                "tool": {"name": "vllm", "version": "0.9", "format": "vllm bench serve"},
                "provenance": {"model": "file", "server.flags": "declared"},
                "server": {"flags": "-c 4096 --kv-unified"},
                "workload": {"request_rate": 2.5},
            },
            "request": {"ok": True, "ttft_s": 0.012, "itl_s": [0.01, 5e-324, 0.3], "output_tokens": 3},
            "extra": {"note": "kept", "n": 2**63 - 1},
        },
        {
            "schema": SCHEMA_V2,
            "run": {"id": "v2", "model": "m.gguf"},
            "summary": {"n_requests": 3, "n_ok": 2, "n_failed": 1, "ttft_ms": {"p95": 12.5}, "duration_s": 1.5},
        },
    ]
    return lines


@pytest.fixture(autouse=True)
def small_files_too(monkeypatch):
    """The writer thread for files of any size (it starts at sqlite_batches.MIN_BYTES)."""
    monkeypatch.setattr(sqlite_batches, "MIN_BYTES", 0)


@pytest.fixture
def writes(monkeypatch):
    """The statements the writer thread ran."""
    ran: list[str] = []
    real = sqlite_batches.BatchWriter.execute

    def spy(self, sql, rows):
        ran.append(sql.split(" (")[0])
        real(self, sql, rows)

    monkeypatch.setattr(sqlite_batches.BatchWriter, "execute", spy)
    return ran


def test_an_import_on_sqlite_may_store_from_the_writer_thread():
    assert sqlite_batches.available()


def test_the_writer_thread_stores_exactly_what_the_single_thread_path_stores(import_bytes, writes, monkeypatch):
    data = jsonl(*_lines(random.Random(7)))

    threaded = import_bytes(data)
    assert threaded.status == "imported", [line.reason for line in threaded.rejected_lines.all()]
    assert {'INSERT INTO "benchmarks_run"', 'INSERT INTO "benchmarks_requestresult"'} <= set(writes)
    assert any(sql.startswith("UPDATE") for sql in writes)  # the v2 request's inter-token latencies
    by_thread = stored_rows()
    Run.objects.all().delete()
    FileImport.objects.all().delete()

    writes.clear()
    monkeypatch.setattr(sqlite_batches, "available", lambda: False)
    single = import_bytes(data)
    assert writes == []
    by_single = stored_rows()

    assert (threaded.n_runs, threaded.n_imported, threaded.n_summaries) == (
        single.n_runs,
        single.n_imported,
        single.n_summaries,
    )
    assert by_thread[0] == by_single[0]
    assert by_thread[1] == by_single[1]
    assert len(by_thread[1]) == threaded.n_imported == 54
    itl = RequestResult.objects.get(run__key="v2").itl_s
    assert itl == [0.01, 5e-324, 0.3]


def test_a_grown_file_adds_to_its_stored_runs_without_the_careful_path(import_bytes, writes, monkeypatch):
    spilled = []
    real_read = importer.read_bench_file
    monkeypatch.setattr(importer, "read_bench_file", lambda *a, **k: spilled.append(1) or real_read(*a, **k))
    first = [flat(run="a", tok_s=1.0), flat(run="b", tok_s=2.0)]
    import_bytes(jsonl(*first))
    assert writes  # the first import went through the writer thread

    grown = import_bytes(jsonl(*first, flat(run="b", tok_s=3.0), flat(run="c", tok_s=4.0)))

    assert (grown.status, grown.n_imported, grown.n_duplicate, grown.n_new_runs) == ("imported", 2, 2, 1)
    assert spilled == []
    assert list(RequestResult.objects.filter(run__key="b").order_by("seq").values_list("tok_s", flat=True)) == [
        2.0,
        3.0,
    ]
    assert FileImport.objects.count() == 2


def test_a_batch_the_writer_thread_cannot_store_sends_the_file_down_the_careful_path(import_bytes, writes, monkeypatch):
    # Another import storing the same run first fails the writer's INSERT on the run's key: the
    # attempt rolls back and the careful path stores the file (adding to what is stored), once.
    monkeypatch.setattr(importer_rows, "INSERT_BATCH", 1)
    real = sqlite_batches.BatchWriter.execute
    calls = []

    def refuse_the_third_run(self, sql, rows):
        if sql.startswith('INSERT INTO "benchmarks_run"'):
            calls.append(1)
            if len(calls) == 3:
                raise sqlite3.IntegrityError("UNIQUE constraint failed: benchmarks_run.key")
        real(self, sql, rows)

    monkeypatch.setattr(sqlite_batches.BatchWriter, "execute", refuse_the_third_run)
    result = import_bytes(jsonl(flat(run="a"), flat(run="b"), flat(run="c")))
    assert (result.status, result.n_runs, result.n_imported) == ("imported", 3, 3)
    assert len(calls) == 3  # the careful path stores in this thread, not the writer's
    assert Run.objects.count() == 3 and RequestResult.objects.count() == 3 and FileImport.objects.count() == 1


def test_a_small_file_is_stored_in_one_thread(import_bytes, writes, monkeypatch):
    monkeypatch.setattr(sqlite_batches, "MIN_BYTES", 1 << 20)
    result = import_bytes(jsonl(*(flat(run=f"r{i}") for i in range(100))))
    assert (result.status, result.n_runs) == ("imported", 100) and writes == []


def test_a_batch_leaves_out_the_columns_null_in_all_its_runs_and_stores_the_same(import_bytes, monkeypatch):
    """Batches of a few runs: some all lab runs (no tool summary, server, latencies: those columns
    are left out of their INSERT), some with them; every run as the single-thread path stores it."""
    monkeypatch.setattr(importer_rows, "INSERT_BATCH", 8)
    run_inserts: list[str] = []
    real = sqlite_batches.BatchWriter.execute

    def spy(self, sql, rows):
        if sql.startswith('INSERT INTO "benchmarks_run"'):
            run_inserts.append(sql)
        real(self, sql, rows)

    monkeypatch.setattr(sqlite_batches.BatchWriter, "execute", spy)
    data = jsonl(*_lines(random.Random(11)))
    threaded = import_bytes(data)
    assert threaded.status == "imported"
    assert len(run_inserts) > 3
    widths = {sql.count(",") for sql in run_inserts}
    assert len(widths) > 1  # batches of lab runs leave columns out; the v2 run's batch keeps more
    by_thread = stored_rows()
    Run.objects.all().delete()
    FileImport.objects.all().delete()
    monkeypatch.setattr(sqlite_batches, "available", lambda: False)
    import_bytes(data)
    assert by_thread[0] == stored_rows()[0]
    assert by_thread[1] == stored_rows()[1]


def test_only_nullable_columns_without_a_database_default_are_ever_left_out():
    fields = {f.column: f for f in Run._meta.concrete_fields}
    assert importer_rows._OMISSIBLE_RUN_COLUMNS  # a lab file's runs leave some out
    for column in importer_rows._OMISSIBLE_RUN_COLUMNS:
        assert fields[column].null and not fields[column].has_db_default(), column
    assert {"key", "model", "label", "provenance", "source", "n_requests"}.isdisjoint(
        importer_rows._OMISSIBLE_RUN_COLUMNS
    )


def test_the_writer_binds_each_batch_in_statements_of_many_rows(import_bytes, monkeypatch):
    """No JSON for SQLite to parse once per column: each statement binds ROWS_PER_STATEMENT rows (fewer
    where SQLite's limit on bound values says so), and takes the GIL back once."""
    ran: list[tuple[str, int]] = []
    real = sqlite_batches.BatchWriter.execute

    def spy(self, sql, values):
        ran.append((sql.split(" (")[0], len(values)))
        real(self, sql, values)

    monkeypatch.setattr(sqlite_batches.BatchWriter, "execute", spy)
    result = import_bytes(jsonl(*(flat(run=f"r{i}", tok_s=float(i)) for i in range(600))))

    assert (result.status, result.n_runs, result.n_imported) == ("imported", 600, 600)
    per = sqlite_batches.ROWS_PER_STATEMENT
    runs = [n for sql, n in ran if sql == 'INSERT INTO "benchmarks_run"']
    requests = [n for sql, n in ran if sql == 'INSERT INTO "benchmarks_requestresult"']
    assert len(runs) == len(requests) == -(-600 // per)
    assert sum(requests) == 600 * len(importer_rows.REQUEST_INSERT_COLUMNS)
    assert sorted(RequestResult.objects.values_list("tok_s", flat=True)) == [float(i) for i in range(600)]
