"""A run's figures when a benchmark tool reported its aggregates (a kvlab.bench/2 summary). Pure.

One rule for the importer and Run.refresh_summary:

* the run's counts (n_requests, n_ok) are the tool's own, never recomputed from the
  request rows, which may be a sample or missing; a tool that does not report them
  (llama-bench's CSV/SQL) leaves the run's counts to its request rows, and a run with
  neither has its counts "not reported" (outcomes.UNKNOWN), never ok or failed;
* when the run has every request row (not a sample, as many rows as the tool counted),
  its latency and throughput figures are computed from the rows as for any run;
  otherwise they are the tool's: TTFT, E2E, ITL and TPOT p50/p95 (ms → s), output tok/s, the
  output token total, the duration as the wall time, and the mean decode rate as
  1000 / mean TPOT (ms) — "derived", since a tool reports TPOT, not tok/s;
* a run where no request succeeded gets no latency or throughput figure (a tool that
  writes 0.0 for every statistic of a failed run must not make it the fastest run).

A run has one summary. A second one for the same run is the same summary when it agrees
on every field both hold (`merge_summaries`); what it adds (the counts a CSV lacked)
fills the first in.

Each figure taken from the summary is named in the returned provenance: "file" (the
tool's value, in kvlab's units) or "derived" (computed from the tool's values).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .metrics import LATENCY_COLUMNS, RunSummary

WALL_REPORTED = "reported"  # Run.WallSource.REPORTED: the wall time a file states
# Each of LATENCY_COLUMNS, in its order -> (the summary statistic it is read from, which of its figures:
# "median" is median_of's); written out, since which statistic fills which column is the rule itself
_SECONDS_FROM_MS = {
    "ttft_p50": ("ttft_ms", "median"),
    "ttft_p95": ("ttft_ms", "p95"),
    "e2e_p95": ("e2e_ms", "p95"),
    "e2e_p50": ("e2e_ms", "median"),
    "itl_p50": ("itl_ms", "median"),
    "itl_p95": ("itl_ms", "p95"),
    "tpot_p50": ("tpot_ms", "median"),
    "tpot_p95": ("tpot_ms", "p95"),
}


def median_of(stats: Mapping[str, Any]) -> float | None:
    """A tool's median of one statistic (its ttft_ms, e2e_ms, …): the p50, else the median; None with neither.

    The one rule for the run's p50 columns and the run page's table of the tool's figures. The p50 comes
    first because it is the tool's percentile, computed as the p95 beside it is, and the column it fills
    is a p50. Where a file holds both the order changes nothing: GuideLLM's DistributionSummary sets
    ``median`` to ``percentiles.p50`` (0.5; 0.2-0.4 read both off one CDF at 0.5), and the GuideLLM
    file in peer-results holds the same value under both in all 60 statistics that have them; vLLM's
    ``median_*`` (np.median: the lambdalabs file's median_ttft_ms is its 10 ttfts' interpolated median)
    and its ``p50_*``, written only when asked for (np.percentile, linear), are one number too. vLLM and
    SGLang files mostly hold the median alone; AIPerf and llmperf the p50 (their importers copy it to median).
    """
    for key in ("p50", "median"):
        value = stats.get(key)
        if value is not None:
            return float(value)
    return None


# The figures a tool's summary replaces when the rows are not all of its requests: the rate and token
# figures computed from the rows, then every latency percentile (the success rate and the wall time are
# set apart, by the tool's counts and duration).
_FROM_ROWS = ("tok_s_mean", "tok_s_min", "tok_s_max", "throughput_tok_s", "output_tokens_total", *LATENCY_COLUMNS)


def has_every_request(aggregates: RunSummary, summary: dict[str, Any]) -> bool:
    """The run's request rows are all of the tool's requests (its figures can come from them)."""
    counted = summary.get("n_requests")
    return (
        counted is not None
        and not summary.get("requests_sampled")
        and aggregates.n_requests > 0
        and aggregates.n_requests >= counted
    )


def counts_reported(summary: dict[str, Any] | None) -> bool:
    """The summary states how many requests ran (absent from llama-bench's CSV and SQL)."""
    return summary is None or summary.get("n_requests") is not None


def merge_summaries(
    stored: dict[str, Any] | None, new: dict[str, Any] | None, prefix: str = ""
) -> tuple[dict[str, Any] | None, str | None]:
    """Two summaries (or summary extras) of one run as one: every field either holds, when they
    agree on every field both hold; otherwise (None, the first field they disagree on)."""
    if stored is None or new is None:
        return (new if stored is None else stored), None
    merged = dict(stored)
    for name, value in new.items():
        if name not in stored or stored[name] is None:
            merged[name] = value
        elif isinstance(value, dict) and isinstance(stored[name], dict):
            inner, conflict = merge_summaries(stored[name], value, f"{prefix}{name}.")
            if conflict is not None:
                return None, conflict
            merged[name] = inner
        elif value is not None and value != stored[name]:
            return None, f"{prefix}{name}"
    return merged, None


def with_tool_summary(
    aggregates: RunSummary, summary: dict[str, Any] | None, *, started_at: datetime | None = None
) -> tuple[RunSummary, dict[str, str]]:
    """The run's aggregates with the tool's summary applied, and the provenance of what it set."""
    if started_at is not None:
        aggregates = aggregates._replace(started_at=started_at)
    if summary is None:
        return aggregates, {}
    values: dict[str, Any] = {}
    provenance: dict[str, str] = {}
    if counts_reported(summary):
        n_requests, n_ok = summary["n_requests"], summary["n_ok"]
        same = (n_requests, n_ok) == (aggregates.n_requests, aggregates.n_ok)
        if not (same and type(n_requests) is type(n_ok) is int):  # the rows' own counts: nothing to replace
            values.update(n_requests=n_requests, n_ok=n_ok)
        provenance.update(n_requests="file", n_ok="file")
    if not has_every_request(aggregates, summary):
        values.update(dict.fromkeys(_FROM_ROWS))
        if summary.get("n_ok") != 0:  # not reported: llama-bench prints a test only once it ran
            figures = _figures(summary)
            values.update(figures)
            provenance.update(dict.fromkeys(figures, "file"))
            if "tok_s_mean" in figures:
                provenance["tok_s_mean"] = "derived"
        duration = summary.get("duration_s")
        if duration is not None and aggregates.effective_wall_source != WALL_REPORTED:
            values.update(effective_wall_s=duration, effective_wall_source=WALL_REPORTED)
            provenance["effective_wall_s"] = "file"
    return (aggregates._replace(**values) if values else aggregates), provenance


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for column, (stat, key) in _SECONDS_FROM_MS.items():
        stats = summary.get(stat) or {}
        value = median_of(stats) if key == "median" else stats.get(key)
        if value is not None:
            figures[column] = value / 1000
    if summary.get("output_tok_s") is not None:
        figures["throughput_tok_s"] = summary["output_tok_s"]
    if summary.get("output_tokens") is not None:
        figures["output_tokens_total"] = summary["output_tokens"]
    tpot_mean = (summary.get("tpot_ms") or {}).get("mean")
    if tpot_mean:
        figures["tok_s_mean"] = 1000 / tpot_mean
    return figures
