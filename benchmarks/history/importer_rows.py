"""The rows an import stores, built and written in raw SQL: new runs' columns and request rows,
adapted with the backend's own adapters (or exact, faster ones for SQLite), and the statements that
insert them or give a run stored in pieces its whole values."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import orjson
from django.db import connection, models
from django.db.models import Model
from django.utils import timezone

from ..models import FileImport, RequestResult, Run
from ..records.metrics import RunSummary, RunTally, summarize
from ..records.schema import REQUEST_FIELD_NAMES, RUN_FIELD_NAMES, Record
from ..records.summaries import with_tool_summary
from . import sqlite_batches
from .reader import ParsedRun

# Run model field for each canonical run field ("run_id" is the run's key; a record's
# started_at is stored in Run.started_at, with its provenance, in place of the derived one).
RUN_COLUMNS = {name: ("key" if name == "run_id" else name) for name in RUN_FIELD_NAMES if name != "started_at"}
# Text columns store "" for absent values; the others store NULL.
BLANK_IS_NONE = {
    "label",
    "gpu",
    "cache_type_k",
    "cache_type_v",
    "flash_attn",
    "server_flags",
    "tool",
    "tool_version",
    "tool_format",
    "engine",
}
INSERT_BATCH = 5_000


# --- bulk inserts ----------------------------------------------------------------
# The hot path of a large import. A plain executemany inside the caller's transaction
# is several times faster than Django building a model (and compiling SQL in
# 999-parameter batches) per row. Values were validated by records.normalize, are
# adapted with the backend's own adapters, and the database constraints still apply.

SUMMARY_COLUMNS = RunSummary._fields
_STORED_RUN_FIELDS = tuple(RUN_COLUMNS)  # the run fields with a column of their own, in RUN_FIELD_NAMES order
RUN_INSERT_COLUMNS = (
    *(RUN_COLUMNS[name] for name in _STORED_RUN_FIELDS),
    *SUMMARY_COLUMNS,
    "summary",
    "summary_extra",
    "requests_sampled",
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
_RUN_INDEX = {name: i for i, name in enumerate(RUN_FIELD_NAMES)}
_STORED_INDEXES = tuple(_RUN_INDEX[name] for name in _STORED_RUN_FIELDS)
_SOURCE_INDEX = _STORED_RUN_FIELDS.index("source")
_PROVENANCE_INDEX = _STORED_RUN_FIELDS.index("provenance")
_BLANK_INDEXES = tuple(_STORED_RUN_FIELDS.index(name) for name in BLANK_IS_NONE)
_STARTED_AT_COLUMN = SUMMARY_COLUMNS.index("started_at")  # among the aggregates

# The run columns an INSERT may leave out when every row of a batch holds NULL there: nullable,
# with no database default, so the row stores the very same NULL (a lab file's runs have no
# tool summary, server, telemetry …: a fifth of the columns, not bound for every run).
_OMISSIBLE_RUN_COLUMNS = frozenset(
    field.column
    for field in Run._meta.concrete_fields
    if field.null and field.db_default is models.NOT_PROVIDED and field.column in RUN_INSERT_COLUMNS
)
_OMISSIBLE_SET = frozenset(i for i, column in enumerate(RUN_INSERT_COLUMNS) if column in _OMISSIBLE_RUN_COLUMNS)


def new_run_statements(columns: list[Sequence[Any]], run_table: str) -> list[tuple[str, list[Any]]]:
    """The INSERTs of a batch of new runs (its columns), leaving out the omissible columns NULL in every row."""
    n = len(columns[0])
    kept = tuple(
        i for i in range(len(RUN_INSERT_COLUMNS)) if not (i in _OMISSIBLE_SET and n and columns[i].count(None) == n)
    )
    return _run_insert(run_table, kept).column_statements([columns[i] for i in kept])


# A run stored in pieces is set to the whole run's values and aggregates by its key, with its last piece.
_UPDATED_RUN_COLUMNS = tuple(
    i for i, column in enumerate(RUN_INSERT_COLUMNS) if column not in ("key", "created_at", "first_import_id")
)


@functools.cache
def _run_update() -> str:
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(RUN_INSERT_COLUMNS[i])} = %s" for i in _UPDATED_RUN_COLUMNS)
    return f"UPDATE {quote(Run._meta.db_table)} SET {assignments} WHERE {quote('key')} = %s"


def finished_run_update(last: ParsedRun, tally: RunTally, file_import: FileImport) -> tuple[str, list[Any]]:
    """The UPDATE that gives a run stored in pieces its whole values and aggregates (last: its last piece)."""
    aggregates = tally.result(last.values[_WALL_S])
    columns = new_run_columns([last], file_import, tallied=[aggregates])
    return _run_update(), [*(columns[i][0] for i in _UPDATED_RUN_COLUMNS), last.key]


@functools.cache
def _run_insert(run_table: str, kept: tuple[int, ...]) -> sqlite_batches.RowsStatement:
    return sqlite_batches.insert_rows(run_table, [RUN_INSERT_COLUMNS[i] for i in kept])


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


def json_adapter(field: models.JSONField[Any]) -> Callable[[Any], Any]:
    """The backend's adaptation of a JSON column's value (not None), or a faster one for SQLite.

    Django stores json.dumps(value) in SQLite's text column and every reader parses it back
    (JSONField.from_db_value, SQLite's JSON functions); orjson writes the same JSON value, compactly,
    in a quarter of the time: the same numbers (the shortest text that reads back as the same double),
    keys in the same order. What orjson refuses (a lone surrogate) is left to Django's adapter.
    """

    def adapt(value: Any) -> Any:
        return connection.ops.adapt_json_value(value, field.encoder)

    if connection.vendor != "sqlite" or field.encoder is not None:
        return adapt
    dumps, refused = orjson.dumps, orjson.JSONEncodeError

    def adapt_sqlite(value: Any) -> Any:
        try:
            return dumps(value).decode()
        except refused:
            return adapt(value)

    return adapt_sqlite


_STORED_VALUES = itemgetter(*_STORED_INDEXES)
_WALL_S, _STARTED_AT = _RUN_INDEX["wall_s"], _RUN_INDEX["started_at"]
_RUN_PROVENANCE = _RUN_INDEX["provenance"]
_ROW_TS, _REQUEST_TS = REQUEST_INSERT_COLUMNS.index("ts"), REQUEST_FIELD_NAMES.index("ts")


def new_run_columns(
    runs: list[ParsedRun],
    file_import: FileImport,
    request_rows: Sequence[Sequence[Any]] | None = None,
    tallied: Sequence[RunSummary] | None = None,
) -> list[Sequence[Any]]:
    """The columns of new runs' rows, in RUN_INSERT_COLUMNS order, adapted for the backend.

    Built column by column: what is the same operation on every run (a run's stored fields, the
    blanks of its text columns, the constant columns) is done by C over a whole column, and only
    what each run needs of its own (its aggregates, its JSON) by Python, once per run.

    request_rows: the runs' request rows (RequestRows.build's, the runs' in order, none left out): a
    run's start that is its first request's timestamp (the derived start of a run in time order, and
    of every run of one request) takes that request's adapted value instead of being formatted again.
    tallied: the runs' aggregates from their requests, when they were gathered piece by piece
    (metrics.RunTally) rather than held in the runs.
    """
    if not runs:
        return [() for _ in RUN_INSERT_COLUMNS]
    adapt_datetime = datetime_adapter()
    adapt_json = json_adapter(Run._meta.get_field("summary"))
    provenance_json: dict[Any, Any] = {}  # a file's runs mostly share their provenance: adapted once
    aggregates: list[RunSummary] = []
    starts: list[Any] = []
    provenances: list[Any] = []
    summaries: list[Any] = []
    extras: list[Any] = []
    sampled: list[bool] = []
    first_request = 0  # the row of the run's first request in request_rows
    for i, parsed_run in enumerate(runs):
        values = parsed_run.values
        entries = parsed_run.records
        summary = parsed_run.summary
        run_aggregates, provenance = with_tool_summary(
            tallied[i]
            if tallied is not None
            else summarize(
                (record.request for _, record, _ in entries),
                values[_WALL_S],
                (record.itl for _, record, _ in entries),
            ),
            summary,
            started_at=values[_STARTED_AT],
        )
        aggregates.append(run_aggregates)
        start = run_aggregates.started_at
        if request_rows is not None and entries and start is entries[0][1].request[_REQUEST_TS]:
            starts.append(request_rows[first_request][_ROW_TS])
        else:
            starts.append(adapt_datetime(start))
        first_request += len(entries)
        pairs = values[_RUN_PROVENANCE]
        key = (pairs, tuple(provenance.items()))
        adapted = provenance_json.get(key)
        if adapted is None:
            adapted = provenance_json[key] = adapt_json({**dict(pairs or ()), **provenance})
        provenances.append(adapted)
        if summary is None:
            summaries.append(None)
            sampled.append(False)
        else:
            summaries.append(adapt_json(summary))
            sampled.append(bool(summary.get("requests_sampled")))
        extra = parsed_run.summary_extra
        extras.append(adapt_json(extra) if extra else None)
    if request_rows is not None and first_request != len(request_rows):
        raise ValueError(f"{len(request_rows)} request rows for runs of {first_request} requests")
    columns: list[Sequence[Any]] = list(zip(*map(_STORED_VALUES, (run.values for run in runs)), strict=True))
    for i in _BLANK_INDEXES:
        if None in columns[i]:
            columns[i] = ["" if value is None else value for value in columns[i]]
    if None in columns[_SOURCE_INDEX]:
        columns[_SOURCE_INDEX] = [Run.Source.IMPORTED if value is None else value for value in columns[_SOURCE_INDEX]]
    columns[_PROVENANCE_INDEX] = provenances
    aggregate_columns: list[Sequence[Any]] = list(zip(*aggregates, strict=True))
    aggregate_columns[_STARTED_AT_COLUMN] = starts
    n = len(runs)
    return [
        *columns,
        *aggregate_columns,
        summaries,
        extras,
        sampled,
        [adapt_datetime(timezone.now())] * n,
        [file_import.pk] * n,
    ]


class RequestRows:
    """Builds request rows in REQUEST_INSERT_COLUMNS order, adapting values for the backend.

    A request's inter-token latencies (kvlab.bench/2) are set by a second statement for the
    rows that have them, so the common row carries no extra column.
    """

    def __init__(self) -> None:
        self.build = _request_row_builder(self)
        self.itl: list[tuple[Any, Any, int]] = []  # (adapted latencies, run id, seq)

    def insert(self, rows: list[tuple[Any, ...]]) -> None:
        insert(RequestResult, REQUEST_INSERT_COLUMNS, rows)
        if self.itl:
            quote = connection.ops.quote_name
            with connection.cursor() as cursor:
                cursor.executemany(
                    f"UPDATE {quote(RequestResult._meta.db_table)} SET {quote('itl_s')} = %s "
                    f"WHERE {quote('run_id')} = %s AND {quote('seq')} = %s",
                    self.itl,
                )
            self.itl = []


def _request_row_builder(rows: RequestRows) -> Callable[[Any, int, Record, int], tuple[Any, ...]]:
    adapt_datetime = datetime_adapter()
    extra_field = RequestResult._meta.get_field("extra")
    empty_extra = extra_field.get_db_prep_save({}, connection)
    itl_field = RequestResult._meta.get_field("itl_s")
    last_ts: datetime | None = None
    last_adapted = adapt_datetime(None)

    def request_row(run_id: Any, seq: int, record: Record, occurrence: int) -> tuple[Any, ...]:
        nonlocal last_ts, last_adapted
        if record.itl is not None:
            rows.itl.append((itl_field.get_db_prep_save(list(record.itl), connection), run_id, seq))
        ts, ok, status, error, error_type, prompt, n_predict, output, tok_s, elapsed, ttft = record.request  # type: ignore[misc]
        if ts is not last_ts:  # a run's requests often share a timestamp (one parsed object): adapted once
            last_ts, last_adapted = ts, adapt_datetime(ts)
        return (
            run_id,
            seq,
            last_adapted,
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


def insert(model: type[Model], columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    quote = connection.ops.quote_name
    sql = "INSERT INTO {} ({}) VALUES ({})".format(
        quote(model._meta.db_table), ", ".join(quote(c) for c in columns), ", ".join(["%s"] * len(columns))
    )
    with connection.cursor() as cursor:
        for i in range(0, len(rows), INSERT_BATCH):
            cursor.executemany(sql, rows[i : i + INSERT_BATCH])
