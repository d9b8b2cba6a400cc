"""Goodput: the share of a run's requests (and the output tokens/s) that met a TTFT and a TPOT objective.

As vLLM's benchmark defines it (`--goodput ttft:<ms> tpot:<ms>`, calculate_metrics): a request is
good when it succeeded and meets every objective set; TPOT is (E2E − TTFT) / (output tokens − 1),
and a request of fewer than 2 output tokens meets any TPOT objective (vLLM counts its TPOT as 0).
The share is of all the run's stored requests (a failed request is never good); token goodput is
Σ output tokens of the good requests / the run's wall time.

One aggregate query per run whatever its request count: the TPOT test is written without a
division, elapsed ≤ ttft + objective × (output − 1), so the database evaluates it row by row.
A run whose requests are not stored (a tool's summary alone) gets no figure: it needs the requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django import forms
from django.db.models import Count, F, Q, QuerySet, Sum

from ..models import RequestResult, Run

MAX_OBJECTIVE_MS = 3_600_000.0  # an hour: beyond it an objective means nothing


class GoodputForm(forms.Form):
    """The objectives, from a query string (`?slo_ttft_ms=&slo_tpot_ms=`) or a job's params."""

    slo_ttft_ms = forms.FloatField(
        label="TTFT objective (ms)", required=False, max_value=MAX_OBJECTIVE_MS, help_text="time to first token"
    )
    slo_tpot_ms = forms.FloatField(
        label="TPOT objective (ms)",
        required=False,
        max_value=MAX_OBJECTIVE_MS,
        help_text="time per output token after the first",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        for name in ("slo_ttft_ms", "slo_tpot_ms"):
            value = data.get(name)
            # Django's FloatField already refuses NaN and infinities; zero and below mean nothing here
            if value is not None and not (math.isfinite(value) and value > 0):
                self.add_error(name, "Give a positive number of milliseconds.")
        return data

    @property
    def objectives(self) -> tuple[float | None, float | None]:
        """(TTFT, TPOT) objectives in seconds; (None, None) when none was given or the form is invalid."""
        if not self.is_valid():
            return None, None
        ttft, tpot = self.cleaned_data.get("slo_ttft_ms"), self.cleaned_data.get("slo_tpot_ms")
        return (None if ttft is None else ttft / 1000), (None if tpot is None else tpot / 1000)


def objectives_form(query: Any, job_params: dict[str, Any] | None) -> GoodputForm:
    """The form bound to the effective objectives: the query string's when it names one, else the job's."""
    names = ("slo_ttft_ms", "slo_tpot_ms")
    if any(query.get(name) not in (None, "") for name in names):
        return GoodputForm({name: query.get(name, "") for name in names})
    params = job_params or {}
    given = {name: params[name] for name in names if isinstance(params.get(name), int | float)}
    return GoodputForm({name: str(given.get(name, "")) for name in names})


@dataclass(frozen=True, slots=True)
class Goodput:
    n_requests: int  # stored requests counted
    n_good: int
    share: float | None  # n_good / n_requests
    tokens_good: int | None
    tok_s: float | None  # Σ output tokens of the good requests / wall time
    needs_requests: bool = False  # a tool's summary alone: no figure
    sampled: bool = False  # the stored requests are a sample of the tool's

    @property
    def percent(self) -> str:
        return "—" if self.share is None else f"{self.share:.1%}"


def good_requests(ttft_s: float | None, tpot_s: float | None) -> Q:
    """The rows that succeeded and met every objective given."""
    good = Q(ok=True)
    if ttft_s is not None:
        good &= Q(ttft_s__lte=ttft_s)
    if tpot_s is not None:
        good &= Q(output_tokens__lt=2) | Q(elapsed_s__lte=F("ttft_s") + tpot_s * (F("output_tokens") - 1))
    return good


def goodput(run: Run, ttft_s: float | None, tpot_s: float | None) -> Goodput | None:
    """The run's goodput for the objectives (seconds); None when no objective is set. One query."""
    if ttft_s is None and tpot_s is None:
        return None
    totals = RequestResult.objects.filter(run_id=run.pk).aggregate(
        n=Count("id"),
        good=Count("id", filter=good_requests(ttft_s, tpot_s)),
        tokens=Sum("output_tokens", filter=good_requests(ttft_s, tpot_s)),
    )
    n, good = totals["n"], totals["good"]
    if n == 0:
        return Goodput(0, 0, None, None, None, needs_requests=run.summary is not None)
    tokens = totals["tokens"] or 0 if good else 0
    wall = run.effective_wall_s
    sampled = run.requests_sampled or (run.summary is not None and n < run.n_requests)
    return Goodput(
        n_requests=n,
        n_good=good,
        share=good / n,
        tokens_good=tokens,
        tok_s=tokens / wall if wall and not sampled else None,
        sampled=sampled,
    )


def with_job_objectives(runs: QuerySet[Run]) -> QuerySet[Run]:
    """The runs with their job's objectives (job_slo_ttft_ms, job_slo_tpot_ms) joined in: no query of
    its own, and only the two keys of the job's params (they may hold its prompts: megabytes)."""
    return runs.annotate(job_slo_ttft_ms=F("job__params__slo_ttft_ms"), job_slo_tpot_ms=F("job__params__slo_tpot_ms"))


def for_runs(runs: list[Run], query: Any) -> tuple[GoodputForm, list[tuple[Run, Goodput]]]:
    """The objectives' form (the query string's, else those of the first run whose job set them, from
    with_job_objectives) and each run's goodput: one query per run when an objective is set."""
    params = None
    for run in runs:
        given = {
            "slo_ttft_ms": getattr(run, "job_slo_ttft_ms", None),
            "slo_tpot_ms": getattr(run, "job_slo_tpot_ms", None),
        }
        if any(value is not None for value in given.values()):
            params = given
            break
    form = objectives_form(query, params)
    ttft_s, tpot_s = form.objectives
    results = [(run, g) for run in runs if (g := goodput(run, ttft_s, tpot_s)) is not None]
    return form, results
