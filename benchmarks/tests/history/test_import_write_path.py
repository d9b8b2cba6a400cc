"""What an import's writes cost, beyond what they store: the report of its new runs
reads them down an index, a run's start is formatted once, batches are laid out from columns and the
connection's page cache is larger only while it imports. (That the rows stored are the very rows stored
before: bench/import_write_identity.py; the runs table's indexes and what uses each: bench/run_index_use.py.)"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext

from benchmarks.history import importer, importer_rows, sqlite_batches
from benchmarks.models import Run
from benchmarks.tests.builders import flat, jsonl

pytestmark = pytest.mark.django_db

on_sqlite = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's plan, page cache and writer thread")


def _plan(sql: str, params: object) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return [str(row[-1]) for row in cursor.fetchall()]


def test_an_import_finds_its_new_runs_down_the_first_import_index(import_bytes):
    # Run's default order (newest first) made SQLite walk run_started_idx over every stored run to find
    # an import's own runs: a cost that grew with the history, paid by every import.
    import_bytes(jsonl(*(flat(run=f"old-{i}") for i in range(30))))
    with CaptureQueriesContext(connection) as captured:
        result = import_bytes(jsonl(*(flat(run=f"new-{i}") for i in range(3))))
    assert (result.status, result.n_new_runs) == ("imported", 3)
    [query] = [q for q in captured.captured_queries if 'WHERE "benchmarks_run"."first_import_id" = ' in q["sql"]]
    assert "ORDER BY" not in query["sql"]
    if connection.vendor == "sqlite":
        plan = _plan(query["sql"], ())  # the captured SQL holds its value
        assert any("first_import_id=?" in step for step in plan), plan
        assert not any(step.startswith("SCAN") for step in plan), plan


@on_sqlite
def test_a_runs_start_taken_from_its_request_is_formatted_once(import_bytes, monkeypatch):
    monkeypatch.setattr(sqlite_batches, "MIN_BYTES", 0)  # the second thread's batches, whatever the size
    real = importer_rows.datetime_adapter
    adapted: list[object] = []

    def counting_adapter():
        adapt = real()
        return lambda value: adapted.append(value) or adapt(value)

    monkeypatch.setattr(importer_rows, "datetime_adapter", counting_adapter)
    n = 300
    lines = [flat(run=f"r{i}", ts=f"2026-10-01T12:{i // 60:02d}:{i % 60:02d}Z") for i in range(n)]
    result = import_bytes(jsonl(*lines))

    assert (result.status, result.n_new_runs, result.n_imported) == ("imported", n, n)
    starts = sorted(Run.objects.values_list("started_at", flat=True))
    assert len(set(starts)) == n and starts[0].minute == 0 and starts[-1].second == 59
    # each request's timestamp once; its run's start, the same instant, looked up; the batch's created_at
    # once (before: every run's start formatted again, 2n + 1)
    stamps = [value for value in adapted if value is not None]
    assert len(stamps) == n + 1 and len(set(stamps)) == n + 1


def test_column_statements_bind_what_row_statements_bind(monkeypatch):
    monkeypatch.setattr(sqlite_batches, "ROWS_PER_STATEMENT", 3)
    monkeypatch.setattr(sqlite_batches, "_max_values", lambda: 32_766)
    statement = sqlite_batches.RowsStatement("INSERT INTO t (a, b) VALUES {rows}", "(%s, %s)")
    rows = [(i, f"v{i}") for i in range(7)]

    by_columns = statement.column_statements([[a for a, _ in rows], [b for _, b in rows]])

    assert by_columns == statement.statements(rows)
    assert [len(values) for _, values in by_columns] == [6, 6, 2]
    assert by_columns[0] == ("INSERT INTO t (a, b) VALUES (%s, %s), (%s, %s), (%s, %s)", [0, "v0", 1, "v1", 2, "v2"])


def test_column_statements_refuse_columns_that_are_not_one_row_each():
    statement = sqlite_batches.RowsStatement("INSERT INTO t (a, b) VALUES {rows}", "(%s, %s)")
    with pytest.raises(ValueError, match="different lengths"):
        statement.column_statements([[1, 2], [3]])
    with pytest.raises(ValueError, match="1 columns for rows of 2 values"):
        statement.column_statements([[1, 2]])


def _cache_size() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        return int(cursor.fetchone()[0])


@on_sqlite
def test_an_import_has_a_larger_page_cache_and_leaves_the_connections_own(import_bytes, monkeypatch):
    own = _cache_size()
    assert -own < sqlite_batches.IMPORT_CACHE_KIB  # SQLite's default (-2000: 2,000 KiB)
    during = []
    real = importer._import_as_read

    def spy(*args, **kwargs):
        during.append(_cache_size())
        return real(*args, **kwargs)

    monkeypatch.setattr(importer, "_import_as_read", spy)
    assert import_bytes(jsonl(flat())).status == "imported"
    assert during == [-sqlite_batches.IMPORT_CACHE_KIB]
    assert _cache_size() == own

    with pytest.raises(RuntimeError), sqlite_batches.page_cache(sqlite_batches.IMPORT_CACHE_KIB):
        raise RuntimeError("an import that fails")
    assert _cache_size() == own


@on_sqlite
def test_a_connection_with_a_larger_cache_keeps_it():
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size = 100000")  # pages: larger than IMPORT_CACHE_KIB
    try:
        with sqlite_batches.page_cache(sqlite_batches.IMPORT_CACHE_KIB):
            assert _cache_size() == 100000
        assert _cache_size() == 100000
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA cache_size = -2000")


@on_sqlite
def test_the_writer_thread_gives_each_request_its_runs_id_not_a_lookup_of_its_key(import_bytes, monkeypatch):
    # SQLite looked each request's run up by its key in the key's unique index (a third of a request
    # INSERT); the writer reads the ids of the runs stored since it last looked in one range instead.
    monkeypatch.setattr(sqlite_batches, "MIN_BYTES", 0)
    monkeypatch.setattr(importer_rows, "INSERT_BATCH", 6)  # several batches: ids learned batch by batch
    monkeypatch.setattr("benchmarks.history.reader.RUN_PIECE", 4)  # and a run whose pieces span them
    import_bytes(jsonl(*(flat(run=f"old-{i}") for i in range(5))))  # runs stored before, not this import's
    ran: list[tuple[str, list[object]]] = []
    real = sqlite_batches.BatchWriter.execute
    monkeypatch.setattr(
        sqlite_batches.BatchWriter,
        "execute",
        lambda self, sql, values: ran.append((sql, values)) or real(self, sql, values),
    )
    lines = [flat(run=f"r{i // 3}", tok_s=float(i)) for i in range(30)] + [
        flat(run="big", tok_s=float(i)) for i in range(11)
    ]

    result = import_bytes(jsonl(*lines))

    assert (result.status, result.n_new_runs, result.n_imported) == ("imported", 11, 41)
    inserts = [(sql, values) for sql, values in ran if sql.startswith('INSERT INTO "benchmarks_requestresult"')]
    assert len(inserts) > 3 and not any("SELECT" in sql for sql, _ in inserts)
    ids = dict(Run.objects.values_list("key", "pk"))
    for run in Run.objects.filter(first_import=result):
        assert list(run.requests.order_by("seq").values_list("run_id", flat=True)) == [ids[run.key]] * run.n_requests
    assert Run.objects.get(key="big").n_requests == 11


@on_sqlite
def test_a_request_whose_run_the_writer_cannot_find_fails_the_batch_as_a_database_error(db):
    # an IntegrityError, as the key lookup's NULL run was: the file then takes the careful path
    keys = sqlite_batches.RunKeys(2)
    insert = 'INSERT INTO "benchmarks_requestresult" ("run_id", "seq") VALUES (%s, %s)'
    with (
        pytest.raises(IntegrityError, match="no run 'nowhere' is stored"),
        sqlite_batches.BatchWriter("benchmarks_run") as writer,
    ):
        writer.put([(insert, ["nowhere", 0], keys)])
        writer.finish()


@on_sqlite
def test_the_writer_runs_with_a_short_switch_interval_and_leaves_the_processs_own(import_bytes, monkeypatch):
    # The writer takes the GIL back for every statement's values; with Python's 5 ms it waited that long
    # for the reader each time. Short while a writer runs, the process's own again after, even on an error.
    import sys

    monkeypatch.setattr(sqlite_batches, "MIN_BYTES", 0)
    seen: list[float] = []
    real = sqlite_batches.BatchWriter.execute
    monkeypatch.setattr(
        sqlite_batches.BatchWriter,
        "execute",
        lambda self, sql, values: seen.append(sys.getswitchinterval()) or real(self, sql, values),
    )
    own = sys.getswitchinterval()
    assert own > sqlite_batches.SWITCH_INTERVAL_S

    assert import_bytes(jsonl(*(flat(run=f"r{i}") for i in range(20)))).status == "imported"
    assert seen and set(seen) == {sqlite_batches.SWITCH_INTERVAL_S}
    assert sys.getswitchinterval() == own

    keys = sqlite_batches.RunKeys(2)
    insert = 'INSERT INTO "benchmarks_requestresult" ("run_id", "seq") VALUES (%s, %s)'
    with pytest.raises(IntegrityError), sqlite_batches.BatchWriter("benchmarks_run") as writer:
        writer.put([(insert, ["nowhere", 0], keys)])
        writer.finish()
    assert sys.getswitchinterval() == own
