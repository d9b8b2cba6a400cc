"""Read a whole bench_results.jsonl file into runs, or into the reasons it is rejected.

Pure: bytes in, a `ParsedFile` out. The importer stores a file only when this
found no rejected line (all-or-nothing), so every line is checked before any row
is written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import IO, Any

from .jsonl import LineError, RecordError, decode_line, excerpt_of, iter_lines
from .records import RUN_FIELD_NAMES, Record, normalize


@dataclass(slots=True)
class ParsedRun:
    key: str
    first_line: int
    values: tuple[Any, ...]  # run fields in RUN_FIELD_NAMES order, merged over its lines
    records: list[tuple[int, Record, int]] = field(default_factory=list)  # (line_no, record, occurrence)
    occurrences: dict[str, int] = field(default_factory=dict)  # content hash -> times seen
    value_lines: dict[int, int] = field(default_factory=dict)  # field index -> line that set it

    def run_dict(self) -> dict[str, Any]:
        return dict(zip(RUN_FIELD_NAMES, self.values, strict=True))


@dataclass(slots=True)
class ParsedFile:
    sha256: str = ""
    size_bytes: int = 0
    n_read: int = 0
    n_blank: int = 0
    runs: dict[str, ParsedRun] = field(default_factory=dict)
    rejects: list[LineError] = field(default_factory=list)

    @property
    def n_records(self) -> int:
        return sum(len(run.records) for run in self.runs.values())


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


def read_bench_file(stream: IO[bytes], *, max_line_bytes: int) -> ParsedFile:
    parsed = ParsedFile()
    reader = _HashingReader(stream)
    run_cache: dict[Any, tuple[Any, ...]] = {}
    for line_no, raw, too_long in iter_lines(reader, max_line_bytes):  # type: ignore[arg-type]
        if too_long:
            parsed.n_read += 1
            parsed.rejects.append(
                LineError(line_no, f"line is longer than the limit of {max_line_bytes:,} bytes", excerpt_of(raw))
            )
            continue
        if not raw or raw.isspace():
            parsed.n_blank += 1
            continue
        parsed.n_read += 1
        try:
            record = normalize(decode_line(raw), run_cache)
            _add(parsed, line_no, record)
        except RecordError as exc:
            parsed.rejects.append(LineError(line_no, str(exc), excerpt_of(raw)))
    parsed.sha256 = reader.digest.hexdigest()
    parsed.size_bytes = reader.size
    return parsed


def _add(parsed: ParsedFile, line_no: int, record: Record) -> None:
    key = record.run[0]
    run = parsed.runs.get(key)
    if run is None:
        run = ParsedRun(key=key, first_line=line_no, values=record.run)
        run.value_lines = {i: line_no for i, v in enumerate(record.run) if v is not None}
        parsed.runs[key] = run
    elif record.run is not run.values and record.run != run.values:
        _merge_run_values(run, record, line_no)
    occurrence = run.occurrences.get(record.content_hash, 0)
    run.occurrences[record.content_hash] = occurrence + 1
    run.records.append((line_no, record, occurrence))


def _merge_run_values(run: ParsedRun, record: Record, line_no: int) -> None:
    """A run's lines must agree; a field missing on some lines is taken from the others."""
    values = list(run.values)
    for i, value in enumerate(record.run):
        if value is None:
            continue
        current = values[i]
        if current is None:
            values[i] = value
            run.value_lines[i] = line_no
        elif current != value:
            name = RUN_FIELD_NAMES[i]
            raise RecordError(
                f"run {run.key!r}: {name!r} is {value!r} here but {current!r} on line {run.value_lines[i]}; "
                "all lines of a run must describe the same run"
            )
    run.values = tuple(values)
