"""Keep the timeline's buckets (models.rollups.TimelineBucket) current, set-based in SQL.

The hour buckets are counted from the runs; the six-hour buckets from the hour buckets, the day
buckets from the six-hour ones and the week buckets from the days (a min of minima, a max of maxima,
a sum of counts), so a rebuild reads the runs table once.
`runs_changed` recomputes only the buckets the given runs fall in now (history.derived calls it on
import and when a job finishes), and the buckets they fell in before when the caller says where that
was (`position`, taken before the change): a run an import gave an earlier request (an earlier start)
or a missing label, or one edited or deleted in the admin, leaves its old buckets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from ..models import Run
from ..models.rollups import HOUR, KEY_FIELDS, ROLLED_COLUMNS, SPANS, WEEK, WEEK_STARTS, TimelineBucket, bucket_start

Position = tuple[Any, ...]  # a run's bucket key (KEY_FIELDS' values) and its start hour (Unix seconds)

RUN_TABLE = "benchmarks_run"
CHANGED = "timeline_changed_runs"  # temporary tables: the ids runs_changed was given,
CHANGED_HOURS = "timeline_changed_hours"  # and the (key, hour) of each


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _bucket(seconds: str, span: int) -> str:
    """SQL: the start of the span-long bucket holding `seconds` (Unix seconds, an integer expression):
    models.rollups.bucket_start."""
    offset = WEEK_STARTS if span == WEEK else 0
    return f"((({seconds}) - {offset}) / {span}) * {span} + {offset}"


def _seconds() -> str:
    """SQL: a run's started_at as whole Unix seconds, on either engine."""
    if connection.vendor == "postgresql":
        return f"CAST(FLOOR(EXTRACT(EPOCH FROM {_q('started_at')})) AS BIGINT)"
    return f"CAST(strftime('%%s', {_q('started_at')}) AS INTEGER)"  # %% : every statement here has params


def _timestamp(seconds: str) -> str:
    """SQL: Unix seconds as a value comparable with started_at, on either engine."""
    if connection.vendor == "postgresql":
        return f"to_timestamp({seconds})"
    return f"datetime({seconds}, 'unixepoch')"  # 'YYYY-MM-DD HH:MM:SS': the text Django stores, to the second


def _columns() -> list[str]:
    names = ["span_s", "start", *KEY_FIELDS, "runs", "failed"]
    for column in ROLLED_COLUMNS:
        names += [f"{column}_min", f"{column}_max", f"{column}_n"]
    return names


def _keys() -> str:
    return ", ".join(_q(k) for k in KEY_FIELDS)


def _affected(span: int) -> str:
    """SQL: the (key, bucket start) of each span-long bucket a changed run falls in, as a_<key>, a_start
    (from the changed runs' hours, staged by runs_changed)."""
    keys = ", ".join(f"a_{k}" for k in KEY_FIELDS)
    if span == HOUR:
        return f"SELECT DISTINCT {keys}, a_start FROM {CHANGED_HOURS}"
    return f"SELECT DISTINCT {keys}, {_bucket('a_start', span)} AS a_start FROM {CHANGED_HOURS}"


def _in_affected(span: int, start_low: str, start_high: str) -> str:
    """SQL: a JOIN of the rows in the affected buckets: an index seek per bucket (run_label_idx, the
    buckets' unique index), never a scan of every run or every hour of the changed runs' time."""
    same = " AND ".join(f"{_q(k)} = a_{k}" for k in KEY_FIELDS)
    return f"JOIN ({_affected(span)}) a ON {same} AND {start_low} AND {start_high}"


def _hours_from_runs(recount: bool) -> str:
    """SQL: INSERT the hour buckets of every dated run, or (recount) of the changed runs' hours."""
    keys = _keys()
    values = ", ".join(_q(c) for c in ROLLED_COLUMNS if c != "success_rate")
    failed = f"({_q('n_requests')} > 0 AND {_q('n_ok')} = 0)"
    started = _q("started_at")
    join = (
        _in_affected(HOUR, f"{started} >= {_timestamp('a_start')}", f"{started} < {_timestamp(f'a_start + {HOUR}')}")
        if recount
        else ""
    )
    runs = (
        f"SELECT {keys}, {values}, {_bucket(_seconds(), HOUR)} AS hour_start,"
        f" CASE WHEN {failed} THEN 1 ELSE 0 END AS is_failed,"
        f" CAST({_q('n_ok')} AS DOUBLE PRECISION) / NULLIF({_q('n_requests')}, 0) AS success_rate"
        f" FROM {RUN_TABLE} {join} WHERE {started} IS NOT NULL"
    )
    aggregates = []
    for column in ROLLED_COLUMNS:
        value = f"CASE WHEN is_failed = 0 THEN r.{_q(column)} END"
        aggregates += [f"MIN({value})", f"MAX({value})", f"COUNT({value})"]
    return (
        f"INSERT INTO {_q(TimelineBucket._meta.db_table)} ({', '.join(_q(c) for c in _columns())}) "
        f"SELECT {HOUR}, hour_start, {keys}, COUNT(*), SUM(is_failed), {', '.join(aggregates)} "
        f"FROM ({runs}) r GROUP BY hour_start, {keys}"
    )


def _span_from_finer(span: int, recount: bool) -> str:
    """SQL: INSERT the span-long buckets merged from the next finer span's buckets (each holds whole
    finer buckets: a six-hour bucket six hours, a day four six-hour buckets, a week seven days): all, or
    (recount) the changed runs'. A min of minima, a max of maxima and a sum of counts are the same
    whichever buckets they are merged from; the coarser the finer span, the fewer rows each reads."""
    finer = SPANS[SPANS.index(span) - 1]
    keys = _keys()
    aggregates = []
    for column in ROLLED_COLUMNS:
        aggregates += [f"MIN({_q(column + '_min')})", f"MAX({_q(column + '_max')})", f"SUM({_q(column + '_n')})"]
    table = _q(TimelineBucket._meta.db_table)
    start = _q("start")
    if recount:
        bucket, join = "a_start", _in_affected(span, f"{start} >= a_start", f"{start} < a_start + {span}")
    else:
        bucket, join = _bucket(start, span), ""
    return (
        f"INSERT INTO {table} ({', '.join(_q(c) for c in _columns())}) "
        f"SELECT {span}, {bucket}, {keys}, SUM({_q('runs')}), SUM({_q('failed')}), {', '.join(aggregates)} "
        f"FROM {table} {join} WHERE {_q('span_s')} = {finer} GROUP BY {bucket}, {keys}"
    )


def rebuild_all() -> None:
    """Recount every bucket from the runs table: one pass over the runs, then over each span's buckets in turn."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {_q(TimelineBucket._meta.db_table)}", [])
        cursor.execute(_hours_from_runs(recount=False), [])
        for span in SPANS[1:]:
            cursor.execute(_span_from_finer(span, recount=False), [])


def position(run: Run) -> Position | None:
    """Where a run is counted (its hour bucket's key and start), or None when it has no start time."""
    if run.started_at is None:
        return None
    return (*(getattr(run, k) for k in KEY_FIELDS), bucket_start(int(run.started_at.timestamp()), HOUR))


def runs_changed(run_ids: Iterable[int], were: Sequence[Position] = ()) -> None:
    """Recount the buckets (every span) that the given runs fall in now, and those at the positions they
    were counted at before (`were`); inside the caller's transaction.

    The ids go to a temporary table first, so that each span costs one DELETE and one INSERT whatever
    their number; each reads the rows of the buckets the runs fall in, through an index.
    """
    ids = sorted(set(run_ids))
    if not ids and not were:
        return
    table = _q(TimelineBucket._meta.db_table)
    keys, start = _keys(), _q("start")
    with connection.cursor() as cursor:
        _stage(cursor, ids, were)
        for span in SPANS:
            cursor.execute(
                f"DELETE FROM {table} WHERE {_q('span_s')} = {span} AND ({keys}, {start}) IN"
                f" (SELECT {', '.join(f'a_{k}' for k in KEY_FIELDS)}, a_start FROM ({_affected(span)}) a)",
                [],
            )
            cursor.execute(_hours_from_runs(recount=True) if span == HOUR else _span_from_finer(span, recount=True), [])
        cursor.execute(f"DELETE FROM {CHANGED}", [])
        cursor.execute(f"DELETE FROM {CHANGED_HOURS}", [])


def _stage(cursor: Any, ids: list[int], were: Sequence[Position]) -> None:
    """The changed run ids, then the (key, hour) of each, now and before, into this connection's temporary tables."""
    keys = ", ".join(f"a_{k} VARCHAR(200)" for k in KEY_FIELDS)
    cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {CHANGED} (id BIGINT PRIMARY KEY)", [])
    cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {CHANGED_HOURS} ({keys}, a_start BIGINT)", [])
    cursor.execute(f"DELETE FROM {CHANGED}", [])
    cursor.execute(f"DELETE FROM {CHANGED_HOURS}", [])
    if connection.vendor == "postgresql":
        cursor.execute(f"INSERT INTO {CHANGED} SELECT unnest(%s::bigint[])", [ids])
    else:
        cursor.executemany(f"INSERT INTO {CHANGED} VALUES (%s)", [(i,) for i in ids])
    selected = ", ".join(_q(k) for k in KEY_FIELDS)
    cursor.execute(
        f"INSERT INTO {CHANGED_HOURS} SELECT DISTINCT {selected}, {_bucket(_seconds(), HOUR)} FROM {RUN_TABLE}"
        f" WHERE {_q('id')} IN (SELECT id FROM {CHANGED}) AND {_q('started_at')} IS NOT NULL",
        [],
    )
    if were:
        marks = ", ".join(["%s"] * (len(KEY_FIELDS) + 1))
        cursor.executemany(f"INSERT INTO {CHANGED_HOURS} VALUES ({marks})", list(set(map(tuple, were))))
