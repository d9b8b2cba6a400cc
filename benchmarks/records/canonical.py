"""The canonical writers: a record's field values laid out in its nested kvlab.bench/1 or /2 shape, as
export_bench writes it. Pure; the reverse of the mapping in schema.py, whose field paths it follows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .schema import REQUEST_FIELDS, RUN_FIELDS, RUN_FIELDS_V2, RUN_FIELDS_V2_ONLY, SCHEMA_V1, SCHEMA_V2


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _place(record: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = record
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def to_canonical(run: dict[str, Any], request: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Build the nested kvlab.bench/1 record from canonical field values."""
    record: dict[str, Any] = {"schema": SCHEMA_V1, "run": {}, "request": {}}
    for name, path in {**RUN_FIELDS, **REQUEST_FIELDS}.items():
        value = run[name] if name in RUN_FIELDS else request[name]
        if isinstance(value, datetime):
            value = _iso(value)
        _place(record, path, value)
    if extra:
        record["extra"] = extra
    return record


def to_canonical_v2(
    run: dict[str, Any],
    *,
    request: dict[str, Any] | None = None,
    itl: Any = None,
    summary: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build a kvlab.bench/2 record (a request, or a run's summary) from canonical field values.

    Every kvlab.bench/1 key is written (null where unknown), as kvlab.bench/1 exports do; of
    the kvlab.bench/2 run fields only those the run has.
    """
    record: dict[str, Any] = {"schema": SCHEMA_V2, "run": {}}
    for name, path in RUN_FIELDS_V2.items():
        value = run.get(name)
        if value is None and name in RUN_FIELDS_V2_ONLY:
            continue
        if isinstance(value, datetime):
            value = _iso(value)
        elif name == "provenance":
            value = dict(value or ())
        _place(record, path, value)
    if summary is not None:
        record["summary"] = summary
    else:
        assert request is not None, "a record is a request or a summary"
        record["request"] = {}
        for name, path in REQUEST_FIELDS.items():
            value = request[name]
            _place(record, path, _iso(value) if isinstance(value, datetime) else value)
        if itl is not None:
            record["request"]["itl_s"] = list(itl)
    if extra:
        record["extra"] = extra
    return record
