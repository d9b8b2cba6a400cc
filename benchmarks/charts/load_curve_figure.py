"""The load curve: runs per configuration and concurrency (or request rate) as curves, each with its
knee (curves), and their figure (load_curve). Pure: rows in, a Plotly figure dict out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..records import series_keys
from .figure_common import LEGEND, fail_trace, literal, panel_note, rounded, with_fail_band

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
    # axis titles on two lines: one would run past a short panel (a "not recorded" one on a phone)
    panels = [("aggregate throughput<br>(tok/s)", "throughput"), ("per-request<br>decode tok/s", "tok_s")]
    if timed:  # no panel of arbitrary ticks when nothing was timed
        panels.append(("TTFT p95 (s)", "ttft_p95"))
    recorded = [any(p[column] is not None for c in drawn for p in c.points) for _, column in panels]
    weights = [1 if r else 0.35 for r in recorded]  # a panel that only says "not recorded" needs little room
    gap = 0.08
    unit = (1 - gap * (len(panels) - 1)) / sum(weights)
    layout: dict[str, Any] = {"legend": LEGEND, "margin": {"t": 30}, "height": 260 * len(panels) + 160}
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
                    "y": [rounded(p[column]) for p in curve.points],
                    "yaxis": axis,
                    "line": {"color": COLORS[n % len(COLORS)]},
                    "hovertemplate": f"{x_word} %{{x}}<br>{title.replace('<br>', ' ')}: %{{y}}"
                    + ("<br>%{text}" if notes[n] else "")
                    + f"<extra>{name}</extra>",
                    **({"text": notes[n]} if notes[n] else {}),
                }
            )
        if not recorded[i - 1]:
            annotations.append(panel_note("not recorded", "x", axis))
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
                    "y": [rounded(curve.points[at]["throughput"])],
                    "yaxis": "y",
                    "marker": {"symbol": "star", "size": 16, "color": COLORS[n % len(COLORS)]},
                    "hovertemplate": f"{name}<br>throughput stops growing after %{{x}}<extra></extra>",
                }
            )
    failed = [(c, x) for c in drawn for x in c.failed_levels]
    if failed:
        texts = [f"{literal(c.name)}: every run at {x_word} {x:g} failed" for c, x in failed]
        traces.append(fail_trace("every run failed", [x for _, x in failed], [None] * len(failed), texts))
    layout["annotations"] = annotations
    return with_fail_band({"data": traces, "layout": layout})


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
