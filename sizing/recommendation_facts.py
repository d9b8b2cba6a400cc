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


def ttft_seconds(r: Recommendation, workload: Workload | None) -> float | None:
    if r.prefill is None or workload is None:
        return None
    decode = r.speed.tok_s if r.speed is not None else None
    return r.prefill.ttft(
        concurrency=workload.concurrency,
        slots=_slots(r, workload),
        output_tokens=workload.output_tokens,
        decode_tok_s=decode,
    )


def rate_text(tok_s: float) -> str:
    """A prompt rate as a reader decides from it: whole tokens from 100 tok/s, tenths below, two figures under 1
    (a prompt that crawls reads "0.26", never "0")."""
    return f"{tok_s:,.0f}" if tok_s >= 100 else f"{tok_s:.1f}" if tok_s >= 1 else f"{tok_s:.2g}"


def _slots(r: Recommendation, workload: Workload) -> int:
    """The slots serving the burst: the decode estimate's sequences (min(slots, concurrency)) say it."""
    return r.speed.sequences if r.speed is not None else min(r.flags.parallel or 1, workload.concurrency)


def ttft_words(r: Recommendation, workload: Workload | None) -> str:
    """The time to the first token of the workload's p95 prompt, the last of its burst, with its prefill speed."""
    p = r.prefill
    if p is None or workload is None:
        return "time to first token unknown: no workload"
    if p.tok_s is None:
        missing = ", ".join(p.unknown) or "the GPU"
        return f"time to first token unknown: no compute peak (FP16 matrix or FP32) or bandwidth for {missing}"
    ttft = ttft_seconds(r, workload)
    slots = _slots(r, workload)
    if ttft is None:
        return f"prefill ≈ {rate_text(p.tok_s)} tok/s; first token of a queued request unknown (no decode speed)"
    burst = workload.concurrency
    how = (
        "alone"
        if burst == 1
        else f"the last of {burst} at once"
        + (f", {burst - slots} queued for a slot" if burst > slots else ", sharing the prefill")
    )
    return (
        f"first token ≈ {ttft:,.1f} s for the {workload.prompt_tokens:,}-token prompt ({how}; "
        f"prefill ≈ {rate_text(p.tok_s)} tok/s, an estimate)"
    )


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
        "ttft": ttft_words(r, workload),
        "ttft_s": None if (t := ttft_seconds(r, workload)) is None else round(t, 3),
        "prefill_tok_s": None if r.prefill is None or r.prefill.tok_s is None else round(r.prefill.tok_s, 1),
        "cells_spare": r.cells_spare,
        "cells": "" if workload is None else cells_words(r, workload),
        "vram_left": r.vram_left,
        "vram": vram_words(r),
        "twin": r.twin,
    }
