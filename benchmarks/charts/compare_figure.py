"""The compare chart: grouped bars of the runs' metrics, one panel per metric, and per-request tok/s
strips. Pure: rows in, a Plotly figure dict out.
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from ..records import series_keys, sources
from ..records.catalogue import COMPARE_METRICS, METRICS
from ..records.outcomes import FAILED, outcome_of
from .figure_common import FAIL_COLOR, NOTE_COLOR, literal, panel_note, rounded

# The compare chart's strips draw each point up to this many in all; past it each box only its points beyond the
# whiskers: a point is an SVG node to paint (10,000 took Chromium 1.3-2.6 s here, their boxes and outliers 0.4-0.8 s).
DRAWN_STRIP_POINTS = 1000

# The metrics' panels stand two to a row over the strips, each named above it (a y title in a narrow
# panel ran over the next one), its runs ticked by number: run 1, 2, 3 as the strips' axis names them
# (rotated names ran into the y ticks and under the neighbouring panel). Fractions of the plot area.
COLUMNS = ((0.0, 0.44), (0.56, 1.0))
STRIPS = (0.0, 0.26)
METRICS_FROM, ROW_GAP = 0.35, 0.075


def compare(
    runs: Sequence[Mapping[str, Any]],
    requests: Iterable[tuple[int, bool, float | None]],
    *,
    stored: set[int] | None = None,
    sampled: Collection[int] = (),
) -> dict[str, Any]:
    """Grouped bars of the runs' metrics, one panel per metric, and per-request tok/s strips.

    Nothing is drawn as a number it is not: a metric no run recorded is a panel saying
    "not recorded" (no axes of arbitrary ticks), a missing bar says why (failed, not
    recorded), and a 0 % success rate is a red mark at zero with its count.
    `requests`: (run id, ok, tok/s) of the requests the strips draw; `stored`: the runs that store
    any request (else those `requests` name); `sampled`: the runs whose `requests` are a sample (the
    axis says so). Past DRAWN_STRIP_POINTS points in all, each box shows only its points beyond the whiskers.
    """
    names = [literal(f"{r['label'] or r['key']} ({r['key']})") for r in runs]
    failed = [outcome_of(r["n_ok"], r["n_requests"]) == FAILED for r in runs]
    traces: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    layout: dict[str, Any] = {}
    panels = len(COMPARE_METRICS)
    with_tools = any(r.get("has_summary") for r in runs)  # then each bar's hover says whose figure it is
    for i, key in enumerate(COMPARE_METRICS, start=1):
        metric = METRICS[key]
        values = [rounded(r["value_" + key]) for r in runs]
        bars: dict[str, Any] = {
            "type": "bar",
            "name": metric.label,
            "x": names,
            "y": values,
            "customdata": [r["pk"] for r in runs],
            "xaxis": f"x{i}",
            "yaxis": f"y{i}",
            "marker": {"color": [FAIL_COLOR if f else "#0b63c5" for f in failed]},
            "hovertemplate": "%{x}<br>" + metric.label + ": %{y}<extra></extra>",
            "showlegend": False,
        }
        if with_tools:
            bars["text"] = [
                literal(sources.source_note(sources.row_sources(r, metric.column), series_keys.measured_by(r)))
                for r in runs
            ]
            bars["textposition"] = "none"
            bars["hovertemplate"] = "%{x}<br>" + metric.label + ": %{y}<br>%{text}<extra></extra>"
        traces.append(bars)
        x_domain, y_domain = _metric_domains(i, panels)
        layout[f"xaxis{i}"] = {**_run_ticks(names, numbered=True), "domain": x_domain, "anchor": f"y{i}"}
        layout[f"yaxis{i}"] = {"rangemode": "tozero", "domain": y_domain, "anchor": f"x{i}"}
        annotations.append(_panel_title(metric.label, f"x{i}", f"y{i}"))
        if all(v is None for v in values):
            annotations.append(panel_note("not recorded", f"x{i}", f"y{i}"))
            _hide_axes(layout, i)
            continue
        for run, name, value, run_failed in zip(runs, names, values, failed, strict=True):
            if value is None:
                text = "failed" if run_failed else "no requests" if not run["n_requests"] else "not recorded"
                annotations.append(_bar_note(text, name, f"x{i}", f"y{i}", FAIL_COLOR if run_failed else NOTE_COLOR))
        if key == "success":
            layout[f"yaxis{i}"].update(range=[0, 1.15], tickformat=".0%")
            zero = [j for j, v in enumerate(values) if v == 0]
            if zero:
                traces.append(
                    {
                        "type": "scatter",
                        "mode": "markers+text",
                        "name": "0 % success",
                        "x": [names[j] for j in zero],
                        "y": [0] * len(zero),
                        "customdata": [runs[j]["pk"] for j in zero],
                        "text": [f"0 %<br>({runs[j]['n_ok']}/{runs[j]['n_requests']} ok)" for j in zero],
                        "textposition": "top center",
                        "textfont": {"color": FAIL_COLOR},
                        "marker": {
                            "symbol": "line-ew-open",
                            "size": 28,
                            "color": FAIL_COLOR,
                            "line": {"width": 4, "color": FAIL_COLOR},
                        },
                        "cliponaxis": False,
                        "xaxis": f"x{i}",
                        "yaxis": f"y{i}",
                        "hovertemplate": "%{x}<br>%{text}<extra></extra>",
                        "showlegend": False,
                    }
                )
    per_run: dict[int, list[float]] = {r["pk"]: [] for r in runs}
    named: set[int] = set()  # runs with a request row among `requests`
    for run_id, ok, tok_s in requests:
        named.add(run_id)
        if ok and tok_s is not None and run_id in per_run:
            per_run[run_id].append(tok_s)
    stored = named if stored is None else stored
    box = panels + 1
    n_points = sum(len(rates) for rates in per_run.values())
    for run, name, run_failed in zip(runs, names, failed, strict=True):
        rates = per_run[run["pk"]]
        traces.append(
            {
                "type": "box",
                "name": name,
                "x0": name,  # the run's category: one name for the trace, not one a point
                "y": rates,
                "boxpoints": "all" if n_points <= DRAWN_STRIP_POINTS else "outliers",
                "pointpos": 0,
                "jitter": 0.3,
                "line": {"width": 1},
                "xaxis": f"x{box}",
                "yaxis": f"y{box}",
                "showlegend": False,
                "hovertemplate": "%{y} tok/s<extra>%{fullData.name}</extra>",
            }
        )
        if not rates and any(per_run.values()):
            text = (
                "failed: no ok request"
                if run_failed
                else "no request stored: the tool's aggregates"
                if run.get("has_summary") and run["pk"] not in stored
                else "no per-request tok/s"
            )
            note = _bar_note(text, name, f"x{box}", f"y{box} domain", FAIL_COLOR if run_failed else NOTE_COLOR)
            annotations.append({**note, "y": 0.5, "textangle": 0})
    layout[f"xaxis{box}"] = {
        **_run_ticks(names, numbered=False),
        "domain": [0, 1],
        "anchor": f"y{box}",
        "automargin": True,
    }
    strips = "per-request decode tok/s<br>(ok requests" + (", a sample)" if any(sampled) else ")")
    layout[f"yaxis{box}"] = {"domain": list(STRIPS), "anchor": f"x{box}", "title": {"text": strips}}
    if not any(per_run.values()):
        annotations.append(panel_note("not recorded", f"x{box}", f"y{box}"))
        _hide_axes(layout, box)
    layout.update(margin={"t": 40, "l": 60, "r": 20}, height=980, annotations=annotations)
    return {"data": traces, "layout": layout}


def _metric_domains(i: int, panels: int) -> tuple[list[float], list[float]]:
    """Panel i's place (1-based): two to a row, from the top, over the strips."""
    rows = -(-panels // len(COLUMNS))
    height = (1 - METRICS_FROM - ROW_GAP * (rows - 1)) / rows
    row, column = divmod(i - 1, len(COLUMNS))
    top = 1 - row * (height + ROW_GAP)
    return list(COLUMNS[column]), [round(top - height, 4), round(top, 4)]


def _run_ticks(names: list[str], *, numbered: bool) -> dict[str, Any]:
    """A category axis of the runs in their order (a failed run keeps its empty place), ticked by each run's
    number, or on the strips by number and name: the key to the panels' numbers."""
    return {
        "type": "category",
        "categoryorder": "array",
        "categoryarray": names,
        "tickmode": "array",
        "tickvals": names,
        "ticktext": [str(n) if numbered else f"{n} · {name}" for n, name in enumerate(names, start=1)],
        "tickangle": 0 if numbered else "auto",
    }


def _panel_title(text: str, xaxis: str, yaxis: str) -> dict[str, Any]:
    """A metric panel's name over it, on lines of up to 18 characters: a panel is 120 px wide on a phone."""
    return {
        "text": "<br>".join(f"<b>{line}</b>" for line in textwrap.wrap(text, 18)),
        "xref": f"{xaxis} domain",
        "yref": f"{yaxis} domain",
        "x": 0,
        "y": 1.02,
        "xanchor": "left",
        "yanchor": "bottom",
        "showarrow": False,
    }


def _bar_note(text: str, category: str, xaxis: str, yaxis: str, color: str) -> dict[str, Any]:
    """Why a bar is missing, written where it would stand."""
    return {
        "text": text,
        "x": category,
        "y": 0,
        "xref": xaxis,
        "yref": yaxis,
        "yanchor": "bottom",
        "showarrow": False,
        "textangle": -90,
        "font": {"color": color},
    }


def _hide_axes(layout: dict[str, Any], i: int) -> None:
    hidden = {"showticklabels": False, "showgrid": False, "zeroline": False, "ticks": "", "fixedrange": True}
    layout[f"xaxis{i}"].update(hidden)
    layout[f"yaxis{i}"].update(hidden)
