"""Who filled a shared KV pool: the overflow of one wave, from the client's own numbers. Pure.

When a unified pool runs out, llama-server fails every slot processing at that moment
with an error event "Context size has been exceeded." inside its 200 stream, all within
one decode step. Each failed request knows what its sequence held then (stream.py's
Outcome.at_error: prompt + tokens decoded = cells), so the overflow is attributed
without any /slots sample: on the tiny model the pool fills in 0.07-0.25 s, before a
sampler at 4 Hz may have seen it (research §2).

The prediction stands beside it: sizing.workload.predict on the same pool, and the step
at which it said the pool would run out (workload.overflow_step).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from sizing.kv import KVLayout
from sizing.workload import Workload, predict

from ...history.errors import CONTEXT_EXCEEDED
from ..client.stream import Outcome

STEP_S = 0.05  # failures this close to the first are one overflow (one decode step, with room)


def overflow(
    outcomes: Iterable[tuple[int, Outcome]],
    *,
    pool: dict[str, Any] | None,
    n_predict: int,
    concurrency: int,
    window_s: float = STEP_S,
) -> dict[str, Any] | None:
    """The first overflow of a shared pool in a wave, or None (no shared pool, no such failure).

    outcomes: (request index, Outcome) of the wave; pool: the series' pool dict (kind,
    slots, pool_cells). The dict is the stored JSON's "overflow" (series.py), sentence included.
    """
    if not pool or pool.get("kind") != "shared" or not isinstance(pool.get("pool_cells"), int):
        return None
    failed = sorted(
        ((o.at_error["t_s"], i, o) for i, o in outcomes if o.error_type == CONTEXT_EXCEEDED and o.at_error),
        key=lambda x: (x[0], x[1]),
    )
    if not failed:
        return None
    first_t = failed[0][0]
    group = sorted((x for x in failed if x[0] - first_t <= window_s), key=lambda x: x[1])
    pool_cells: int = pool["pool_cells"]
    requests = [
        {"i": i, "prompt": o.at_error["prompt"], "decoded": o.at_error["decoded"], "cells": o.at_error["cells"]}
        for _, i, o in group
        if o.at_error
    ]
    prompts = [r["prompt"] for r in requests]
    alone_needed = max(prompts) + n_predict
    slots = pool.get("slots") if isinstance(pool.get("slots"), int) else None
    step = predicted_step(pool_cells, slots, max(prompts), n_predict, concurrency)
    result = {
        "t": round(first_t, 4),
        "pool_cells": pool_cells,
        "predicted_step": step,
        "predicted_t": _predicted_t(step, [o for _, _, o in group]),
        "requests": requests,
        "alone_needed": alone_needed,
    }
    result["sentence"] = sentence(result, n_predict)
    return result


def predicted_step(pool_cells: int, slots: int | None, prompt: int, n_predict: int, concurrency: int) -> int | None:
    """The decode step at which kvlab's prediction (sizing.workload.predict, shared pool) said
    the pool runs out; None when it predicted no overflow."""
    n_slots = slots if slots and slots > 0 else concurrency
    layout = KVLayout(
        n_ctx=pool_cells,
        n_ctx_seq=pool_cells,
        n_stream=1,
        n_parallel=n_slots,
        kv_unified=True,
        auto_parallel=False,
        flash_attn=True,
    )
    prediction = predict(layout, Workload(prompt, n_predict, concurrency))
    return prediction.overflow_step if prediction.outcome == "pool_overflow" else None


def _predicted_t(step: int | None, group: list[Outcome]) -> float | None:
    """When the predicted step would come at the speed these requests ran: sent + TTFT +
    (step - 1) × their mean inter-token gap (median over the group). None without the figures."""
    if step is None:
        return None
    times = []
    for o in group:
        if o.at_error is None or o.ttft_s is None or o.elapsed_s is None:
            continue
        sent = o.at_error["t_s"] - o.elapsed_s  # the request's send, on the wave's clock
        gap = statistics.fmean(o.itl_s) if o.itl_s else 0.0
        times.append(max(0.0, sent) + o.ttft_s + max(0, step - 1) * gap)
    return round(statistics.median(times), 4) if times else None


def sentence(over: dict[str, Any], n_predict: int) -> str:
    """The overflow in words: when, whose cells, what each needed alone, what kvlab predicted."""
    requests = over["requests"]
    numbers = _and([str(r["i"] + 1) for r in requests])
    cells = _and([f"{r['cells']:,}" for r in requests])
    one = len(requests) == 1
    held = sum(r["cells"] for r in requests)
    pool_cells = over["pool_cells"]
    text = (
        f"At {over['t']:.2f} s the {pool_cells:,}-cell pool was full: request{'' if one else 's'} {numbers} "
        f"held {cells} cell{'' if one and requests[0]['cells'] == 1 else 's'}"
    )
    if not one:
        text += f" ({held:,} together)"
    prompts = {r["prompt"] for r in requests}
    if len(prompts) == 1:
        need = f"{over['alone_needed']:,} ({prompts.pop():,} prompt + {n_predict:,} to generate)"
    else:
        need = f"up to {over['alone_needed']:,} (prompt + {n_predict:,} to generate)"
    text += f"; {'alone it' if one else 'each alone'} needed {need}."
    spare = pool_cells - held - len(requests)  # one more cell each was the step that failed
    if spare > max(16, pool_cells // 50):
        text += (
            f" The other {spare:,} cells were held by requests kvlab did not send (cached prompts or other clients)."
        )
    step = over.get("predicted_step")
    if step is None:
        text += " kvlab did not predict an overflow for this workload."
    elif step == 0:
        text += " kvlab predicted the prompts alone would not fit together."
    else:
        when = f" (≈ {over['predicted_t']:.2f} s)" if over.get("predicted_t") is not None else ""
        each = "" if one else " of each"
        text += f" kvlab predicted the pool would run out at token {step:,}{each}{when}."
    return text


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
