"""The timeline's buckets counted in Python from the runs, the reference that the buckets kept in SQL
must equal whichever way they were brought up to date; the stored ones; and the figure a timeline page
hands to Plotly."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from benchmarks.models import Run, TimelineBucket
from benchmarks.models.rollups import KEY_FIELDS, ROLLED_COLUMNS, SPANS, WEEK_STARTS


def reference() -> dict[tuple[Any, ...], dict[str, Any]]:
    """Every bucket of every span, counted in Python from the runs, as TimelineBucket rows."""
    buckets: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run in Run.objects.exclude(started_at=None):
        seconds = int(run.started_at.timestamp())
        failed = run.n_requests > 0 and run.n_ok == 0
        values = {c: getattr(run, c) for c in ROLLED_COLUMNS if c != "success_rate"}
        values["success_rate"] = run.n_ok / run.n_requests if run.n_requests else None
        for span in SPANS:
            offset = WEEK_STARTS if span == SPANS[-1] else 0
            start = (seconds - offset) // span * span + offset
            key = (span, *(getattr(run, k) for k in KEY_FIELDS), start)
            bucket = buckets.setdefault(
                key, {"runs": 0, "failed": 0, **{f"{c}_{s}": None for c in ROLLED_COLUMNS for s in ("min", "max")}}
            )
            bucket["runs"] += 1
            bucket["failed"] += failed
            for column, value in values.items():
                bucket.setdefault(f"{column}_n", 0)
                if failed or value is None:
                    continue
                bucket[f"{column}_n"] += 1
                low, high = bucket[f"{column}_min"], bucket[f"{column}_max"]
                bucket[f"{column}_min"] = value if low is None else min(low, value)
                bucket[f"{column}_max"] = value if high is None else max(high, value)
    return buckets


def stored() -> dict[tuple[Any, ...], dict[str, Any]]:
    fields = ["runs", "failed", *(f"{c}_{s}" for c in ROLLED_COLUMNS for s in ("min", "max", "n"))]
    return {
        (row["span_s"], *(row[k] for k in KEY_FIELDS), row["start"]): {f: row[f] for f in fields}
        for row in TimelineBucket.objects.values()
    }


def assert_same(got: dict[tuple[Any, ...], dict[str, Any]], want: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    assert got.keys() == want.keys()
    for key, row in want.items():
        assert got[key] == pytest.approx(row), key


def figure(page: str) -> dict[str, Any]:
    match = re.search(r'<script id="timeline-figure" type="application/json">(.*?)</script>', page, re.S)
    assert match, "no figure in the page"
    return json.loads(match.group(1))
