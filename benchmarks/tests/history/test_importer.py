import io
from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from django.db import IntegrityError, connection, transaction

from benchmarks.history import importer, importer_rows, sqlite_batches
from benchmarks.history.exporter import export_lines
from benchmarks.models import FileImport, RejectedLine, RequestResult, Run
from benchmarks.tests.builders import DEMO_PATH, flat, jsonl
from benchmarks.tests.investigation import investigation_bytes, investigation_lines

pytestmark = pytest.mark.django_db

RUN_SNAPSHOT_FIELDS = [f.name for f in Run._meta.fields if f.name not in {"id", "created_at", "first_import"}]
REQUEST_SNAPSHOT_FIELDS = [f.name for f in RequestResult._meta.fields if f.name not in {"id", "run"}]


def snapshot() -> dict:
    runs = {r["key"]: r for r in Run.objects.values(*RUN_SNAPSHOT_FIELDS)}
    requests = sorted(
        RequestResult.objects.values_list("run__key", *REQUEST_SNAPSHOT_FIELDS), key=lambda r: (r[0], r[1])
    )
    return {"runs": runs, "requests": requests}


def test_the_demo_file_is_the_investigation():
    """The demo a new user's `make run` imports tells the story the suite asserts on: the same
    requests, fields and values, in the same order."""
    lines = [orjson.loads(line) for line in DEMO_PATH.read_bytes().splitlines()]
    assert lines == investigation_lines()
    assert [list(line) for line in lines] == [list(line) for line in investigation_lines()]


def test_the_investigation_imports_with_no_rejected_line(investigation):
    assert investigation.status == "imported"
    assert (investigation.n_read, investigation.n_imported, investigation.n_duplicate, investigation.n_rejected) == (
        11,
        11,
        0,
        0,
    )
    assert sorted(Run.objects.values_list("key", flat=True)) == [
        "c2-single",
        "c2-x3",
        "c3p-queue2",
        "c3p-single",
        "orig-single",
        "orig-x3",
    ]


def test_the_investigation_runs_carry_the_published_figures(investigation):
    orig = Run.objects.get(key="orig-x3")
    assert (orig.n_requests, orig.n_ok, orig.ctx_size, orig.parallel, orig.kv_unified) == (3, 0, 16384, 4, True)
    assert orig.effective_wall_s == 246 and orig.effective_wall_source == "derived"
    assert set(orig.requests.values_list("error_type", flat=True)) == {"context_exceeded"}
    c2 = Run.objects.get(key="c2-x3")
    assert (c2.n_ok, c2.tok_s_mean, c2.effective_wall_s, c2.effective_wall_source) == (3, 2.15, 615, "reported")
    c3p = Run.objects.get(key="c3p-single")
    assert (c3p.cache_type_k, c3p.kv_offload, c3p.flash_attn, c3p.vram_used_mib) == ("q8_0", True, "on", 15097)
    assert c3p.tok_s_mean == 25.7 and c3p.throughput_tok_s is None  # output tokens were not published


def test_identical_lines_of_a_run_are_separate_requests(investigation):
    assert RequestResult.objects.filter(run__key="orig-x3").count() == 3
    assert list(RequestResult.objects.filter(run__key="orig-x3").values_list("occurrence", flat=True)) == [0, 1, 2]


def test_importing_the_same_file_twice_adds_nothing(investigation, import_bytes):
    again = import_bytes(investigation_bytes())
    assert again.status == "imported"
    assert (again.n_imported, again.n_duplicate) == (0, 11)
    assert RequestResult.objects.count() == 11 and Run.objects.count() == 6


def test_the_database_refuses_a_second_copy_of_a_request(investigation):
    request = RequestResult.objects.filter(run__key="c2-x3").first()
    request.pk = None
    request.seq = 99
    with pytest.raises(IntegrityError), transaction.atomic():
        request.save()


def test_unknown_keys_are_kept_and_exported(investigation):
    request = RequestResult.objects.get(run__key="c2-single")
    assert request.extra == {"note": "post: 9,216 tokens per slot (3 x 3,072)"}
    exported = b"".join(export_lines(Run.objects.filter(key="c2-single")))
    assert b'"extra":{"note":"post: 9,216 tokens per slot (3 x 3,072)"}' in exported


def test_export_then_import_into_an_empty_database_reproduces_the_runs(investigation, import_bytes):
    before = snapshot()
    exported = b"".join(export_lines(Run.objects.all()))
    Run.objects.all().delete()
    result = import_bytes(exported, filename="export.jsonl")
    assert (result.status, result.n_imported, result.n_rejected) == ("imported", 11, 0)
    assert snapshot() == before
    assert b"".join(export_lines(Run.objects.all())) == exported


def test_reimporting_an_export_over_the_same_runs_adds_nothing(investigation, import_bytes):
    exported = b"".join(export_lines(Run.objects.all()))
    result = import_bytes(exported)
    assert (result.n_imported, result.n_duplicate) == (0, 11)


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        (b"{oops", "invalid JSON"),
        (b"[1, 2, 3]", "a line must hold a JSON object, not an array"),
        (b'{"run": "r9", "model": "m", "ok": true, "tok_s": NaN}', "NaN is not valid JSON"),
        (b'{"run": "r9", "model": "m", "ok": true, "tok_s": Infinity}', "Infinity is not valid JSON"),
        (b'{"run": "r9", "run": "r8", "model": "m", "ok": true}', "duplicate key 'run'"),
        (b'{"run": "r9", "model": "m", "ok": true, "tok_s": "fast"}', "wrong type: 'tok_s' must be a number"),
        (b'{"run": "r9", "model": "m", "ok": true, "prompt_tokens": -4}', "'prompt_tokens' must not be negative"),
        (b'{"run": "r9", "model": "m", "ok": -9223372036854775809}', "wrong type: 'ok' must be true or false"),
        (b'{"run": "r9", "ok": true}', "missing required field: 'model'"),
        (b'{"run": "r9", "model": "m"}', "missing required field: 'ok' or 'status'"),
        (b'{"run": "r9", "model": "caf\xc3", "ok": true}', "not valid UTF-8"),
        (b'{"run": "r9", "model": "m", "ok": true, "pad": "' + b"x" * 70_000 + b'"}', "line is longer than"),
    ],
)
def test_a_bad_line_rejects_the_whole_file_with_its_line_number(import_bytes, bad_line, reason):
    data = jsonl(flat(run="good-1"), flat(run="good-2")) + bad_line + b"\n" + jsonl(flat(run="good-3"))
    result = import_bytes(data)
    assert result.status == "rejected"
    assert (result.n_read, result.n_imported, result.n_rejected) == (4, 0, 1)
    rejected = result.rejected_lines.get()
    assert rejected.line_no == 3 and rejected.reason.startswith(reason)
    assert Run.objects.count() == 0 and RequestResult.objects.count() == 0


def test_every_rejected_line_is_recorded(import_bytes):
    data = jsonl(flat(), b"nope", flat(run="r2"), b"[]", flat(tok_s="x"))
    result = import_bytes(data)
    assert list(result.rejected_lines.values_list("line_no", flat=True)) == [2, 4, 5]
    assert result.rejected_lines.get(line_no=4).excerpt == "[]"
    assert Run.objects.count() == 0


def test_a_file_that_is_not_utf8_is_rejected(import_bytes):
    latin1 = '{"run": "r2", "model": "Grüße", "ok": true}'.encode("latin-1")
    result = import_bytes(jsonl(flat()) + latin1)
    assert result.status == "rejected"
    assert "not valid UTF-8" in result.rejected_lines.get().reason


def test_empty_lines_are_skipped_and_u2028_is_not_a_line_break(import_bytes):
    data = b"\n  \n" + jsonl(flat(error="a\u2028b", ok=False, status=503)) + b"\r\n\n" + jsonl(flat(run="r2"))
    result = import_bytes(data)
    assert (result.status, result.n_read, result.n_blank, result.n_imported) == ("imported", 2, 4, 2)
    assert RequestResult.objects.get(run__key="r1").error == "a\u2028b"


def test_lines_of_one_run_that_disagree_are_rejected(import_bytes):
    result = import_bytes(jsonl(flat(), flat(ctx_size=4096)))
    reason = result.rejected_lines.get().reason
    assert result.status == "rejected" and "'ctx_size' is 4096 here but 8192 on line 1" in reason


def test_a_field_missing_on_some_lines_of_a_run_is_taken_from_the_others(import_bytes):
    import_bytes(jsonl(flat(wall_s=...), flat(run_wall_s=12.0)))
    run = Run.objects.get(key="r1")
    assert (run.wall_s, run.effective_wall_s, run.n_requests) == (12.0, 12.0, 2)


def test_a_file_may_add_requests_to_a_stored_run(import_bytes):
    import_bytes(jsonl(flat(tok_s=10.0)))
    result = import_bytes(jsonl(flat(tok_s=10.0), flat(tok_s=30.0, ok=False, status=500, error="boom")))
    assert (result.n_imported, result.n_duplicate) == (1, 1)
    run = Run.objects.get(key="r1")
    assert (run.n_requests, run.n_ok, run.tok_s_mean) == (2, 1, 10.0)
    assert list(run.requests.values_list("seq", flat=True)) == [0, 1]


def test_a_file_that_describes_a_stored_run_differently_is_rejected(import_bytes):
    import_bytes(jsonl(flat()))
    result = import_bytes(jsonl(flat(run="new"), flat(model="other.gguf", tok_s=1.0)))
    assert result.status == "rejected"
    assert result.rejected_lines.get().reason.startswith("run 'r1' is already stored with 'model' = 'tiny.gguf'")
    assert not Run.objects.filter(key="new").exists() and RequestResult.objects.count() == 1


def test_an_import_that_fails_midway_stores_nothing(import_bytes, monkeypatch):
    # Single-thread path: the requests' INSERT fails after the runs' went in.
    monkeypatch.setattr(sqlite_batches, "available", lambda: False)
    real_insert = importer_rows.insert

    def insert_then_fail(model, columns, rows):
        real_insert(model, columns, rows)
        if model is RequestResult:
            raise OSError("disk full")

    monkeypatch.setattr(importer_rows, "insert", insert_then_fail)
    with pytest.raises(OSError):
        import_bytes(jsonl(flat(), flat(run="r2")))
    assert Run.objects.count() == 0 and RequestResult.objects.count() == 0
    assert FileImport.objects.count() == 0


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the second-thread path is SQLite's")
def test_an_import_whose_writer_thread_fails_midway_stores_nothing(import_bytes, monkeypatch):
    assert sqlite_batches.available(), "imports on SQLite store from the writer thread"
    # The second-thread path (SQLite): the second batch fails in the writer, after the first was written.
    monkeypatch.setattr(sqlite_batches, "MIN_BYTES", 0)
    monkeypatch.setattr(importer_rows, "INSERT_BATCH", 2)
    written = []

    class FailingWriter(sqlite_batches.BatchWriter):
        def execute(self, sql, rows):
            if len(written) == 2:
                raise OSError("disk full")
            super().execute(sql, rows)
            written.append(sql)

    monkeypatch.setattr(sqlite_batches, "BatchWriter", FailingWriter)
    with pytest.raises(OSError):
        import_bytes(jsonl(flat(), flat(run="r2"), flat(run="r3"), flat(run="r4")))
    assert len(written) == 2
    assert Run.objects.count() == 0 and RequestResult.objects.count() == 0
    assert FileImport.objects.count() == 0


def test_a_rejected_import_is_recorded_with_its_file_details(import_bytes):
    data = jsonl(flat(), b"{")
    result = import_bytes(data, filename="lab.jsonl")
    stored = FileImport.objects.get()
    assert (stored.filename, stored.size_bytes, stored.status) == ("lab.jsonl", len(data), "rejected")
    assert len(stored.sha256) == 64 and RejectedLine.objects.count() == 1
    assert result.pk == stored.pk


def test_it_streams_a_file_object_without_reading_it_whole(import_bytes, monkeypatch):
    monkeypatch.setattr("benchmarks.records.jsonl.CHUNK_BYTES", 64)
    records = [flat(run=f"run-{i}") for i in range(40)]
    result = import_bytes(jsonl(*records))
    assert (result.n_imported, result.n_runs) == (40, 40)


def test_many_runs_are_looked_up_in_batches(import_bytes, monkeypatch):
    monkeypatch.setattr(importer, "LOOKUP_BATCH", 7)
    records = [flat(run=f"run-{i}") for i in range(30)]
    import_bytes(jsonl(*records))
    again = import_bytes(jsonl(*records, flat(run="run-3", tok_s=1.0)))
    assert (again.n_imported, again.n_duplicate) == (1, 30)


def test_upload_like_file_objects_work():
    data = io.BytesIO(jsonl(flat()))
    result = importer.import_bench_file(data, filename="x", origin="upload", user=None)
    assert result.user is None and result.origin == "upload"


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        (b'{"run": "r9", "model": "m", "ok": true, "n": 100000000000000000000}', "a value cannot be stored"),
        (b'{"run": "r9", "model": "m", "ok": true, "wall_s": 1' + b"0" * 400 + b"}", "'wall_s' is too large"),
        (b'{"run": "r9", "model": "m\\ud800", "ok": true}', "'model' contains a lone surrogate"),
        (b'{"run": "r9", "model": "m", "ok": false, "error": "\\udfff"}', "'error' contains a lone surrogate"),
        (b'{"run": "r9", "model": "m", "ok": true, "x": "\\ud800"}', "a value cannot be stored"),
        (b'{"run": "r9", "model": "m", "ok": true, "x": ' + b"[" * 300 + b"]" * 300 + b"}", "a value cannot be"),
        (b'{"run": "r9", "model": "m", "ok": true, "x": 1' + b"0" * 5000 + b"}", "invalid JSON: Exceeds the limit"),
        (b'{"run": "r9", "model": "m", "ok": true, "ts": "9999-12-31T23:00:00-05:00"}', "'ts' is out of range"),
        (b'{"run": "r9", "model": "m", "ok": true, "ctx_size": 3000000000}', "'ctx_size' is too large"),
    ],
)
def test_values_python_reads_but_the_database_cannot_hold_are_rejected_not_crashed(import_bytes, bad_line, reason):
    result = import_bytes(jsonl(flat()) + bad_line + b"\n")
    assert result.status == "rejected"
    assert result.rejected_lines.get().reason.startswith(reason)
    assert Run.objects.count() == 0


def test_a_missing_source_agrees_with_a_stated_one(import_bytes):
    assert import_bytes(jsonl(flat(source="executed"), flat(tok_s=1.0))).status == "imported"
    assert Run.objects.get().source == "executed"
    assert import_bytes(jsonl(flat(tok_s=2.0))).n_imported == 1
    assert import_bytes(jsonl(flat(run="r2"))).status == "imported"
    assert Run.objects.get(key="r2").source == "imported"


def test_a_file_holding_only_a_bom_is_empty_not_invalid(import_bytes):
    result = import_bytes(b"\xef\xbb\xbf\n")
    assert (result.status, result.n_read, result.n_blank) == ("imported", 0, 1)


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 9, 18, 19, 2, 11, tzinfo=UTC),
        datetime(2026, 9, 18, 19, 2, 11, 123456, tzinfo=UTC),
        datetime(2026, 9, 18, 21, 2, 11, tzinfo=timezone(timedelta(hours=2))),
        None,
    ],
)
def test_the_datetime_shortcut_stores_what_django_would(value):
    assert importer_rows.datetime_adapter()(value) == connection.ops.adapt_datetimefield_value(value)
