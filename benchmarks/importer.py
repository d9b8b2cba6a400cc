"""Store a bench_results.jsonl file: all of it in one transaction, or none of it.

Every attempt leaves a FileImport row: "imported" with its counts, or "rejected"
with each rejected line's number and reason (and no run or request stored).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict
from typing import IO, Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from .jsonl import LineError
from .metrics import RequestFacts, summarize
from .models import FileImport, RejectedLine, RequestResult, Run
from .reader import ParsedFile, ParsedRun, read_bench_file
from .records import RUN_FIELD_NAMES

log = logging.getLogger(__name__)

# Run model field for each canonical run field ("run_id" is the run's key).
RUN_COLUMNS = {name: ("key" if name == "run_id" else name) for name in RUN_FIELD_NAMES}
# Text columns store "" for absent values; the others store NULL.
BLANK_IS_NONE = {"label", "gpu", "cache_type_k", "cache_type_v", "flash_attn"}
INSERT_BATCH = 5_000
LOOKUP_BATCH = 500


class ConflictingRun(Exception):
    def __init__(self, rejects: list[LineError]) -> None:
        self.rejects = rejects


def import_bench_file(
    stream: IO[bytes],
    *,
    filename: str,
    origin: str,
    user: Any = None,
    max_line_bytes: int | None = None,
) -> FileImport:
    parsed = read_bench_file(stream, max_line_bytes=max_line_bytes or settings.KVLAB_IMPORT_MAX_LINE_BYTES)
    meta = {
        "filename": filename[:255],
        "sha256": parsed.sha256,
        "size_bytes": parsed.size_bytes,
        "origin": origin,
        "user": user if getattr(user, "is_authenticated", False) else None,
        "n_read": parsed.n_read,
        "n_blank": parsed.n_blank,
    }
    if parsed.rejects:
        return _record_rejection(meta, parsed.rejects)
    # Two imports of the same new runs can race; the loser's INSERT hits the unique
    # constraint, its transaction rolls back, and the retry finds them as duplicates.
    for attempt in range(3):
        try:
            with transaction.atomic():
                return _store(parsed, meta)
        except ConflictingRun as conflict:
            return _record_rejection(meta, conflict.rejects)
        except IntegrityError:
            if attempt == 2:
                raise
            log.info("import of %s raced another import; retrying", filename)
    raise AssertionError("unreachable")


def _record_rejection(meta: dict[str, Any], rejects: list[LineError]) -> FileImport:
    with transaction.atomic():
        file_import = FileImport.objects.create(**meta, status=FileImport.Status.REJECTED, n_rejected=len(rejects))
        RejectedLine.objects.bulk_create(
            (
                RejectedLine(file_import=file_import, line_no=e.line_no, reason=e.reason, excerpt=e.excerpt)
                for e in rejects
            ),
            batch_size=INSERT_BATCH,
        )
    return file_import


def _store(parsed: ParsedFile, meta: dict[str, Any]) -> FileImport:
    file_import = FileImport.objects.create(**meta, status=FileImport.Status.IMPORTED)
    existing = _existing_runs(parsed.runs)
    rejects = [e for run in parsed.runs.values() if run.key in existing for e in _conflicts(run, existing[run.key])]
    if rejects:
        raise ConflictingRun(rejects)

    new_runs = [_new_run(run, file_import) for key, run in parsed.runs.items() if key not in existing]
    Run.objects.bulk_create(new_runs, batch_size=LOOKUP_BATCH)
    run_ids = {run.key: run.pk for run in new_runs} | {key: run.pk for key, run in existing.items()}

    known = _known_requests([run.pk for run in existing.values()])
    rows: list[tuple[Any, ...]] = []
    touched_existing: list[Run] = []
    for key, parsed_run in parsed.runs.items():
        run_id = run_ids[key]
        seen, next_seq = known.get(run_id, (set(), 0))
        before = len(rows)
        for _line_no, record, occurrence in parsed_run.records:
            if (record.content_hash, occurrence) in seen:
                continue
            rows.append(_request_row(run_id, next_seq, record, occurrence))
            next_seq += 1
        if key in existing:
            filled = _fill_missing_run_values(existing[key], parsed_run)
            if len(rows) > before or filled:
                touched_existing.append(existing[key])
    _insert_requests(rows)
    for run in touched_existing:
        _apply_summary(run, (RequestFacts(*v) for v in run.requests.values_list(*FACT_FIELDS).order_by()))
        run.save()

    file_import.n_imported = len(rows)
    file_import.n_duplicate = parsed.n_records - len(rows)
    file_import.n_runs = len(parsed.runs)
    file_import.save(update_fields=["n_imported", "n_duplicate", "n_runs"])
    return file_import


FACT_FIELDS = ("ok", "ts", "prompt_tokens", "n_predict", "output_tokens", "tok_s", "elapsed_s")


def _existing_runs(runs: dict[str, ParsedRun]) -> dict[str, Run]:
    keys = list(runs)
    found: dict[str, Run] = {}
    for i in range(0, len(keys), LOOKUP_BATCH):
        for run in Run.objects.filter(key__in=keys[i : i + LOOKUP_BATCH]):
            found[run.key] = run
    return found


def _conflicts(parsed_run: ParsedRun, stored: Run) -> list[LineError]:
    """A file may add requests to a stored run, but not describe it differently."""
    stored_values = stored.record_values()
    for name, value in parsed_run.run_dict().items():
        current = stored_values[name]
        if value is not None and current is not None and value != current:
            line = parsed_run.value_lines.get(RUN_FIELD_NAMES.index(name), parsed_run.first_line)
            return [
                LineError(
                    line,
                    f"run {parsed_run.key!r} is already stored with {name!r} = {current!r}; this file says {value!r}",
                )
            ]
    return []


def _fill_missing_run_values(stored: Run, parsed_run: ParsedRun) -> bool:
    filled = False
    stored_values = stored.record_values()
    for name, value in parsed_run.run_dict().items():
        if value is not None and stored_values[name] is None:
            setattr(stored, RUN_COLUMNS[name], value)
            filled = True
    return filled


def _new_run(parsed_run: ParsedRun, file_import: FileImport) -> Run:
    values = {
        RUN_COLUMNS[name]: ("" if value is None and name in BLANK_IS_NONE else value)
        for name, value in parsed_run.run_dict().items()
        if value is not None or name != "source"  # an absent source takes the model's default
    }
    run = Run(**values, first_import=file_import)
    _apply_summary(run, (RequestFacts(*_facts(record)) for _, record, _ in parsed_run.records))
    return run


def _facts(record: Any) -> tuple[Any, ...]:
    ts, ok, _status, _error, _etype, prompt, n_predict, output, tok_s, elapsed, _ttft = record.request
    return ok, ts, prompt, n_predict, output, tok_s, elapsed


def _apply_summary(run: Run, facts: Iterable[RequestFacts]) -> None:
    for name, value in asdict(summarize(facts, run.wall_s)).items():
        setattr(run, name, value)


def _known_requests(run_ids: list[int]) -> dict[int, tuple[set[tuple[str, int]], int]]:
    """For stored runs: the (content_hash, occurrence) pairs they hold and their next seq."""
    known: dict[int, tuple[set[tuple[str, int]], int]] = {}
    for i in range(0, len(run_ids), LOOKUP_BATCH):
        rows = RequestResult.objects.filter(run_id__in=run_ids[i : i + LOOKUP_BATCH]).values_list(
            "run_id", "content_hash", "occurrence", "seq"
        )
        for run_id, content_hash, occurrence, seq in rows.order_by():
            seen, next_seq = known.get(run_id, (set(), 0))
            seen.add((content_hash, occurrence))
            known[run_id] = (seen, max(next_seq, seq + 1))
    return known


_EXTRA_FIELD = RequestResult._meta.get_field("extra")
_TS_FIELD = RequestResult._meta.get_field("ts")
INSERT_COLUMNS = (
    "run_id",
    "seq",
    "ts",
    "ok",
    "http_status",
    "error",
    "error_type",
    "prompt_tokens",
    "n_predict",
    "output_tokens",
    "tok_s",
    "elapsed_s",
    "ttft_s",
    "extra",
    "content_hash",
    "occurrence",
)


def _request_row(run_id: int, seq: int, record: Any, occurrence: int) -> tuple[Any, ...]:
    ts, ok, status, error, etype, prompt, n_predict, output, tok_s, elapsed, ttft = record.request
    return (
        run_id,
        seq,
        _TS_FIELD.get_db_prep_save(ts, connection),
        ok,
        status,
        error or "",
        etype or "",
        prompt,
        n_predict,
        output,
        tok_s,
        elapsed,
        ttft,
        _EXTRA_FIELD.get_db_prep_save(record.extra, connection),
        record.content_hash,
        occurrence,
    )


def _insert_requests(rows: list[tuple[Any, ...]]) -> None:
    # The hot path of a large import: a plain executemany, inside the caller's
    # transaction, is several times faster than building a model per row. The
    # values were validated by records.normalize and the constraints still apply.
    table = connection.ops.quote_name(RequestResult._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(c) for c in INSERT_COLUMNS)
    placeholders = ", ".join(["%s"] * len(INSERT_COLUMNS))
    sql = f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"
    with connection.cursor() as cursor:
        for i in range(0, len(rows), INSERT_BATCH):
            cursor.executemany(sql, rows[i : i + INSERT_BATCH])
