"""Derived metrics of a run, computed from its requests. Pure functions.

Formulas (shown in the UI beside each figure):
* success rate = ok requests / requests
* per-request tok/s mean, min, max: over ok requests that report tok/s
* wall time = the run's reported wall time, else the longest request's elapsed time
* aggregate throughput = Σ output tokens of ok requests / wall time, only when every
  ok request reports its output tokens (never estimated from n_predict)
* TTFT, E2E: per ok request, nearest-rank percentiles
* ITL (inter-token latency): every gap between two streamed tokens of the ok requests,
  pooled, nearest-rank (vLLM's benchmark_serving `itls += outputs[i].itl`, GuideLLM's
  inter_token_latency); a request without its gaps adds none
* TPOT (time per output token): per ok request with 2 or more output tokens,
  (E2E − TTFT) / (output tokens − 1) (vLLM's calculate_metrics, GuideLLM's
  time_per_output_token), nearest-rank over those requests
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from .catalogue import METRICS

T = TypeVar("T", int, float)

# Positions in a request tuple, in records.REQUEST_FIELD_NAMES order:
# (ts, ok, http_status, error, error_type, prompt_tokens, n_predict, output_tokens,
#  tok_s, elapsed_s, ttft_s)
TS, OK, PROMPT_TOKENS, N_PREDICT, OUTPUT_TOKENS, TOK_S, ELAPSED_S, TTFT_S = 0, 1, 5, 6, 7, 8, 9, 10


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
    ttft_p50: float | None  # nearest-rank, over ok requests
    ttft_p95: float | None
    e2e_p95: float | None
    # E2E p50 and the streamed-token latencies, added last (importer.RUN_INSERT_COLUMNS follows this order)
    e2e_p50: float | None = None
    itl_p50: float | None = None  # over every gap of the ok requests
    itl_p95: float | None = None
    tpot_p50: float | None = None  # per ok request with >= 2 output tokens
    tpot_p95: float | None = None


# The catalogue's latency percentiles (TTFT, E2E, ITL, TPOT at p50 and p95), in its order: what a tool's
# summary states in ms (summaries) and the run page tags with its source.
LATENCY_COLUMNS = tuple(m.column for m in METRICS.values() if m.column.endswith(("_p50", "_p95")))


def tpot(elapsed_s: float | None, ttft_s: float | None, output_tokens: int | None) -> float | None:
    """Time per output token after the first: (E2E − TTFT) / (output tokens − 1), None below 2 tokens."""
    if elapsed_s is None or ttft_s is None or output_tokens is None or output_tokens < 2:
        return None
    return (elapsed_s - ttft_s) / (output_tokens - 1)


def summarize(
    requests: Iterable[Sequence[Any]],
    reported_wall_s: float | None,
    itl: Iterable[Sequence[float] | None] | None = None,
) -> RunSummary:
    """Summarize a run from its request tuples (records.REQUEST_FIELD_NAMES order).

    `itl`: each request's inter-token latencies (s), aligned with `requests` (None where a
    request has none); read once, alongside, and only the ok requests' gaps are kept (8 bytes each).
    """
    rows = list(requests)
    if len(rows) == 1:  # a file of one-request runs summarizes as many runs as it has requests
        per_request = None if itl is None else list(itl)
        if per_request is None or len(per_request) == 1:
            return _one_request(rows[0], reported_wall_s, None if per_request is None else per_request[0])
        itl = per_request  # not one per request: zip(strict=True) below says so
    tally = RunTally()
    tally.add(rows, itl)
    return tally.result(reported_wall_s)


class RunTally:
    """A run's figures gathered from its requests in pieces (add), read once all are in (result).

    What it keeps is 8 bytes a value for what a percentile or a mean needs (TTFTs, E2Es, TPOTs, tok/s,
    gaps) and a scalar for the rest: a run of a million requests is summarized a piece at a time
    without its rows in memory. summarize() is one add and the result: the same figures, bit for bit.
    """

    def __init__(self) -> None:
        self.n_requests = 0
        self.n_ok = 0
        self.started: datetime | None = None  # the first of the earliest (as min() keeps it)
        self.prompt_max: int | None = None
        self.predict_max: int | None = None
        self.elapsed_max: float | None = None
        self.output_total = 0
        self.outputs_complete = True  # every ok request reported its output tokens
        # lists while one piece is in (sorted as they are), arrays of doubles once a second comes
        self.rates: list[float] | array[float] = []
        self.ttfts: list[float] | array[float] = []
        self.e2es: list[float] | array[float] = []
        self.tpots: list[float] | array[float] = []  # of the ok requests with a TTFT (a run with no TTFT has no TPOT)
        self.gaps = array("d")

    def add(self, rows: Sequence[Sequence[Any]], itl: Iterable[Sequence[float] | None] | None = None) -> None:
        """Add request tuples (REQUEST_FIELD_NAMES order), with their inter-token latencies aligned."""
        if itl is not None:
            gaps = self.gaps
            for row, latencies in zip(rows, itl, strict=True):
                if latencies and row[OK]:
                    gaps.extend(latencies)
        started: list[datetime] = []
        prompts: list[int] = []
        predicts: list[int] = []
        elapsed: list[float] = []
        rates: list[float] = []
        outputs: list[int | None] = []
        ttfts: list[float] = []
        e2es: list[float] = []
        tpots: list[float] = []
        n_ok = 0
        for row in rows:
            if (ts := row[TS]) is not None:
                started.append(ts)
            if (prompt := row[PROMPT_TOKENS]) is not None:
                prompts.append(prompt)
            if (predict := row[N_PREDICT]) is not None:
                predicts.append(predict)
            if (e2e := row[ELAPSED_S]) is not None:
                elapsed.append(e2e)
            if row[OK]:
                n_ok += 1
                if (rate := row[TOK_S]) is not None:
                    rates.append(rate)
                output = row[OUTPUT_TOKENS]
                outputs.append(output)
                if (ttft := row[TTFT_S]) is not None:
                    ttfts.append(ttft)
                    if (per_token := tpot(e2e, ttft, output)) is not None:
                        tpots.append(per_token)
                if e2e is not None:
                    e2es.append(e2e)
        self.n_requests += len(rows)
        self.n_ok += n_ok
        if started:
            first = min(started)
            if self.started is None or first < self.started:
                self.started = first
        if prompts:
            most = max(prompts)
            self.prompt_max = most if self.prompt_max is None else max(self.prompt_max, most)
        if predicts:
            most = max(predicts)
            self.predict_max = most if self.predict_max is None else max(self.predict_max, most)
        if elapsed:
            longest = max(elapsed)
            self.elapsed_max = longest if self.elapsed_max is None else max(self.elapsed_max, longest)
        if None in outputs:
            self.outputs_complete = False
        elif self.outputs_complete:
            self.output_total += sum(outputs)  # type: ignore[arg-type]
        if self.n_requests == len(rows):  # the first piece (or the whole run): its lists kept as they are
            self.rates, self.ttfts, self.e2es, self.tpots = rates, ttfts, e2es, tpots
            return
        if type(self.rates) is list:  # a second piece: from now on 8 bytes a value
            self.rates, self.ttfts, self.e2es, self.tpots = (
                array("d", values) for values in (self.rates, self.ttfts, self.e2es, self.tpots)
            )
        self.rates.extend(rates)
        self.ttfts.extend(ttfts)
        self.e2es.extend(e2es)
        self.tpots.extend(tpots)

    def result(self, reported_wall_s: float | None) -> RunSummary:
        """The run's figures, from every request added."""
        if not self.n_requests:
            empty: dict[str, Any] = dict.fromkeys(RunSummary._fields)
            empty.update(n_requests=0, n_ok=0, effective_wall_s=reported_wall_s)
            empty["effective_wall_source"] = _wall_source(reported_wall_s, None)
            return RunSummary(**empty)
        ttfts = sorted(self.ttfts)
        e2es = sorted(self.e2es)
        tpots = sorted(self.tpots) if ttfts else []
        ordered_gaps = sorted(self.gaps)
        rates = self.rates
        wall = reported_wall_s if reported_wall_s is not None else self.elapsed_max
        output_tokens_total = self.output_total if self.n_ok and self.outputs_complete else None
        return RunSummary(  # positional: a third of the cost of keywords
            self.started,  # started_at
            self.n_requests,  # n_requests
            self.n_ok,  # n_ok
            self.prompt_max,  # prompt_tokens_max
            self.predict_max,  # n_predict_max
            output_tokens_total,
            mean(rates) if rates else None,  # tok_s_mean
            min(rates) if rates else None,  # tok_s_min
            max(rates) if rates else None,  # tok_s_max
            wall,  # effective_wall_s
            _wall_source(reported_wall_s, wall),
            output_tokens_total / wall if output_tokens_total is not None and wall else None,  # throughput_tok_s
            nearest_rank(ttfts, 50),  # ttft_p50
            nearest_rank(ttfts, 95),  # ttft_p95
            nearest_rank(e2es, 95),  # e2e_p95
            nearest_rank(e2es, 50),  # e2e_p50
            nearest_rank(ordered_gaps, 50),  # itl_p50
            nearest_rank(ordered_gaps, 95),  # itl_p95
            nearest_rank(tpots, 50),  # tpot_p50
            nearest_rank(tpots, 95),  # tpot_p95
        )


def _one_request(row: Sequence[Any], reported_wall_s: float | None, latencies: Sequence[float] | None) -> RunSummary:
    """summarize() of a run of one request: the same figures (the request's own values, or their
    computation by the same functions), without a pass over the run for each."""
    elapsed = row[ELAPSED_S]
    wall = reported_wall_s if reported_wall_s is not None else elapsed
    if row[OK]:
        n_ok, output, tok_s, ttft, e2e = 1, row[OUTPUT_TOKENS], row[TOK_S], row[TTFT_S], elapsed
    else:  # the figures below are an ok request's
        n_ok, output, tok_s, ttft, e2e = 0, None, None, None, None
    output_tokens_total = None if output is None else sum((output,))
    tpot_s = tpot(e2e, ttft, output)
    ordered_gaps = sorted(array("d", latencies)) if latencies and n_ok else []
    return RunSummary(
        row[TS],  # started_at
        1,  # n_requests
        n_ok,
        row[PROMPT_TOKENS],  # prompt_tokens_max
        row[N_PREDICT],  # n_predict_max
        output_tokens_total,
        None if tok_s is None else mean((tok_s,)),  # tok_s_mean
        tok_s,  # tok_s_min
        tok_s,  # tok_s_max
        wall,  # effective_wall_s
        _wall_source(reported_wall_s, wall),
        output_tokens_total / wall if output_tokens_total is not None and wall else None,  # throughput_tok_s
        ttft,  # ttft_p50
        ttft,  # ttft_p95
        e2e,  # e2e_p95
        e2e,  # e2e_p50
        nearest_rank(ordered_gaps, 50),  # itl_p50
        nearest_rank(ordered_gaps, 95),  # itl_p95
        tpot_s,  # tpot_p50
        tpot_s,  # tpot_p95
    )


def success_rate(n_ok: int, n_requests: int) -> float | None:
    """Ok requests / requests; None for a run without requests (models.outcomes says it in SQL)."""
    return n_ok / n_requests if n_requests else None


def mean(values: Sequence[float]) -> float:
    """The mean of a non-empty sequence, finite whenever its values are (their sum may not be)."""
    n = len(values)
    total = sum(values)
    return total / n if math.isfinite(total) else sum(v / n for v in values)


def nearest_rank(ordered: Sequence[T], p: int) -> T | None:
    """The p-th percentile (0 < p <= 100) of sorted values by the nearest-rank method.

    The value at rank ceil(p/100 × n), computed in integers so it is exact for any n:
    always a value that was measured, never an interpolation.
    """
    return at_rank(ordered, p) if ordered else None


def at_rank(ordered: Sequence[T], p: int) -> T:
    """nearest_rank of a non-empty sequence."""
    return ordered[rank_index(p, len(ordered))]


def rank_index(p: int, n: int) -> int:
    """The 0-based position of the nearest-rank p-th percentile among n > 0 sorted values."""
    return max(0, -(-p * n // 100) - 1)


def _wall_source(reported_wall_s: float | None, wall: float | None) -> str:
    if reported_wall_s is not None:
        return "reported"
    return "derived" if wall is not None else ""


PERCENTILES = (50, 90, 95, 99)
MIN_FOR_TAIL = 20  # p90/p95/p99 of fewer requests would be a single request's value


class Distribution(NamedTuple):
    n: int
    mean: float
    minimum: float
    maximum: float
    percentiles: dict[int, float]  # nearest-rank; the tail only with MIN_FOR_TAIL values or more


def distribution(values: Iterable[float | None]) -> Distribution | None:
    """Mean, min, max and nearest-rank percentiles of the values that are present."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    n = len(data)
    wanted = PERCENTILES if n >= MIN_FOR_TAIL else (50,)
    return Distribution(
        n=n,
        mean=mean(data),
        minimum=data[0],
        maximum=data[-1],
        percentiles={p: at_rank(data, p) for p in wanted},
    )
