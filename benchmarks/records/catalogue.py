"""The metric catalogue: each figure a run is charted and compared by, the groupings of runs into lines,
and the rule that says when a value is worse than its history (baseline_comparison). Pure.

Every list of metric columns (the timeline's buckets, the regression baselines, the run summaries)
derives from METRICS, so a new figure is added here once.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from . import series_keys


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    column: str
    higher_is_better: bool
    formula: str


METRICS = {
    m.key: m
    for m in (
        Metric("tok_s", "decode tok/s per request", "tok_s_mean", True, "mean of ok requests' tok/s"),
        Metric("throughput", "aggregate throughput (tok/s)", "throughput_tok_s", True, "Σ output tokens / wall time"),
        Metric("success", "success rate", "success_rate", True, "ok requests / requests"),
        Metric("ttft_p50", "TTFT p50 (s)", "ttft_p50", False, "median time to first token of ok requests"),
        Metric("ttft_p95", "TTFT p95 (s)", "ttft_p95", False, "95th percentile time to first token"),
        Metric("e2e_p95", "E2E latency p95 (s)", "e2e_p95", False, "95th percentile request latency"),
        Metric("e2e_p50", "E2E latency p50 (s)", "e2e_p50", False, "median request latency of ok requests"),
        Metric("itl_p50", "ITL p50 (s)", "itl_p50", False, "median gap between two streamed tokens"),
        Metric("itl_p95", "ITL p95 (s)", "itl_p95", False, "95th percentile gap between two streamed tokens"),
        Metric("tpot_p50", "TPOT p50 (s)", "tpot_p50", False, "median of (E2E − TTFT) / (output tokens − 1)"),
        Metric("tpot_p95", "TPOT p95 (s)", "tpot_p95", False, "95th percentile of (E2E − TTFT) / (output tokens − 1)"),
        Metric("wall", "wall time (s)", "effective_wall_s", False, "reported, else the longest request"),
    )
}
GROUPINGS = {
    "label": ("config label", ("label",)),
    "model": ("model", ("model",)),
    "gpu": ("GPU", ("gpu",)),
    "server": ("server", ("job__server__name",)),
    "config": ("configuration", series_keys.FLAG_FIELDS),
    "series": ("configuration + workload", (*series_keys.FLAG_FIELDS, *series_keys.WORKLOAD_FIELDS)),
}
# Two figures of one configuration this many times apart are noise, not a change: the slowest vs the
# fastest repeat of a job, or two compared runs.
NOISY_FACTOR = 2.0
# The figures whose spread across repeats (or two compared runs) says noise: (column, words, unit, larger is better)
NOISE_FIGURES: tuple[tuple[str, str, str, bool], ...] = (
    ("throughput_tok_s", "aggregate throughput", "tok/s", True),
    ("tok_s_mean", "tok/s per request, mean", "tok/s", True),
    ("ttft_p50", "TTFT p50", "s", False),
    ("e2e_p95", "E2E p95", "s", False),
)
COMPARE_METRICS = ("success", "tok_s", "throughput", "ttft_p95", "e2e_p95", "itl_p95")


class Comparison(NamedTuple):
    baseline: float  # the median of the earlier values
    change: float  # relative, signed so that negative is worse
    spread: float | None  # their standard deviation, with three or more
    history: int  # how many earlier values


def baseline_comparison(now: float | None, past: Sequence[float], metric: Metric) -> Comparison | None:
    """The latest value against the median of the earlier ones, when the latest is worse.

    Worse means a change in the metric's bad direction and, with three or more earlier values,
    beyond two standard deviations of them (their spread); None otherwise, or with nothing to
    compare. The one rule of the regressions page: its thresholds then only ask "by how much".
    """
    if now is None or not past:
        return None
    base = statistics.median(past)
    if base == 0:
        return None
    change = (now - base) / abs(base)
    worse = -change if metric.higher_is_better else change
    if not worse > 0:
        return None
    spread = statistics.stdev(past) if len(past) >= 3 else None
    if spread is not None and not abs(now - base) > 2 * spread:
        return None
    return Comparison(base, -worse, spread, len(past))
