"""A tool's summary of a run as the run page shows it: its figures and latencies, formatted."""

from __future__ import annotations

from typing import Any

from kvlab.number_formats import ms, seconds, thousands, tok_s

from ..records.summaries import median_of

# (name, summary key, how to show it).
SUMMARY_FIGURES = (
    ("requests", "n_requests", thousands),
    ("ok", "n_ok", thousands),
    ("failed", "n_failed", thousands),
    ("incomplete", "n_incomplete", thousands),
    ("duration", "duration_s", seconds),
    ("request rate (measured)", "request_rate", lambda v: f"{thousands(v)} req/s" if v is not None else "—"),
    ("output throughput", "output_tok_s", tok_s),
    ("total throughput (input + output)", "total_tok_s", tok_s),
    ("input tokens", "input_tokens", thousands),
    ("output tokens", "output_tokens", thousands),
)
SUMMARY_LATENCIES = (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("TPOT", "tpot_ms"), ("E2E latency", "e2e_ms"))
SUMMARY_STAT_COLUMNS = ("mean", "median", "p90", "p95", "p99")


def tool_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The figures of a tool's summary, formatted (a figure the tool did not report is "—")."""
    latencies = []
    for name, key in SUMMARY_LATENCIES:
        stats = summary.get(key) or {}
        if stats:
            values = [stats.get("mean"), median_of(stats), *(stats.get(p) for p in ("p90", "p95", "p99"))]
            latencies.append((name, [ms(v) for v in values]))
    return {
        "figures": [(name, show(summary.get(key))) for name, key, show in SUMMARY_FIGURES if key in summary],
        "latencies": latencies,
        "stat_columns": SUMMARY_STAT_COLUMNS,
    }
