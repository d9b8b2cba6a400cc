"""The KV pool during a job, as a Plotly figure and in words. Pure: a telemetry dict in, a figure dict out.

The dict is Run.telemetry / Job.telemetry (shape: benchmarks/jobs/telemetry/series.py). It is read
defensively: a missing or mistyped key leaves its part out, never breaks the page. The figure's size is
bounded whatever the series holds: at most MAX_POINTS points per line (pairwise max, which keeps the
peaks) and MAX_SLOT_LINES slot lines (the fullest), so a page polled every second stays light.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .figure_common import FAIL_COLOR, NOTE_COLOR, WEBGL_POINTS, literal

MAX_POINTS = 2000  # per line; the series already keeps ≤ 2000, this guards the page
MAX_SLOT_LINES = 16  # slot lines drawn; the pool sum always counts every slot
RATE_WINDOW_S = 1.0  # output tok/s is measured over the last second of samples
CAPACITY_COLOR = "#555555"
PREDICTED_COLOR = "#1f5fa8"
SOURCE_NAMES = {"slots": "/slots", "metrics": "/metrics", "gpu": "GPU (NVML)"}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _column(values: Any, n: int) -> list[float | None]:
    """values as n numbers (None where a poll failed or the list is short)."""
    items = values if isinstance(values, list) else []
    return [_number(items[i]) if i < len(items) else None for i in range(n)]


def _max(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _buckets(n: int, limit: int = MAX_POINTS) -> list[range]:
    size = max(1, math.ceil(n / limit))
    return [range(start, min(n, start + size)) for start in range(0, n, size)]


def _thin(column: Sequence[float | None], buckets: Sequence[range]) -> list[float | None]:
    """One value per bucket, its largest (a peak survives); whole numbers as ints (a smaller page)."""
    values = [_max([column[i] for i in b]) for b in buckets]
    return [int(v) if v is not None and v.is_integer() else v for v in values]


def cells_text(n: float) -> str:
    return f"{n:,.0f}"


def seconds_text(t: float) -> str:
    return f"{t:.3g} s" if t < 100 else f"{t:,.0f} s"


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def pool_of(telemetry: Mapping[str, Any]) -> tuple[str, int | None, int | None, str]:
    """(kind, pool cells, cells per slot, where the pool size came from) — "unknown" when no launch command."""
    pool = _dict(telemetry.get("pool"))
    kind = str(pool.get("kind")) if pool.get("kind") in ("shared", "per-slot") else "unknown"
    pool_cells = _number(pool.get("pool_cells"))
    slot_cells = _number(pool.get("slot_cells"))
    origin = str(pool.get("from") or "unknown: no launch command")
    if kind != "unknown" and pool_cells is None:
        kind = "unknown"
    overflow = overflow_of(telemetry)
    if kind == "unknown" and overflow is not None and overflow.get("shared_from") == "error":
        # A server kvlab did not launch: the overflow's HTTP 500 said the pool is shared (attribution.py).
        sized = _number(overflow.get("pool_cells"))
        at_least = _number(overflow.get("pool_at_least"))
        if sized:
            kind, pool_cells = "shared", sized
            origin = f"{overflow.get('pool_from') or '/props'}; shared, as its HTTP 500 said"
        elif at_least:
            origin = f"unknown: the server did not say; shared, at least {cells_text(at_least)} cells when it ran out"
    return (
        kind,
        int(pool_cells) if pool_cells and kind != "unknown" else None,
        int(slot_cells) if slot_cells else None,
        origin,
    )


def unknown_pool_text(origin: str) -> str:
    reason = origin.split(":", 1)[1].strip() if origin.startswith("unknown:") else "no launch command"
    return f"pool size unknown ({reason or 'no launch command'})"


def overflow_of(telemetry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    overflow = telemetry.get("overflow")
    return overflow if isinstance(overflow, Mapping) and _number(overflow.get("t")) is not None else None


def overflow_cells(overflow: Mapping[str, Any]) -> int | None:
    """The cells the failed requests held when the pool ran out, from their own streams."""
    cells = [_number(_dict(r).get("cells")) for r in overflow.get("requests") or [] if isinstance(r, Mapping)]
    present = [c for c in cells if c is not None]
    return int(sum(present)) if present else None


def _rate(t: Sequence[float], tokens: Sequence[float | None]) -> list[float | None]:
    """Output tok/s over the last RATE_WINDOW_S of samples at each sample (None until two samples)."""
    rates: list[float | None] = []
    start = 0
    for i, now in enumerate(t):
        while start < i and now - t[start] > RATE_WINDOW_S:
            start += 1
        j = start if start < i else max(0, i - 1)
        a, b = tokens[j], tokens[i]
        span = now - t[j]
        rates.append(round((b - a) / span, 1) if a is not None and b is not None and span > 0 and b >= a else None)
    return rates


# Each slot's line: three slots holding the same cells draw one line on another, so each is narrower than
# the one before and dashed its own way: every one shows (solid under dashes under dots).
SLOT_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def _line(
    name: str, x: Sequence[float], y: Sequence[float | None], yaxis: str, unit: str, **style: Any
) -> dict[str, Any]:
    return {
        "type": "scattergl" if len(x) > WEBGL_POINTS else "scatter",
        "mode": "lines",
        "name": name,
        "x": list(x),
        "y": list(y),
        "yaxis": yaxis,
        "hovertemplate": f"%{{y:,}} {unit} at %{{x:.3f}} s<extra>{name}</extra>",
        **style,
    }


def _hline(y: float, yaxis: str, text: str, color: str, dash: str = "dash") -> tuple[dict[str, Any], dict[str, Any]]:
    shape = {
        "type": "line",
        "xref": "x domain",
        "x0": 0,
        "x1": 1,
        "yref": yaxis,
        "y0": y,
        "y1": y,
        "line": {"color": color, "dash": dash, "width": 1.5},
    }
    note = {
        "xref": "x domain",
        "x": 0,
        "xanchor": "left",
        "yref": yaxis,
        "y": y,
        "yanchor": "bottom",
        "text": text,
        "showarrow": False,
        "font": {"color": color, "size": 11},
    }
    return shape, note


def _vline(t: float, text: str, color: str, dash: str, y: float) -> tuple[dict[str, Any], dict[str, Any]]:
    shape = {
        "type": "line",
        "xref": "x",
        "x0": t,
        "x1": t,
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "line": {"color": color, "dash": dash, "width": 1.5},
    }
    note = {
        "xref": "x",
        "x": t,
        "xanchor": "left",
        "yref": "paper",
        "y": y,
        "yanchor": "bottom",
        "text": text,
        "showarrow": False,
        "font": {"color": color, "size": 11},
        "bgcolor": "rgba(255,255,255,0.8)",
    }
    return shape, note


def _domains(weights: Sequence[int], gap: float = 0.07) -> list[list[float]]:
    """Stacked panels, the first at the top, heights in proportion to weights."""
    usable = 1 - gap * (len(weights) - 1)
    top = 1.0
    domains = []
    for w in weights:
        height = usable * w / sum(weights)
        domains.append([round(max(0.0, top - height), 4), round(top, 4)])
        top -= height + gap
    return domains


def figure(telemetry: Any) -> dict[str, Any] | None:
    """The KV pool chart, or None when there is nothing to draw (no sample and no overflow)."""
    if not isinstance(telemetry, Mapping):
        return None
    raw_t = _list(telemetry.get("t"))
    t_all = [_number(v) for v in raw_t]
    n = len(t_all)
    overflow = overflow_of(telemetry)
    if not any(v is not None for v in t_all) and overflow is None:
        return None
    buckets = [b for b in _buckets(n) if t_all[b[0]] is not None]
    t = [float(t_all[b[0]] or 0.0) for b in buckets]
    kind, pool_cells, slot_cells, origin = pool_of(telemetry)

    slots = [_column(c, n) for c in _list(telemetry.get("cells")) if isinstance(c, list)]
    total = [_sum([s[i] for s in slots]) for i in range(n)]
    shown = sorted(range(len(slots)), key=lambda s: -(_max(slots[s]) or 0))[:MAX_SLOT_LINES]
    data: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for k, s in enumerate(sorted(shown)):  # slots whose lines coincide stay apart: wider first, each its own dash
        style = {"dash": SLOT_DASHES[k % len(SLOT_DASHES)], "width": max(1.5, 5.0 - 1.2 * k)}
        data.append(_line(f"slot {s}: cells held", t, _thin(slots[s], buckets), "y", "cells", line=style))
    if slots and kind != "per-slot":
        name = "pool: cells held (all slots)" if kind == "shared" else "all slots: cells held"
        data.append(_line(name, t, _thin(total, buckets), "y", "cells", line={"color": "#000000", "width": 2.5}))
    if overflow is not None and (held := overflow_cells(overflow)) is not None:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "at the overflow: cells the failed requests held (from their streams)",
                "x": [_number(overflow.get("t"))],
                "y": [held],
                "yaxis": "y",
                "marker": {"color": FAIL_COLOR, "symbol": "x", "size": 11},
                "hovertemplate": "%{y:,} cells held when the pool ran out, at %{x:.3f} s<extra></extra>",
            }
        )
    if kind == "shared" and pool_cells:
        where = f" (from the {literal(origin)})" if origin == "launch command" else ""
        where = f" (from {literal(origin)})" if origin.startswith("/props;") else where
        pair = _hline(pool_cells, "y", f"pool capacity: {cells_text(pool_cells)} cells{where}", CAPACITY_COLOR)
        shapes.append(pair[0])
        notes.append(pair[1])
    elif kind == "per-slot" and slot_cells:
        text = f"each slot's capacity: {cells_text(slot_cells)} cells (per-slot pool)"
        pair = _hline(slot_cells, "y", text, CAPACITY_COLOR)
        shapes.append(pair[0])
        notes.append(pair[1])
    else:
        notes.append(_panel_note(literal(unknown_pool_text(origin)), "y"))
    if len(slots) > len(shown):
        notes.append(_panel_note(f"{len(shown)} of {len(slots)} slots drawn (the fullest)", "y", top=False))

    panels: list[tuple[str, str, int]] = [("y", "KV cells held", 2)]
    processing = _column(telemetry.get("processing"), n) if "processing" in telemetry else None
    deferred = _column(telemetry.get("deferred"), n) if "deferred" in telemetry else None
    tokens = _column(telemetry.get("tokens_out"), n)
    rate = _rate(t_all_filled(t_all), tokens) if any(v is not None for v in tokens) else None
    if processing is not None or deferred is not None or rate is not None:
        requests_known = processing is not None or deferred is not None
        # without /metrics the panel holds the rate alone, on its own axis (an overlay of an empty axis is dropped)
        panels.append(("y2", "requests" if requests_known else "output tok/s", 1))
        for name, column, color in (
            ("requests processing", processing, "#8c564b"),
            ("requests deferred (waiting for a slot)", deferred, "#e377c2"),
        ):
            if column is not None:
                data.append(
                    _line(name, t, _thin(column, buckets), "y2", "requests", line={"shape": "hv", "color": color})
                )
        if not requests_known:
            metrics = str(_dict(telemetry.get("sources")).get("metrics") or "not sampled")
            notes.append(_panel_note(literal(f"requests processing / deferred: /metrics {metrics}"), "y2"))
        if rate is not None:
            data.append(
                _line(
                    "output tok/s (last second)",
                    t,
                    _thin(rate, buckets),
                    "y3" if requests_known else "y2",
                    "tok/s",
                    line={"color": "#7b3fa0", "dash": "dot"},
                )
            )
    gpu = _dict(telemetry.get("gpu"))
    memory = [m for m in _list(gpu.get("mem_mib")) if isinstance(m, list)]
    if memory:
        panels.append(("y4", "GPU memory (MiB)", 1))
        names = _list(gpu.get("names"))
        totals = _list(gpu.get("mem_total_mib"))
        for g, used in enumerate(memory[:MAX_SLOT_LINES]):
            label = f"GPU {g}" + (f" ({literal(names[g])})" if g < len(names) and names[g] else "")
            data.append(_line(f"{label}: memory used", t, _thin(_column(used, n), buckets), "y4", "MiB"))
            total_mib = _number(totals[g]) if g < len(totals) else None
            if total_mib:
                pair = _hline(total_mib, "y4", f"{label}: {cells_text(total_mib)} MiB in all", CAPACITY_COLOR, "dot")
                shapes.append(pair[0])
                notes.append(pair[1])

    if overflow is not None:
        at = float(overflow["t"])
        held = overflow_cells(overflow)
        full = f"pool full at {seconds_text(at)}" + (f": {cells_text(held)} cells held" if held else "")
        pair = _vline(at, full, FAIL_COLOR, "solid", 1.0)
        shapes.append(pair[0])
        notes.append(pair[1])
        predicted_t = _number(overflow.get("predicted_t"))
        step = _number(overflow.get("predicted_step"))
        if predicted_t is not None:
            text = "kvlab predicted it at " + seconds_text(predicted_t) + (f" (token {step:,.0f})" if step else "")
            pair = _vline(predicted_t, text, PREDICTED_COLOR, "dash", 0.93)
            shapes.append(pair[0])
            notes.append(pair[1])

    height = 360 + 130 * (len(panels) - 1)
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 70, "r": 70, "t": 30, "b": 110},
        "uirevision": "telemetry",  # a live redraw keeps the user's zoom
        "hovermode": "closest",
        # below the x axis' title: the legend starts a fixed distance under the plot, whatever its height
        "legend": {"orientation": "h", "y": round(-55 / (height - 140), 3), "yanchor": "top"},
        "xaxis": {
            "title": {"text": "seconds since the first request was sent"},
            "rangemode": "tozero",
            "anchor": panels[-1][0],
        },
        "shapes": shapes,
        "annotations": notes,
    }
    for (axis, title, _), domain in zip(panels, _domains([p[2] for p in panels]), strict=True):
        layout[_axis_key(axis)] = {"title": {"text": title}, "domain": domain, "rangemode": "tozero", "anchor": "x"}
    if any(trace["yaxis"] == "y3" for trace in data):
        layout["yaxis3"] = {
            "title": {"text": "output tok/s"},
            "overlaying": "y2",
            "side": "right",
            "rangemode": "tozero",
            "anchor": "x",
        }
    return {"data": data, "layout": layout}


def t_all_filled(t: Sequence[float | None]) -> list[float]:
    """Sample times with a missing one carried forward (the rate needs an ordered time for every sample)."""
    filled: list[float] = []
    for v in t:
        filled.append(v if v is not None else (filled[-1] if filled else 0.0))
    return filled


def _axis_key(axis: str) -> str:
    return "yaxis" if axis == "y" else f"yaxis{axis[1:]}"


def _sum(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _panel_note(text: str, yaxis: str, top: bool = True) -> dict[str, Any]:
    return {
        "xref": "x domain",
        "x": 0.5,
        "xanchor": "center",
        "yref": f"{yaxis} domain",
        "y": 0.9 if top else 0.05,
        "text": text,
        "showarrow": False,
        "font": {"color": NOTE_COLOR, "size": 12},
    }


def sources_text(telemetry: Mapping[str, Any]) -> str:
    """What was sampled and how often, and what was off and why."""
    sources = _dict(telemetry.get("sources"))
    period = _number(telemetry.get("period_s"))
    points = len(_list(telemetry.get("t")))
    samples = _number(telemetry.get("samples"))
    n = int(samples) if samples is not None and samples >= points else points
    every = f" every {period:g} s" if period else ""
    # In SOURCE_NAMES' order, then any other: PostgreSQL's jsonb does not keep an object's key order.
    order = {name: i for i, name in enumerate(SOURCE_NAMES)}
    ordered = sorted(sources.items(), key=lambda item: (order.get(str(item[0]), len(order)), str(item[0])))
    parts = [f"{SOURCE_NAMES.get(str(k), str(k))}: {v}" for k, v in ordered if v not in (None, "")]
    kept = f" ({points:,} points kept, each the largest of its stretch)" if n > points else ""
    head = f"Sampled{every}, {n:,} sample{'' if n == 1 else 's'}{kept}"
    return head + (" — " + " · ".join(parts) if parts else "")


def peak_text(telemetry: Mapping[str, Any]) -> str | None:
    """The peak occupancy against the capacity it had, and where the figure comes from."""
    peak = _dict(telemetry.get("peak"))
    kind, pool_cells, slot_cells, origin = pool_of(telemetry)
    pool_peak = _number(peak.get("pool"))
    slot_peaks = [p for p in (_number(v) for v in peak.get("slots") or []) if p is not None]
    at = _number(peak.get("pool_t"))
    when = f" at {seconds_text(at)}" if at is not None else ""
    whence = (
        " — from the requests' own counts when the pool ran out (no sample landed on it)"
        if peak.get("from") == "overflow"
        else " — the highest sample"
    )
    if kind == "per-slot" and slot_cells and slot_peaks:
        fullest = max(slot_peaks)
        return (
            f"Peak: the fullest slot held {cells_text(fullest)} of its {cells_text(slot_cells)} cells "
            f"({100 * fullest / slot_cells:.1f} %){whence}."
        )
    if pool_peak is None:
        return None
    if kind == "shared" and pool_cells:
        sized_by = f", its size from {origin}" if origin.startswith("/props;") else ""
        return (
            f"Peak: {cells_text(pool_peak)} cells held of the {cells_text(pool_cells)}-cell pool "
            f"({100 * pool_peak / pool_cells:.1f} %{sized_by}){when}{whence}."
        )
    return f"Peak: {cells_text(pool_peak)} cells held across the slots{when}{whence}; {unknown_pool_text(origin)}."


def prediction_text(telemetry: Mapping[str, Any]) -> str | None:
    """kvlab's prediction of the overflow beside what happened, when the attribution sentence does not say it
    (the execution's sentence, attribution.sentence, ends with the prediction)."""
    overflow = overflow_of(telemetry)
    if overflow is None or (isinstance(overflow.get("sentence"), str) and overflow["sentence"].strip()):
        return None
    at = seconds_text(float(overflow["t"]))
    step = _number(overflow.get("predicted_step"))
    predicted_t = _number(overflow.get("predicted_t"))
    pool_cells = _number(overflow.get("pool_cells"))
    pool = f"the {cells_text(pool_cells)}-cell pool" if pool_cells else "the pool"
    if step is None:
        return f"kvlab made no prediction of when {pool} would run out; it ran out at {at}."
    when = f" (≈ {seconds_text(predicted_t)})" if predicted_t is not None else ""
    return f"kvlab predicted {pool} would run out at token {step:,.0f} of each request{when}; it ran out at {at}."


def attribution_text(telemetry: Mapping[str, Any]) -> str | None:
    """The attribution sentence the execution wrote; a plain one from the requests if it wrote none."""
    overflow = overflow_of(telemetry)
    if overflow is None:
        return None
    sentence = overflow.get("sentence")
    if isinstance(sentence, str) and sentence.strip():
        return sentence.strip()
    requests = [_dict(r) for r in overflow.get("requests") or [] if isinstance(r, Mapping)]
    held = [
        (int(i) + 1, int(c))
        for r in requests
        if (i := _number(r.get("i"))) is not None and (c := _number(r.get("cells"))) is not None
    ]
    pool_cells = _number(overflow.get("pool_cells"))
    pool = f"the {cells_text(pool_cells)}-cell pool" if pool_cells else "the pool"
    if not held:
        return f"At {seconds_text(float(overflow['t']))} {pool} was full."
    who = ", ".join(f"request {i} held {cells_text(c)} cells" for i, c in held)
    return f"At {seconds_text(float(overflow['t']))} {pool} was full: {who}."


def peak_of(telemetry: Any) -> tuple[int, int | None] | None:
    """(peak cells held in the pool, the pool's cells or None when unknown), for a sweep's table."""
    if not isinstance(telemetry, Mapping):
        return None
    peak = _number(_dict(telemetry.get("peak")).get("pool"))
    if peak is None:
        return None
    return int(peak), pool_of(telemetry)[1]
