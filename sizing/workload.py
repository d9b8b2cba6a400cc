"""What a workload does to a KV layout: which requests fail, how, and why. Pure.

The two context errors (checked on a real server):
* unified pool: the slots processing at once share n_ctx cells; when their prompts
  and outputs together outgrow the pool, every slot processing at that moment gets
  HTTP 500 "Context size has been exceeded." (requests still queued are unaffected);
* per-slot: a prompt longer than the slot is refused at admission with HTTP 400
  exceed_context_size_error, for that request only.
A prompt that fits but whose output would pass the slot's end is cut there
(stop_type "limit"), not an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kv import KVLayout


@dataclass(frozen=True)
class Workload:
    prompt_tokens: int  # p95 prompt length, measured with /tokenize
    output_tokens: int  # p95 output length (n_predict)
    concurrency: int  # requests in flight at once
    preference: str = "throughput"  # or "latency"
    headroom_pct: int = 0  # the recommender sizes each request's cells this much above its need

    @property
    def cells_per_request(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def sized_cells(self) -> int:
        """The cells a recommendation holds for each request: its need, plus the headroom asked for."""
        need = self.cells_per_request
        return need + -(-need * self.headroom_pct // 100)


@dataclass(frozen=True)
class Prediction:
    outcome: str  # "ok", "pool_overflow", "prompt_too_long", "truncated", "invalid"
    message: str
    in_flight: int
    queued: int
    cells_needed: int
    cells_available: int
    # pool_overflow only: the decode step at which the shared pool runs out, each request in
    # flight having generated that many tokens (0: already while the prompts are processed).
    overflow_step: int | None = None

    @property
    def fails(self) -> bool:
        return self.outcome in ("pool_overflow", "prompt_too_long", "invalid")

    @property
    def http_status(self) -> int | None:
        return {"pool_overflow": 500, "prompt_too_long": 400}.get(self.outcome)


def predict(layout: KVLayout, workload: Workload) -> Prediction:
    in_flight = min(workload.concurrency, layout.n_parallel)
    queued = workload.concurrency - in_flight
    need = workload.cells_per_request
    queue_note = (
        f" {queued} more request{'s' if queued != 1 else ''} wait in the server's queue (latency, not failure)."
        if queued
        else ""
    )
    if layout.errors:
        return Prediction(
            "invalid", "llama-server will not start: " + "; ".join(layout.errors), in_flight, queued, 0, 0
        )
    if layout.recurrent and not layout.caches:
        return Prediction(
            "ok",
            f"a recurrent model keeps a fixed state per sequence: {in_flight} in flight, "
            "no context limit from the KV cache." + queue_note,
            in_flight,
            queued,
            0,
            0,
        )
    slot = layout.n_ctx_seq
    if layout.kv_unified:
        total = in_flight * need
        if workload.prompt_tokens > slot:
            return Prediction(
                "prompt_too_long",
                f"a {workload.prompt_tokens:,}-token prompt exceeds the {slot:,}-cell context: "
                "HTTP 400 exceed_context_size_error for each such request." + queue_note,
                in_flight,
                queued,
                workload.prompt_tokens,
                slot,
            )
        if total > slot:
            return Prediction(
                "pool_overflow",
                f"{in_flight} concurrent request{'s' if in_flight != 1 else ''} of {workload.prompt_tokens:,} + "
                f"{workload.output_tokens:,} tokens need {total:,} cells; the unified pool has {slot:,}: "
                "all in-flight requests will fail together with HTTP 500 'Context size has been exceeded'."
                + queue_note,
                in_flight,
                queued,
                total,
                slot,
                overflow_step(slot, in_flight, workload.prompt_tokens),
            )
        return Prediction(
            "ok",
            f"{in_flight} concurrent request{'s' if in_flight != 1 else ''} need {total:,} of the pool's "
            f"{slot:,} cells ({slot - total:,} to spare)." + queue_note,
            in_flight,
            queued,
            total,
            slot,
        )
    if workload.prompt_tokens > slot:
        return Prediction(
            "prompt_too_long",
            f"a {need:,}-token request ({workload.prompt_tokens:,}-token prompt) exceeds the {slot:,}-cell slot: "
            "HTTP 400 exceed_context_size_error for that request only." + queue_note,
            in_flight,
            queued,
            need,
            slot,
        )
    if need > slot:
        return Prediction(
            "truncated",
            f"the {workload.prompt_tokens:,}-token prompt fits the {slot:,}-cell slot, but only "
            f"{slot - workload.prompt_tokens:,} of {workload.output_tokens:,} output tokens do: generation stops "
            "there (stop_type 'limit'), without an error." + queue_note,
            in_flight,
            queued,
            need,
            slot,
        )
    return Prediction(
        "ok",
        f"each request needs {need:,} of its slot's {slot:,} cells ({slot - need:,} to spare)." + queue_note,
        in_flight,
        queued,
        need,
        slot,
    )


def overflow_step(pool_cells: int, in_flight: int, prompt_tokens: int) -> int:
    """The decode step k at which in_flight requests of prompt_tokens each, decoding in
    lock-step, outgrow a shared pool of pool_cells: the first k with in_flight × (p + k) >
    pool_cells, i.e. floor(P / n − p) + 1 (P=1024, n=3, p=200 → 142, as a real server
    fails). 0 when the prompts alone do not fit."""
    return max(0, pool_cells // in_flight - prompt_tokens + 1)
