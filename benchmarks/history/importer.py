"""Store a bench_results.jsonl file (or another tool's file read into kvlab.bench/2 records):
all of it in one transaction, or none of it.

Every attempt leaves a FileImport row: "imported" with its counts, or "rejected"
with its rejected lines' numbers and reasons (the first 1,000; n_rejected counts them
all) and no run or request stored.

Memory does not grow with the file: the reader spills the validated lines to disk and
hands back one run at a time; runs are stored in batches of at most
importer_rows.INSERT_BATCH requests (a larger run alone), and what stored runs already
hold is read in batches of the same size. This module holds the transactions and the
order of the steps; importer_rows builds and writes the rows in raw SQL.
"""

from __future__ import annotations

import functools
import gc
import logging
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import IntegrityError, connection, models, transaction

from kvlab.visibility import UPLOAD_DIR_PREFIX

from ..models import FileImport, RejectedLine, RequestResult, Run
from ..records.formats import Declared, registry
from ..records.jsonl import LineError, RecordError
from ..records.metrics import RunTally
from ..records.schema import RUN_FIELD_NAMES
from ..records.storable import storable_text
from ..records.summaries import merge_summaries
from . import derived, importer_rows, rollups, sqlite_batches
from .reader import NotInOrder, ParsedRun, ReadCounts, Rejects, SpilledFile, read_bench_file, runs_as_read

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

LOOKUP_BATCH = 500


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a file is imported.

    An import creates millions of short-lived, acyclic objects, freed as they go; the
    collections their allocations would trigger find nothing to collect.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Rejected(Exception):
    """A line was rejected while the file was being stored: roll the transaction back."""


@dataclass(frozen=True)
class ServerLog:
    """A llama-server start-up log attached to the runs of an import: its text, and what was parsed of it."""

    text: str
    parsed: dict[str, Any] | None = None


def read_server_log(text: str) -> ServerLog:
    """The log's text, with its parsed configuration when the llama-server log parser is there and reads it."""
    text = storable_text(text)
    try:
        from benchmarks.records.formats.llama_server_log import parse_startup_log
    except ImportError:
        return ServerLog(text)
    try:
        parsed: Any = parse_startup_log(text)
    except Exception:  # a log the parser cannot read is still kept, as text
        return ServerLog(text)
    if hasattr(parsed, "to_dict"):
        parsed = parsed.to_dict()
    return ServerLog(text, parsed if isinstance(parsed, dict) else None)


@dataclass
class _Context:
    """What one import stores besides the file's own records."""

    declared: Declared
    server_log: ServerLog | None
    n_new_runs: int = 0
    n_summaries: int = 0
    keys: list[str] = field(default_factory=list)  # the file's runs, for the server log
    touched: list[int] = field(default_factory=list)  # stored runs this import added to (history.derived)
    were: list[rollups.Position] = field(default_factory=list)  # where those that moved were counted before
    streamed: _Streamed | None = None  # the run being stored in pieces (reader.RUN_PIECE)


@dataclass
class _Streamed:
    """A run of more than reader.RUN_PIECE requests, stored a piece at a time.

    A new run's row is inserted with its first piece and set to the whole run's values and
    aggregates (tallied as the pieces pass) with its last; a stored run gains each piece's new
    requests, found by their content hashes in the stored run, and is summarized again at the end.
    """

    key: str
    next_seq: int = 0  # the seq its next request takes
    tally: RunTally = field(default_factory=RunTally)
    run_id: int | None = None  # of a new run stored in this thread
    stored: Run | None = None  # the run as stored before this import, when it was
    added: bool = False  # requests added to the stored run
    conflicts: bool = False  # a piece contradicted the stored run
    was: rollups.Position | None = None  # where the stored run was counted before

    def add(self, piece: ParsedRun) -> None:
        entries = piece.records
        self.tally.add([record.request for _, record, _ in entries], [record.itl for _, record, _ in entries])
        self.next_seq += len(entries)

    def new_rows(
        self, piece: ParsedRun, request_row: Callable[..., tuple[Any, ...]], run: Any
    ) -> list[tuple[Any, ...]]:
        """A later piece of a new run: its request rows (run: the run's id, or its key for the writer
        thread), numbered on from the pieces before it; then the piece is added."""
        rows = [
            request_row(run, self.next_seq + seq, record, occurrence)
            for seq, (_line_no, record, occurrence) in enumerate(piece.records)
        ]
        self.add(piece)
        return rows


def _with_import_cache(function: Callable[P, R]) -> Callable[P, R]:
    """Run an import with a page cache of sqlite_batches.IMPORT_CACHE_KIB on its connection."""

    @functools.wraps(function)
    def with_cache(*args: P.args, **kwargs: P.kwargs) -> R:
        with sqlite_batches.page_cache(sqlite_batches.IMPORT_CACHE_KIB):
            return function(*args, **kwargs)

    return with_cache


@_with_import_cache
def import_bench_file(
    stream: IO[bytes],
    *,
    filename: str,
    origin: str,
    user: Any = None,
    max_line_bytes: int | None = None,
    declared: Declared | None = None,
    format: str = "",
    server_log: ServerLog | None = None,
    identity: tuple[str, int] | None = None,
    conversion_error: Callable[[], LineError | None] | None = None,
    relabel: Callable[[LineError], LineError] | None = None,
) -> FileImport:
    """Import one stream of kvlab JSONL (v1, v2 or flat) whole, or reject it whole.

    declared: what the file's runs lack (never overriding a value the file holds);
    format: the input format recorded on the FileImport; identity: (sha256, size) of the
    original input when stream is a conversion of it; conversion_error: called after the
    stream is read, the error that ended a conversion early (the input is then rejected);
    relabel: names the file and line of a rejected line of a stream joined from parts.
    """
    max_line_bytes = max_line_bytes or settings.KVLAB_IMPORT_MAX_LINE_BYTES
    context = _Context(declared or Declared(), server_log)
    require_model = not context.declared.model
    meta = {
        "filename": filename[:255],
        "format": format[:40],
        "origin": origin,
        "user": user if getattr(user, "is_authenticated", False) else None,
    }
    start = _start_of(stream) if identity is None and conversion_error is None and relabel is None else None
    if start is not None:
        # The common file (a kvlab file whose runs are contiguous and whose lines are all
        # valid) is stored as it is read; any other is read again from its start, the careful way.
        # On SQLite its new runs are written from a second thread; a run already stored (the
        # file imported before, or grown since) makes that attempt fail on the run's key, and the
        # file is stored as it is read in this thread, adding to the stored runs.
        threaded_first = sqlite_batches.worth_it(stream) and sqlite_batches.available()
        for threaded in (True, False) if threaded_first else (False,):
            try:
                with gc_paused():
                    return _import_as_read(stream, meta, context, max_line_bytes, require_model, threaded)
            except (NotInOrder, Rejected, IntegrityError) as exc:
                stream.seek(start)
                context = _Context(context.declared, server_log)
                if not (threaded and isinstance(exc, IntegrityError)):
                    break
    with gc_paused(), read_bench_file(stream, max_line_bytes=max_line_bytes, require_model=require_model) as parsed:
        sha256, size = identity or (parsed.sha256, parsed.size_bytes)
        meta = {**meta, "sha256": sha256, "size_bytes": size, "n_read": parsed.n_read, "n_blank": parsed.n_blank}
        failed = conversion_error() if conversion_error else None
        if failed is not None:
            parsed.rejects.add(failed)
        if parsed.rejects:
            _store_runs(parsed, None, context)  # only to find every other rejected line: nothing is written
            return _record_rejection(meta, parsed.rejects, relabel)
        # Two imports of the same new runs can race; the loser's INSERT hits the unique
        # constraint, its transaction rolls back, and the retry finds them as duplicates.
        for attempt in range(3):
            context = _Context(context.declared, server_log)
            try:
                with transaction.atomic():
                    return _store(parsed, meta, context)
            except Rejected:
                return _record_rejection(meta, parsed.rejects, relabel)
            except IntegrityError:
                if attempt == 2:
                    raise
                log.info("import of %s raced another import; retrying", filename)
    raise AssertionError("unreachable")


def _start_of(stream: IO[bytes]) -> int | None:
    """Where a stream that can be read again starts; None when it cannot (a pipe)."""
    try:
        return stream.tell() if stream.seekable() else None
    except (AttributeError, OSError, ValueError):
        return None


def _import_as_read(
    stream: IO[bytes],
    meta: dict[str, Any],
    context: _Context,
    max_line_bytes: int,
    require_model: bool,
    threaded: bool,
) -> FileImport:
    """Store each run as it is read, in one transaction; NotInOrder, Rejected or IntegrityError (all
    rolled back) when the file needs the careful path: a rejected line, a split run, a race.

    threaded: the runs are new (else IntegrityError) and written from a second thread (_write_new_runs).
    """
    counts = ReadCounts()
    rejects = Rejects()
    with transaction.atomic():
        file_import = FileImport.objects.create(**meta, sha256="", size_bytes=0, status=FileImport.Status.IMPORTED)
        stored = 0
        with closing(runs_as_read(stream, counts, max_line_bytes=max_line_bytes, require_model=require_model)) as runs:
            batches = _batches(_declared_runs_as_read(runs, context), lambda run: len(run.records))
            if threaded:
                stored = _write_new_runs(batches, file_import, context)
            else:
                for batch in batches:
                    stored += _store_batch(batch, file_import, rejects, context)
                    if rejects:
                        raise Rejected
        file_import.sha256, file_import.size_bytes = counts.sha256, counts.size_bytes
        file_import.n_read, file_import.n_blank = counts.n_read, counts.n_blank
        file_import.n_imported = stored
        file_import.n_summaries = context.n_summaries
        file_import.n_new_runs = context.n_new_runs
        file_import.n_duplicate = counts.n_records - stored - context.n_summaries
        file_import.n_runs = counts.n_runs
        file_import.save(
            update_fields=[
                "sha256",
                "size_bytes",
                "n_read",
                "n_blank",
                "n_imported",
                "n_duplicate",
                "n_runs",
                "n_summaries",
                "n_new_runs",
            ]
        )
        if context.server_log is not None:
            _attach_server_log(context.keys, context.server_log)
        _report_changed_runs(file_import, context)
        return file_import


def _write_new_runs(batches: Iterator[list[ParsedRun]], file_import: FileImport, context: _Context) -> int:
    """Store the file's runs, all new, from a second thread (sqlite_batches); requests stored.

    A run already stored (by an earlier import, or by one racing this) fails its INSERT on
    the unique key: IntegrityError, and the file takes the careful path, which adds to
    stored runs.
    """
    quote = connection.ops.quote_name
    run_table = Run._meta.db_table
    request_table = RequestResult._meta.db_table
    insert_requests = sqlite_batches.insert_rows(request_table, importer_rows.REQUEST_INSERT_COLUMNS, keyed_by_run=True)
    set_itl = sqlite_batches.RowsStatement(
        f"UPDATE {quote(request_table)} SET {quote('itl_s')} = v.column1 FROM (VALUES {{rows}}) AS v "
        f"WHERE {quote(request_table)}.{quote('run_id')} = "
        f"(SELECT {quote('id')} FROM {quote(run_table)} WHERE {quote('key')} = v.column2) "
        f"AND {quote(request_table)}.{quote('seq')} = v.column3",
        "(%s, %s, %s)",
    )
    stored = 0
    with sqlite_batches.BatchWriter(run_table) as writer:
        for batch in batches:
            builder = importer_rows.RequestRows()
            request_row = builder.build
            heads = [run for run in batch if not run.part]
            requests = [
                request_row(run.key, seq, record, occurrence)
                for run in heads
                for seq, (_line_no, record, occurrence) in enumerate(run.records)
            ]
            statements: list[tuple[str, list[Any]]] = []
            if heads:
                columns = importer_rows.new_run_columns(heads, file_import, requests)
                statements = importer_rows.new_run_statements(columns, run_table)
            for run in batch:
                streamed = context.streamed
                if not run.part:
                    if not run.last:
                        context.streamed = streamed = _Streamed(run.key)
                        streamed.add(run)
                    continue
                assert streamed is not None and streamed.key == run.key, "a run's pieces come in order"
                requests += streamed.new_rows(run, request_row, run.key)
                if run.last:
                    statements.append(importer_rows.finished_run_update(run, streamed.tally, file_import))
                    context.streamed = None
            statements += insert_requests.statements(requests)
            if builder.itl:
                statements += set_itl.statements(builder.itl)
            writer.put(statements)
            stored += len(requests)
            context.n_new_runs += len(heads)
            context.n_summaries += sum(run.last and run.summary is not None for run in batch)
            if context.server_log is not None:
                context.keys.extend(run.key for run in heads)
        writer.finish()
    return stored


def _declared_runs_as_read(runs: Iterator[ParsedRun], context: _Context) -> Iterator[ParsedRun]:
    for run in runs:
        try:
            run.apply_declared(context.declared)
        except RecordError:
            raise Rejected from None
        yield run


def import_path(
    path: Path,
    *,
    origin: str,
    declared: Declared | None = None,
    format: str | None = None,
    server_log: ServerLog | None = None,
    user: Any = None,
    filename: str | None = None,
    files: Sequence[Path] = (),
) -> FileImport:
    """Import a file or directory of any format kvlab reads, detected from its content (or forced by name).

    files: files given together that are one run (registry.join_given), read with format as the folder
    `path` holding just them. FormatError when format names no format.
    """
    declared = declared or Declared()
    detected, stream = registry.open_input(path, declared, format, files)
    name = filename or str(path)
    common: dict[str, Any] = {
        "filename": name,
        "origin": origin,
        "user": user,
        "declared": declared,
        "format": detected,
        "server_log": server_log,
    }
    if isinstance(stream, registry.InputStream):
        return import_bench_file(
            stream,  # type: ignore[arg-type]
            **common,
            identity=registry.input_identity(path, files),
            conversion_error=stream.conversion_error,
            relabel=stream.where,
        )
    with stream:
        return import_bench_file(stream, **common)


def import_uploads(
    uploads: Sequence[Any],
    *,
    origin: str,
    user: Any = None,
    declared: Declared | None = None,
    server_log: ServerLog | None = None,
) -> list[FileImport]:
    """Import uploaded files: kvlab JSONL streams straight in; other formats are written to a private
    directory first (converters read files). The files of one run given together (registry.join_given:
    an llmperf summary with its responses, AIPerf's exports with inputs.json, a vLLM sweep's files) are
    one import, as their directory would be; every other file is one import of its own."""
    common: dict[str, Any] = {"origin": origin, "user": user, "declared": declared, "server_log": server_log}
    with tempfile.TemporaryDirectory(prefix=UPLOAD_DIR_PREFIX) as tmp:
        given_as: dict[Path, str] = {}  # each file written -> its name as uploaded
        times_named: dict[str, int] = {}
        for upload in uploads:
            name = Path(upload.name or "upload").name.lstrip(".") or "upload"
            # one folder, as the files lay in theirs; a name given again goes to a folder of its own
            times_named[name] = times_named.get(name, 0) + 1
            folder = Path(tmp, "upload" if times_named[name] == 1 else f"upload-{times_named[name]}")
            folder.mkdir(exist_ok=True)
            path = folder / name
            with path.open("wb") as fh:
                for chunk in upload.chunks():
                    fh.write(chunk)
            given_as[path] = Path(upload.name or "upload").name
        results = []
        for given in registry.join_given(list(given_as)):
            if isinstance(given, registry.Joined):
                names = ", ".join(given_as[path] for path in given.files)[:255]
                results.append(
                    import_path(given.folder, format=given.format, files=given.files, filename=names, **common)
                )
            else:
                results.append(import_path(given, filename=given_as[given], **common))
        return results


def _record_rejection(
    meta: dict[str, Any], rejects: Rejects, relabel: Callable[[LineError], LineError] | None = None
) -> FileImport:
    kept = rejects.kept()
    if relabel is not None:
        kept = [relabel(e) for e in kept]
    with transaction.atomic():
        file_import = FileImport.objects.create(**meta, status=FileImport.Status.REJECTED, n_rejected=rejects.count)
        RejectedLine.objects.bulk_create(
            (
                RejectedLine(file_import=file_import, line_no=e.line_no, reason=e.reason, excerpt=e.excerpt)
                for e in kept
            ),
            batch_size=importer_rows.INSERT_BATCH,
        )
    return file_import


def _store(parsed: SpilledFile, meta: dict[str, Any], context: _Context) -> FileImport:
    file_import = FileImport.objects.create(**meta, status=FileImport.Status.IMPORTED)
    file_import.n_imported = _store_runs(parsed, file_import, context)
    if parsed.rejects:
        raise Rejected
    file_import.n_summaries = context.n_summaries
    file_import.n_new_runs = context.n_new_runs
    file_import.n_duplicate = parsed.n_records - file_import.n_imported - context.n_summaries
    file_import.n_runs = parsed.n_runs
    file_import.save(update_fields=["n_imported", "n_duplicate", "n_runs", "n_summaries", "n_new_runs"])
    if context.server_log is not None:
        _attach_server_log(context.keys, context.server_log)
    _report_changed_runs(file_import, context)
    return file_import


def _report_changed_runs(file_import: FileImport, context: _Context) -> None:
    """The tables derived from the runs learn of the import's new runs and of the stored runs it added to
    (a large import's are counted by a worker just after the commit: history.derived.runs_added)."""
    # Unordered: Run's default order (newest first) made SQLite walk run_started_idx over every stored run
    # to find these, instead of reading them from the first_import index.
    new: Sequence[int] = []
    if context.n_new_runs:
        runs = Run.objects.filter(first_import=file_import).order_by()
        span = runs.aggregate(first=models.Min("pk"), last=models.Max("pk"), n=models.Count("pk"))
        if span["n"] and span["last"] - span["first"] + 1 == span["n"]:
            new = range(span["first"], span["last"] + 1)  # the common case, held as two numbers, not a list
        else:
            new = list(runs.values_list("pk", flat=True))
    derived.runs_added(new, context.touched, context.were)


def _attach_server_log(keys: list[str], log: ServerLog) -> None:
    """The log goes to the file's runs that have none yet; its parsed configuration where no /props is kept."""
    for i in range(0, len(keys), LOOKUP_BATCH):
        runs = Run.objects.filter(key__in=keys[i : i + LOOKUP_BATCH])
        runs.filter(server_log="").update(server_log=log.text)
        if log.parsed is not None:
            runs.filter(server_props__isnull=True).update(server_props={"startup_log": log.parsed})


def _store_runs(parsed: SpilledFile, file_import: FileImport | None, context: _Context) -> int:
    """Store the file's runs in batches and return how many requests were stored.

    Every run is checked; none is stored once a line is rejected, or without file_import.
    """
    batches = _batches(_declared_runs(parsed, context), lambda run: len(run.records))
    return sum(_store_batch(batch, file_import, parsed.rejects, context) for batch in batches)


def _declared_runs(parsed: SpilledFile, context: _Context) -> Iterator[ParsedRun]:
    for run in parsed.runs():
        try:
            run.apply_declared(context.declared)
        except RecordError as exc:
            if not run.part:  # once a run, not once a piece
                parsed.rejects.add(LineError(run.first_line, str(exc)))
            continue
        yield run


def _store_batch(runs: list[ParsedRun], file_import: FileImport | None, rejects: Rejects, context: _Context) -> int:
    """Check a batch of runs against the stored runs, then store it if all is well; requests stored.

    A run of more than RUN_PIECE requests comes in pieces (reader.ParsedRun.part): its first is
    checked and stored as a run is, the others by _store_piece.
    """
    heads = [run for run in runs if not run.part]
    existing = _existing_runs(heads)
    pieces: list[tuple[ParsedRun, _Streamed]] = []  # the batch's pieces of runs stored in pieces, in order
    for run in runs:
        if not run.part:
            stored = existing.get(run.key)
            if not run.last:
                context.streamed = _Streamed(run.key, stored=stored)
        else:
            assert context.streamed is not None and context.streamed.key == run.key, "a run's pieces come in order"
            stored = context.streamed.stored
        streamed = context.streamed if run.part or not run.last else None
        if streamed is not None:
            pieces.append((run, streamed))
            if run.last:
                context.streamed = None
        if stored is not None and not (streamed and streamed.conflicts):
            for error in _conflicts(run, stored):
                rejects.add(error)
                if streamed is not None:
                    streamed.conflicts = True  # said once for the run, not once a piece
    if rejects or file_import is None:
        return 0

    new_runs = [run for run in heads if run.key not in existing]
    _insert_new_runs(new_runs, file_import)
    context.n_new_runs += len(new_runs)
    context.n_summaries += sum(run.summary is not None for run in new_runs if run.last)
    if context.server_log is not None:
        context.keys.extend(run.key for run in heads)
    run_ids = _run_ids([run.key for run in new_runs])
    builder = importer_rows.RequestRows()
    request_row = builder.build
    rows = [
        request_row(run_ids[run.key], seq, record, occurrence)
        for run in new_runs
        for seq, (_line_no, record, occurrence) in enumerate(run.records)
    ]
    builder.insert(rows)
    stored = len(rows)
    stored_runs = [run for run in heads if run.key in existing and run.last]
    for group in _batches(stored_runs, lambda run: existing[run.key].n_requests):  # what each run holds is read
        stored += _add_to_stored_runs(group, existing, context)
    for piece, streamed in pieces:
        stored += _store_piece(piece, streamed, run_ids.get(piece.key), file_import, context)
    return stored


def _insert_new_runs(runs: list[ParsedRun], file_import: FileImport) -> None:
    rows = list(zip(*importer_rows.new_run_columns(runs, file_import), strict=True))
    importer_rows.insert(Run, importer_rows.RUN_INSERT_COLUMNS, rows)


def _store_piece(
    piece: ParsedRun, streamed: _Streamed, new_id: int | None, file_import: FileImport, context: _Context
) -> int:
    """Store a piece of a run of more than RUN_PIECE requests (its first: new_id when the run is new
    and was just inserted); requests stored. The last piece sets the run's values and aggregates."""
    if not piece.part:
        if streamed.stored is None:
            assert new_id is not None
            streamed.run_id = new_id
            streamed.add(piece)  # its requests were stored with its row
            return 0
        streamed.was = rollups.position(streamed.stored)
        streamed.next_seq = _next_seq(streamed.stored.pk)
    builder = importer_rows.RequestRows()
    request_row = builder.build
    if streamed.stored is None:
        rows = streamed.new_rows(piece, request_row, streamed.run_id)
    else:
        run_id = streamed.stored.pk
        known = _known_in_run(run_id, {record.content_hash for _, record, _ in piece.records})
        rows = []
        for _line_no, record, occurrence in piece.records:
            if (record.content_hash, occurrence) not in known:
                rows.append(request_row(run_id, streamed.next_seq, record, occurrence))
                streamed.next_seq += 1
        streamed.added = streamed.added or bool(rows)
    builder.insert(rows)
    if piece.last:
        if streamed.stored is None:
            with connection.cursor() as cursor:
                cursor.execute(*importer_rows.finished_run_update(piece, streamed.tally, file_import))
            context.n_summaries += piece.summary is not None
        else:
            _finish_stored_run(piece, streamed, context)
    return len(rows)


def _finish_stored_run(piece: ParsedRun, streamed: _Streamed, context: _Context) -> None:
    """A stored run's last piece read: its missing values filled, its summary merged, its
    aggregates computed again when it changed (as _add_to_stored_runs does for a run read whole)."""
    stored_run = streamed.stored
    assert stored_run is not None
    if not (_fill_stored_run(stored_run, piece, context) or streamed.added):
        return
    stored_run.refresh_summary()
    if streamed.was is not None and streamed.was != rollups.position(stored_run):
        context.were.append(streamed.was)
    context.touched.append(stored_run.pk)


def _next_seq(run_id: int) -> int:
    """The seq a request added to a stored run takes next."""
    last = RequestResult.objects.filter(run_id=run_id).aggregate(last=models.Max("seq"))["last"]
    return 0 if last is None else last + 1


def _known_in_run(run_id: int, hashes: set[str]) -> set[tuple[str, int]]:
    """The (content_hash, occurrence) pairs a stored run holds among the given hashes (its unique index)."""
    wanted = list(hashes)
    known: set[tuple[str, int]] = set()
    for i in range(0, len(wanted), LOOKUP_BATCH):
        rows = RequestResult.objects.filter(run_id=run_id, content_hash__in=wanted[i : i + LOOKUP_BATCH])
        known.update(rows.order_by().values_list("content_hash", "occurrence"))
    return known


def _batches(runs: Iterable[ParsedRun], size: Callable[[ParsedRun], int]) -> Iterator[list[ParsedRun]]:
    """The runs in consecutive groups of at most importer_rows.INSERT_BATCH by size (a larger run alone)."""
    group: list[ParsedRun] = []
    total = 0
    for run in runs:
        n = size(run)
        if group and total + n > importer_rows.INSERT_BATCH:
            yield group
            group, total = [], 0
        group.append(run)
        total += n
    if group:
        yield group


def _add_to_stored_runs(runs: list[ParsedRun], existing: dict[str, Run], context: _Context) -> int:
    """Add the requests (and summary) that stored runs do not hold yet and fill their missing fields;
    requests stored."""
    known = _known_requests([existing[run.key].pk for run in runs])
    builder = importer_rows.RequestRows()
    request_row = builder.build
    rows: list[tuple[Any, ...]] = []
    touched: list[Run] = []
    was: dict[int, rollups.Position | None] = {}
    for parsed_run in runs:
        stored_run = existing[parsed_run.key]
        was[stored_run.pk] = rollups.position(stored_run)  # an earlier request or a filled label moves it
        seen, next_seq = known.get(stored_run.pk, (set(), 0))
        before = len(rows)
        for _line_no, record, occurrence in parsed_run.records:
            if (record.content_hash, occurrence) in seen:
                continue
            rows.append(request_row(stored_run.pk, next_seq, record, occurrence))
            next_seq += 1
        filled = _fill_stored_run(stored_run, parsed_run, context)
        if len(rows) > before or filled:
            touched.append(stored_run)
    builder.insert(rows)
    for run in touched:
        run.refresh_summary()
        before = was[run.pk]
        if before is not None and before != rollups.position(run):
            context.were.append(before)
    context.touched.extend(run.pk for run in touched)
    return len(rows)


def _fill_stored_run(stored_run: Run, parsed_run: ParsedRun, context: _Context) -> bool:
    """Give a stored run the values and summary fields it lacks from the file; whether it gained any."""
    filled = _fill_missing_run_values(stored_run, parsed_run)
    if parsed_run.summary is not None:
        # _conflicts found the two summaries agree: the stored one gains what it lacked (the counts
        # a CSV did not report); the same summary again is a duplicate.
        summary = merge_summaries(stored_run.summary, parsed_run.summary)[0]
        extra = merge_summaries(stored_run.summary_extra, parsed_run.summary_extra or None)[0]
        if (summary, extra or None) != (stored_run.summary, stored_run.summary_extra or None):
            stored_run.summary, stored_run.summary_extra = summary, extra or None
            context.n_summaries += 1
            filled = True
    return filled


def _existing_runs(runs: list[ParsedRun]) -> dict[str, Run]:
    ids = list(_run_ids([run.key for run in runs]).values())
    found: dict[str, Run] = {}
    for i in range(0, len(ids), LOOKUP_BATCH):
        found.update((run.key, run) for run in Run.objects.filter(pk__in=ids[i : i + LOOKUP_BATCH]).order_by())
    return found


def _run_ids(keys: list[str]) -> dict[str, int]:
    """The ids of the stored runs among keys (in plain SQL: Django takes milliseconds to build IN of 500)."""
    quote = connection.ops.quote_name
    ids: dict[str, int] = {}
    with connection.cursor() as cursor:
        for i in range(0, len(keys), LOOKUP_BATCH):
            chunk = keys[i : i + LOOKUP_BATCH]
            cursor.execute(
                f"SELECT {quote('key')}, {quote('id')} FROM {quote(Run._meta.db_table)} "
                f"WHERE {quote('key')} IN ({', '.join(['%s'] * len(chunk))})",
                chunk,
            )
            ids.update(cursor.fetchall())
    return ids


def _conflicts(parsed_run: ParsedRun, stored: Run) -> list[LineError]:
    """A file may add requests (or a summary) to a stored run, but not describe it differently."""
    stored_values = stored.record_values()
    for name, value in parsed_run.run_dict().items():
        current = stored_values[name]
        if name != "provenance" and value is not None and current is not None and value != current:
            line = parsed_run.value_lines.get(RUN_FIELD_NAMES.index(name), parsed_run.first_line)
            return [
                LineError(
                    line,
                    f"run {parsed_run.key!r} is already stored with {name!r} = {current!r}; this file says {value!r}",
                )
            ]
    if parsed_run.summary is not None and stored.summary is not None:
        conflict = merge_summaries(stored.summary, parsed_run.summary)[1]
        conflict = conflict or merge_summaries(stored.summary_extra, parsed_run.summary_extra or None, "extra.")[1]
        if conflict is not None:
            return [
                LineError(
                    parsed_run.summary_line,
                    f"run {parsed_run.key!r} is already stored with another summary, which differs in "
                    f"'summary.{conflict}'; a run has one summary",
                )
            ]
    return []


def _fill_missing_run_values(stored: Run, parsed_run: ParsedRun) -> bool:
    filled = False
    stored_values = stored.record_values()
    provenance = dict(stored.provenance or {})
    for name, value in parsed_run.run_dict().items():
        if name == "provenance" or value is None or stored_values[name] is not None:
            continue
        setattr(stored, importer_rows.RUN_COLUMNS.get(name, name), value)
        if name in parsed_run.provenance:
            provenance[name] = parsed_run.provenance[name]
        filled = True
    if stored.source == Run.Source.IMPORTED:
        # An executed run's values came from its job: its own export, imported, does not make them the file's.
        for name, kind in parsed_run.provenance.items():
            provenance.setdefault(name, kind)
    if provenance != (stored.provenance or {}):
        stored.provenance = provenance
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
