"""The home page's figure: runs per day, those with a failed request stacked under the rest."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .figure_common import FAIL_COLOR


def failures_by_day(days: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The home page's bars: per day, runs with a failed request stacked under the runs without.

    Stacked, not overlaid, so that the red part is never hidden behind the total; a date
    axis with one tick per day, not a time axis that labels midnight "23:59:59.9995".
    """
    x = [str(d["day"]) for d in days]
    day_ms = 86_400_000
    common = {
        "type": "bar",
        "x": x,
        "width": [day_ms * 0.8] * len(x),
        "hovertemplate": "%{x}: %{y} %{fullData.name}<extra></extra>",
    }
    return {
        "data": [
            {**common, "name": "runs with failures", "y": [d["failed"] for d in days], "marker": {"color": FAIL_COLOR}},
            {
                **common,
                "name": "runs without",
                "y": [d["total"] - d["failed"] for d in days],
                "marker": {"color": "#c9d4e0"},
            },
        ],
        "layout": {
            "barmode": "stack",
            "margin": {"t": 30},
            "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},  # clear of the day ticks
            "xaxis": {"type": "date", "tickformat": "%Y-%m-%d", "dtick": day_ms, "tickangle": -90},
            "yaxis": {
                "title": {"text": "runs"},
                "rangemode": "tozero",
                "tickformat": "d",
                "dtick": max(1, math.ceil(max((d["total"] for d in days), default=0) / 6)),  # whole runs
            },
        },
    }
