"""Plotly figures built from query rows. Pure: rows in, figure dicts out.

Each builder takes the rows one query returned and gives {"data": [...], "layout":
{...}} for Plotly.newPlot, plus the flat rows the CSV/JSON download offers.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..history.outcomes import FAILED, outcome_of

WEBGL_POINTS = 1000  # above this many points a series is drawn with WebGL (scattergl)
FAIL_COLOR = "#b3261e"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    column: str
    higher_is_better: bool
    formula: str


METRICS = {
    m.key: m
    for m in (
        Metric("tok_s", "decode tok/s per request", "tok_s_mean", True, "mean of ok requests' tok/s"),
        Metric("throughput", "aggregate throughput (tok/s)", "throughput_tok_s", True, "Σ output tokens / wall time"),
        Metric("success", "success rate", "success_rate", True, "ok requests / requests"),
        Metric("ttft_p50", "TTFT p50 (s)", "ttft_p50", False, "median time to first token of ok requests"),
        Metric("ttft_p95", "TTFT p95 (s)", "ttft_p95", False, "95th percentile time to first token"),
        Metric("e2e_p95", "E2E latency p95 (s)", "e2e_p95", False, "95th percentile request latency"),
        Metric("wall", "wall time (s)", "effective_wall_s", False, "reported, else the longest request"),
    )
}
GROUPINGS = {
    "label": ("config label", ("label",)),
    "model": ("model", ("model",)),
    "gpu": ("GPU", ("gpu",)),
    "server": ("server", ("job__server__name",)),
    "config": ("configuration", ("ctx_size", "parallel", "kv_unified", "cache_type_k", "cache_type_v")),
}
CONFIG_FIELDS = ("model", "ctx_size", "parallel", "kv_unified", "cache_type_k", "cache_type_v", "flash_attn", "build")


def group_name(row: Mapping[str, Any], grouping: str) -> str:
    if grouping == "config":
        unified = {True: "unified", False: "per-slot", None: "?"}[row["kv_unified"]]
        return (
            f"-c {row['ctx_size'] or '?'} -np {row['parallel'] or '?'} {unified} "
            f"{row['cache_type_k'] or '?'}/{row['cache_type_v'] or '?'}"
        )
    field = GROUPINGS[grouping][1][0]
    return str(row.get(field) or "(none)")


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


def _config(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(f) for f in CONFIG_FIELDS)


def _describe_change(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    changed = [f"{f}: {before.get(f)} → {after.get(f)}" for f in CONFIG_FIELDS if before.get(f) != after.get(f)]
    return "; ".join(changed)


def timeline(rows: Sequence[Mapping[str, Any]], metric: Metric, grouping: str) -> dict[str, Any]:
    """One line per group over time; failed runs as red crosses; configuration changes marked.

    Kept compact for large histories: per point only time (seconds, UTC), value, run id,
    "ok/total" and an index into the trace's table of configurations; charts.js expands
    the hover text in the browser.
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(group_name(row, grouping), []).append(row)
    traces: list[dict[str, Any]] = []
    fail_x, fail_ids, fail_text = [], [], []
    change_x, change_y, change_ids, change_text = [], [], [], []
    for name, points in groups.items():
        xs, ys, ids, outcomes, config_index = [], [], [], [], []
        configs: dict[str, int] = {}
        previous = None
        for row in points:
            failed = outcome_of(row["n_ok"], row["n_requests"]) == FAILED
            value = None if failed else _round(row["value"])
            when = _when(row["started_at"])
            config = group_name(row, "config")
            xs.append(when)
            ys.append(value)
            ids.append(row["pk"])
            outcomes.append(f"{row['n_ok']}/{row['n_requests']}")
            config_index.append(configs.setdefault(config, len(configs)))
            if failed:
                fail_x.append(when)
                fail_ids.append(row["pk"])
                fail_text.append(f"{name}: {row['key']} failed, 0/{row['n_requests']} ok")
            if previous is not None and _config(previous) != _config(row):
                change_x.append(when)
                change_ids.append(row["pk"])
                change_text.append(f"{name}: {_describe_change(previous, row)}")
                change_y.append(value)
            previous = row
        traces.append(
            {
                "type": "scattergl" if len(xs) > WEBGL_POINTS else "scatter",
                "mode": "lines+markers",
                "name": name,
                "x": xs,
                "y": ys,
                "customdata": ids,
                "hovertext_parts": {"outcome": outcomes, "config": config_index, "configs": list(configs)},
                "hovertemplate": "%{text}<br>%{y}<extra>%{fullData.name}</extra>",
                "connectgaps": False,
            }
        )
    values = [y for t in traces for y in t["y"] if y is not None]
    floor = min(values) if values else 0
    if fail_x:
        traces.append(_markers("failed runs", fail_x, [floor] * len(fail_x), fail_ids, fail_text, "x", FAIL_COLOR))
    if change_x:
        change_y = [y if y is not None else floor for y in change_y]
        traces.append(
            _markers("configuration changed", change_x, change_y, change_ids, change_text, "diamond-open", "#444")
        )
    layout = {
        "xaxis": {"title": {"text": "run start (UTC)"}, "type": "date"},
        "yaxis": {"title": {"text": metric.label}, "rangemode": "tozero" if metric.key == "success" else "normal"},
        "hovermode": "closest",
        "margin": {"t": 30},
        "legend": {"orientation": "h"},
    }
    return {"data": traces, "layout": layout}


def _when(value: datetime | str) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S") if isinstance(value, datetime) else value


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


COMPARE_METRICS = ("success", "tok_s", "throughput", "ttft_p95", "e2e_p95")


def compare(runs: Sequence[Mapping[str, Any]], requests: Iterable[tuple[int, bool, float | None]]) -> dict[str, Any]:
    """Grouped bars of the runs' metrics, one panel per metric, and per-request tok/s strips."""
    names = [f"{r['label'] or r['key']} ({r['key']})" for r in runs]
    failed = [outcome_of(r["n_ok"], r["n_requests"]) == FAILED for r in runs]
    traces: list[dict[str, Any]] = []
    panels = len(COMPARE_METRICS)
    for i, key in enumerate(COMPARE_METRICS, start=1):
        metric = METRICS[key]
        values = [_round(r["value_" + key]) for r in runs]
        traces.append(
            {
                "type": "bar",
                "name": metric.label,
                "x": names,
                "y": values,
                "customdata": [r["pk"] for r in runs],
                "xaxis": f"x{i}",
                "yaxis": f"y{i}",
                "text": ["failed: 0 ok" if f else "" for f in failed],
                "textposition": "outside",
                "marker": {"color": [FAIL_COLOR if f else "#0b63c5" for f in failed]},
                "hovertemplate": "%{x}<br>" + metric.label + ": %{y}<extra></extra>",
                "showlegend": False,
            }
        )
    per_run: dict[int, list[float]] = {r["pk"]: [] for r in runs}
    for run_id, ok, tok_s in requests:
        if ok and tok_s is not None and run_id in per_run:
            per_run[run_id].append(tok_s)
    for run, name in zip(runs, names, strict=True):
        rates = per_run[run["pk"]]
        traces.append(
            {
                "type": "box",
                "name": name,
                "x": [name] * len(rates),
                "y": rates,
                "boxpoints": "all",
                "pointpos": 0,
                "jitter": 0.3,
                "line": {"width": 1},
                "xaxis": f"x{panels + 1}",
                "yaxis": f"y{panels + 1}",
                "showlegend": False,
                "hovertemplate": "%{y} tok/s<extra>%{fullData.name}</extra>",
            }
        )
    layout: dict[str, Any] = {
        "grid": {"rows": 2, "columns": panels, "pattern": "independent"},
        "margin": {"t": 40},
        "height": 720,
        "annotations": [],
    }
    for i, key in enumerate(COMPARE_METRICS, start=1):
        layout[f"yaxis{i}"] = {"title": {"text": METRICS[key].label}, "rangemode": "tozero"}
        layout[f"xaxis{i}"] = {"tickangle": -30}
    box_axis = panels + 1
    layout[f"xaxis{box_axis}"] = {
        "domain": [0, 1],
        "anchor": f"y{box_axis}",
        "type": "category",
        "categoryorder": "array",
        "categoryarray": names,  # a failed run keeps its (empty) place
    }
    layout[f"yaxis{box_axis}"] = {"domain": [0, 0.42], "title": {"text": "per-request decode tok/s (ok requests)"}}
    for i in range(1, panels + 1):
        layout[f"yaxis{i}"]["domain"] = [0.58, 1]
    return {"data": traces, "layout": layout}


def load_curve(
    points: Sequence[Mapping[str, Any]], growth_threshold: float = 0.05
) -> tuple[dict[str, Any], int | None]:
    """Throughput, per-request tok/s and TTFT p95 against concurrency; where throughput stops growing."""
    xs = [p["concurrency"] for p in points]
    throughput = [_round(p["throughput"]) for p in points]
    knee = None
    for prev, cur in zip(points, points[1:], strict=False):
        if (
            prev["throughput"]
            and cur["throughput"] is not None
            and cur["throughput"] < prev["throughput"] * (1 + growth_threshold)
        ):
            knee = prev["concurrency"]
            break
    traces = [
        {"type": "scatter", "mode": "lines+markers", "name": "aggregate throughput (tok/s)", "x": xs, "y": throughput},
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "per-request decode tok/s",
            "x": xs,
            "y": [_round(p["tok_s"]) for p in points],
        },
    ]
    ttft = [_round(p["ttft_p95"]) for p in points]
    if any(v is not None for v in ttft):  # no right-hand axis of arbitrary ticks when nothing was timed
        traces.append(
            {"type": "scatter", "mode": "lines+markers", "name": "TTFT p95 (s)", "x": xs, "y": ttft, "yaxis": "y2"}
        )
    layout: dict[str, Any] = {
        "xaxis": {"title": {"text": "concurrency"}, "type": "log" if xs and max(xs) > 16 else "linear"},
        "yaxis": {"title": {"text": "tok/s"}, "rangemode": "tozero"},
        "yaxis2": {"title": {"text": "TTFT p95 (s)"}, "overlaying": "y", "side": "right", "rangemode": "tozero"},
        "legend": {"orientation": "h"},
        "margin": {"t": 30},
        "shapes": [],
        "annotations": [],
    }
    if knee is not None:
        layout["shapes"].append(
            {"type": "line", "x0": knee, "x1": knee, "yref": "paper", "y0": 0, "y1": 1, "line": {"dash": "dot"}}
        )
        layout["annotations"].append(
            {"x": knee, "yref": "paper", "y": 1, "text": f"throughput stops growing after {knee}", "showarrow": False}
        )
    return {"data": traces, "layout": layout}, knee


@dataclass(frozen=True)
class Regression:
    group: str
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
    """Groups whose latest run is worse than the median of their previous `window` runs.

    Worse means beyond the metric's threshold (a fraction) and, with three or more
    earlier runs, also beyond two standard deviations of those runs (their spread).
    """
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_group.setdefault(row["group"], []).append(row)
    found: list[Regression] = []
    for group, runs in by_group.items():
        latest, earlier = runs[-1], runs[-1 - window : -1]
        for metric in metrics:
            now = latest.get(metric.column)
            past = [r[metric.column] for r in earlier if r.get(metric.column) is not None]
            if now is None or not past:
                continue
            base = statistics.median(past)
            if base == 0:
                continue
            change = (now - base) / abs(base)
            worse = -change if metric.higher_is_better else change
            spread = statistics.stdev(past) if len(past) >= 3 else None
            if worse > thresholds.get(metric.key, 0.05) and (spread is None or abs(now - base) > 2 * spread):
                found.append(
                    Regression(
                        group=group,
                        metric=metric,
                        latest=now,
                        baseline=base,
                        change=change if metric.higher_is_better else -change,
                        spread=spread,
                        latest_run_id=latest["pk"],
                        latest_key=latest["key"],
                        history=len(past),
                    )
                )
    return sorted(found, key=lambda r: r.change)


def failures_by_day(days: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The home page's bars: per day, the runs with a failed request over all runs."""
    x = [str(d["day"]) for d in days]
    failed = {"type": "bar", "name": "runs with failures", "x": x, "y": [d["failed"] for d in days]}
    total = {"type": "bar", "name": "all runs", "x": x, "y": [d["total"] for d in days]}
    return {
        "data": [{**failed, "marker": {"color": FAIL_COLOR}}, {**total, "marker": {"color": "#c9d4e0"}}],
        "layout": {"barmode": "overlay", "margin": {"t": 30}, "legend": {"orientation": "h"}},
    }
