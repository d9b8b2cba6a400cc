"""The timeline page's values, its download's rows and what it shows, from timeline_data's read."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F
from django.db.models.fields.json import KT

from ..history.forms import CompareForm
from ..records import catalogue, sources
from . import figure_common, timeline_data, timeline_figure
from .run_values import TOOL_FIELDS, VALUE_FIELDS


def raw_values(metric: catalogue.Metric, grouping: str) -> dict[str, Any]:
    """What a run read raw gives: its fields, the grouping's, the metric's value, and whose the figure is."""
    group_fields = catalogue.GROUPINGS[grouping][1]
    return {
        "args": (
            *VALUE_FIELDS,
            *TOOL_FIELDS,
            *[f for f in group_fields if f not in VALUE_FIELDS and f not in TOOL_FIELDS],
        ),
        "kwargs": {
            "value": F(metric.column),
            "build": F("server_props__props__build_info"),
            # "file" / "derived" when the figure is the tool's: the point's hover says so
            "value_source": KT(f"provenance__{sources.provenance_key(metric.column)}"),
        },
    }


def download_rows(data: timeline_data.TimelineData, metric: catalogue.Metric, grouping: str) -> list[dict[str, Any]]:
    """The flat rows of a download: the buckets of an overview, else the runs."""
    return [_flat_bucket(b, metric, grouping, data.span_s) for b in data.buckets] or [
        _flat(r, metric) for r in data.rows
    ]


def _flat(row: dict[str, Any], metric: catalogue.Metric) -> dict[str, Any]:
    flat = {k: row.get(k) for k in VALUE_FIELDS}
    flat[metric.key] = row.get("value")
    return flat


def _flat_bucket(bucket: dict[str, Any], metric: catalogue.Metric, grouping: str, span_s: int) -> dict[str, Any]:
    """A reduced point as the download gives it: the bucket, its counts, its min and max (no run)."""
    start = timeline_data.when(bucket["start"])
    return {
        grouping: figure_common.group_name(bucket, grouping),
        "bucket_from": start.isoformat(),
        "bucket_to": timeline_data.when(bucket["start"] + span_s).isoformat(),
        "runs": bucket["runs"],
        "failed_runs": bucket["failed"],
        f"runs_with_{metric.key}": bucket["valued"],
        f"min_{metric.key}": bucket["lo"],
        f"max_{metric.key}": bucket["hi"],
    }


def shown(
    data: timeline_data.TimelineData,
    metric: catalogue.Metric,
    grouping: str,
    x0: datetime | None,
    x1: datetime | None,
) -> dict[str, Any]:
    """The page's figure and what it says about it, for the range x0..x1 (either may be open)."""
    span_word = timeline_data.SPAN_WORDS.get(data.span_s, "")
    rows = data.rows
    mixed = timeline_figure.mixed_lines(rows, grouping)
    if data.buckets:
        figure = timeline_figure.timeline_reduced(data.buckets, metric, grouping, data.span_s, span_word)
    else:
        figure = timeline_figure.timeline(rows, metric, grouping, mixed) if rows else None
    if figure and x0 and x1:
        figure["layout"]["xaxis"]["range"] = [x0.isoformat(), x1.isoformat()]
    return {
        "metric": metric,
        "grouping": grouping,
        "grouping_label": catalogue.GROUPINGS[grouping][0],
        "mixed": mixed,
        "figure": figure,
        "n_points": data.n_runs if data.buckets else len(rows),
        "n_buckets": len(data.buckets),
        "span_word": span_word,
        "truncated": data.truncated,
        "why_raw": data.why_raw,
        "window": data.window,
        "ranged": bool(x0 or x1),
        # the figure holds less than every run of its range: a zoom or a pan fetches the range's detail
        "partial": bool(data.buckets or data.truncated or x0 or x1),
        "max_points": timeline_data.RAW_MAX,
        "compare_max_runs": CompareForm.MAX_RUNS,
    }
