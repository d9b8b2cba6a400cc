"""What a list page offers and how its statements run, read the same way by the tests of every list."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.db import connection

from benchmarks.history.forms import SORTS
from benchmarks.models import Run

TOP_CHOICES = 50  # history.forms.TOP_CHOICES: the values a filter offers


def offered_values(html: str, name: str) -> list[str]:
    """The values the filter's datalist offers (the typed search is test_filter_search.py's)."""
    datalist = re.search(rf'<datalist id="id_{name}-values">(.*?)</datalist>', html, re.S)
    assert datalist, f"no datalist for {name}"
    return re.findall(r'<option value="([^"]*)"', datalist.group(1))


def typed_value(html: str, name: str) -> str | None:
    box = re.search(rf'<input type="text" name="{name}"(?: value="([^"]*)")?', html)
    assert box, f"no text box for {name}"
    return box.group(1)


def query_plan(sql: str, params: tuple) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            return "\n".join(str(row[-1]) for row in cursor.fetchall())
        # PostgreSQL would rightly scan a tiny table; forbid that, so the plan shows whether an index can
        # give the order at all (a Sort node then means none can: its order or NULLs differ)
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")  # a fresh table is not vacuumed yet
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def python_order(runs: list[Run], sort: str) -> list[str]:
    """The run list's order, computed in Python: no value lowest; ties by date (label, model, GPU), then id."""
    name = sort.lstrip("-")
    column = SORTS[name]
    dated = name in ("label", "model", "gpu")
    low = datetime.min.replace(tzinfo=UTC)

    def key(run: Run) -> tuple:
        value = getattr(run, column)
        when = run.started_at or low
        return (value is not None, value if value is not None else 0, *((when,) if dated else ()), run.pk)

    return [r.key for r in sorted(runs, key=key, reverse=sort.startswith("-"))]
