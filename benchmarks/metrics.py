"""Derived metrics of a run, computed from its requests. Pure functions.

Formulas (shown in the UI beside each figure):
* success rate = ok requests / requests
* per-request tok/s mean, min, max: over ok requests that report tok/s
* wall time = the run's reported wall time, else the longest request's elapsed time
* aggregate throughput = Σ output tokens of ok requests / wall time, only when every
  ok request reports its output tokens (never estimated from n_predict)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

# Positions in a request tuple, in records.REQUEST_FIELD_NAMES order:
# (ts, ok, http_status, error, error_type, prompt_tokens, n_predict, output_tokens,
#  tok_s, elapsed_s, ttft_s)
TS, OK, PROMPT_TOKENS, N_PREDICT, OUTPUT_TOKENS, TOK_S, ELAPSED_S = 0, 1, 5, 6, 7, 8, 9


class RunSummary(NamedTuple):
    started_at: datetime | None
    n_requests: int
    n_ok: int
    prompt_tokens_max: int | None
    n_predict_max: int | None
    output_tokens_total: int | None
    tok_s_mean: float | None
    tok_s_min: float | None
    tok_s_max: float | None
    effective_wall_s: float | None
    effective_wall_source: str
    throughput_tok_s: float | None


def summarize(requests: Iterable[Sequence[Any]], reported_wall_s: float | None) -> RunSummary:
    """Summarize a run from its request tuples (records.REQUEST_FIELD_NAMES order)."""
    started: list[datetime] = []
    prompts: list[int] = []
    predicts: list[int] = []
    rates: list[float] = []
    elapsed: list[float] = []
    n_requests = n_ok = 0
    output_total = 0
    output_complete = True
    for r in requests:
        n_requests += 1
        if r[TS] is not None:
            started.append(r[TS])
        if r[PROMPT_TOKENS] is not None:
            prompts.append(r[PROMPT_TOKENS])
        if r[N_PREDICT] is not None:
            predicts.append(r[N_PREDICT])
        if r[ELAPSED_S] is not None:
            elapsed.append(r[ELAPSED_S])
        if not r[OK]:
            continue
        n_ok += 1
        if r[TOK_S] is not None:
            rates.append(r[TOK_S])
        if r[OUTPUT_TOKENS] is None:
            output_complete = False
        else:
            output_total += r[OUTPUT_TOKENS]
    if reported_wall_s is not None:
        wall, wall_source = reported_wall_s, "reported"
    elif elapsed:
        wall, wall_source = max(elapsed), "derived"
    else:
        wall, wall_source = None, ""
    output_tokens_total = output_total if n_ok and output_complete else None
    throughput = output_tokens_total / wall if output_tokens_total is not None and wall else None
    return RunSummary(
        started_at=min(started) if started else None,
        n_requests=n_requests,
        n_ok=n_ok,
        prompt_tokens_max=max(prompts) if prompts else None,
        n_predict_max=max(predicts) if predicts else None,
        output_tokens_total=output_tokens_total,
        tok_s_mean=sum(rates) / len(rates) if rates else None,
        tok_s_min=min(rates) if rates else None,
        tok_s_max=max(rates) if rates else None,
        effective_wall_s=wall,
        effective_wall_source=wall_source,
        throughput_tok_s=throughput,
    )
