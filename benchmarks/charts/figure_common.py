"""What the chart figures share: a group's name, user text made literal, the colours of failures and notes,
the WebGL threshold, values and times as the figures write them, marker traces and panel notes.

Plotly reads trace names, tick labels, hover text and annotations as HTML (<b>, <a href>):
every piece of user text (labels, models, run keys, flags, builds) passes through `literal()`.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..records import series_keys
from ..records.catalogue import GROUPINGS

WEBGL_POINTS = 1000  # above this many points a series is drawn with WebGL (scattergl)
FAIL_COLOR = "#b3261e"
NOTE_COLOR = "#8a5a00"


# What series_keys.flags_label and series_keys.workload_label read: a configuration's name, a series' name.
_NAMED_BY = {
    "config": (*series_keys.FLAG_FIELDS, "engine", "server_flags"),
    "series": (*series_keys.FLAG_FIELDS, "engine", "server_flags", *series_keys.WORKLOAD_FIELDS),
}


def group_name(row: Mapping[str, Any], grouping: str) -> str:
    if grouping in _NAMED_BY:  # a timeline asks for each of its 2,000 rows' name three times: named once
        return _composed_name(grouping, series_keys.key(row, _NAMED_BY[grouping]))
    field = GROUPINGS[grouping][1][0]
    return str(row.get(field) or "(none)")


@functools.lru_cache(maxsize=8192)
def _composed_name(grouping: str, values: tuple[Any, ...]) -> str:
    row = dict(zip(_NAMED_BY[grouping], values, strict=True))
    if grouping == "config":
        return series_keys.flags_label(row)
    return f"{series_keys.flags_label(row)} · {series_keys.workload_label(row)}"


def literal(value: object) -> str:
    """User text as Plotly shows it literally: &lt; is drawn as "<", never read as a tag."""
    return html.escape(str(value), quote=False)


def rounded(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


def plotly_time(value: datetime | str) -> str:
    return value.isoformat(timespec="seconds")[:19] if isinstance(value, datetime) else value


def marker_trace(
    name: str, xs: list[Any], ys: list[Any], ids: list[Any], texts: list[str], symbol: str, color: str
) -> dict[str, Any]:
    return {
        "type": "scattergl" if len(xs) > WEBGL_POINTS else "scatter",
        "mode": "markers",
        "name": name,
        "x": xs,
        "y": ys,
        "customdata": ids,
        "text": texts,
        "hovertemplate": "%{text}<extra></extra>",
        "marker": {"symbol": symbol, "size": 11, "color": color},
    }


def panel_note(text: str, xaxis: str, yaxis: str) -> dict[str, Any]:
    """A note in the middle of a panel that has nothing to draw."""
    return {
        "text": text,
        "xref": f"{xaxis} domain",
        "yref": f"{yaxis} domain",
        "x": 0.5,
        "y": 0.5,
        "showarrow": False,
        "font": {"color": NOTE_COLOR, "size": 14},
    }
