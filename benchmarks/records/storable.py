"""What the database stores of a JSON value or a text: refused in a record (check_json), made storable
in a server's answers (storable_json, storable_text). Pure: both read the one set of limits below.
"""

from __future__ import annotations

import math
from typing import Any

from .jsonl import RecordError

# What a JSON column holds on every engine: 64-bit integers, finite floats, no NUL
# (PostgreSQL's text and jsonb refuse "\u0000"), and a nesting depth that cannot
# exhaust a recursive reader or writer.
MIN_JSON_INT, MAX_JSON_INT = -(2**63), 2**63 - 1
MAX_JSON_DEPTH = 32


def check_json(value: Any, name: str) -> None:
    """Raise RecordError unless value is JSON that a JSON column stores on every engine."""
    found = _json_problem(value, 0)
    if found is not None:
        path, reason = found
        where = "".join([name, *reversed(path)])
        where = where if len(where) <= 80 else where[:77] + "…"
        raise RecordError(f"a value cannot be stored: {where!r} {reason}")


def storable_json(value: Any, depth: int = 0) -> Any:
    """value with what check_json refuses replaced, for a server's answers: kept, not refused.

    NUL and lone surrogates become replacement characters, a non-finite float or an
    integer beyond 64 bits None, and anything nested past MAX_JSON_DEPTH None.
    """
    kind = type(value)
    if kind is str:
        return storable_text(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
        return value if MIN_JSON_INT <= value <= MAX_JSON_INT else None
    if value is None or kind is bool or depth >= MAX_JSON_DEPTH:
        return value if value is None or kind is bool else None
    if isinstance(value, dict):
        return {storable_text(str(k)): storable_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable_json(v, depth + 1) for v in value]
    return None


def storable_text(value: str) -> str:
    """value without what a text column refuses: NUL (PostgreSQL) and lone surrogates (UTF-8)."""
    if not value.isascii():
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\x00", "\ufffd")


def _json_problem(value: Any, depth: int) -> tuple[list[str], str] | None:
    """(the path to the first unstorable value, innermost part first, and why), or None."""
    kind = type(value)
    if kind is str:
        return ([], "contains a NUL character") if "\x00" in value else None
    if kind is float:
        return None if math.isfinite(value) else ([], "must be a finite number (it is past the float range)")
    if kind is int:
        if MIN_JSON_INT <= value <= MAX_JSON_INT:
            return None
        return [], "is an integer beyond 64-bit"
    if value is None or kind is bool:
        return None
    if kind is dict or kind is list:
        if depth >= MAX_JSON_DEPTH:
            return [], f"is nested more than {MAX_JSON_DEPTH} levels deep"
        items = value.items() if kind is dict else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and "\x00" in key:
                return [f".{key!r}"], "has a key with a NUL character"
            found = _json_problem(item, depth + 1)
            if found is not None:
                found[0].append(f".{key}" if kind is dict else f"[{key}]")
                return found
        return None
    return [], f"is not a JSON value ({kind.__name__})"
