"""Keep the timeline's buckets (models.rollups.TimelineBucket) current, set-based in SQL.

The hour buckets are counted from the runs; the six-hour buckets from the hour buckets, the day
buckets from the six-hour ones and the week buckets from the days (a min of minima, a max of maxima,
a sum of counts), so a rebuild reads the runs table once.
`runs_changed` recomputes only the buckets the given runs fall in now (history.derived calls it on
import and when a job finishes), and the buckets they fell in before when the caller says where that
was (`position`, taken before the change): a run an import gave an earlier request (an earlier start)
or a missing label, or one edited or deleted in the admin, leaves its old buckets. A change that holds
most runs (an import into a young history) recounts every bucket instead (RECOUNT_ALL_FROM).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from ..models import Run
from ..models.outcomes import failed_sql, success_rate_sql
from ..models.rollups import HOUR, KEY_FIELDS, ROLLED_COLUMNS, SPANS, WEEK, WEEK_STARTS, TimelineBucket, bucket_start
from .changed_runs import ChangedRuns

Position = tuple[Any, ...]  # a run's bucket key (KEY_FIELDS' values) and its start hour (Unix seconds)

RUN_TABLE = "benchmarks_run"
WERE = "timeline_changed_were"  # temporary tables: where changed runs were counted before (runs_changed's `were`),
AFFECTED = "timeline_affected"  # and the buckets of every span to recount (a_span, a_<key>..., a_start)
# A change of this many runs or more that holds half the dated runs or more recounts every bucket: the
# runs read in one pass instead of each bucket's down an index (200,000 new runs: 5.0 against 6.9 s).
RECOUNT_ALL_FROM = 10_000


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


def _in_affected(span: int, start_low: str, start_high: str) -> str:
    """SQL: a JOIN of the rows in the affected span-long buckets: an index seek per bucket (run_label_idx,
    the buckets' unique index), never a scan of every run or every hour of the changed runs' time."""
    same = " AND ".join(f"{_q(k)} = a.a_{k}" for k in KEY_FIELDS)
    return f"JOIN {AFFECTED} a ON a.a_span = {span} AND {same} AND {start_low} AND {start_high}"


def _by_label() -> str:
    """SQL: on SQLite, read the runs of a bucket down run_label_idx (label, started_at). Without
    statistics its planner may take run_engine_idx or run_tool_idx instead, whose one value ("" or
    "llama.cpp") holds every run of the hour: 23 rows read for each run recounted, at 200,000 runs."""
    return "INDEXED BY run_label_idx" if connection.vendor == "sqlite" else ""


def _hours_from_runs(changed: ChangedRuns | None) -> tuple[str, list[Any]]:
    """SQL and its parameters: INSERT the hour buckets of every dated run, or of the changed runs' hours
    (staged in AFFECTED): the changed runs, read by id, and the other runs of those hours, each hour's
    found down run_label_idx (whose id tells a changed run apart without reading its row). A start SQLite
    cannot count in seconds (strftime gives NULL for 9999-12-31 23:59:59.999999) is in no bucket."""
    keys = _keys()
    values = ", ".join(_q(c) for c in ROLLED_COLUMNS if c != "success_rate")
    failed = failed_sql(_q)
    started = _q("started_at")
    selected = (
        f"SELECT {keys}, {values}, {_bucket(_seconds(), HOUR)} AS hour_start,"
        f" CASE WHEN {failed} THEN 1 ELSE 0 END AS is_failed,"
        f" {success_rate_sql(_q)} AS success_rate"
    )
    params: list[Any] = []
    if changed is None:
        runs = f"{selected} FROM {RUN_TABLE} WHERE {started} IS NOT NULL"
    else:
        in_changed, params = changed.where(_q("id"))
        hour_end = _timestamp(f"a.a_start + {HOUR}")
        join = _in_affected(HOUR, f"{started} >= {_timestamp('a.a_start')}", f"{started} < {hour_end}")
        runs = (
            f"{selected} FROM {RUN_TABLE} WHERE {started} IS NOT NULL AND {in_changed}"
            f" UNION ALL {selected} FROM {RUN_TABLE} {_by_label()} {join}"
            f" WHERE {started} IS NOT NULL AND NOT {in_changed}"
        )
        params = params * 2
    aggregates = []
    for column in ROLLED_COLUMNS:
        value = f"CASE WHEN is_failed = 0 THEN r.{_q(column)} END"
        aggregates += [f"MIN({value})", f"MAX({value})", f"COUNT({value})"]
    sql = (
        f"INSERT INTO {_q(TimelineBucket._meta.db_table)} ({', '.join(_q(c) for c in _columns())}) "
        f"SELECT {HOUR}, hour_start, {keys}, COUNT(*), SUM(is_failed), {', '.join(aggregates)} "
        f"FROM ({runs}) r WHERE hour_start IS NOT NULL GROUP BY hour_start, {keys}"
    )
    return sql, params


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
        bucket, join = "a.a_start", _in_affected(span, f"{start} >= a.a_start", f"{start} < a.a_start + {span}")
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
        cursor.execute(*_hours_from_runs(None))
        for span in SPANS[1:]:
            cursor.execute(_span_from_finer(span, recount=False), [])


def position(run: Run) -> Position | None:
    """Where a run is counted (its hour bucket's key and start), or None when it has no start time."""
    if run.started_at is None:
        return None
    return (*(getattr(run, k) for k in KEY_FIELDS), bucket_start(int(run.started_at.timestamp()), HOUR))


def runs_changed(run_ids: Iterable[int] | ChangedRuns, were: Sequence[Position] = ()) -> None:
    """Recount the buckets (every span) that the given runs fall in now, and those at the positions they
    were counted at before (`were`); inside the caller's transaction.

    The buckets to recount go to a temporary table first, each span's from the next finer span's, so
    that each span costs one DELETE and one INSERT whatever their number; each reads the rows of the
    buckets the runs fall in, through an index.
    """
    changed = run_ids if isinstance(run_ids, ChangedRuns) else ChangedRuns.of(run_ids)
    if not len(changed) and not were:
        return
    if len(changed) >= RECOUNT_ALL_FROM and 2 * len(changed) >= Run.objects.filter(started_at__isnull=False).count():
        rebuild_all()  # most runs changed (an import into a young history): a scan beats a seek per bucket
        return
    table, start = _q(TimelineBucket._meta.db_table), _q("start")
    same = " AND ".join(f"b.{_q(k)} = a.a_{k}" for k in KEY_FIELDS)
    with connection.cursor() as cursor:
        _stage(cursor, changed, were)
        for i, span in enumerate(SPANS):
            if i:  # a span's buckets hold whole buckets of the next finer span
                finer = SPANS[i - 1]
                keys = ", ".join(f"a_{k}" for k in KEY_FIELDS)
                cursor.execute(
                    f"INSERT INTO {AFFECTED} SELECT DISTINCT {span}, {keys}, {_bucket('a_start', span)}"
                    f" FROM {AFFECTED} WHERE a_span = {finer}",
                    [],
                )
            cursor.execute(  # each bucket found down its unique index
                f"DELETE FROM {table} WHERE {_q('id')} IN (SELECT b.{_q('id')} FROM {AFFECTED} a JOIN {table} b"
                f" ON b.{_q('span_s')} = {span} AND {same} AND b.{start} = a.a_start WHERE a.a_span = {span})",
                [],
            )
            if span == HOUR:
                cursor.execute(*_hours_from_runs(changed))
            else:
                cursor.execute(_span_from_finer(span, recount=True), [])
        cursor.execute(f"DELETE FROM {AFFECTED}", [])


def _stage(cursor: Any, changed: ChangedRuns, were: Sequence[Position]) -> None:
    """The (key, hour) of each changed run, now and before, into this connection's temporary table AFFECTED."""
    keys = ", ".join(f"a_{k} VARCHAR(200)" for k in KEY_FIELDS)
    cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {WERE} ({keys}, a_start BIGINT)", [])
    cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {AFFECTED} (a_span INTEGER, {keys}, a_start BIGINT)", [])
    cursor.execute(f"DELETE FROM {AFFECTED}", [])
    selected = ", ".join(_q(k) for k in KEY_FIELDS)
    in_changed, params = changed.where(_q("id"))
    hours = (
        f"SELECT DISTINCT {HOUR}, {selected}, {_bucket(_seconds(), HOUR)} FROM {RUN_TABLE}"
        f" WHERE {in_changed} AND {_q('started_at')} IS NOT NULL"
    )
    if were:  # UNION: each bucket once, or the recount would count its runs twice
        cursor.execute(f"DELETE FROM {WERE}", [])
        marks = ", ".join(["%s"] * (len(KEY_FIELDS) + 1))
        cursor.executemany(f"INSERT INTO {WERE} VALUES ({marks})", list(set(map(tuple, were))))
        a_keys = ", ".join(f"a_{k}" for k in KEY_FIELDS)
        cursor.execute(f"INSERT INTO {AFFECTED} {hours} UNION SELECT {HOUR}, {a_keys}, a_start FROM {WERE}", params)
    else:
        cursor.execute(f"INSERT INTO {AFFECTED} {hours}", params)
