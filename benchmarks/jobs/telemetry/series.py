"""The telemetry series of one wave: the KV cells each slot holds, over time, and what goes with it.

The sampler (sampler.py, on the job's event loop) calls `add` a few times a second; the
job's recording thread calls `snapshot` at each heartbeat and at the wave's end. One lock
guards both. Everything `add` takes came from the server under test, so every value is
checked here: a negative, huge, non-numeric or nested value is read as "not said" and
never breaks a snapshot.

Bounded by design: at most MAX_SLOTS slots and MAX_GPUS GPUs are kept, and past
MAX_POINTS points the series is halved by pairwise maximum (so a peak is never lost)
and later samples are merged in buckets of the same width, keeping the time axis even.
`peak` is kept from every sample as it arrives, before any merging, and is raised by the
overflow (set_overflow): the cells the failed requests held when the shared pool ran out,
which no sample may have seen.

Cells per slot are /slots' `n_prompt_tokens`: the slot's token count (prompt and the
tokens generated so far: research §1), 0 when absent. `busy` is a bitmask of the slots that
were processing (bit i = slot i, for slots below BUSY_BITS). `tokens_out` is given to `add` by
the caller: the tokens the client has received so far, for tokens/s.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MAX_POINTS = 2000
MAX_SLOTS = 128  # slots beyond these are left out of the series (and said so in sources)
MAX_GPUS = 16
BUSY_BITS = 53  # busy is a bitmask of slots 0-52: exact as a JavaScript number, storable as a 64-bit int
MAX_CELLS = 2**31 - 1  # a cell count beyond this is not a measurement
MAX_COUNT = 10**9  # requests processing / deferred, tokens out
MAX_MIB = 2**31 - 1  # 2 PiB
MAX_POWER_W = 100_000.0
MAX_TEXT = 300
T_DIGITS = 4  # seconds to 0.1 ms

GpuRow = tuple[int | None, int | None, float | None]  # memory used MiB, utilisation %, power W


@dataclass(slots=True)
class _Point:
    t: float
    cells: list[int] | None  # per slot; None when /slots was not read at this point
    busy: int | None
    processing: int | None
    deferred: int | None
    tokens_out: int | None
    gpu: list[GpuRow] | None


def _count(value: Any, limit: int) -> int | None:
    """A non-negative integer the server reported, or None when what it said is not one."""
    if type(value) is int:
        return value if 0 <= value <= limit else None
    if type(value) is float and math.isfinite(value) and value.is_integer() and 0 <= value <= limit:
        return int(value)
    return None


def _number(value: Any, limit: float) -> float | None:
    if type(value) in (int, float) and math.isfinite(value) and 0 <= value <= limit:
        return float(value)
    return None


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text[:MAX_TEXT]
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text.replace("\x00", "\ufffd")


def _max(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


def _merge_lists(a: Sequence[Any] | None, b: Sequence[Any] | None) -> list[Any] | None:
    if a is None:
        return None if b is None else list(b)
    if b is None:
        return list(a)
    n = max(len(a), len(b))
    return [_max(a[i] if i < len(a) else None, b[i] if i < len(b) else None) for i in range(n)]


def _merge(a: _Point, b: _Point) -> _Point:
    """Two neighbouring points as one: the maximum of each value (so peaks survive), at the time
    of the point whose cells add up to more (so the peak keeps its moment)."""
    a_sum = sum(a.cells) if a.cells else -1
    b_sum = sum(b.cells) if b.cells else -1
    gpu = None
    if a.gpu is not None or b.gpu is not None:
        rows_a, rows_b = a.gpu or [], b.gpu or []
        gpu = [
            (
                _max(ra[0] if ra else None, rb[0] if rb else None),
                _max(ra[1] if ra else None, rb[1] if rb else None),
                _max(ra[2] if ra else None, rb[2] if rb else None),
            )
            for ra, rb in (
                (rows_a[i] if i < len(rows_a) else None, rows_b[i] if i < len(rows_b) else None)
                for i in range(max(len(rows_a), len(rows_b)))
            )
        ]
    return _Point(
        t=a.t if a_sum > b_sum else b.t,
        cells=_merge_lists(a.cells, b.cells),
        busy=None if a.busy is None and b.busy is None else (a.busy or 0) | (b.busy or 0),
        processing=_max(a.processing, b.processing),
        deferred=_max(a.deferred, b.deferred),
        tokens_out=_max(a.tokens_out, b.tokens_out),
        gpu=gpu,
    )


class Series:
    """One wave's telemetry; thread-safe (`add` from the event loop, `snapshot` from the recorder)."""

    def __init__(self, period_s: float, pool: dict[str, Any] | None, sources: dict[str, str]) -> None:
        self.period_s = period_s
        self._lock = threading.Lock()
        self._pool = copy.deepcopy(pool)
        self._sources = {str(k): _text(v) for k, v in sources.items()}
        self._points: list[_Point] = []
        self._pending: _Point | None = None  # the bucket being filled, once the series was halved
        self._pending_n = 0
        self._stride = 1  # samples per point
        self._samples = 0
        self._n_slots = 0
        self._gpu_names: list[str] = []
        self._gpu_total: list[int | None] = []
        self._metrics_seen = False
        self._peak_pool: int | None = None
        self._peak_t: float | None = None
        self._peak_slots: list[int] = []
        self._overflow: dict[str, Any] | None = None

    # --- writing -----------------------------------------------------------------------

    def set_source(self, name: str, text: str) -> None:
        with self._lock:
            self._sources[str(name)] = _text(text)

    def set_overflow(self, overflow: dict[str, Any] | None) -> None:
        with self._lock:
            self._overflow = copy.deepcopy(overflow)

    def add(
        self,
        t: float,
        slots: Iterable[Any] | None,
        metrics: dict[str, Any] | None,
        gpu: Iterable[Any] | None,
        *,
        tokens_out: int | None = None,
    ) -> None:
        """One sample at t seconds since the wave's first send. slots: /slots' entries (None when
        not read); metrics: /metrics' llamacpp gauges without the prefix (None when not read);
        gpu: one dict per GPU (gpu.py's read()); tokens_out: tokens received so far."""
        time_s = _number(t, 1e9)
        if time_s is None:
            return
        cells, busy = self._slots(slots)
        point = _Point(
            t=round(time_s, T_DIGITS),
            cells=cells,
            busy=busy,
            processing=None,
            deferred=None,
            tokens_out=_count(tokens_out, MAX_COUNT),
            gpu=None,
        )
        metrics_read = isinstance(metrics, dict)
        if isinstance(metrics, dict):
            point.processing = _count(metrics.get("requests_processing"), MAX_COUNT)
            point.deferred = _count(metrics.get("requests_deferred"), MAX_COUNT)
        with self._lock:
            self._metrics_seen = self._metrics_seen or metrics_read
            point.gpu = self._gpu(gpu)
            if cells is not None:
                self._n_slots = max(self._n_slots, len(cells))
                self._raise_peak(point.t, cells)
            self._samples += 1
            self._append(point)

    def _slots(self, slots: Iterable[Any] | None) -> tuple[list[int] | None, int | None]:
        if slots is None or isinstance(slots, (str, bytes, dict)):
            return None, None
        cells: dict[int, int] = {}
        busy = 0
        try:
            for position, slot in enumerate(slots):
                if position >= MAX_SLOTS * 4:  # a list this long is not a slot list
                    break
                if not isinstance(slot, dict):
                    continue
                slot_id = _count(slot.get("id"), MAX_SLOTS - 1)
                if slot_id is None:
                    slot_id = position if position < MAX_SLOTS and position not in cells else None
                if slot_id is None:
                    continue
                cells[slot_id] = _count(slot.get("n_prompt_tokens"), MAX_CELLS) or 0
                if slot.get("is_processing") is True and slot_id < BUSY_BITS:
                    busy |= 1 << slot_id
        except TypeError:  # not iterable after all
            return None, None
        if not cells:
            return [], 0
        return [cells.get(i, 0) for i in range(max(cells) + 1)], busy

    def _gpu(self, gpu: Iterable[Any] | None) -> list[GpuRow] | None:
        """Rows per GPU; the names and totals are kept once (the first seen). Under the lock."""
        if gpu is None or isinstance(gpu, (str, bytes, dict)):
            return None
        rows: list[GpuRow] = []
        try:
            for i, entry in enumerate(gpu):
                if i >= MAX_GPUS:
                    break
                if not isinstance(entry, dict):
                    entry = {}
                if i >= len(self._gpu_names):
                    self._gpu_names.append(_text(entry.get("name", f"GPU {i}"))[:100])
                    self._gpu_total.append(_count(entry.get("mem_total_mib"), MAX_MIB))
                power = _number(entry.get("power_w"), MAX_POWER_W)
                util = _number(entry.get("util_pct"), 100.0)
                rows.append(
                    (
                        _count(entry.get("mem_mib"), MAX_MIB),
                        None if util is None else round(util),
                        None if power is None else round(power, 1),
                    )
                )
        except TypeError:
            return None
        return rows or None

    def _raise_peak(self, t: float, cells: list[int]) -> None:
        total = sum(cells)
        if self._peak_pool is None or total > self._peak_pool:
            self._peak_pool, self._peak_t = total, t
        for i, c in enumerate(cells):
            if i >= len(self._peak_slots):
                self._peak_slots.append(c)
            elif c > self._peak_slots[i]:
                self._peak_slots[i] = c

    def _append(self, point: _Point) -> None:
        if self._stride == 1:
            self._points.append(point)
        else:
            self._pending = point if self._pending is None else _merge(self._pending, point)
            self._pending_n += 1
            if self._pending_n >= self._stride:
                self._points.append(self._pending)
                self._pending, self._pending_n = None, 0
        if len(self._points) > MAX_POINTS:
            pts = self._points
            halved = [_merge(pts[i], pts[i + 1]) for i in range(0, len(pts) - 1, 2)]
            if len(pts) % 2:
                halved.append(pts[-1])  # alone in its bucket until the next sample joins it
                self._pending, self._pending_n = halved.pop(), self._stride
            self._points = halved
            self._stride *= 2

    # --- reading -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The stored JSON (Run.telemetry / Job.telemetry): columns, one entry per point."""
        with self._lock:
            points = list(self._points)
            if self._pending is not None:
                points.append(self._pending)
            n_slots = self._n_slots
            data: dict[str, Any] = {
                "v": 1,
                "period_s": self.period_s,
                "samples": self._samples,
                "sources": dict(self._sources),
                "pool": copy.deepcopy(self._pool),
                "t": [p.t for p in points],
                "cells": [
                    [(p.cells[i] if i < len(p.cells) else 0) if p.cells is not None else None for p in points]
                    for i in range(n_slots)
                ],
                "busy": [p.busy for p in points],
            }
            if self._metrics_seen:
                data["processing"] = [p.processing for p in points]
                data["deferred"] = [p.deferred for p in points]
            data["tokens_out"] = [p.tokens_out for p in points]
            if self._gpu_names:
                n = len(self._gpu_names)

                def column(k: int) -> list[list[Any]]:
                    return [
                        [(p.gpu[g][k] if g < len(p.gpu) else None) if p.gpu else None for p in points] for g in range(n)
                    ]

                data["gpu"] = {
                    "names": list(self._gpu_names),
                    "mem_total_mib": list(self._gpu_total),
                    "mem_mib": column(0),
                    "util_pct": column(1),
                    "power_w": column(2),
                }
            data["peak"] = self._peak()
            data["overflow"] = copy.deepcopy(self._overflow)
            return data

    def _peak(self) -> dict[str, Any]:
        peak: dict[str, Any] = {
            "pool": self._peak_pool,
            "pool_t": self._peak_t,
            "slots": list(self._peak_slots),
            "from": "samples",
        }
        held = _overflow_cells(self._overflow)
        if held is not None and (self._peak_pool is None or held[0] > self._peak_pool):
            peak["pool"], peak["pool_t"], peak["from"] = held[0], held[1], "overflow"
        return peak


def _overflow_cells(overflow: dict[str, Any] | None) -> tuple[int, float | None] | None:
    """(the cells the overflow's requests held together, its time), or None without one."""
    if not isinstance(overflow, dict) or not isinstance(overflow.get("requests"), list):
        return None
    cells = [_count(r.get("cells"), MAX_CELLS) for r in overflow["requests"] if isinstance(r, dict)]
    known = [c for c in cells if c is not None]
    if not known:
        return None
    return sum(known), _number(overflow.get("t"), 1e9)
