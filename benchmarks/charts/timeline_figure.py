"""The timeline: one line per group over time (timeline), its per-bucket min/max when reduced
(timeline_reduced) and one panel per model (timeline_by_model); failed runs and changes of configuration
or workload marked. Pure: rows in, Plotly figure dicts out ({"data": [...], "layout": {...}}).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ..records import series_keys, sources
from ..records.catalogue import Metric
from ..records.outcomes import FAILED, outcome_of
from .figure_common import (
    LEGEND,
    WEBGL_POINTS,
    fail_trace,
    group_name,
    legend_with_note,
    literal,
    marker_trace,
    panel_label,
    plotly_time,
    rounded,
    with_fail_band,
)

# Past this many changes of configuration (or of workload) in one chart, a marker per change is noise
# and most of the page's weight: the legend gives their number and the page warns that lines mix them.
MAX_CHANGE_MARKERS = 500
# A line of more points than this is drawn without a marker per point: each marker is an SVG node that
# Chromium paints, 0.1-0.2 ms each (30 lines of 66 runs: 720 ms with markers on a busy 2-core machine).
MARKED_POINTS = 50
# A reduced timeline (timeline_reduced) of more buckets than this draws its strokes without a marker at each
# end: the overview of a million runs held 810 buckets, whose 1,600 markers were ~100 ms of its paint.
MARKED_BUCKETS = 300
MAX_LINES = 50  # lines drawn one by one in a timeline: the rest as one trace of points (_timeline_traces)
# Past MAX_LINES, a group of fewer runs than this is a point, not a line: it joins the grey points (its hover
# names it) rather than take a trace and a legend entry of its own (_timeline_traces).
MIN_LINE_RUNS = 2


CHANGE_FIELDS = (*series_keys.CONFIG_FIELDS, "build")  # a change within a line is marked with a diamond
CHANGE_KINDS = {  # a change within a line: the fields that make it, its marker
    "configuration": (CHANGE_FIELDS, "diamond-open"),
    "workload": (series_keys.WORKLOAD_FIELDS, "square-open"),
}
GREY_NAMED_BY = {"config": "flags", "series": "flags and workload"}  # what names a grey point's line, in its hover


def _describe_change(before: Mapping[str, Any], after: Mapping[str, Any], fields: Sequence[str]) -> str:
    return "; ".join(
        f"{series_keys.FIELD_NAMES[f]}: {literal(before.get(f))} → {literal(after.get(f))}"
        for f in fields
        if before.get(f) != after.get(f)
    )


def mixed_note(mixed: Sequence[series_keys.Mixed], n_groups: int) -> str:
    """A warning written into the figure itself (the legend's title), so that a saved PNG carries it too."""
    some = "every line mixes" if len(mixed) == n_groups else f"{len(mixed)} of {n_groups} lines mix"
    return f"⚠ {some} configurations or workloads:<br>not like for like"


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
        "margin": {"t": 20},
        "legend": legend_with_note(mixed_note(mixed, n_groups) if mixed else None),
        "showlegend": True,
    }
    return with_fail_band({"data": traces, "layout": layout})


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
                    plotly_time(datetime.fromtimestamp(row["start"] + (row["end"] - row["start"]) * at, UTC))
                    for row in rows
                ],
                "y": [],
                "reduced": {
                    "span": span_s,
                    "at": round(at, 4),
                    "dash": round(0.35 / len(valued), 4),  # half a one-value dash's width, of the bucket's
                    "start": [row["start"] for row in rows],
                    "end": [row["end"] for row in rows],
                    "lo": [rounded(row["lo"]) for row in rows],
                    "hi": [rounded(row["hi"]) for row in rows],
                    "valued": [row["valued"] for row in rows],
                    "runs": [row["runs"] for row in rows],
                },
                "marker": {"size": 4},
                "line": {"width": 2},
                "hovertemplate": "%{text}<br>%{y}<extra>%{fullData.name}</extra>",
                "connectgaps": False,
            }
        )
    if failed:
        middle = [datetime.fromtimestamp((row["start"] + row["end"]) // 2, UTC) for _, row in failed]
        texts = [
            f"{name}: {row['failed']:,} of {row['runs']:,} runs failed, {_between(row['start'], row['end'])}"
            " (click to zoom in)"
            for name, row in failed
        ]
        starts = [row["start"] for _, row in failed]
        marks = fail_trace("failed runs", [plotly_time(m) for m in middle], starts, texts)
        traces.append({**marks, "reduced": {"end": [row["end"] for _, row in failed]}})
    layout = {
        "xaxis": {"title": {"text": "run start (UTC)"}, "type": "date"},
        "yaxis": {"title": {"text": metric.label}, "rangemode": "tozero" if metric.key == "success" else "normal"},
        "hovermode": "closest",
        "margin": {"t": 20},
        "legend": LEGEND,
    }
    return with_fail_band({"data": traces, "layout": layout})


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
    layout: dict[str, Any] = {"hovermode": "closest", "margin": {"t": 20}, "showlegend": True}
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
            annotations.append(panel_label(literal(model), f"y{axis}"))
    layout["xaxis"] = {"type": "date", "anchor": f"y{'' if len(shown) == 1 else len(shown)}"}
    layout["legend"] = legend_with_note(mixed_note(all_mixed, n_groups) if all_mixed else None)
    layout["annotations"] = annotations
    if len(shown) > 1:
        layout["height"] = 240 * len(shown) + 120
    return with_fail_band({"data": traces, "layout": layout}), models[max_panels:]


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
        xs = [plotly_time(row["started_at"]) for row in points]
        failed = [outcome_of(row["n_ok"], row["n_requests"]) == FAILED for row in points]
        ys = [None if fail else rounded(row["value"]) for row, fail in zip(points, failed, strict=True)]
        for row, when, fail in zip(points, xs, failed, strict=True):
            if fail:
                fail_x.append(when)
                fail_ids.append(row["pk"])
                fail_text.append(f"{name}: {literal(row['key'])} failed, 0/{row['n_requests']} ok{_on(row)}")
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
                fail_x.append(plotly_time(row["started_at"]))
                fail_ids.append(row["pk"])
                fail_text.append(
                    f"{literal(group_name(row, grouping))}: {literal(row['key'])} failed, 0/{row['n_requests']} ok"
                    f"{_on(row)}"
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
                "x": [plotly_time(row["started_at"]) for row in others],
                "y": [None if fail else rounded(row["value"]) for row, fail in zip(others, failed, strict=True)],
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
    for kind, lines in changes.items():
        if lines:
            extra.append(_change_markers(kind, lines, floor))
    for trace in extra:
        trace.update(yaxis=yaxis, legendgroup=trace["name"], showlegend=yaxis == "y")
    if fail_x:  # on the failure band, the figure's one for every panel
        extra.append({**fail_trace("failed runs", fail_x, fail_ids, fail_text), "legendgroup": "failed runs"})
        extra[-1]["showlegend"] = yaxis == "y"
    return traces + extra, n_groups


def _on(row: Mapping[str, Any]) -> str:
    """A failure's model: the band is one for every panel of the by-model timeline."""
    return f" · {literal(row['model'])}" if row.get("model") else ""


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
        return {**marker_trace(name, [], [], [], [], symbol, "#444"), "visible": "legendonly"}
    xs, ys, ids, texts = [], [], [], []
    for trace, points, where in lines:
        for i in where:
            y = trace["y"][i]
            xs.append(trace["x"][i])
            ys.append(floor if y is None else y)
            ids.append(points[i]["pk"])
            texts.append(f"{trace['name']}: {_describe_change(points[i - 1], points[i], fields)}")
    return marker_trace(f"{kind} changed", xs, ys, ids, texts, symbol, "#444")


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
