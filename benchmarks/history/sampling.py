"""An even sample of runs' ok requests: the one rule of the pages that show a run's distribution.

The run page's distributions (history.views) and the compare chart's boxes (charts.views) read at
most `up_to` ok requests of a run: all of them when its requests span at most `up_to` seq numbers,
else every step-th by seq — seq 0, step, 2·step, … below the span, step = ⌈span / up_to⌉. Each
sampled request is one seek down (run, seq) (request_unique_seq), never a walk over the run's
requests: a run of a million requests costs what one of ten thousand costs.

The span is what the caller knows of the run's seq numbers: its number of requests (an import
numbers them 0..n-1, a job in the order it sent them), or its largest seq + 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Expression, Q

from ..models import RequestResult


@dataclass(frozen=True)
class Sample:
    """How one run was sampled: every `step`-th of the `span` seq numbers."""

    step: int
    span: int

    @property
    def whole(self) -> bool:
        return self.step == 1


def step_for(span: int, up_to: int) -> int:
    """Every how many requests a run of `span` seq numbers is read, for at most `up_to` of them."""
    return max(1, -(-span // max(1, up_to)))


def _sampled_seqs(run_id: int, span: int, step: int, up_to: int) -> Q:
    if step == 1:  # the whole run; seq < up_to still bounds it when the span under-counts (a job still recording)
        return Q(run_id=run_id, seq__lt=up_to)
    return Q(run_id=run_id, seq__in=range(0, min(span, step * up_to), step))


def ok_sample(
    spans: Mapping[int, int], values: Mapping[str, Expression], up_to: int
) -> tuple[list[tuple[Any, ...]], dict[int, Sample]]:
    """The sampled ok requests of these runs (run id -> span) in one query, as (run_id, *values) rows
    (at most up_to a run), and how each run was sampled."""
    if not spans:
        return [], {}
    samples = {run_id: Sample(step_for(span, up_to), span) for run_id, span in spans.items()}
    where = Q()
    for run_id, sample in samples.items():
        where |= _sampled_seqs(run_id, sample.span, sample.step, up_to)
    ok = RequestResult.objects.filter(where, ok=True).order_by()
    rows = list(ok.annotate(**values).values_list("run_id", *values)[: up_to * len(spans)])
    return rows, samples
