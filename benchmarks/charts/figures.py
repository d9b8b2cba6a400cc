"""Plotly figures built from query rows. Pure: rows in, figure dicts out.

Each builder takes the rows one query returned and gives {"data": [...], "layout":
{...}} for Plotly.newPlot, plus the flat rows the CSV/JSON download offers.

Plotly reads trace names, tick labels, hover text and annotations as HTML (<b>, <a href>):
every piece of user text (labels, models, run keys, flags, builds) passes through `literal()`.
"""

from __future__ import annotations

import functools
import html
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ..records import series_keys, sources
from ..records.catalogue import COMPARE_METRICS, GROUPINGS, METRICS, Comparison, Metric, baseline_comparison
from ..records.outcomes import FAILED, outcome_of

WEBGL_POINTS = 1000  # above this many points a series is drawn with WebGL (scattergl)
# Past this many changes of configuration (or of workload) in one chart, a marker per change is noise
# and most of the page's weight: the legend gives their number and the page warns that lines mix them.
MAX_CHANGE_MARKERS = 500
# A line of more points than this is drawn without a marker per point: each marker is an SVG node that
# Chromium paints, 0.1-0.2 ms each (30 lines of 66 runs: 720 ms with markers on a busy 2-core machine).
MARKED_POINTS = 50
# A reduced timeline (timeline_reduced) of more buckets than this draws its strokes without a marker at each
# end: the overview of a million runs held 810 buckets, whose 1,600 markers were ~100 ms of its paint.
MARKED_BUCKETS = 300
# The compare chart's strips draw each point up to this many in all; past it each box only its points beyond the
# whiskers: a point is an SVG node to paint (10,000 took Chromium 1.3-2.6 s here, their boxes and outliers 0.4-0.8 s).
DRAWN_STRIP_POINTS = 1000
MAX_LINES = 50  # lines drawn one by one in a timeline: the rest as one trace of points (_timeline_traces)
# Past MAX_LINES, a group of fewer runs than this is a point, not a line: it joins the grey points (its hover
# names it) rather than take a trace and a legend entry of its own (_timeline_traces).
MIN_LINE_RUNS = 2
FAIL_COLOR = "#b3261e"


CHANGE_FIELDS = (*series_keys.CONFIG_FIELDS, "build")  # a change within a line is marked with a diamond
CHANGE_KINDS = {  # a change within a line: the fields that make it, its marker
    "configuration": (CHANGE_FIELDS, "diamond-open"),
    "workload": (series_keys.WORKLOAD_FIELDS, "square-open"),
}
NOTE_COLOR = "#8a5a00"


# What series_keys.flags_label and series_keys.workload_label read: a configuration's name, a series' name.
_NAMED_BY = {
    "config": (*series_keys.FLAG_FIELDS, "engine", "server_flags"),
    "series": (*series_keys.FLAG_FIELDS, "engine", "server_flags", *series_keys.WORKLOAD_FIELDS),
}


GREY_NAMED_BY = {"config": "flags", "series": "flags and workload"}  # what names a grey point's line, in its hover


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


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


def _describe_change(before: Mapping[str, Any], after: Mapping[str, Any], fields: Sequence[str]) -> str:
    return "; ".join(
        f"{series_keys.FIELD_NAMES[f]}: {literal(before.get(f))} → {literal(after.get(f))}"
        for f in fields
        if before.get(f) != after.get(f)
    )


def mixed_note(mixed: Sequence[series_keys.Mixed], n_groups: int) -> dict[str, Any]:
    """A warning written into the figure itself, so that a saved PNG carries it too."""
    some = "every line mixes" if len(mixed) == n_groups else f"{len(mixed)} of {n_groups} lines mix"
    return {
        "text": f"⚠ {some} configurations or workloads: not like for like",
        "xref": "paper",
        "yref": "paper",
        "x": 0,
        "y": 1,
        "xanchor": "left",
        "yanchor": "bottom",
        "showarrow": False,
        "font": {"color": NOTE_COLOR},
    }


def mixed_lines(rows: Iterable[Mapping[str, Any]], grouping: str) -> list[series_keys.Mixed]:
    """The lines of a timeline that mix configurations or workloads."""
    return series_keys.mixed_groups(rows, lambda row: group_name(row, grouping))


def timeline(
    rows: Sequence[Mapping[str, Any]], metric: Metric, grouping: str, mixed: Sequence[series_keys.Mixed] | None = None
) -> dict[str, Any]:
    """One line per group over time; failed runs as red crosses; configuration and workload changes marked.

    Kept compact for large histories: per point its time (UTC, to the second), value and
    run id, and its hover facts as numbers and an index into the line's table of flags
    (`_hover_facts`); charts.js writes the hover text in the browser. `mixed`: the caller's
    `mixed_lines(rows, grouping)`, if it has them.
    """
    traces, n_groups = _timeline_traces(rows, grouping, "y")
    mixed = mixed_lines(rows, grouping) if mixed is None else mixed
    layout = {
        "xaxis": {"title": {"text": "run start (UTC)"}, "type": "date"},
        "yaxis": {"title": {"text": metric.label}, "rangemode": "tozero" if metric.key == "success" else "normal"},
        "hovermode": "closest",
        "margin": {"t": 40},
        "legend": {"orientation": "h"},
        "annotations": [mixed_note(mixed, n_groups)] if mixed else [],
    }
    return {"data": traces, "layout": layout}


def timeline_reduced(
    buckets: Sequence[Mapping[str, Any]], metric: Metric, grouping: str, span_s: int, span_word: str
) -> dict[str, Any]:
    """Each line as the min and the max of its runs per bucket (timeline_data), marked as reduced.

    Per bucket the server sends its start and end (Unix seconds), min, max, runs with a value and runs;
    charts.js draws each bucket as a vertical stroke from its min to its max (the per-pixel min/max
    picture: no line joins one bucket's max to the next one's min; a bucket of one value is a point, or
    where the line has no markers a short dash at the value, as is one whose min is its max) and writes
    the hover at either end
    ("max of 37 runs (35 with a value) · 2026-03-02 00:00 … 2026-03-03 00:00 UTC"); clicking one zooms
    into its bucket, which fetches the runs. Failed runs are counted per bucket as red crosses.
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for bucket in buckets:
        groups.setdefault(group_name(bucket, grouping), []).append(bucket)
    traces: list[dict[str, Any]] = []
    failed: list[tuple[str, Mapping[str, Any]]] = []
    valued = [g for g, rows in groups.items() if any(row["valued"] for row in rows)]
    for group, rows in groups.items():
        name = literal(group)
        failed += [(name, row) for row in rows if row["failed"]]
        if group not in valued:
            continue  # a line of failed runs alone (or of no value): its crosses say it
        # each line's strokes at its own place within the bucket, side by side: not hidden behind another's
        at = (valued.index(group) + 0.5) / len(valued)
        traces.append(
            {
                "type": "scattergl" if 2 * len(rows) > WEBGL_POINTS else "scatter",
                # a stroke per bucket; a marker at its ends only for a few buckets (a bucket of one value is
                # a point; without markers charts.js draws it as a short dash): each marker is an SVG node to paint
                "mode": "lines+markers" if len(rows) <= MARKED_POINTS and len(buckets) <= MARKED_BUCKETS else "lines",
                "name": f"{name} (min/max per {span_word})",
                # each bucket's middle (charts.js draws two points there: the min and the max)
                "x": [
                    _when(datetime.fromtimestamp(row["start"] + (row["end"] - row["start"]) * at, UTC)) for row in rows
                ],
                "y": [],
                "reduced": {
                    "span": span_s,
                    "at": round(at, 4),
                    "dash": round(0.35 / len(valued), 4),  # half a one-value dash's width, of the bucket's
                    "start": [row["start"] for row in rows],
                    "end": [row["end"] for row in rows],
                    "lo": [_round(row["lo"]) for row in rows],
                    "hi": [_round(row["hi"]) for row in rows],
                    "valued": [row["valued"] for row in rows],
                    "runs": [row["runs"] for row in rows],
                },
                "marker": {"size": 4},
                "line": {"width": 2},
                "hovertemplate": "%{text}<br>%{y}<extra>%{fullData.name}</extra>",
                "connectgaps": False,
            }
        )
    values = [y for t in traces for y in t["reduced"]["lo"] if y is not None]
    floor = min(values) if values else 0
    if failed:
        middle = [datetime.fromtimestamp((row["start"] + row["end"]) // 2, UTC) for _, row in failed]
        texts = [
            f"{name}: {row['failed']:,} of {row['runs']:,} runs failed, {_between(row['start'], row['end'])}"
            " (click to zoom in)"
            for name, row in failed
        ]
        starts = [row["start"] for _, row in failed]
        marks = _markers(
            "failed runs", [_when(m) for m in middle], [floor] * len(failed), starts, texts, "x", FAIL_COLOR
        )
        traces.append({**marks, "reduced": {"end": [row["end"] for _, row in failed]}})
    layout = {
        "xaxis": {"title": {"text": "run start (UTC)"}, "type": "date"},
        "yaxis": {"title": {"text": metric.label}, "rangemode": "tozero" if metric.key == "success" else "normal"},
        "hovermode": "closest",
        "margin": {"t": 40},
        "legend": {"orientation": "h"},
        "annotations": [],
    }
    return {"data": traces, "layout": layout}


def _between(start: int, end: int) -> str:
    """A bucket's time range as the hover gives it: 2026-03-02 00:00 … 2026-03-03 00:00 UTC."""
    first, last = (datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%d %H:%M") for s in (start, end))
    return f"{first} … {last} UTC"


def timeline_by_model(
    rows: Sequence[Mapping[str, Any]], metric: Metric, grouping: str, *, max_panels: int = 4
) -> tuple[dict[str, Any], list[str]]:
    """The timeline in one panel per model, on a shared time axis; the models left out.

    Models differ in speed by orders of magnitude (a 24B model decodes at 26 tok/s, a
    0.5B one at 2,000): on one axis the slow one is a flat line at zero, and a log
    axis would shrink the drops a team looks for. Each model gets its own scale.
    """
    by_model: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_model.setdefault(str(row["model"]), []).append(row)
    models = sorted(by_model, key=lambda m: (-len(by_model[m]), m))
    shown = models[:max_panels]
    gap = 0.12 if len(shown) > 1 else 0
    height = (1 - gap * (len(shown) - 1)) / len(shown)
    traces: list[dict[str, Any]] = []
    layout: dict[str, Any] = {"hovermode": "closest", "margin": {"t": 40}, "legend": {"orientation": "h"}}
    annotations: list[dict[str, Any]] = []
    all_mixed: list[series_keys.Mixed] = []
    n_groups = 0
    for i, model in enumerate(shown):
        axis = "" if i == 0 else str(i + 1)
        panel, groups = _timeline_traces(by_model[model], grouping, f"y{axis}")
        traces += panel
        n_groups += groups
        all_mixed += mixed_lines(by_model[model], grouping)
        top = 1 - i * (height + gap)
        layout[f"yaxis{axis}"] = {
            "domain": [max(top - height, 0), top],
            "anchor": "x",
            "title": {"text": metric.label if len(shown) == 1 else "tok/s" if metric.key == "tok_s" else ""},
            "rangemode": "tozero",
        }
        if len(shown) > 1:
            annotations.append(
                {
                    "text": f"<b>{literal(model)}</b>",
                    "xref": "paper",
                    "yref": f"y{axis} domain",
                    "x": 0,
                    "y": 1,
                    "xanchor": "left",
                    "yanchor": "bottom",
                    "showarrow": False,
                }
            )
    layout["xaxis"] = {"type": "date", "anchor": f"y{'' if len(shown) == 1 else len(shown)}"}
    if all_mixed:
        annotations.append({**mixed_note(all_mixed, n_groups), "y": 1.0, "x": 1, "xanchor": "right"})
    layout["annotations"] = annotations
    if len(shown) > 1:
        layout["height"] = 240 * len(shown) + 120
    return {"data": traces, "layout": layout}, models[max_panels:]


def _timeline_traces(rows: Sequence[Mapping[str, Any]], grouping: str, yaxis: str) -> tuple[list[dict[str, Any]], int]:
    """The lines of a timeline (column by column: thousands of points) and its markers; how many lines.

    Past MAX_LINES lines (grouped by configuration + workload, a lab where every run has its own prompt
    size has a line per run) the lines with the fewest runs are drawn together as grey points: a
    Plotly trace costs Chromium ~2 ms to paint, and 2,000 of them took 4 s. Of those past MAX_LINES,
    only lines of MIN_LINE_RUNS runs or more are drawn one by one: the latest 2,000 runs of a million
    were 1,994 such lines, the 50 "largest" of one or two runs each, picked by name; their 50 legend
    entries cost the page 70-100 ms in Chromium and told no more than each point's hover (its line).
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(group_name(row, grouping), []).append(row)
    n_groups = len(groups)
    others: list[Mapping[str, Any]] = []
    if n_groups > MAX_LINES:
        long_enough = [g for g in groups if len(groups[g]) >= MIN_LINE_RUNS]
        kept = sorted(long_enough, key=lambda g: (-len(groups[g]), g))[:MAX_LINES]
        others = sorted(
            (row for g in groups if g not in kept for row in groups[g]), key=lambda r: (r["started_at"], r["pk"])
        )
        groups = {g: groups[g] for g in groups if g in kept}
    traces: list[dict[str, Any]] = []
    fail_x, fail_ids, fail_text = [], [], []
    changes: dict[str, list[_Changes]] = {kind: [] for kind in CHANGE_KINDS}
    for group, points in groups.items():
        name = literal(group)
        xs = [_when(row["started_at"]) for row in points]
        failed = [outcome_of(row["n_ok"], row["n_requests"]) == FAILED for row in points]
        ys = [None if fail else _round(row["value"]) for row, fail in zip(points, failed, strict=True)]
        for row, when, fail in zip(points, xs, failed, strict=True):
            if fail:
                fail_x.append(when)
                fail_ids.append(row["pk"])
                fail_text.append(f"{name}: {literal(row['key'])} failed, 0/{row['n_requests']} ok")
        trace = {
            "type": "scattergl" if len(xs) > WEBGL_POINTS else "scatter",
            "mode": "lines+markers" if len(xs) <= MARKED_POINTS else "lines",
            "name": name,
            "x": xs,
            "y": ys,
            "customdata": [row["pk"] for row in points],
            "hover_facts": _hover_facts(points),  # charts.js writes each point's hover text from them
            "hovertemplate": "%{text}<br>%{y}<extra>%{fullData.name}</extra>",
            "connectgaps": False,
            "yaxis": yaxis,
        }
        traces.append(trace)
        for kind, (fields, _) in CHANGE_KINDS.items():
            keys = [series_keys.key(row, fields) for row in points]
            where = [i for i in range(1, len(points)) if keys[i] != keys[i - 1]]
            if where:
                changes[kind].append(_Changes(trace, points, where))
    if others:
        failed = [outcome_of(row["n_ok"], row["n_requests"]) == FAILED for row in others]
        for row, fail in zip(others, failed, strict=True):
            if fail:
                fail_x.append(_when(row["started_at"]))
                fail_ids.append(row["pk"])
                fail_text.append(
                    f"{literal(group_name(row, grouping))}: {literal(row['key'])} failed, 0/{row['n_requests']} ok"
                )
        # Each point's hover names its line: the flags (and workload) its text gives already are the line's
        # name when grouped by configuration (+ workload); grouped otherwise, a table of the names.
        named = grouping in GREY_NAMED_BY
        facts = _hover_facts(others, None if named else [literal(group_name(row, grouping)) for row in others])
        traces.append(
            {
                # SVG, whatever its size (at most timeline_data.RAW_MAX points): 2,000 markers paint in 620 ms
                # in a Chromium without GPU, 1,050 ms as WebGL
                "type": "scatter",
                "mode": "markers",
                "name": f"{n_groups - len(groups):,} more lines, as grey points",
                "x": [_when(row["started_at"]) for row in others],
                "y": [None if fail else _round(row["value"]) for row, fail in zip(others, failed, strict=True)],
                "customdata": [row["pk"] for row in others],
                "hover_facts": facts,
                "hovertemplate": "%{text}<br>%{y}<extra>"
                + (f"its line: the {GREY_NAMED_BY[grouping]} above" if named else "%{hovertext}")
                + "</extra>",
                "marker": {"color": "#999", "size": 5},
                "yaxis": yaxis,
            }
        )
    values = [y for t in traces for y in t["y"] if y is not None]
    floor = min(values) if values else 0
    extra = []
    if fail_x:
        extra.append(_markers("failed runs", fail_x, [floor] * len(fail_x), fail_ids, fail_text, "x", FAIL_COLOR))
    for kind, lines in changes.items():
        if lines:
            extra.append(_change_markers(kind, lines, floor))
    for trace in extra:
        trace.update(yaxis=yaxis, legendgroup=trace["name"], showlegend=yaxis == "y")
    return traces + extra, n_groups


class _Changes(NamedTuple):
    """Where a line's configuration (or workload) differs from the run before: indices into its points."""

    trace: dict[str, Any]
    points: Sequence[Mapping[str, Any]]
    where: list[int]


def _change_markers(kind: str, lines: Sequence[_Changes], floor: float) -> dict[str, Any]:
    """A marker per change, each saying what changed; past MAX_CHANGE_MARKERS only their number, undescribed."""
    fields, symbol = CHANGE_KINDS[kind]
    n_changes = sum(len(line.where) for line in lines)
    if n_changes > MAX_CHANGE_MARKERS:
        name = f"{kind} changed {n_changes:,} times: too many to mark"
        return {**_markers(name, [], [], [], [], symbol, "#444"), "visible": "legendonly"}
    xs, ys, ids, texts = [], [], [], []
    for trace, points, where in lines:
        for i in where:
            y = trace["y"][i]
            xs.append(trace["x"][i])
            ys.append(floor if y is None else y)
            ids.append(points[i]["pk"])
            texts.append(f"{trace['name']}: {_describe_change(points[i - 1], points[i], fields)}")
    return _markers(f"{kind} changed", xs, ys, ids, texts, symbol, "#444")


def _hover_facts(points: Sequence[Mapping[str, Any]], lines: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """A line's hover facts, compact: per point its outcome, its workload as numbers and an index into the
    line's table of flags, each escaped once. charts.js writes them as "ok/total ok · flags · workload".
    `lines`: per point the name of its line (escaped), for points of many lines (the grey points), as a
    table and an index per point; charts.js makes it each point's hovertext.

    In a lab where nearly every run has its own prompt size, one such string per point was two thirds
    of a 10,000-run timeline's page (~100 bytes a point); these take ~20.
    """
    keys = [series_keys.key(row, series_keys.FLAG_FIELDS) for row in points]
    table: dict[tuple[Any, ...], int] = {}
    flags: list[str] = []
    for key, row in zip(keys, points, strict=True):
        if key not in table:
            table[key] = len(flags)
            flags.append(literal(series_keys.flags_label(row)))
    facts: dict[str, list[Any]] = {
        "flags": flags,
        "flag": [table[key] for key in keys],
        "ok": [row["n_ok"] for row in points],
        "requests": [row["n_requests"] for row in points],
        "concurrency": [row.get("concurrency") for row in points],
        "prompt": [row.get("prompt_tokens_max") for row in points],
        "n_predict": [row.get("n_predict_max") for row in points],
    }
    rates = [row.get("request_rate") for row in points]
    if any(rate is not None for rate in rates):  # part of the workload (series_keys.workload_label) when set
        facts["rate"] = rates
    if lines is not None:
        names = {name: i for i, name in enumerate(dict.fromkeys(lines))}
        facts["lines"] = list(names)
        facts["line"] = [names[name] for name in lines]
    # Whose figure each point is, when the line holds a tool's (a table of notes and an index per point).
    kinds = [sources.kind_of(row.get("value_source")) for row in points]
    if any(kind != sources.REQUESTS for kind in kinds):
        notes = [
            literal(sources.source_note(kind, series_keys.measured_by(row)))
            for kind, row in zip(kinds, points, strict=True)
        ]
        index = {note: i for i, note in enumerate(dict.fromkeys(notes))}
        facts["sources"] = list(index)
        facts["source"] = [index[note] for note in notes]
    return facts


def _when(value: datetime | str) -> str:
    return value.isoformat(timespec="seconds")[:19] if isinstance(value, datetime) else value


def _markers(
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
        values = [_round(r["value_" + key]) for r in runs]
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
        layout[f"xaxis{i}"] = {"tickangle": -30, "type": "category", "categoryorder": "array", "categoryarray": names}
        layout[f"yaxis{i}"] = {"title": {"text": metric.label}, "rangemode": "tozero", "domain": [0.58, 1]}
        if all(v is None for v in values):
            annotations.append(_panel_note("not recorded", f"x{i}", f"y{i}"))
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
                        "text": [f"0 % ({runs[j]['n_ok']}/{runs[j]['n_requests']} ok)" for j in zero],
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
        "domain": [0, 1],
        "anchor": f"y{box}",
        "type": "category",
        "categoryorder": "array",
        "categoryarray": names,  # a failed run keeps its (empty) place
    }
    strips = "per-request decode tok/s (ok requests" + (", a sample)" if any(sampled) else ")")
    layout[f"yaxis{box}"] = {"domain": [0, 0.42], "title": {"text": strips}}
    if not any(per_run.values()):
        annotations.append(_panel_note("not recorded", f"x{box}", f"y{box}"))
        _hide_axes(layout, box)
    layout.update(
        grid={"rows": 2, "columns": panels, "pattern": "independent"},
        margin={"t": 40},
        height=720,
        annotations=annotations,
    )
    return {"data": traces, "layout": layout}


def _panel_note(text: str, xaxis: str, yaxis: str) -> dict[str, Any]:
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


# held fixed along a curve: GPU first, prompt and n_predict last; the tool too (tools time requests their own way)
CURVE_FIELDS = ("gpu", "engine", "tool", "server_flags", *series_keys.FLAG_FIELDS, "prompt_tokens_max", "n_predict_max")
# What a load curve's x axis can be: the run column, and its name on the page.
LOAD_AXES = {"concurrency": "concurrency", "request_rate": "request rate (req/s)"}
MAX_CURVES = 8
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")


@dataclass(frozen=True)
class Curve:
    """One configuration (and prompt/n_predict) across concurrencies."""

    name: str
    points: list[Mapping[str, Any]]
    knee: float | None
    runs: int
    x: str = "concurrency"  # the points' key on the x axis

    @property
    def levels(self) -> list[float]:
        return [p[self.x] for p in self.points]

    @property
    def failed_levels(self) -> list[int]:
        return [p[self.x] for p in self.points if p["failed"] == p["runs"]]

    @property
    def throughput_measured(self) -> bool:
        return any(p["throughput"] is not None for p in self.points)


def curves(
    points: Sequence[Mapping[str, Any]],
    growth_threshold: float = 0.05,
    fields: Sequence[str] = CURVE_FIELDS,
    x: str = "concurrency",
) -> list[Curve]:
    """The rows per configuration and concurrency as curves, the most-run first, each with its knee:
    the last concurrency before throughput stops growing by `growth_threshold`.

    `x`: the point's key on the x axis (concurrency, or request_rate); `fields` are held fixed along a curve."""
    by_key: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for point in points:
        by_key.setdefault(series_keys.key(point, fields), []).append(point)
    groups = list(by_key.values())
    several_gpus = len({g[0].get("gpu") for g in groups}) > 1
    several_workloads = len({(g[0].get("prompt_tokens_max"), g[0].get("n_predict_max")) for g in groups}) > 1
    several_tools = len({series_keys.measured_by(g[0]) for g in groups}) > 1
    found = []
    for rows in by_key.values():
        rows = sorted(rows, key=lambda p: p[x])
        first = rows[0]
        labels = {p["label_min"] for p in rows} | {p["label_max"] for p in rows}
        name = series_keys.flags_label(first)
        if len(labels) == 1 and first["label_min"]:
            name = f"{first['label_min']}: {name}"
        if several_gpus:
            name += f" on {first['gpu'] or '?'}"
        if several_workloads:
            name += f" · prompt {first['prompt_tokens_max']} tok · n_predict {first['n_predict_max']}"
        if first.get("tool") or several_tools:
            name += f" ({series_keys.measured_by(first) or 'kvlab'})"  # no tool named: kvlab's own JSONL
        knee = None
        for prev, cur in zip(rows, rows[1:], strict=False):
            if (
                prev["throughput"]
                and cur["throughput"] is not None
                and cur["throughput"] < prev["throughput"] * (1 + growth_threshold)
            ):
                knee = prev[x]
                break
        found.append(Curve(name, rows, knee, sum(p["runs"] for p in rows), x))
    return sorted(found, key=lambda c: (len(c.points) < 2, -c.runs, c.name))


def load_curve(drawn: Sequence[Curve], x_name: str = "concurrency") -> dict[str, Any]:
    """Throughput, per-request tok/s and TTFT p95 against concurrency, one line per configuration,
    a star at each curve's knee; a concurrency at which every run failed is a red cross."""
    x_word = "concurrency" if x_name == "concurrency" else "request rate"
    notes = [_curve_sources(curve) for curve in drawn]  # per curve, whose figures its points are (or none)
    timed = any(p["ttft_p95"] is not None for c in drawn for p in c.points)
    panels = [("aggregate throughput (tok/s)", "throughput"), ("per-request decode tok/s", "tok_s")]
    if timed:  # no panel of arbitrary ticks when nothing was timed
        panels.append(("TTFT p95 (s)", "ttft_p95"))
    recorded = [any(p[column] is not None for c in drawn for p in c.points) for _, column in panels]
    weights = [1 if r else 0.35 for r in recorded]  # a panel that only says "not recorded" needs little room
    gap = 0.08
    unit = (1 - gap * (len(panels) - 1)) / sum(weights)
    layout: dict[str, Any] = {"legend": {"orientation": "h"}, "margin": {"t": 30}, "height": 260 * len(panels) + 160}
    annotations: list[dict[str, Any]] = []
    traces: list[dict[str, Any]] = []
    xs = [x for c in drawn for x in c.levels]
    layout["xaxis"] = {
        "title": {"text": LOAD_AXES.get(x_name, x_name)},
        "type": "log" if xs and max(xs) > 16 else "linear",
        "anchor": f"y{len(panels)}",
        # concurrency is a whole number
        **({} if (xs and max(xs) > 16) or x_name != "concurrency" else {"dtick": 1}),
    }
    top = 1.0
    for i, (title, column) in enumerate(panels, start=1):
        axis = "y" if i == 1 else f"y{i}"
        height = unit * weights[i - 1]
        layout[f"yaxis{'' if i == 1 else i}"] = {
            "title": {"text": title},
            "rangemode": "tozero",
            "domain": [max(top - height, 0), top],
            "anchor": "x",
        }
        top -= height + gap
        for n, curve in enumerate(drawn):
            name = literal(curve.name)
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": name,
                    "legendgroup": name,
                    "showlegend": i == 1,
                    "x": curve.levels,
                    "y": [_round(p[column]) for p in curve.points],
                    "yaxis": axis,
                    "line": {"color": COLORS[n % len(COLORS)]},
                    "hovertemplate": f"{x_word} %{{x}}<br>{title}: %{{y}}"
                    + ("<br>%{text}" if notes[n] else "")
                    + f"<extra>{name}</extra>",
                    **({"text": notes[n]} if notes[n] else {}),
                }
            )
        if not recorded[i - 1]:
            annotations.append(_panel_note("not recorded", "x", axis))
            layout[f"yaxis{'' if i == 1 else i}"].update(showticklabels=False, showgrid=False, zeroline=False)
    for n, curve in enumerate(drawn):
        if curve.knee is not None:
            at = curve.levels.index(curve.knee)
            name = literal(curve.name)
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"knee: {name}",
                    "legendgroup": name,
                    "showlegend": False,
                    "x": [curve.knee],
                    "y": [_round(curve.points[at]["throughput"])],
                    "yaxis": "y",
                    "marker": {"symbol": "star", "size": 16, "color": COLORS[n % len(COLORS)]},
                    "hovertemplate": f"{name}<br>throughput stops growing after %{{x}}<extra></extra>",
                }
            )
    failed = [(c, x) for c in drawn for x in c.failed_levels]
    if failed:
        traces.append(
            {
                **_markers(
                    "every run failed",
                    [x for _, x in failed],
                    [0] * len(failed),
                    [None] * len(failed),
                    [f"{literal(c.name)}: every run at {x_word} {x:g} failed" for c, x in failed],
                    "x",
                    FAIL_COLOR,
                ),
                "yaxis": "y2",
                "cliponaxis": False,
            }
        )
    layout["annotations"] = annotations
    return {"data": traces, "layout": layout}


def _curve_sources(curve: Curve) -> list[str]:
    """Hover notes saying whose figures a curve's points are, when any is a tool's own (else none)."""
    if not any(p.get("tool_runs") for p in curve.points):
        return []
    tool = series_keys.measured_by(curve.points[0]) or "the tool"
    return [
        literal(
            f"{tool}'s own figures"
            if p["tool_runs"] == p["runs"]
            else f"{p['tool_runs']} of {p['runs']} runs: {tool}'s own figures, the rest kvlab's from requests"
            if p["tool_runs"]
            else "kvlab, from the stored requests"
        )
        for p in curve.points
    ]


@dataclass(frozen=True)
class Regression:
    group: str
    configuration: str  # model, GPU and flags: the same for the latest run and its baseline
    workload: str  # concurrency, prompt tokens, n_predict: the same too
    metric: Metric
    latest: float
    baseline: float
    change: float  # relative, signed so that negative is worse
    spread: float | None
    latest_run_id: int
    latest_key: str
    history: int


def regressions(
    rows: Sequence[Mapping[str, Any]], metrics: Sequence[Metric], thresholds: Mapping[str, float], *, window: int = 10
) -> list[Regression]:
    """Series whose latest run is worse than the median of their previous `window` runs.

    A series is one configuration under one workload within a group: a run is compared
    only with runs like it (concurrency 3 against concurrency 1 is no regression).
    Worse means beyond the metric's threshold (a fraction) and baseline_comparison's rule.
    """
    by_series: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        by_series.setdefault((row["group"], *series_keys.key(row)), []).append(row)
    found: list[Regression] = []
    for runs in by_series.values():
        latest, earlier = runs[-1], runs[-1 - window : -1]
        for metric in metrics:
            past = [r[metric.column] for r in earlier if r.get(metric.column) is not None]
            compared = baseline_comparison(latest.get(metric.column), past, metric)
            if compared is not None and -compared.change > thresholds.get(metric.key, 0.05):
                found.append(regression(latest, metric, compared))
    return sorted(found, key=lambda r: r.change)


def regression(latest: Mapping[str, Any], metric: Metric, compared: Comparison) -> Regression:
    """A row of the regressions page: the latest run (its group, fields, pk and key) and its comparison."""
    return Regression(
        group=latest["group"],
        configuration=f"{latest.get('model') or '?'} on {latest.get('gpu') or '?'}: " + series_keys.flags_label(latest),
        workload=series_keys.workload_label(latest),
        metric=metric,
        latest=latest[metric.column],
        baseline=compared.baseline,
        change=compared.change,
        spread=compared.spread,
        latest_run_id=latest["pk"],
        latest_key=latest["key"],
        history=compared.history,
    )


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
