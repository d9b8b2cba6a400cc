"""Read a bench_results.jsonl file into runs, one run at a time, or into the reasons it is rejected.

No Django database: bytes in, `ParsedRun`s out. Memory does not grow with the file:
each valid line is validated once and spilled, as it is read, to a private SQLite file
on disk (`SpilledFile`); `SpilledFile.runs()` reads the lines back grouped by run and
merges each run's lines as it goes, holding one run at a time. The importer stores a
file only when no line was rejected (all-or-nothing), so every line is checked before
the file is stored.
"""

from __future__ import annotations

import hashlib
import marshal
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import IO, Any

from ..records.formats import Declared
from ..records.jsonl import LineError, RecordError, excerpt_of, iter_lines
from ..records.schema import RUN_FIELD_NAMES, LineReader, Record
from ..records.summaries import merge_summaries

MAX_KEPT_REJECTS = 1_000  # a file's rejected lines stored with their reasons; the rest are counted
SPILL_BATCH = 5_000  # lines written to the spill file at a time
RUN_CACHE_SIZE = 256  # validated run contexts remembered (a flat file repeats one per run)
RUN_PIECE = 5_000  # a run's requests handed over at a time: a larger run comes in pieces (ParsedRun.part)
EXCERPT_BYTES = 161  # of a line, kept for the excerpt should its run fields be rejected (excerpt_of shows 160)
# Run fields a user may declare for what a file lacks (import_bench --gpu …, the upload form).
DECLARABLE = ("label", "model", "gpu", "engine", "server_flags")
_INDEX = {name: i for i, name in enumerate(RUN_FIELD_NAMES)}
_PROVENANCE = _INDEX["provenance"]
_STARTED_AT = _INDEX["started_at"]
_DECLARABLE_INDEXES = tuple(_INDEX[name] for name in DECLARABLE)
# (which declarable fields a run lacks, whether it has started_at, its own provenance; declared) ->
# (the fields the declared values fill, the run's provenance pairs)
_PROVENANCE_OF: dict[Any, tuple[tuple[int, ...], tuple[tuple[str, str], ...]]] = {}


def _provenance_of(values: tuple[Any, ...], declared: Declared) -> tuple[tuple[int, ...], tuple[tuple[str, str], ...]]:
    provenance = dict(values[_PROVENANCE] or ())
    filled = []
    for name, i in zip(DECLARABLE, _DECLARABLE_INDEXES, strict=True):
        if values[i] is not None:
            provenance.setdefault(name, "file")
        elif getattr(declared, name):
            filled.append(i)
            provenance[name] = "declared"
    if values[_STARTED_AT] is not None:
        provenance.setdefault("started_at", "file")
    return tuple(filled), tuple(sorted(provenance.items()))


class Rejects:
    """Every rejected line counted; the MAX_KEPT_REJECTS first (by line number) kept with their reasons."""

    def __init__(self, keep: int = MAX_KEPT_REJECTS) -> None:
        self.keep = keep
        self.count = 0
        self._kept: list[LineError] = []

    def __bool__(self) -> bool:
        return self.count > 0

    def add(self, error: LineError) -> None:
        self.count += 1
        self._kept.append(error)
        if len(self._kept) >= 2 * self.keep:
            self._kept = self.kept()

    def kept(self) -> list[LineError]:
        return sorted(self._kept, key=lambda e: e.line_no)[: self.keep]


@dataclass(slots=True)
class ParsedRun:
    key: str
    first_line: int
    values: tuple[Any, ...]  # run fields in RUN_FIELD_NAMES order, merged over its lines
    records: list[tuple[int, Record, int]] = field(default_factory=list)  # (line_no, record, occurrence)
    occurrences: dict[str, int] = field(default_factory=dict)  # content hash -> times seen (in this piece)
    value_lines: dict[int, int] = field(default_factory=dict)  # field index -> a later line that set it
    # (a field its first line sets is not in value_lines: first_line set it)
    summary: dict[str, Any] | None = None  # the tool's aggregates (a kvlab.bench/2 summary record)
    summary_extra: dict[str, Any] = field(default_factory=dict)
    summary_line: int = 0
    n_summary_records: int = 0  # summary records read (a repeated identical one is a duplicate)
    # A run of more than RUN_PIECE requests is handed over in pieces of RUN_PIECE, in order: part 0
    # first, `last` on the final one. A piece holds its own requests, their occurrences counted over
    # the run's earlier pieces too (_Occurrences.settled); its values and summary are the run's as read so
    # far (the last piece's are the whole run's).
    part: int = 0
    last: bool = True

    @classmethod
    def start(cls, line_no: int, record: Record) -> ParsedRun:
        return cls(key=record.run[0], first_line=line_no, values=record.run)

    def add(self, line_no: int, record: Record) -> None:
        """Add a line of this run; RecordError when it describes the run differently."""
        if record.run is not self.values and record.run != self.values:
            self._merge_run_values(record, line_no)
        if record.request is None:
            self._add_summary(line_no, record)
            return
        occurrence = self.occurrences.get(record.content_hash, 0)
        self.occurrences[record.content_hash] = occurrence + 1
        self.records.append((line_no, record, occurrence))

    def next_piece(self) -> ParsedRun:
        """The run's next piece, to read its following lines into (it may end up holding none); this
        one is then not the last."""
        self.last = False
        return ParsedRun(
            self.key,
            self.first_line,
            self.values,
            [],
            {},
            self.value_lines,
            self.summary,
            self.summary_extra,
            self.summary_line,
            self.n_summary_records,
            self.part + 1,
        )

    def _add_summary(self, line_no: int, record: Record) -> None:
        self.n_summary_records += 1
        if self.summary is None:
            self.summary, self.summary_extra, self.summary_line = record.summary, record.extra, line_no
            return
        # The same summary when the two agree on every field both hold (one may lack the counts).
        summary, conflict = merge_summaries(self.summary, record.summary)
        extra, extra_conflict = merge_summaries(self.summary_extra, record.extra, "extra.")
        if conflict or extra_conflict:
            raise RecordError(
                f"run {self.key!r}: a second summary that differs from the one on line {self.summary_line} "
                f"in 'summary.{conflict or extra_conflict}'; a run has one summary"
            )
        self.summary, self.summary_extra = summary, extra or {}

    def run_dict(self) -> dict[str, Any]:
        return dict(zip(RUN_FIELD_NAMES, self.values, strict=True))

    @property
    def provenance(self) -> dict[str, str]:
        return dict(self.values[_PROVENANCE] or ())

    def apply_declared(self, declared: Declared) -> None:
        """Take the declared values for what the run lacks, and record where each value came from.

        RecordError when the run still has no model.
        """
        values = self.values
        if values[_INDEX["model"]] is None and not declared.model:
            raise RecordError(f"run {self.key!r} has no model: the file does not say it; declare it (--model)")
        # A file's runs mostly share which fields they give: their provenance is worked out once.
        shape = (
            tuple(values[i] is None for i in _DECLARABLE_INDEXES),
            values[_STARTED_AT] is None,
            values[_PROVENANCE],
        )
        known = _PROVENANCE_OF.get((shape, declared))
        if known is None:
            known = _provenance_of(values, declared)
            if len(_PROVENANCE_OF) > 1024:
                _PROVENANCE_OF.clear()
            _PROVENANCE_OF[(shape, declared)] = known
        filled, pairs = known
        if filled or pairs is not values[_PROVENANCE]:
            new = list(values)
            for i in filled:
                new[i] = getattr(declared, RUN_FIELD_NAMES[i])
            new[_PROVENANCE] = pairs
            self.values = tuple(new)

    def _merge_run_values(self, record: Record, line_no: int) -> None:
        """A run's lines must agree; a field missing on some lines is taken from the others."""
        values = list(self.values)
        filled = []
        for i, value in enumerate(record.run):
            if value is None:
                continue
            current = values[i]
            if current is None:
                values[i] = value
                filled.append(i)
            elif current != value:
                name, where = RUN_FIELD_NAMES[i], self.value_lines.get(i, self.first_line)
                raise RecordError(
                    f"run {self.key!r}: {name!r} is {value!r} here but {current!r} on line {where}; "
                    "all lines of a run must describe the same run"
                )
        self.values = tuple(values)
        self.value_lines.update(dict.fromkeys(filled, line_no))


class _Occurrences:
    """How many times each request of a run read in pieces was seen in the run's earlier pieces,
    kept in a private SQLite file on disk, so that a run of millions of requests is not held in
    memory as its requests' hashes either. One run at a time."""

    def __init__(self) -> None:
        self.db: sqlite3.Connection | None = None

    def settled(self, piece: ParsedRun) -> ParsedRun:
        """piece, its requests' occurrences counted over its run's earlier pieces too (a run read whole
        is handed over as it is); call it for each run and piece, in order, as it is handed over."""
        if piece.part or not piece.last:
            self._settle(piece)
        return piece

    def _settle(self, piece: ParsedRun) -> None:
        if self.db is None:
            self.db = sqlite3.connect("")
            self.db.executescript(
                "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA temp_store = FILE;"
                "CREATE TABLE seen (hash TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;"
            )
        db = self.db
        if not piece.part:
            db.execute("DELETE FROM seen")
            earlier: dict[str, int] = {}
        else:
            hashes = list(piece.occurrences)
            earlier = {}
            for i in range(0, len(hashes), _LOOKUP):
                chunk = hashes[i : i + _LOOKUP]
                marks = ", ".join("?" * len(chunk))
                earlier.update(db.execute(f"SELECT hash, n FROM seen WHERE hash IN ({marks})", chunk))
        if earlier:
            piece.records = [
                (line_no, record, occurrence + earlier.get(record.content_hash, 0))
                for line_no, record, occurrence in piece.records
            ]
        db.executemany(
            "INSERT INTO seen VALUES (?, ?) ON CONFLICT (hash) DO UPDATE SET n = n + excluded.n",
            piece.occurrences.items(),
        )

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


_LOOKUP = 500  # hashes looked up at a time


class _HashingReader:
    """Hash and count the bytes as they are read, so the file is read once."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        chunk = self.stream.read(n)
        self.digest.update(chunk)
        self.size += len(chunk)
        return chunk


# --- the spill file ------------------------------------------------------------------
# One row per piece: up to SPILL_BATCH consecutive lines of one run, written with
# marshal (the standard library's fastest exact serializer of plain values; the bytes
# never leave this process) as a list of (line_no, run fields, ts in microseconds, the
# other request fields, extra, content hash, excerpt, special): special is None, or a
# request's inter-token latencies (a tuple), or a summary record's aggregates (a dict,
# with None for the request fields). The run fields, and the line's
# start for the excerpt of a message about them, are written only where they differ
# from the line before (None): a flat file repeats them on every line. Each run's
# first line is in `run`.

_SPILL_SCHEMA = """
CREATE TABLE piece (first_line INTEGER PRIMARY KEY, run_key NOT NULL, lines NOT NULL);
CREATE TABLE run (key PRIMARY KEY, first_line NOT NULL) WITHOUT ROWID;
"""
_SPILL_PIECE = "INSERT INTO piece VALUES (?, ?, ?)"
_SPILL_RUN = "INSERT OR IGNORE INTO run VALUES (?, ?)"  # the first line of a run wins
_PIECES_IN_FILE_ORDER = "SELECT * FROM piece ORDER BY first_line"
_PIECES_BY_RUN = (
    "SELECT piece.* FROM piece JOIN run ON run.key = piece.run_key ORDER BY run.first_line, piece.first_line"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(slots=True)
class SpilledFile:
    """A read file: its size, hash and counts, its rejected lines, and its valid lines on disk."""

    spill: sqlite3.Connection
    sha256: str = ""
    size_bytes: int = 0
    n_read: int = 0
    n_blank: int = 0
    n_records: int = 0
    n_runs: int = 0
    n_segments: int = 0  # stretches of lines of one run
    rejects: Rejects = field(default_factory=Rejects)

    def __enter__(self) -> SpilledFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.spill.close()

    @property
    def runs_are_contiguous(self) -> bool:
        """No run's lines are split by another run's."""
        return self.n_runs == self.n_segments

    def runs(self) -> Iterator[ParsedRun]:
        """Each run with its lines merged, in the order of their first lines, one at a time (a run of
        more than RUN_PIECE requests in pieces).

        A line that describes its run differently from the run's earlier lines is
        added to `rejects`, and left out of the run.
        """
        query = _PIECES_IN_FILE_ORDER if self.runs_are_contiguous else _PIECES_BY_RUN
        lines = self._lines(query)
        try:
            yield from _runs_of(lines, self._reject)
        finally:
            lines.close()

    def _lines(self, query: str) -> Iterator[tuple[int, Record, bytes | None]]:
        """The spilled lines, each a run's lines together (the query's order): (line_no, record, excerpt)."""
        run_values: tuple[Any, ...] = ()
        for _first_line, _key, lines in self.spill.execute(query):
            for line_no, values, ts_us, request, extra, content_hash, excerpt, special in marshal.loads(lines):
                if values is not None:
                    run_values = values if values[_STARTED_AT] is None else _unspill_run(values)
                if special is None:
                    ts = None if ts_us is None else _EPOCH + timedelta(microseconds=ts_us)
                    record = Record(run_values, (ts, *request), extra, content_hash)
                elif type(special) is dict:
                    record = Record(run_values, None, extra, "", None, special)
                else:
                    ts = None if ts_us is None else _EPOCH + timedelta(microseconds=ts_us)
                    record = Record(run_values, (ts, *request), extra, content_hash, special)
                yield line_no, record, excerpt

    def _reject(self, line_no: int, error: RecordError, excerpt: bytes | None) -> None:
        self.rejects.add(LineError(line_no, str(error), excerpt_of(excerpt or b"")))


def _runs_of(
    lines: Iterator[tuple[int, Record, bytes | None]], reject: Callable[[int, RecordError, bytes | None], None]
) -> Iterator[ParsedRun]:
    """The runs of lines that come a run's lines together, merged, one at a time as their lines end: a run
    of more than RUN_PIECE requests in pieces, each piece's occurrences counted over the run's earlier
    pieces (_Occurrences). A line its run refuses (RecordError) is handed to reject and left out."""
    occurrences = _Occurrences()
    try:
        run: ParsedRun | None = None
        for line_no, record, excerpt in lines:
            if run is None or record.run[0] != run.key:
                if run is not None:
                    yield occurrences.settled(run)
                run = ParsedRun.start(line_no, record)
            try:
                run.add(line_no, record)
            except RecordError as exc:
                reject(line_no, exc, excerpt)
            if len(run.records) == RUN_PIECE:
                run, piece = run.next_piece(), run
                yield occurrences.settled(piece)
        if run is not None:
            yield occurrences.settled(run)
    finally:
        occurrences.close()


def _unspill_run(values: tuple[Any, ...]) -> tuple[Any, ...]:
    started_at = _EPOCH + timedelta(microseconds=values[_STARTED_AT])
    return (*values[:_STARTED_AT], started_at, *values[_STARTED_AT + 1 :])


class NotInOrder(Exception):
    """A file that runs_as_read() cannot hand over as it reads: a line was rejected, or a run's lines
    are split by another run's. Read it again with read_bench_file (which finds every reason)."""


@dataclass(slots=True)
class ReadCounts:
    """What runs_as_read() counted, complete once its runs are all handed over."""

    sha256: str = ""
    size_bytes: int = 0
    n_read: int = 0
    n_blank: int = 0
    n_records: int = 0
    n_runs: int = 0


def runs_as_read(
    stream: IO[bytes], counts: ReadCounts, *, max_line_bytes: int, require_model: bool = True
) -> Iterator[ParsedRun]:
    """Each run of a file whose runs are contiguous and whose lines are all valid, as soon as it is read.

    The fast path of the common file: no spill. NotInOrder (raised before the last run is
    handed over) when the file is not such a file; the caller then discards what it did
    with the runs. Whether a run's key comes back after another run's is checked with a
    private SQLite file of the keys seen, so memory stays flat however many runs there are.
    """
    seen = sqlite3.connect("")
    seen.executescript(
        "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA temp_store = FILE; PRAGMA cache_size = -2048;"
        "CREATE TABLE run (key PRIMARY KEY) WITHOUT ROWID;"
    )
    lines = _lines_in_order(stream, counts, seen, max_line_bytes, require_model)
    try:
        yield from _runs_of(lines, _not_in_order)
    finally:
        lines.close()
        seen.close()


def _lines_in_order(
    stream: IO[bytes], counts: ReadCounts, seen: sqlite3.Connection, max_line_bytes: int, require_model: bool
) -> Iterator[tuple[int, Record, None]]:
    """The file's records as they are read, counted; NotInOrder at the first line that is not valid, or
    the first run whose key came before (checked at the latest once every line is read, before the file's
    last run is handed over)."""
    reader = _HashingReader(stream)
    read_line = LineReader(require_model, RUN_CACHE_SIZE).read
    keys: list[tuple[str]] = []
    key = ""  # a run key is never empty
    for line_no, raw, too_long in iter_lines(reader, max_line_bytes):  # type: ignore[arg-type]
        if too_long:
            raise NotInOrder
        if not raw or raw.isspace():
            counts.n_blank += 1
            continue
        counts.n_read += 1
        try:
            record = read_line(raw)
        except RecordError:
            raise NotInOrder from None
        counts.n_records += 1
        if record.run[0] != key:
            key = record.run[0]
            counts.n_runs += 1
            keys.append((key,))
            if len(keys) >= SPILL_BATCH:
                _remember_keys(seen, keys)
        yield line_no, record, None
    _remember_keys(seen, keys)
    counts.sha256, counts.size_bytes = reader.digest.hexdigest(), reader.size


def _not_in_order(line_no: int, error: RecordError, excerpt: bytes | None) -> None:  # noqa: ARG001
    raise NotInOrder from None


def _remember_keys(seen: sqlite3.Connection, keys: list[tuple[str]]) -> None:
    try:
        seen.executemany("INSERT INTO run VALUES (?)", keys)
    except sqlite3.IntegrityError:  # a run's key again, after another run's lines
        raise NotInOrder from None
    keys.clear()


def read_bench_file(stream: IO[bytes], *, max_line_bytes: int, require_model: bool = True) -> SpilledFile:
    """Read and validate every line of stream; use the result as a context manager (it closes the spill).

    require_model=False: lines may lack the model (a declared one fills it, see ParsedRun.apply_declared).
    """
    spill = sqlite3.connect("")  # a private temporary database on disk, deleted when closed
    spill.executescript(
        "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA temp_store = FILE; PRAGMA cache_size = -8192;"
        + _SPILL_SCHEMA
    )
    parsed = SpilledFile(spill)
    try:
        _spill_lines(parsed, stream, max_line_bytes, require_model)
    except BaseException:
        spill.close()
        raise
    return parsed


class _Pieces:
    """The lines of the spill file being written: the current piece, and pieces not yet written."""

    def __init__(self, parsed: SpilledFile) -> None:
        self.parsed = parsed
        self.key = ""  # the current piece's run (a run key is never empty)
        self.first_line = 0
        self.lines: list[tuple[Any, ...]] = []
        self.last_values: tuple[Any, ...] | None = None
        self.pending: list[tuple[int, str, bytes]] = []
        self.n_pending = 0
        self.segments: list[tuple[str, int]] = []  # (run key, line) where the lines turn to another run

    def add(self, line_no: int, record: Record, raw: bytes) -> None:
        run, request = record.run, record.request
        if run[0] != self.key:
            self.close_piece()
            self.segments.append((run[0], line_no))
            self.key, self.first_line = run[0], line_no
        elif len(self.lines) >= SPILL_BATCH:
            self.close_piece()
            self.first_line = line_no
        values = excerpt = None
        if run is not self.last_values and run != self.last_values:
            values, excerpt, self.last_values = run, raw[:EXCERPT_BYTES], run
            if run[_STARTED_AT] is not None:  # marshal writes no datetime
                values = (*run[:_STARTED_AT], (run[_STARTED_AT] - _EPOCH) // _MICROSECOND, *run[_STARTED_AT + 1 :])
        if request is None:  # a summary record
            self.lines.append((line_no, values, None, None, record.extra, "", excerpt, record.summary))
            return
        ts = request[0]
        ts_us = None if ts is None else (ts - _EPOCH) // _MICROSECOND
        self.lines.append((line_no, values, ts_us, request[1:], record.extra, record.content_hash, excerpt, record.itl))

    def close_piece(self) -> None:
        """End the current piece (the next one starts with its run fields); write the pieces when they are many."""
        if self.lines:
            self.pending.append((self.first_line, self.key, marshal.dumps(self.lines)))
            self.n_pending += len(self.lines)
            self.lines, self.last_values = [], None
        if self.n_pending >= SPILL_BATCH:
            self.write()

    def write(self) -> None:
        spill = self.parsed.spill
        spill.executemany(_SPILL_PIECE, self.pending)
        spill.executemany(_SPILL_RUN, self.segments)
        self.parsed.n_records += self.n_pending
        self.parsed.n_segments += len(self.segments)
        self.pending, self.n_pending, self.segments = [], 0, []


def _spill_lines(parsed: SpilledFile, stream: IO[bytes], max_line_bytes: int, require_model: bool = True) -> None:
    reader = _HashingReader(stream)
    read_line = LineReader(require_model, RUN_CACHE_SIZE).read
    pieces = _Pieces(parsed)
    for line_no, raw, too_long in iter_lines(reader, max_line_bytes):  # type: ignore[arg-type]
        if too_long:
            parsed.n_read += 1
            parsed.rejects.add(
                LineError(line_no, f"line is longer than the limit of {max_line_bytes:,} bytes", excerpt_of(raw))
            )
            continue
        if not raw or raw.isspace():
            parsed.n_blank += 1
            continue
        parsed.n_read += 1
        try:
            record = read_line(raw)
        except RecordError as exc:
            parsed.rejects.add(LineError(line_no, str(exc), excerpt_of(raw)))
            continue
        pieces.add(line_no, record, raw)
    pieces.close_piece()
    pieces.write()
    parsed.spill.commit()
    parsed.n_runs = parsed.spill.execute("SELECT count(*) FROM run").fetchone()[0]
    parsed.sha256 = reader.digest.hexdigest()
    parsed.size_bytes = reader.size
