"""What the run page and the comparison of runs read beside the runs themselves: the requests'
distributions, the failures by type, how many requests a run stores, and where each figure came from."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Expression, F, QuerySet

from ..models import RequestResult, Run
from ..records import sources
from ..records.metrics import LATENCY_COLUMNS, Distribution, distribution
from . import sampling
from .sql_functions import JsonNumber

# The figures the run page tags with their source: the counts, rates and token total a tool's summary can
# state, then the latency percentiles.
FIGURE_COLUMNS = ("n_ok", "tok_s_mean", "effective_wall_s", "throughput_tok_s", "output_tokens_total", *LATENCY_COLUMNS)


def distributions(run: Run, sample_size: int) -> list[tuple[str, str, Distribution, str]]:
    """(name, formula, distribution, unit) of each metric of the run's ok requests that has one: read from
    all of them, or from an even sample of at most sample_size (the formula then says so)."""
    metrics = [
        ("TTFT", "request sent → first streamed token", F("ttft_s"), "s"),
        ("E2E latency", "request sent → last chunk", F("elapsed_s"), "s"),
        ("decode tok/s (server)", "timings.predicted_per_second", F("tok_s"), "tok/s"),
        ("decode tok/s (client)", "(output tokens − 1) / (E2E − TTFT)", JsonNumber("extra", "client_tok_s"), "tok/s"),
    ]
    rows, step = _distribution_sample(run, [m[2] for m in metrics], sample_size)
    sampled = f" · a sample: every {step}th request, {len(rows):,} of {run.n_requests:,}" if step > 1 else ""
    found = [
        (name, formula + sampled, distribution(row[i] for row in rows), unit)
        for i, (name, formula, _, unit) in enumerate(metrics)
    ]
    return [(name, formula, shown, unit) for name, formula, shown, unit in found if shown is not None]


def _distribution_sample(run: Run, values: list[Expression], sample_size: int) -> tuple[list[tuple[Any, ...]], int]:
    """The values of the run's ok requests, for metrics.distribution: all of them, or an even sample
    (sampling.ok_sample: at most sample_size rows, one seek each, JSON keys read in SQL), so the
    page costs the same for a million requests as for ten thousand."""
    named = {f"v{i}": value for i, value in enumerate(values)}
    rows, samples = sampling.ok_sample({run.pk: run.n_requests}, named, sample_size)
    return [row[1:] for row in rows], samples[run.pk].step


def failures_by_type(run: Run) -> QuerySet[RequestResult, dict[str, Any]]:
    """The run's failed requests counted by error type, the most common first (read when shown)."""
    # COUNT(*): request_failed_idx answers it alone (an index-only scan on PostgreSQL)
    return run.requests.filter(ok=False).values("error_type").annotate(n=Count("*")).order_by("-n", "error_type")


def failures_by_run(ids: list[int]) -> dict[int, dict[str, int]]:
    """Each run's failed requests counted by error type ("other" when it has none), in one query."""
    failures: dict[int, dict[str, int]] = {i: {} for i in ids}
    for row in (
        RequestResult.objects.filter(run_id__in=ids, ok=False)
        .values("run_id", "error_type")
        .annotate(n=Count("id"))
        .order_by()
    ):
        failures[row["run_id"]][row["error_type"] or "other"] = row["n"]
    return failures


def stored_of_summarised(runs: list[Run]) -> dict[int, int]:
    """How many requests each run with a tool's summary stores (none, or a sample): one query, only when
    there is such a run."""
    with_summary = [run.pk for run in runs if run.summary is not None]
    if not with_summary:
        return {}
    counted = RequestResult.objects.filter(run_id__in=with_summary).values("run_id").annotate(n=Count("id"))
    return {row["run_id"]: row["n"] for row in counted.order_by()}


def field_sources(run: Run) -> dict[str, str]:
    """Run field -> "from the file" / "declared" / "derived", shown beside the field."""
    return {name: sources.FIELD_WORDS.get(kind, kind) for name, kind in (run.provenance or {}).items()}


def figure_sources(run: Run, *, has_summary: bool) -> dict[str, dict[str, str]]:
    """Figure column -> its "tool" / "derived" / "kvlab" tag, shown beside the figure."""
    provenance = run.provenance or {}
    return {
        column: _source_tag(sources.figure_source(provenance, column, has_summary=has_summary))
        for column in FIGURE_COLUMNS
    }


def _source_tag(source: str) -> dict[str, str]:
    return {"tag": sources.SOURCE_TAGS[source], "title": sources.SOURCE_WORDS[source], "kind": source}
