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

    A UTF-8 byte order mark at the start of the file is not part of line 1. A line
    longer than max_line_bytes is not held in memory: its first bytes are kept for
    the excerpt and the rest is skipped up to the next newline.
    """
    line_no = 0
    pending = b""  # the start of a line that continues in the next chunk
    oversized = False  # pending is only the excerpt of a line already too long
    for chunk in _chunks_without_bom(stream):
        parts = chunk.split(b"\n")
        tail = parts.pop()
        if parts:
            if oversized:
                line_no += 1
                yield line_no, pending, True
                del parts[0]
            elif pending:
                parts[0] = pending + parts[0]
            pending, oversized = b"", False
            for part in parts:
                line_no += 1
                if len(part) > max_line_bytes:
                    yield line_no, part[:EXCERPT_KEPT], True
                else:
                    yield line_no, part, False
        if not oversized:
            pending += tail
            if len(pending) > max_line_bytes:
                pending, oversized = pending[:EXCERPT_KEPT], True
    if pending or oversized:
        yield line_no + 1, pending, oversized


def _chunks_without_bom(stream: IO[bytes]) -> Iterator[bytes]:
    head = b""
    while len(head) < len(UTF8_BOM) and (more := stream.read(CHUNK_BYTES)):
        head += more
    head = head.removeprefix(UTF8_BOM)
    if head:
        yield head
    while chunk := stream.read(CHUNK_BYTES):
        yield chunk


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


# Every digit mapped to "0", so a run of 19 digits (an integer literal that may not
# fit 64 bits, which orjson would turn into a float) is found by a substring search.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19


def decode_line(raw: bytes) -> dict[str, Any]:
    """Decode one line into a JSON object, or raise RecordError with the reason.

    The common line takes orjson's fast parser, accepted only when it certainly read
    the line as the strict parser would (the line is what orjson writes for the object,
    or has no \\u escape, long integer or duplicate key); anything else takes the strict
    path, which also gives the precise reason.
    """
    try:
        value = orjson.loads(raw)
        if type(value) is dict:
            written = orjson.dumps(value)
            if written == raw:
                # The line is exactly what orjson writes for the object (kvlab's own export): no
                # duplicate key (orjson would have dropped one), no integer read as a float (it
                # would be written back with a '.' or an 'e'), no escape but those orjson writes,
                # which both parsers read alike.
                return value
            if (
                (b"\\" not in raw or b"\\u" not in raw)  # a one-byte search first: most lines escape nothing
                and _LONG_NUMBER not in raw.translate(_DIGITS_AS_ZERO)
                and written.count(b":") == raw.count(b":")
            ):
                # Without \\u escapes every ':' of a line ends a key or sits verbatim in a
                # string, and orjson writes both back alike; a duplicate key that orjson
                # dropped leaves the line with more ':' than the re-serialized object.
                return value
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass
    return _decode_strictly(raw)


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
