"""The regressions page's figure: each regression's latest run against its baseline band.

One row per regression found (the worst first, at most FIGURE_ROWS of the table's rows), on one axis
of change from the baseline: the baseline median is 0 %, its band the median ± twice the earlier
runs' spread (what a run must leave to count, with three or more earlier runs), the threshold a
dashed line, and the latest run a red point. Units differ between metrics (tok/s, seconds, %);
change from each series' own median is the one scale they share. "Worse" is always to the left:
the change is signed so that negative is worse, for the metrics where lower is better too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .figure_common import FAIL_COLOR, literal

FIGURE_ROWS = 25  # the worst regressions drawn; the table lists up to MAX_REGRESSIONS_SHOWN
BAND_COLOR = "#c9d4e0"
ROW_PX = 40


def baseline_bands(found: Sequence[Any], thresholds: Mapping[str, float]) -> dict[str, Any]:
    """The figure of the regressions found (regression_views.Regression), worst first, as Plotly's JSON."""
    rows = list(found[:FIGURE_ROWS])
    # the group over the metric: on one line the names took a phone's width from the plot
    names = [f"{literal(r.group)}<br>{literal(r.metric.label)} ({i + 1})" for i, r in enumerate(rows)]
    band = [
        200 * r.spread / abs(r.baseline) if r.spread is not None and r.baseline else None for r in rows
    ]  # ± 2 spreads, in % of the median
    latest = [round(100 * r.change, 2) for r in rows]
    threshold = [-100 * thresholds[r.metric.key] for r in rows]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": "baseline band (median ± 2 spreads of the earlier runs)",
            "y": names,
            "base": [-b if b is not None else 0 for b in band],
            "x": [2 * b if b is not None else 0 for b in band],
            "marker": {"color": BAND_COLOR},
            "customdata": [[r.baseline, r.spread, r.history] for r in rows],
            "hovertemplate": "median %{customdata[0]:.3f}, spread %{customdata[1]:.3f} over %{customdata[2]} runs"
            "<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "threshold",
            "y": names,
            "x": threshold,
            "marker": {"symbol": "line-ns", "size": 16, "line": {"width": 2, "color": "#555"}},
            "hovertemplate": "threshold %{x:.1f} %<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "latest run",
            "y": names,
            "x": latest,
            "marker": {"color": FAIL_COLOR, "size": 10},
            "customdata": [[r.latest, r.latest_run_id] for r in rows],
            "hovertemplate": "latest %{customdata[0]:.3f}: %{x:+.1f} % from the median<extra></extra>",
        },
    ]
    return {
        "data": data,
        "layout": {
            "height": 130 + ROW_PX * len(rows),
            "margin": {"l": 10, "r": 20, "t": 50, "b": 50},
            "barmode": "overlay",
            "showlegend": True,
            "legend": {"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom"},  # above the plot, clear of the x title
            "xaxis": {
                "title": {"text": "% from the baseline median<br>(worse to the left)", "standoff": 4},
                "zeroline": True,
                "ticksuffix": " %",
            },
            "yaxis": {"autorange": "reversed", "automargin": True, "type": "category"},
        },
    }
