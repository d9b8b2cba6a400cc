"""What each recommendation carries beside its command, in words a reader decides from: its decode speed
(an estimate, or unknown and why) and its headroom (cells spare per request with the whole workload in
flight, GPU memory left beyond the margin, or unknown when the weights or the GPU are). Pure."""

from __future__ import annotations

from typing import Any

from .memory import MiB
from .recommend import Recommendation
from .workload import Workload


def speed_words(r: Recommendation) -> str:
    speed = r.speed
    if speed is None or speed.tok_s is None:
        missing = ", ".join(speed.unknown) if speed is not None and speed.unknown else "a bandwidth"
        return f"decode speed unknown: no memory bandwidth for {missing}"
    words = f"decode ≈ {speed.tok_s:,.1f} tok/s per request"
    if speed.sequences > 1 and speed.aggregate_tok_s is not None:
        words += f", {speed.aggregate_tok_s:,.1f} tok/s for the {speed.sequences} decoding at once"
    return words + (" (an estimate, calibrated)" if speed.calibration else " (an estimate)")


def cells_words(r: Recommendation, workload: Workload) -> str:
    need = workload.cells_per_request
    where = (
        f"its share of the unified pool with {min(r.flags.parallel or 1, workload.concurrency)} in flight"
        if r.flags.kv_unified
        else "its slot"
    )
    return f"{r.cells_spare:,} cells spare per request in {where}, beyond its {need:,} (p95 prompt + output)"


def vram_words(r: Recommendation) -> str:
    left = r.vram_left
    if left is None:
        why = "the weights' size is unknown" if r.plan.weights_bytes is None else "no GPU was given"
        return f"VRAM left: unknown ({why})"
    return f"{left / MiB:,.2f} MiB of VRAM left beyond the {r.plan.margin_bytes / MiB:,.0f} MiB margin"


def facts(r: Recommendation, workload: Workload | None) -> dict[str, Any]:
    """The page's and the JSON's fields for one recommendation (a snapshot stores them as they are)."""
    return {
        "speed": speed_words(r),
        "tok_s": None if r.speed is None or r.speed.tok_s is None else round(r.speed.tok_s, 2),
        "cells_spare": r.cells_spare,
        "cells": "" if workload is None else cells_words(r, workload),
        "vram_left": r.vram_left,
        "vram": vram_words(r),
        "twin": r.twin,
    }
