"""Who filled a shared KV pool: the overflow of one wave, from the client's own numbers. Pure.

When a unified pool runs out, llama-server fails every slot processing at that moment
with an error event "Context size has been exceeded." inside its 200 stream, all within
one decode step. Each failed request knows what its sequence held then (stream.py's
Outcome.at_error: prompt + tokens decoded = cells), so the overflow is attributed
without any /slots sample: on the tiny model the pool fills in 0.07-0.25 s, before a
sampler at 4 Hz may have seen it (research §2).

The prediction stands beside it: sizing.workload.predict on the same pool, and the step
at which it said the pool would run out (workload.overflow_step).

A server kvlab did not launch (`bench --server URL`, or registered without a launch
command) has a pool of unknown kind, yet its overflow is attributed too: the error itself
says the pool is shared, since a cache per slot refuses a prompt with HTTP 400 at
admission and never fails requests in flight. The size is then /props' context per slot
(with one shared pool every slot is told it may use all of it), or, when /props said
none, at least what the requests had written: their own counts less the token each was
writing when the step failed (on the tiny model at -c 1024: 1,025-1,027 counted, 1,022-1,024
written).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any, TypeGuard

from sizing.kv import KVLayout
from sizing.workload import Workload, predict

from ...records.errors import CONTEXT_EXCEEDED
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
    """The first overflow of a shared pool in a wave, or None (per-slot caches, no such failure).

    outcomes: (the request's row in the run, Outcome) of the wave: a request is named by its row, as the
    run page's table numbers the stored requests (#row + 1, the order they finished in), so that the
    sentence's "requests 1, 2 and 3 held …" are the table's #1-#3, not the order they were sent in.
    pool: the series' pool dict (kind, slots, slot_cells, pool_cells). The dict is the stored JSON's
    "overflow" (series.py), sentence included: "pool_from" says where its size came from ("launch command", "/props",
    or None when unknown, with "pool_at_least" the cells the requests had written).
    """
    kind = pool.get("kind") if pool else None
    if kind == "per-slot" or (kind == "shared" and not _positive(pool and pool.get("pool_cells"))):
        return None  # a cache per slot answers an oversized prompt with a 400, never this
    failed = sorted(
        ((o.at_error["t_s"], i, o) for i, o in outcomes if o.error_type == CONTEXT_EXCEEDED and o.at_error),
        key=lambda x: (x[0], x[1]),
    )
    if not failed:
        return None
    first_t = failed[0][0]
    group = sorted((x for x in failed if x[0] - first_t <= window_s), key=lambda x: x[1])
    requests = [
        {"i": i, "prompt": o.at_error["prompt"], "decoded": o.at_error["decoded"], "cells": o.at_error["cells"]}
        for _, i, o in group
        if o.at_error
    ]
    written = written_cells(requests)
    pool_cells, pool_from = _pool_size(pool or {}, written)
    prompts = [r["prompt"] for r in requests]
    alone_needed = max(prompts) + n_predict
    slots = pool.get("slots") if pool and _positive(pool.get("slots")) else None
    step = None if pool_cells is None else predicted_step(pool_cells, slots, max(prompts), n_predict, concurrency)
    result: dict[str, Any] = {
        "t": round(first_t, 4),
        "pool_cells": pool_cells,
        "pool_from": pool_from,
        "predicted_step": step,
        "predicted_t": _predicted_t(step, [o for _, _, o in group]),
        "requests": requests,
        "alone_needed": alone_needed,
    }
    if pool_from != "launch command":
        result["shared_from"] = "error"  # the 500 said the pool is shared, not the launch command
    if pool_cells is None:
        result["pool_at_least"] = written
        slot_cells = (pool or {}).get("slot_cells")
        if _positive(slot_cells):
            result["slot_cells"] = slot_cells  # /props' context per slot, smaller than what was written
    result["sentence"] = sentence(result, n_predict)
    return result


def written_cells(requests: list[dict[str, Any]]) -> int:
    """The cells the requests had written to the pool at least: each one's count less the token it
    was writing when the step failed. A request that failed before its first token had written an
    unknown part of its prompt and counts for none."""
    return sum(max(0, r["cells"] - 1) for r in requests if r["decoded"] > 0)


def _pool_size(pool: dict[str, Any], written: int) -> tuple[int | None, str | None]:
    """(the shared pool's cells, where that came from), or (None, None) when nothing says it."""
    if pool.get("kind") == "shared":
        return pool["pool_cells"], "launch command"
    slot_cells = pool.get("slot_cells")
    if _positive(slot_cells) and written <= slot_cells:
        return slot_cells, "/props"  # shared: every slot may use the whole pool
    return None, None  # no /props, or slots capped below the pool (--kv-unified-per-slot)


def _positive(value: Any) -> TypeGuard[int]:
    return type(value) is int and value > 0


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


SHARED_BY_ERROR = (
    ' The HTTP 500 "Context size has been exceeded" says the slots share one pool '
    "(a cache per slot refuses a prompt with HTTP 400 at admission)"
)


def sentence(over: dict[str, Any], n_predict: int) -> str:
    """The overflow in words: when, whose cells, what each needed alone, what kvlab predicted, and,
    for a server kvlab did not launch, why the pool is shared and how to learn its size."""
    requests = over["requests"]
    numbers = _and([str(r["i"] + 1) for r in requests])
    cells = _and([f"{r['cells']:,}" for r in requests])
    one = len(requests) == 1
    held = sum(r["cells"] for r in requests)
    pool_cells = over.get("pool_cells")
    pool_from = over.get("pool_from", "launch command")
    if pool_cells is None:
        at_least = over.get("pool_at_least") or 0
        size = (
            f"at least {at_least:,} cells, a size the server did not say"
            if at_least
            else "a size the server did not say"
        )
        pool = f"the shared pool — {size} —"
    elif pool_from == "/props":
        pool = f"the shared pool of {pool_cells:,} cells"
    else:
        pool = f"the {pool_cells:,}-cell pool"
    text = (
        f"At {over['t']:.2f} s {pool} was full: request{'' if one else 's'} {numbers} "
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
    if pool_cells is not None:
        spare = pool_cells - held - len(requests)  # one more cell each was the step that failed
        if spare > max(16, pool_cells // 50):
            text += (
                f" The other {spare:,} cells were held by requests kvlab did not send "
                "(cached prompts or other clients)."
            )
    step = over.get("predicted_step")
    if pool_cells is None:
        text += " Without the pool's size kvlab made no prediction."
    elif step is None:
        text += " kvlab did not predict an overflow for this workload."
    elif step == 0:
        text += " kvlab predicted the prompts alone would not fit together."
    else:
        when = f" (≈ {over['predicted_t']:.2f} s)" if over.get("predicted_t") is not None else ""
        each = "" if one else " of each"
        text += f" kvlab predicted the pool would run out at token {step:,}{each}{when}."
    if pool_from == "/props":
        text += SHARED_BY_ERROR + "; its size is the context /props gives each slot, all of which each slot may use."
    elif pool_cells is None:
        slot_cells = over.get("slot_cells")
        capped = (
            f" (/props gives each slot {slot_cells:,} cells, fewer than were written: the slots are capped "
            "below the pool's size)"
            if isinstance(slot_cells, int)
            else ""
        )
        text += (
            SHARED_BY_ERROR + f"{capped}. To learn its size, read the server's /props "
            "(default_generation_settings.n_ctx: with one shared pool every slot may use all of it), "
            "or register the server with the command that launched it (its -c and -np)."
        )
    return text


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
