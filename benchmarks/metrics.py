"""Derived metrics of a run, computed from its requests. Pure functions.

Formulas (shown in the UI beside each figure):
* success rate = ok requests / requests
* per-request tok/s mean, min, max: over ok requests that report tok/s
* wall time = the run's reported wall time, else the longest request's elapsed time
* aggregate throughput = Σ output tokens of ok requests / wall time, only when every
  ok request reports its output tokens (never estimated from n_predict)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class RequestFacts:
    ok: bool
    ts: datetime | None
    prompt_tokens: int | None
    n_predict: int | None
    output_tokens: int | None
    tok_s: float | None
    elapsed_s: float | None


@dataclass(frozen=True, slots=True)
class RunSummary:
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


def summarize(requests: Iterable[RequestFacts], reported_wall_s: float | None) -> RunSummary:
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
        if r.ts is not None:
            started.append(r.ts)
        if r.prompt_tokens is not None:
            prompts.append(r.prompt_tokens)
        if r.n_predict is not None:
            predicts.append(r.n_predict)
        if r.elapsed_s is not None:
            elapsed.append(r.elapsed_s)
        if not r.ok:
            continue
        n_ok += 1
        if r.tok_s is not None:
            rates.append(r.tok_s)
        if r.output_tokens is None:
            output_complete = False
        else:
            output_total += r.output_tokens
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
