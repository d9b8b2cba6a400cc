"""Store a bench_results.jsonl file: all of it in one transaction, or none of it.

Every attempt leaves a FileImport row: "imported" with its counts, or "rejected"
with each rejected line's number and reason (and no run or request stored).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from ..models import FileImport, RejectedLine, RequestResult, Run
from .jsonl import LineError
from .metrics import RunSummary, summarize
from .reader import ParsedFile, ParsedRun, read_bench_file
from .records import REQUEST_FIELD_NAMES, RUN_FIELD_NAMES, Record

log = logging.getLogger(__name__)

# Run model field for each canonical run field ("run_id" is the run's key).
RUN_COLUMNS = {name: ("key" if name == "run_id" else name) for name in RUN_FIELD_NAMES}
# Text columns store "" for absent values; the others store NULL.
BLANK_IS_NONE = {"label", "gpu", "cache_type_k", "cache_type_v", "flash_attn"}
INSERT_BATCH = 5_000
LOOKUP_BATCH = 500


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a file's records are built.

    An import creates hundreds of thousands of long-lived, acyclic objects; every
    collection would walk all of them again (a third of the import's time).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
    with gc_paused():
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
            with gc_paused(), transaction.atomic():
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

    _insert_new_runs([run for key, run in parsed.runs.items() if key not in existing], file_import)
    run_ids = dict(Run.objects.filter(first_import=file_import).values_list("key", "pk"))
    run_ids.update((key, run.pk) for key, run in existing.items())

    known = _known_requests([run.pk for run in existing.values()])
    rows: list[tuple[Any, ...]] = []
    touched_existing: list[Run] = []
    request_row = _request_row_builder()
    for key, parsed_run in parsed.runs.items():
        run_id = run_ids[key]
        seen, next_seq = known.get(run_id, (set(), 0))
        before = len(rows)
        for _line_no, record, occurrence in parsed_run.records:
            if seen and (record.content_hash, occurrence) in seen:
                continue
            rows.append(request_row(run_id, next_seq, record, occurrence))
            next_seq += 1
        if key in existing:
            filled = _fill_missing_run_values(existing[key], parsed_run)
            if len(rows) > before or filled:
                touched_existing.append(existing[key])
    _insert(RequestResult, REQUEST_INSERT_COLUMNS, rows)
    for run in touched_existing:
        run.refresh_summary()

    file_import.n_imported = len(rows)
    file_import.n_duplicate = parsed.n_records - len(rows)
    file_import.n_runs = len(parsed.runs)
    file_import.save(update_fields=["n_imported", "n_duplicate", "n_runs"])
    return file_import


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


# --- bulk inserts ----------------------------------------------------------------
# The hot path of a large import. A plain executemany inside the caller's transaction
# is several times faster than Django building a model (and compiling SQL in
# 999-parameter batches) per row. Values were validated by records.normalize, are
# adapted with the backend's own adapters, and the database constraints still apply.

SUMMARY_COLUMNS = RunSummary._fields
RUN_INSERT_COLUMNS = (
    *(RUN_COLUMNS[name] for name in RUN_FIELD_NAMES),
    *SUMMARY_COLUMNS,
    "created_at",
    "first_import_id",
)
REQUEST_INSERT_COLUMNS = (
    "run_id",
    "seq",
    *REQUEST_FIELD_NAMES,
    "extra",
    "content_hash",
    "occurrence",
)
_SOURCE_INDEX = RUN_FIELD_NAMES.index("source")
_BLANK_INDEXES = tuple(RUN_FIELD_NAMES.index(name) for name in BLANK_IS_NONE)
_STARTED_AT_INDEX = len(RUN_FIELD_NAMES) + SUMMARY_COLUMNS.index("started_at")


def datetime_adapter() -> Callable[[datetime | None], Any]:
    """The backend's datetime adapter, or an exact shortcut of it for SQLite.

    Django stores an aware datetime in SQLite as str() of it made naive in the
    connection's time zone; records hold UTC datetimes, so with a UTC connection that
    is str() of the datetime without its tzinfo (tested against Django's own adapter).
    """
    adapt = connection.ops.adapt_datetimefield_value
    if connection.vendor != "sqlite" or connection.timezone_name != "UTC":
        return adapt

    def adapt_utc(value: datetime | None) -> Any:
        if value is None:
            return None
        if value.tzinfo is UTC:  # records hold datetime.UTC datetimes
            return value.isoformat(" ")[:-6]  # without "+00:00"
        return adapt(value)

    return adapt_utc


def _insert_new_runs(runs: list[ParsedRun], file_import: FileImport) -> None:
    adapt_datetime = datetime_adapter()
    created_at = adapt_datetime(timezone.now())
    rows = []
    for parsed_run in runs:
        values = list(parsed_run.values)
        for i in _BLANK_INDEXES:
            if values[i] is None:
                values[i] = ""
        if values[_SOURCE_INDEX] is None:
            values[_SOURCE_INDEX] = Run.Source.IMPORTED
        summary = summarize(
            (record.request for _, record, _ in parsed_run.records), values[RUN_FIELD_NAMES.index("wall_s")]
        )
        row = [*values, *summary, created_at, file_import.pk]
        row[_STARTED_AT_INDEX] = adapt_datetime(row[_STARTED_AT_INDEX])
        rows.append(row)
    _insert(Run, RUN_INSERT_COLUMNS, rows)


def _request_row_builder() -> Callable[[int, int, Record, int], tuple[Any, ...]]:
    """Builds request rows in REQUEST_INSERT_COLUMNS order, adapting values for the backend."""
    adapt_datetime = datetime_adapter()
    extra_field = RequestResult._meta.get_field("extra")
    empty_extra = extra_field.get_db_prep_save({}, connection)

    def request_row(run_id: int, seq: int, record: Record, occurrence: int) -> tuple[Any, ...]:
        ts, ok, status, error, error_type, prompt, n_predict, output, tok_s, elapsed, ttft = record.request
        return (
            run_id,
            seq,
            adapt_datetime(ts),
            ok,
            status,
            error or "",
            error_type or "",
            prompt,
            n_predict,
            output,
            tok_s,
            elapsed,
            ttft,
            extra_field.get_db_prep_save(record.extra, connection) if record.extra else empty_extra,
            record.content_hash,
            occurrence,
        )

    return request_row


def _insert(model: type[Model], columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    quote = connection.ops.quote_name
    sql = "INSERT INTO {} ({}) VALUES ({})".format(
        quote(model._meta.db_table), ", ".join(quote(c) for c in columns), ", ".join(["%s"] * len(columns))
    )
    with connection.cursor() as cursor:
        for i in range(0, len(rows), INSERT_BATCH):
            cursor.executemany(sql, rows[i : i + INSERT_BATCH])
