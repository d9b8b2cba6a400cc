"""The values a run filter offers and suggests, at a cost that does not grow with the history.

A filter (model, GPU, label, tool, engine) offers the most used values of the latest runs, and, as the
user types, the values that start with the text (an index seek per value found, over the
whole history) and then those of the latest runs that contain it in any case.

The most used values are counted once per newest run and kept for at most CHOICES_TTL_S in
Django's cache: a new run is counted at once, an edited or deleted one within a minute.
Counting them read 10,000 runs per page view: on PostgreSQL under load, four tenths of the
database's time (bench/load_test.py, pg_stat_statements).
"""

from __future__ import annotations

from collections import Counter

from django.core.cache import cache
from django.db import connection

from ..models import Run

# The columns a filter searches; only these names ever reach SQL.
FILTER_COLUMNS = ("model", "gpu", "label", "tool", "engine")
# The runs whose values are offered (the most used) and searched within (any part, any case):
# the latest ones stored, read with one backward scan of the primary key.
RECENT_RUNS = 10_000
TOP_CHOICES = 50  # values offered before anything is typed
SUGGESTIONS = 20  # values suggested for a typed text
CHOICES_TTL_S = 60  # how long counted choices are kept: the staleness an edit or a delete may see


def top_values(columns: tuple[str, ...], n: int = TOP_CHOICES) -> dict[str, list[str]]:
    """Per column, the n values held by the most of the latest RECENT_RUNS runs (ties by value), in value order.

    One query finds the newest run; while it is the one the values were counted at (and for at
    most CHOICES_TTL_S) they come from the cache. Otherwise one more query reads the latest runs'
    values for all the columns, whatever the history holds (a GROUP BY over the whole table took
    0.13-0.29 s at 200,000 distinct models).
    """
    _check(columns)
    newest = Run.objects.order_by("-pk").values_list("pk", "created_at").first()
    if newest is None:
        return {column: [] for column in columns}
    key = f"kvlab:top-values:{','.join(columns)}:{n}:{RECENT_RUNS}:{newest[0]}:{newest[1].timestamp()}"
    top = cache.get(key)
    if top is None:
        top = _count_top(columns, n)
        cache.set(key, top, CHOICES_TTL_S)
    return top


def _count_top(columns: tuple[str, ...], n: int) -> dict[str, list[str]]:
    rows = Run.objects.order_by("-pk").values_list(*columns)[:RECENT_RUNS]
    counts = [Counter(row[i] for row in rows) for i in range(len(columns))]
    top = {}
    for column, counter in zip(columns, counts, strict=True):
        counter.pop("", None)
        ranked = sorted(counter.items(), key=lambda item: (-item[1], item[0]))[:n]
        top[column] = sorted(value for value, _ in ranked)
    return top


def suggest_values(column: str, text: str, n: int = SUGGESTIONS) -> list[str]:
    """At most n values of the column for a typed text: those that start with it (exact case, any
    run: at most n index seeks), then those of the latest RECENT_RUNS runs that contain it in any
    case. An empty text gives what the page first offers: the TOP_CHOICES most used. At most two queries.
    """
    _check((column,))
    if not text:
        return top_values((column,))[column]
    found = starting_with(column, text, n)
    if len(found) < n:
        folded = text.casefold()
        recent = Run.objects.order_by("-pk").values_list(column, flat=True)[:RECENT_RUNS]
        containing = sorted({v for v in recent if folded in v.casefold()} - set(found), key=lambda v: (v.casefold(), v))
        found += containing[: n - len(found)]
    return found


def starting_with(column: str, prefix: str, n: int) -> list[str]:
    """The first n distinct values of the column that start with prefix, in index order.

    A loose index scan: each step seeks the next value above the last one found, so the cost
    is n seeks of the column's index however many runs share a value. On a database whose
    collation is not code point order (a linguistic PostgreSQL locale) the range can miss
    prefixed values; it never returns others (the startswith check below).
    """
    _check((column,))
    upper = _after_prefix(prefix)
    if not prefix or upper is None:
        return []
    # Only Run's own table and a checked column name are written into the SQL; the text is a parameter.
    table, col = connection.ops.quote_name(Run._meta.db_table), connection.ops.quote_name(column)
    sql = f"""
        WITH RECURSIVE found(value, n) AS (
            SELECT (SELECT {col} FROM {table} WHERE {col} >= %s AND {col} < %s ORDER BY {col} LIMIT 1), 1
            UNION ALL
            SELECT (SELECT {col} FROM {table} WHERE {col} > found.value AND {col} < %s ORDER BY {col} LIMIT 1), n + 1
            FROM found WHERE found.value IS NOT NULL AND n < %s
        )
        SELECT value FROM found WHERE value IS NOT NULL
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [prefix, upper, upper, n])
        return [value for (value,) in cursor.fetchall() if value.startswith(prefix)]


def _after_prefix(prefix: str) -> str | None:
    """The least string above every string that starts with prefix, in code point order (None: none is)."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code <= 0x10FFFF:
            return "".join(chars) + chr(0xE000 if 0xD800 <= code <= 0xDFFF else code)  # no surrogates in UTF-8
    return None


def _check(columns: tuple[str, ...]) -> None:
    unknown = set(columns) - set(FILTER_COLUMNS)
    if unknown:
        raise ValueError(f"not a filter column: {sorted(unknown)}")


def only_value(column: str) -> str | None:
    """The column's one value when every run that has one holds the same (None when none does or several do):
    two seeks of the column's index (the first value, and whether any follows it), whatever the history holds."""
    _check((column,))
    ordered = Run.objects.exclude(**{column: ""}).order_by(column).values_list(column, flat=True)
    first = ordered.first()
    if first is None or ordered.filter(**{f"{column}__gt": first}).exists():
        return None
    return first
