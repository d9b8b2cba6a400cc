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


# Every chart's legend stands above its plots, left-aligned: Plotly's horizontal legend sits just under
# the plot area by default, over the x axis's title and dates (a 31-entry one covered both), and it
# widens the top margin for a legend above (charts.js's fitLegend grows the figure when the margin cannot
# hold it: a phone wraps ten entries to five rows). Past 200 px (ten rows) the legend scrolls.
LEGEND = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom", "maxheight": 200}


def legend_with_note(note: str | None) -> dict[str, Any]:
    """The legend, headed by a warning when there is one: it stands in the legend's place, never over an
    axis or another note, and a saved PNG carries it (the legend is shown whenever it has a note)."""
    if not note:
        return LEGEND
    return {**LEGEND, "title": {"text": note, "side": "top", "font": {"color": NOTE_COLOR}}}


def panel_label(text: str, yaxis: str) -> dict[str, Any]:
    """A panel's name (a model's file), at the top left inside its panel: above it would meet the legend
    or the panel over it."""
    return {
        "text": f"<b>{text}</b>",
        "xref": "paper",
        "yref": f"{yaxis} domain",
        "x": 0.005,
        "y": 0.98,
        "xanchor": "left",
        "yanchor": "top",
        "showarrow": False,
        "bgcolor": "rgba(255, 255, 255, 0.8)",
    }


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


# Failed runs are drawn on one band under the plots of every chart (timeline, home, load curve), on the
# shared x axis: a strip labelled "failed" with its own axis, never a place on a value axis, where a
# cross at the bottom of an automatic range read as a measurement (108 tok/s on a tiny model's panel).
FAIL_AXIS = "y20"  # the band's axis (a trace's "yaxis"; layout key "yaxis20")
FAIL_Y = 0.5  # a failure's place within the band
FAIL_BAND = 0.06  # the band's height, of the plot area
FAIL_GAP = 0.04  # between the band and the lowest value panel


def fail_trace(name: str, xs: list[Any], ids: list[Any], texts: list[str]) -> dict[str, Any]:
    """Failed runs as red crosses on the failure band (with_fail_band puts the band in the layout)."""
    return {
        **marker_trace(name, xs, [FAIL_Y] * len(xs), ids, texts, "x", FAIL_COLOR),
        "yaxis": FAIL_AXIS,
        "cliponaxis": False,
    }


def with_fail_band(figure: dict[str, Any]) -> dict[str, Any]:
    """The figure with its failure band, when a trace is on it: the value axes' domains moved up over the
    band, the band's axis (fixed range, one tick reading "failed"), and the x axis drawn under the band."""
    if not any(t.get("yaxis") == FAIL_AXIS for t in figure["data"]):
        return figure
    layout = figure["layout"]
    above, scale = FAIL_BAND + FAIL_GAP, 1 - FAIL_BAND - FAIL_GAP
    for key in [k for k in layout if k.startswith("yaxis")]:
        lo, hi = layout[key].get("domain", [0, 1])
        layout[key] = {**layout[key], "domain": [round(above + lo * scale, 4), round(above + hi * scale, 4)]}
    layout["yaxis" + FAIL_AXIS[1:]] = {
        "domain": [0, FAIL_BAND],
        "range": [0, 1],
        "fixedrange": True,
        "tickvals": [FAIL_Y],
        "ticktext": ["failed"],
        "tickfont": {"color": FAIL_COLOR},
        "showgrid": False,
        "zeroline": False,
        "anchor": "x",
    }
    layout["xaxis"] = {**layout.get("xaxis", {}), "anchor": FAIL_AXIS}
    return figure
