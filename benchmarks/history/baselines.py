"""Keep the regressions page's tables (models.baselines) current as runs change, and read them.

A dated run is filed under its series (SeriesRun) by a 64-bit hash of its configuration and
workload (records.series_keys.SERIES_FIELDS), computed set-based in SQL: md5 of the fields quoted as
SQL literals on PostgreSQL; on SQLite, which has no hash, blake2b of their values through a
function registered on the connection (NULL apart from '', every float exact either way).
When runs change, each series they were or are in is compared again, per family (alone,
within a label, within a server):
its latest DEPTH runs are read down an index, and records.catalogue.baseline_comparison decides,
for every window of WINDOWS and every metric, whether the latest run is worse (BaselineComparison
keeps only those). A series with a single run has nothing to compare: a new run alone in its
series costs one row and no comparison, which keeps an import of new series cheap.

The grouping of the page is honoured exactly as the window query it replaces did: a series
is one configuration and workload within one group name ("(none)" for no label); the server
family tells servers apart by id, so a server named "(none)" is not merged with runs of no server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from django.db import connection

from ..models.baselines import BaselineComparison, SeriesRun
from ..records import catalogue, series_keys
from ..records.metrics import success_rate
from .changed_runs import ChangedRuns

WINDOWS = (5, 10, 20, 50)  # the windows the regressions page offers: each is kept compared
DEPTH = max(WINDOWS) + 1  # a series' latest run and the runs its widest window compares it with
FAMILY_COLUMNS = {  # the SeriesRun columns that tell a family's series apart
    BaselineComparison.Family.SERIES: ("series_key",),
    BaselineComparison.Family.LABEL: ("series_key", "label"),
    BaselineComparison.Family.SERVER: ("series_key", "server_pk"),
}
PARTITIONS_PER_QUERY = 300  # series read (and replaced) per statement
METRICS = list(catalogue.METRICS.values())
VALUE_COLUMNS = tuple(m.column for m in METRICS if m.column != "success_rate")

Partition = tuple[int, str, int]  # (series_key, label, server_pk), the columns a family ignores blank


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


RUN = _q("benchmarks_run")
MEMBERS = _q(SeriesRun._meta.db_table)
COMPARED = _q(BaselineComparison._meta.db_table)


def _hash64(*values: Any) -> int:
    """A series key on SQLite: blake2b of the values' repr (exact for floats, '' apart from None)."""
    text = repr(values).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def _series_key(alias: str) -> str:
    """SQL: the series key of the run `alias`, on either engine."""
    normalised = {"request_rate": f"({alias}.{_q('request_rate')} + 0.0)"}  # -0.0 is 0.0, as SQL compares
    fields = [normalised.get(f, f"{alias}.{_q(f)}") for f in series_keys.SERIES_FIELDS]
    if connection.vendor == "postgresql":  # the fields as SQL literals (NULL apart from ''), md5 of them joined
        quoted = " || ',' || ".join(f"quote_nullable({f})" for f in fields)
        return f"('x' || substr(md5({quoted}), 1, 16))::bit(64)::bigint"
    connection.ensure_connection()
    connection.connection.create_function("kvlab_series_hash", len(fields), _hash64, deterministic=True)
    return f"kvlab_series_hash({', '.join(fields)})"


def _file(cursor: Any, where: str, params: Sequence[Any]) -> None:
    """File the dated runs matching `where` (on the run r) under their series, in the order of their
    series (each index of SeriesRun then grows at a few places, not at one random place per run: 200,000
    new runs filed in 2.7 against 6.0 s)."""
    job = _q("benchmarks_job")
    cursor.execute(
        f"INSERT INTO {MEMBERS} ({_q('run_id')}, {_q('series_key')}, {_q('label')}, {_q('server_pk')},"
        f" {_q('started_at')})"
        f" SELECT * FROM (SELECT r.{_q('id')} AS run_id, {_series_key('r')} AS series_key,"
        f" CASE WHEN r.{_q('label')} = '' THEN '(none)' ELSE r.{_q('label')} END AS label,"
        f" COALESCE(j.{_q('server_id')}, 0) AS server_pk, r.{_q('started_at')} AS started_at"
        f" FROM {RUN} r LEFT JOIN {job} j ON j.{_q('id')} = r.{_q('job_id')}"
        f" WHERE r.{_q('started_at')} IS NOT NULL AND {where}) f ORDER BY series_key, started_at, run_id",
        params,
    )


def runs_changed(run_ids: Iterable[int] | ChangedRuns) -> None:
    """File the runs (new, changed or deleted) under their series again and compare those series again."""
    changed = run_ids if isinstance(run_ids, ChangedRuns) else ChangedRuns.of(run_ids)
    if not len(changed):
        return
    in_ids, params = changed.where(_q("run_id"))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {_q('series_key')}, {_q('label')}, {_q('server_pk')} FROM {MEMBERS} WHERE {in_ids}", params
        )
        before = cursor.fetchall()
        if before:
            cursor.execute(f"DELETE FROM {MEMBERS} WHERE {in_ids}", params)
        _file(cursor, *changed.where("r." + _q("id")))
        # Only a series that holds another run has anything to compare (or had, when it is in `before`).
        member_of_ids = changed.where("m." + _q("run_id"))[0]
        cursor.execute(
            f"SELECT m.{_q('series_key')}, m.{_q('label')}, m.{_q('server_pk')} FROM {MEMBERS} m"
            f" WHERE {member_of_ids} AND EXISTS (SELECT 1 FROM {MEMBERS} o"
            f" WHERE o.{_q('series_key')} = m.{_q('series_key')} AND o.{_q('run_id')} <> m.{_q('run_id')})",
            params,
        )
        shared = cursor.fetchall()
        rows = [*before, *shared]
        _compare_again(cursor, {family: {_partition(row, family) for row in rows} for family in FAMILY_COLUMNS})


def rebuild() -> None:
    """File every dated run and compare every series that holds two or more, from the runs table alone."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {COMPARED}")
        cursor.execute(f"DELETE FROM {MEMBERS}")
        _file(cursor, "1 = 1", [])
        partitions: dict[str, set[Partition]] = {}
        for family, columns in FAMILY_COLUMNS.items():
            names = ", ".join(_q(c) for c in columns)
            blanks = {"label": "''", "server_pk": "0"}
            selected = ", ".join(_q(c) if c in columns else blanks[c] for c in ("series_key", "label", "server_pk"))
            cursor.execute(f"SELECT {selected} FROM {MEMBERS} GROUP BY {names} HAVING COUNT(*) > 1")
            partitions[family] = set(cursor.fetchall())
        _compare_again(cursor, partitions)


def _partition(row: Sequence[Any], family: str) -> Partition:
    """The series of `family` that a SeriesRun row (series_key, label, server_pk) is in."""
    key, label, server = row
    columns = FAMILY_COLUMNS[family]
    return (key, label if "label" in columns else "", server if "server_pk" in columns else 0)


def _chunks(items: Sequence[Partition], size: int) -> Iterator[Sequence[Partition]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


COMPARED_COLUMNS = (
    "family",
    "series_key",
    "label",
    "server_pk",
    "window_size",
    "metric",
    "latest_run_id",
    "latest",
    "baseline",
    "change",
    "spread",
    "history",
)


FOUND = "baseline_found"  # temporary tables: each distinct comparison computed (per runs compared, per depth),
COMPARED_SERIES = "baseline_compared_series"  # and the series of one chunk, with the comparisons they get


def _compare_again(cursor: Any, partitions: Mapping[str, set[Partition]]) -> None:
    """Replace the comparisons of these series (per family) by their comparisons now.

    The families in FAMILY_COLUMNS' order, the whole series first: a series' label (or server)
    series whose label the whole series' latest runs all share holds those same runs, and is
    not read again. The same runs compare alike in every family and in every window that holds
    no more of them: computed once, handed to the database once (FOUND), and copied into a row
    per family and window there (most comparisons are stored twelve times over: three families,
    four windows), instead of each row's twelve values sent one row at a time.
    """
    _create_staging(cursor)
    computed: dict[tuple[int, ...], tuple[int, bool]] = {}  # runs compared -> (their number in FOUND, any found)
    whole: dict[int, list[dict[str, Any]]] = {}  # the whole series' latest runs, by series key
    found_rows: list[tuple[Any, ...]] = []
    for family, found in partitions.items():
        field = {"label": "label", "server": "server_pk"}.get(family)
        for chunk in _chunks(sorted(found), PARTITIONS_PER_QUERY):
            _forget(cursor, family, chunk)
            known = {p: whole[p[0]] for p in chunk if field and _all_in(whole.get(p[0]), field, p)}
            read = _latest_runs(cursor, family, [p for p in chunk if p not in known])
            if field is None:
                whole.update((p[0], runs) for p, runs in read.items())
            series_rows = []
            for partition, runs in (*read.items(), *known.items()):
                ids = tuple(r["id"] for r in runs)
                if ids not in computed:
                    number = len(computed)
                    rows = [(number, *row) for row in _comparisons(runs)]
                    computed[ids] = (number, bool(rows))
                    found_rows += rows
                number, any_found = computed[ids]
                if any_found:
                    series_rows.append((family, *partition, number, len(runs) - 1))
            if series_rows:
                _store(cursor, found_rows, series_rows)
                found_rows = []
    cursor.execute(f"DELETE FROM {FOUND}")


def _create_staging(cursor: Any) -> None:
    cursor.execute(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {FOUND} (found BIGINT, depth INTEGER, metric VARCHAR(16),"
        f" latest_run_id BIGINT, latest DOUBLE PRECISION, baseline DOUBLE PRECISION, change DOUBLE PRECISION,"
        f" spread DOUBLE PRECISION, history INTEGER)"
    )
    cursor.execute(f"CREATE INDEX IF NOT EXISTS {FOUND}_idx ON {FOUND} (found, depth)")
    cursor.execute(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {COMPARED_SERIES} (family VARCHAR(8), series_key BIGINT,"
        f" label VARCHAR(200), server_pk INTEGER, found BIGINT, earlier INTEGER)"
    )
    cursor.execute(f"DELETE FROM {FOUND}")
    cursor.execute(f"DELETE FROM {COMPARED_SERIES}")


def _store(cursor: Any, found_rows: list[tuple[Any, ...]], series_rows: list[tuple[Any, ...]]) -> None:
    """Stage the comparisons computed since the last call and a chunk's series, then store each series'
    comparisons for each window: those of its runs at depth min(window, its earlier runs)."""
    if found_rows:
        cursor.executemany(f"INSERT INTO {FOUND} VALUES ({', '.join(['%s'] * 9)})", found_rows)
    cursor.executemany(f"INSERT INTO {COMPARED_SERIES} VALUES ({', '.join(['%s'] * 6)})", series_rows)
    windows = " UNION ALL ".join(f"SELECT {w} AS window_size" for w in WINDOWS)
    values = ", ".join(f"f.{c}" for c in COMPARED_COLUMNS[5:])
    cursor.execute(
        f"INSERT INTO {COMPARED} ({', '.join(_q(c) for c in COMPARED_COLUMNS)})"
        f" SELECT s.family, s.series_key, s.label, s.server_pk, w.window_size, {values}"
        f" FROM {COMPARED_SERIES} s CROSS JOIN ({windows}) w JOIN {FOUND} f ON f.found = s.found"
        f" AND f.depth = CASE WHEN w.window_size < s.earlier THEN w.window_size ELSE s.earlier END"
    )
    cursor.execute(f"DELETE FROM {COMPARED_SERIES}")


def _all_in(runs: list[dict[str, Any]] | None, field: str, partition: Partition) -> bool:
    value = partition[1] if field == "label" else partition[2]
    return runs is not None and all(r[field] == value for r in runs)


def _partitions_sql(chunk: Sequence[Partition]) -> str:
    """SQL: the CTE p (series_key, label, server_pk) of these series."""
    typed = "(%s::bigint, %s::text, %s::integer)" if connection.vendor == "postgresql" else "(%s, %s, %s)"
    return f"p (series_key, label, server_pk) AS (VALUES {', '.join([typed] * len(chunk))})"


def _forget(cursor: Any, family: str, chunk: Sequence[Partition]) -> None:
    """Delete the comparisons of these series, each found down comparison_series_idx."""
    same = " AND ".join(f"c.{_q(col)} = p.{col}" for col in ("series_key", "label", "server_pk"))
    cursor.execute(
        f"WITH {_partitions_sql(chunk)} DELETE FROM {COMPARED} WHERE {_q('id')} IN"
        f" (SELECT c.{_q('id')} FROM p JOIN {COMPARED} c ON {same} AND c.{_q('family')} = %s)",
        [*(v for p in chunk for v in p), family],
    )


def _latest_runs(cursor: Any, family: str, chunk: Sequence[Partition]) -> dict[Partition, list[dict[str, Any]]]:
    """The latest DEPTH dated runs of each series (newest first), each read down its index."""
    if not chunk:
        return {}
    same = " AND ".join(f"x.{_q(c)} = p.{c}" for c in FAMILY_COLUMNS[family])
    newest = f"FROM {MEMBERS} x WHERE {same} ORDER BY x.{_q('started_at')} DESC, x.{_q('run_id')} DESC LIMIT {DEPTH}"
    if connection.vendor == "postgresql":
        member = ", ".join(f"x.{_q(c)}" for c in ("run_id", "label", "server_pk", "started_at"))
        members = f"CROSS JOIN LATERAL (SELECT {member} {newest}) m"
    else:  # no LATERAL: a correlated IN, evaluated per series down the index
        members = f"JOIN {MEMBERS} m ON m.{_q('run_id')} IN (SELECT x.{_q('run_id')} {newest})"
    values = ", ".join(f"r.{_q(c)}" for c in (*VALUE_COLUMNS, "n_ok", "n_requests"))
    cursor.execute(
        f"WITH {_partitions_sql(chunk)}"
        f" SELECT p.series_key, p.label, p.server_pk, m.{_q('label')}, m.{_q('server_pk')}, r.{_q('id')}, {values}"
        f" FROM p {members} JOIN {RUN} r ON r.{_q('id')} = m.{_q('run_id')}"
        f" ORDER BY p.series_key, p.label, p.server_pk, m.{_q('started_at')} DESC, m.{_q('run_id')} DESC",
        [v for p in chunk for v in p],
    )
    names = ["label", "server_pk", "id", *VALUE_COLUMNS, "n_ok", "n_requests"]
    found: dict[Partition, list[dict[str, Any]]] = {}
    for key, label, server, *rest in cursor.fetchall():
        run = dict(zip(names, rest, strict=True))
        run["success_rate"] = success_rate(run["n_ok"], run["n_requests"])
        found.setdefault((key, label, server), []).append(run)
    return found


class Worse(NamedTuple):
    """A series' latest run worse than the runs before it on one metric (records.catalogue.Comparison's fields)."""

    metric: catalogue.Metric
    latest: float
    baseline: float
    change: float  # relative, signed so that negative is worse
    spread: float | None
    history: int


def worse_than_before(
    runs: Sequence[Mapping[str, Any]], window: int, metrics: Sequence[catalogue.Metric] = METRICS
) -> Iterator[Worse]:
    """The regressions page's window: per metric where a series' latest run (`runs` newest first) is worse than
    the median of its `window` earlier runs, as records.catalogue.baseline_comparison decides."""
    latest, earlier = runs[0], runs[1 : window + 1]
    for metric in metrics:
        past = [r[metric.column] for r in earlier if r[metric.column] is not None]
        compared = catalogue.baseline_comparison(latest[metric.column], past, metric)
        if compared is not None:
            yield Worse(metric, latest[metric.column], *compared)


def _comparisons(runs: Sequence[Mapping[str, Any]]) -> Iterator[tuple[Any, ...]]:
    """(depth, metric, latest run, latest, baseline, change, spread, history) where the latest run is worse
    than its `depth` earlier runs, for each depth a window of WINDOWS reaches (a wider window that holds
    no more runs answers alike: the window of w compares with depth min(w, earlier runs))."""
    latest = runs[0]
    for depth in sorted({min(window, len(runs) - 1) for window in WINDOWS}):
        for worse in worse_than_before(runs, depth):
            yield (depth, worse.metric.key, latest["id"], *worse[1:])


# --- reading: the regressions page ---------------------------------------------------------------

SHOWN_RUN_FIELDS = ("key", "label", *series_keys.SERIES_FIELDS)
BOOLEAN_FIELDS = ("kv_unified", "kv_offload")  # SQLite hands them back as 0 and 1


def _shown_run(r: str, s: str) -> str:
    """SQL: the columns of the run r (and its job's server s) that a row of the page shows."""
    return ", ".join([*(f"{r}.{_q(f)}" for f in SHOWN_RUN_FIELDS), f"{s}.{_q('name')}"])


def _run_values(values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip((*SHOWN_RUN_FIELDS, "job__server__name"), values, strict=True))
    for name in BOOLEAN_FIELDS:
        row[name] = None if row[name] is None else bool(row[name])
    return row


# SQL: the dated runs stored after the last one filed
_UNFILED = (
    f"SELECT {_q('id')} FROM {RUN} WHERE {_q('id')} > (SELECT COALESCE(MAX({_q('run_id')}), 0) FROM {MEMBERS})"
    f" AND {_q('started_at')} IS NOT NULL"
)


def _joined_runs(r: str, s: str, on: str) -> str:
    job = _q("benchmarks_job")
    return (
        f"JOIN {RUN} {r} ON {r}.{_q('id')} = {on}"
        f" LEFT JOIN {job} j ON j.{_q('id')} = {r}.{_q('job_id')}"
        f" LEFT JOIN {_q('benchmarks_server')} {s} ON {s}.{_q('id')} = j.{_q('server_id')}"
    )


def worst(
    family: str, window: int, thresholds: Mapping[str, float], *, limit: int, count_up_to: int, unfiled_up_to: int
) -> tuple[list[dict[str, Any]], int, int]:
    """The `limit` worst comparisons beyond the thresholds, worst first (the latest run's fields with
    each); how many there are, counted up to count_up_to + 1; and how many dated runs are not filed
    yet (stored by neither an import nor a job), counted up to unfiled_up_to + 1. One query, each
    part of it an index range read with a LIMIT.
    """
    where = f"{_q('family')} = %s AND {_q('window_size')} = %s AND {_q('metric')} = %s AND {_q('change')} < %s"
    order = f"{_q('change')}, {_q('latest_run_id')}"
    tied = f"{order}, {_q('metric')}"  # one run's metrics can move alike (wall and e2e p95): a fixed order among them
    per_metric = [(family, window, m.key, -thresholds[m.key]) for m in METRICS]
    top = " UNION ALL ".join(  # each metric's worst, read from the index alone
        f"SELECT * FROM (SELECT {_q('id')}, {tied} FROM {COMPARED} WHERE {where} ORDER BY {order} LIMIT {limit}) m{i}"
        for i, _ in enumerate(METRICS)
    )
    counted = " UNION ALL ".join(
        f"SELECT * FROM (SELECT 1 AS one FROM {COMPARED} WHERE {where} LIMIT {count_up_to + 1}) m{i}"
        for i, _ in enumerate(METRICS)
    )
    unfiled = f"{_UNFILED} LIMIT {unfiled_up_to + 1}"
    shown = ", ".join(f"c.{_q(c)}" for c in ("metric", "latest", "baseline", "change", "spread", "history"))
    runs = _joined_runs("r", "s", "c." + _q("latest_run_id"))
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH top AS ({top}), best AS (SELECT {_q('id')} FROM top ORDER BY {tied} LIMIT {limit}),"
            f" picked AS (SELECT c.{_q('latest_run_id')} AS run_pk, {shown}, {_shown_run('r', 's')}"
            f" FROM best JOIN {COMPARED} c ON c.{_q('id')} = best.{_q('id')} {runs})"
            f" SELECT n.found, n.unfiled, picked.* FROM (SELECT (SELECT COUNT(*) FROM (SELECT 1 AS one FROM"
            f" ({counted}) a LIMIT {count_up_to + 1}) k) AS found, (SELECT COUNT(*) FROM ({unfiled}) u) AS unfiled) n"
            f" LEFT JOIN picked ON 1 = 1",
            [v for arm in per_metric for v in arm] * 2,
        )
        fetched = cursor.fetchall()
    rows = []
    for _found, _unfiled, run_pk, *rest in fetched:
        if run_pk is None:
            continue
        metric, latest, baseline, change, spread, history, *run = rest
        row = _run_values(run) | {
            "pk": run_pk,
            "metric": metric,
            "compared": catalogue.Comparison(baseline, change, spread, history),
        }
        row[catalogue.METRICS[metric].column] = latest
        rows.append(row)
    rows.sort(key=lambda row: (row["compared"].change, row["pk"], row["metric"]))
    return rows, fetched[0][0], fetched[0][1]


def unfiled_runs(up_to: int) -> list[int]:
    """The dated runs stored after the last one filed (by neither an import nor a job: a bulk fill), at most up_to."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_q('id')} FROM ({_UNFILED} ORDER BY {_q('id')} LIMIT %s) u", [up_to])
        return [pk for (pk,) in cursor.fetchall()]


def series_sample(family: str, up_to: int) -> list[dict[str, Any]]:
    """The series of a family one by one, at most up_to + 1 of them, each with the fields of one of its runs.

    A walk from series to series down the index (each step one seek, however many runs a series holds).
    """
    columns = FAMILY_COLUMNS[family]
    names = ", ".join(f"x.{_q(c)}" for c in columns)
    current = ", ".join(f"s.{c}" for c in columns)
    after = f"({names}) > ({current})" if len(columns) > 1 else f"{names} > {current}"
    step = ", ".join(f"(SELECT x.{_q(c)} FROM {MEMBERS} x WHERE {after} ORDER BY {names} LIMIT 1)" for c in columns)
    same = " AND ".join(f"x.{_q(c)} = s.{c}" for c in columns)
    one_run = f"(SELECT x.{_q('run_id')} FROM {MEMBERS} x WHERE {same} LIMIT 1)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE s ({', '.join(columns)}, n) AS ("
            f"SELECT f.*, 1 FROM (SELECT {names} FROM {MEMBERS} x ORDER BY {names} LIMIT 1) f"
            f" UNION ALL SELECT {step}, s.n + 1 FROM s WHERE s.{columns[0]} IS NOT NULL AND s.n <= %s)"
            f" SELECT {_shown_run('r', 'sv')} FROM s {_joined_runs('r', 'sv', one_run)}"
            f" WHERE s.{columns[0]} IS NOT NULL",
            [up_to],
        )
        return [_run_values(row) for row in cursor.fetchall()]
