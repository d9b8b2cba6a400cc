"""Reading JSONL strictly: lines split on b"\\n" only, UTF-8, one JSON object per line.

Pure functions, no database. Each problem becomes a `LineError` carrying the
1-based line number and a reason a person can act on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import orjson

CHUNK_BYTES = 1 << 20
UTF8_BOM = b"\xef\xbb\xbf"
EXCERPT_KEPT = 200  # bytes of an over-long line kept for its excerpt


@dataclass(frozen=True, slots=True)
class LineError:
    line_no: int
    reason: str
    excerpt: str = ""


class RecordError(ValueError):
    """A line's content is not acceptable; the message is the reason shown to the user."""


def excerpt_of(raw: bytes, limit: int = 160) -> str:
    text = raw[:limit].decode("utf-8", errors="backslashreplace")
    return text + ("…" if len(raw) > limit else "")


def iter_lines(stream: IO[bytes], max_line_bytes: int) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (line_no, raw, too_long) for every line, split on b"\\n" only.

    A line longer than max_line_bytes is not held in memory: its first bytes are
    kept for the excerpt and the rest is skipped up to the next newline.
    """
    line_no = 0
    pending = b""
    oversized = False
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk:
            break
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end == -1:
                if not oversized:
                    pending += chunk[start:]
                    if len(pending) > max_line_bytes:
                        pending = pending[:EXCERPT_KEPT]
                        oversized = True
                break
            line_no += 1
            if oversized:
                yield line_no, pending, True
            else:
                line = pending + chunk[start:end] if pending else chunk[start:end]
                if len(line) > max_line_bytes:
                    yield line_no, line[:EXCERPT_KEPT], True
                else:
                    yield line_no, line, False
            pending = b""
            oversized = False
            start = end + 1
    if pending or oversized:
        yield line_no + 1, pending, oversized


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise RecordError(f"duplicate key {key!r} in one object")
            seen.add(key)
    return obj


def _reject_constant(name: str) -> Any:
    raise RecordError(f"{name} is not valid JSON (numbers must be finite)")


_decoder = json.JSONDecoder(object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant)


# orjson reads an integer literal beyond 64 bits as a float; Python's json keeps it exact.
_FLOAT_FROM_BIG_INT = float(2**63)


def decode_line(raw: bytes, line_no: int) -> dict[str, Any]:
    """Decode one line into a JSON object, or raise RecordError with the reason.

    The common case takes orjson's fast parser, and is accepted only when it is
    certain to read the line exactly as the strict parser would; anything else
    (nested objects, \\u escapes, long integers, errors) takes the strict path,
    which also gives the precise reason.
    """
    if line_no == 1 and raw.startswith(UTF8_BOM):
        raw = raw[len(UTF8_BOM) :]
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = None
    if type(value) is dict and b"\\u" not in raw and _read_exactly(raw, value):
        return value
    return _decode_strictly(raw)


def _read_exactly(raw: bytes, obj: dict[str, Any]) -> bool:
    """True when orjson's flat object is what the strict parser would return.

    Duplicate keys: without \\u escapes, every ':' in the raw line either ends a key
    (one per key) or sits verbatim inside a string, so a dropped duplicate leaves an
    extra ':' in the raw line that no kept key or string accounts for. Huge integers:
    orjson turns them into floats, so any float that large goes the strict way.
    Nested containers are left to the strict parser.
    """
    colons = len(obj)
    for key, value in obj.items():
        if ":" in key:
            colons += key.count(":")
        kind = type(value)
        if kind is str:
            if ":" in value:
                colons += value.count(":")
        elif kind is float:
            if not -_FLOAT_FROM_BIG_INT < value < _FLOAT_FROM_BIG_INT:
                return False
        elif kind is dict or kind is list:
            return False
    return colons == raw.count(b":")


def _decode_strictly(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); save the file as UTF-8"
        ) from None
    try:
        value = _decoder.decode(text)
    except RecordError:  # from the hooks: duplicate keys, NaN/Infinity
        raise
    except json.JSONDecodeError as exc:
        raise RecordError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise RecordError("invalid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal past Python's digit limit
        raise RecordError(f"invalid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RecordError(f"a line must hold a JSON object, not {json_type_name(value)}")
    return value


def json_type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
