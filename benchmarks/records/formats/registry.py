"""Which format an input is, and its records as kvlab JSONL for the one import pipeline.

`detect(path)` reads the content (never the file name): kvlab's own JSONL (kvlab.bench/1,
kvlab.bench/2 or the flat lab shape) first, then each tool's format module in
FORMAT_MODULES order. A directory is offered whole to the formats that read directories
(a vLLM sweep, an llmperf summary with its responses); one that none claims is read file
by file (and subdirectory by subdirectory), all of it one import.

`open_input(path, declared)` gives the input as a stream of kvlab JSONL lines: kvlab
files pass through as they are; other formats' records are serialised with orjson, one
per line, so the reader validates them exactly like kvlab's own lines (all-or-nothing,
idempotent, constant memory). orjson writes a non-finite float (a tool's NaN or
Infinity) as null: "not known" (see docs/record-schema.md).

`join_given(paths)` joins the files given together (one command line, one upload) that are
one tool's run, as that tool's directory read joins them (an llmperf summary and its responses,
AIPerf's exports and inputs.json, a vLLM sweep's run files and summary): a format module that
joins files exposes ``joins(names) -> list[list[str]]`` over the names of one folder's files.

Format modules are imported lazily and tolerantly: one that is missing or fails to
import is left out (and logged), the others work.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import orjson

from ..jsonl import UTF8_BOM, LineError
from ..schema import ALIASES, SCHEMAS
from . import SAMPLE_BYTES, Declared, Format, FormatError, Sample, Source

log = logging.getLogger(__name__)

KVLAB = "kvlab"  # kvlab's own JSONL: kvlab.bench/1, kvlab.bench/2 and the flat lab shape
DIRECTORY = "directory"  # a directory no format claims whole: its files, each detected
FORMAT_MODULES = (
    "vllm",
    "sglang",
    "guidellm",
    "aiperf",
    "genai_perf",
    "llmperf",
    "llama_bench",
    "llama_server_log",
)
CHUNK_BYTES = 1 << 20

_RUN_KEYS = frozenset(ALIASES["run_id"])
_OUTCOME_KEYS = frozenset(ALIASES["ok"] + ALIASES["http_status"])


def formats() -> list[Format]:
    """The format modules that import and expose NAME, sniff and convert, in FORMAT_MODULES order."""
    found: list[Format] = []
    for name in FORMAT_MODULES:
        module = _load(name)
        if module is not None:
            found.append(module)  # type: ignore[arg-type]
    return found


def names() -> list[str]:
    return [KVLAB, *(module.NAME for module in formats())]


def _load(name: str) -> ModuleType | None:
    dotted = name if "." in name else f"{__package__}.{name}"
    try:
        module = importlib.import_module(dotted)
    except Exception:  # a converter still being written, or broken: the others keep working
        log.warning("format module %s could not be imported; left out", dotted, exc_info=True)
        return None
    if not all(hasattr(module, attr) for attr in ("NAME", "sniff", "convert")):
        log.warning("format module %s lacks NAME, sniff or convert; left out", dotted)
        return None
    return module


def by_name(name: str) -> Format | None:
    if name == KVLAB:
        return None
    for module in formats():
        if name == module.NAME:
            return module
    raise FormatError(f"unknown format {name!r}; kvlab reads {', '.join(names())}")


# --- detection ------------------------------------------------------------------------


def sample_of(path: Path) -> Sample:
    if path.is_dir():
        return Sample(names=tuple(str(p.relative_to(path)) for p in files_of(path)), is_dir=True)
    with path.open("rb") as fh:
        return Sample(head=fh.read(SAMPLE_BYTES))


def files_of(directory: Path) -> tuple[Path, ...]:
    """A directory's files, recursively, sorted; hidden files and directories left out."""
    return tuple(
        sorted(
            p
            for p in directory.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)
        )
    )


def is_kvlab(sample: Sample) -> bool:
    """The first non-blank line is a kvlab record: a canonical one, or a flat one with a run id and an outcome."""
    if sample.is_dir:
        return False
    for line in sample.head.removeprefix(UTF8_BOM).split(b"\n"):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(obj, dict):
            return False
        if "schema" in obj:
            return obj["schema"] in SCHEMAS
        return bool(_RUN_KEYS & obj.keys()) and bool(_OUTCOME_KEYS & obj.keys())
    return False


def detect(path: Path) -> str | None:
    """The input's format name; DIRECTORY for a directory no format claims; None for a file none claims."""
    sample = sample_of(path)
    return detect_sample(sample)


def detect_sample(sample: Sample) -> str | None:
    if is_kvlab(sample):
        return KVLAB
    for module in formats():
        try:
            if module.sniff(sample):
                return module.NAME
        except Exception:  # a sniffer that trips on odd content does not decide for the others
            log.warning("%s.sniff failed", module.NAME, exc_info=True)
    return DIRECTORY if sample.is_dir else None


# --- the input as kvlab JSONL ------------------------------------------------------------


def input_identity(path: Path, files: Sequence[Path] = ()) -> tuple[str, int]:
    """(sha256, size) of an input: a file's bytes; for a directory, its files' paths and bytes (for files
    given together, those files in the folder they share: the identity of a directory holding just them)."""
    if not path.is_dir():
        with path.open("rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest(), path.stat().st_size
    digest, size = hashlib.sha256(), 0
    for file in sorted(files, key=lambda p: p.name) if files else files_of(path):
        with file.open("rb") as fh:
            digest.update(str(file.relative_to(path)).encode("utf-8", "surrogateescape") + b"\0")
            digest.update(hashlib.file_digest(fh, "sha256").digest())
        size += file.stat().st_size
    return digest.hexdigest(), size


# --- files given together --------------------------------------------------------------


@dataclass(frozen=True)
class Joined:
    """Files given together that are one tool's run: read as the folder they share, holding just them."""

    format: str
    folder: Path
    files: tuple[Path, ...]  # in the folder, in the order given
    given: tuple[Path, ...]  # the same files as they were given


def join_given(paths: Sequence[Path], format: str | None = None) -> list[Path | Joined]:
    """The given files as inputs, in the order given: the files of one tool's run (in one folder, as that
    tool's directory read joins them) are one Joined input; every other file is an input of its own.

    Each file's format is detected from its content (or forced by name); a format's ``joins`` then names
    the files of one folder that are one run. Only files of one folder join: a folder holds one name once.
    """
    if format is not None:
        by_name(format)
    if len(paths) < 2:
        return list(paths)
    folders: dict[Path, list[Path]] = {}
    for path in paths:
        folders.setdefault(path.resolve().parent, []).append(path)
    joined_of: dict[Path, Joined] = {}
    for members in folders.values():
        if len(members) < 2:
            continue
        named = {path.name: path for path in members}
        if len(named) < len(members):  # the same file given twice, or through two paths: each stays alone
            continue
        detected = {name: format or detect(path) for name, path in named.items()}
        for name, group in _groups(detected):
            given = [path for path in members if path.name in group]
            folder = given[0].parent  # as typed; every member lies in it (the same resolved folder)
            joined = Joined(name, folder, tuple(folder / path.name for path in given), tuple(given))
            joined_of.update(dict.fromkeys(given, joined))
    inputs: list[Path | Joined] = []
    for path in paths:
        joined = joined_of.get(path)
        if joined is None:
            inputs.append(path)
        elif joined not in inputs:
            inputs.append(joined)
    return inputs


def _groups(detected: Mapping[str, str | None]) -> list[tuple[str, set[str]]]:
    """(format, names) for each run the formats' ``joins`` find among one folder's files."""
    left = dict(detected)
    groups: list[tuple[str, set[str]]] = []
    for module in formats():
        joins = getattr(module, "joins", None)
        if joins is None:
            continue
        try:
            found = joins(left)
        except Exception:  # a joiner that trips on odd names does not decide for the others
            log.warning("%s.joins failed", module.NAME, exc_info=True)
            continue
        for names in found:
            group = {name for name in names if name in left}
            if len(group) > 1:
                groups.append((module.NAME, group))
                for name in group:
                    del left[name]
    return groups


@dataclass
class _Segment:
    first_line: int  # the stream's line where this part starts
    name: str  # the file (or directory) it comes from
    converted: bool  # records converted from another tool's file (else a kvlab file's own lines)


@dataclass
class InputStream:
    """An input read as kvlab JSONL: a readable binary stream for the reader, plus what went wrong.

    `error` is the FormatError (or converter failure) that ended the stream early, as a
    LineError on the line after the last record; `where(line_error)` names the file and the
    record or line within it.
    """

    path: Path
    declared: Declared
    format: str
    files: tuple[Path, ...] = ()  # files given together, read as the folder `path` holding just them
    error: LineError | None = None
    segments: list[_Segment] = field(default_factory=list)
    _lines: int = 0
    _buffer: bytes = b""
    _chunks: Iterator[bytes] | None = None

    def read(self, n: int = -1) -> bytes:
        if self._chunks is None:
            self._chunks = self._input(self.path, self.format)
        while n < 0 or len(self._buffer) < n:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                break
            self._buffer += chunk
        if n < 0:
            out, self._buffer = self._buffer, b""
        else:
            out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def conversion_error(self) -> LineError | None:
        return self.error

    def where(self, error: LineError) -> LineError:
        """The error with the file and its own line or record named, when the stream joins parts. The error
        that ended a conversion names its file and the place within it already (no record of its own)."""
        if error == self.error:
            return error
        segment = next((s for s in reversed(self.segments) if s.first_line <= error.line_no), None)
        if segment is None or (len(self.segments) == 1 and not segment.converted):
            return error
        local = error.line_no - segment.first_line + 1
        unit = "record" if segment.converted else "line"
        return LineError(error.line_no, f"{segment.name}, {unit} {local}: {error.reason}", error.excerpt)

    def _input(self, path: Path, format: str | None) -> Iterator[bytes]:
        if format == DIRECTORY:
            for child in sorted(path.iterdir()):
                if child.name.startswith("."):
                    continue
                yield from self._input(child, detect(child))
                if self.error is not None:
                    return
            return
        if format is None or format == KVLAB:
            yield from self._kvlab_file(path)
            return
        yield from self._converted(path, format, self.files if path == self.path else ())

    def _kvlab_file(self, path: Path) -> Iterator[bytes]:
        self.segments.append(_Segment(self._lines + 1, str(path), converted=False))
        last = b"\n"
        with path.open("rb") as fh:
            chunk = fh.read(CHUNK_BYTES).removeprefix(UTF8_BOM)
            while chunk:
                self._lines += chunk.count(b"\n")
                last = chunk[-1:]
                yield chunk
                chunk = fh.read(CHUNK_BYTES)
        if last != b"\n":  # the next part starts on a line of its own
            self._lines += 1
            yield b"\n"

    def _converted(self, path: Path, format: str, files: tuple[Path, ...] = ()) -> Iterator[bytes]:
        module = by_name(format)
        assert module is not None
        self.segments.append(_Segment(self._lines + 1, str(path), converted=True))
        source = Source(path, files or (files_of(path) if path.is_dir() else ()))
        n = 0
        try:
            for record in module.convert(source, self.declared):
                n += 1
                line = _serialise(record, n)
                self._lines += 1
                yield line
        except FormatError as exc:
            self.error = LineError(self._lines + 1, f"{path} ({format}): {exc}")
        except Exception as exc:  # a converter's bug on odd input rejects the input; it never crashes the import
            log.exception("the %s converter failed on %s", format, path)
            self.error = LineError(
                self._lines + 1,
                f"{path} ({format}): the converter failed at record {n + 1}: {type(exc).__name__}: {exc}",
            )


def _serialise(record: Any, n: int) -> bytes:
    if not isinstance(record, dict):
        raise FormatError(f"record {n} is not an object (a converter yields dicts)")
    try:
        return orjson.dumps(record) + b"\n"
    except (orjson.JSONEncodeError, TypeError) as exc:
        where = _beyond_64_bits(record)
        if where:
            raise FormatError(f"record {n}: {where} is an integer beyond the 64 bits kvlab stores") from None
        raise FormatError(f"record {n} cannot be written as JSON: {exc}") from None


def _beyond_64_bits(value: Any, path: str = "", depth: int = 0) -> str:
    """The place of the first integer in value that 64 bits cannot hold ("summary.input_tokens"), or ""."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (path or "(the value)") if not -(2**63) <= value < 2**64 else ""
    if depth > 64:
        return ""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _beyond_64_bits(item, f"{path}.{key}" if path else str(key), depth + 1)
        if found:
            return found
    return ""


def open_input(
    path: Path, declared: Declared, format: str | None = None, files: Sequence[Path] = ()
) -> tuple[str, IO[bytes] | InputStream]:
    """(the format, the input as kvlab JSONL). A kvlab file is opened as it is (the fast path).

    format forces a format by name; FormatError when it names none. files: files given together (a
    Joined input), read with format as the folder `path` holding just them.
    """
    if format is not None:
        by_name(format)
    if files:
        if format is None:
            raise FormatError("files given together are read as one format: name it")
        return format, InputStream(path, declared, format, tuple(files))
    detected = format or detect(path)
    if detected in (None, KVLAB) and not path.is_dir():
        return KVLAB, path.open("rb")
    return detected or KVLAB, InputStream(path, declared, detected or KVLAB)
