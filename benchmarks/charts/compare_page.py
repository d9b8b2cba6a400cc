"""The compare chart's reads: the compared runs' values, and each box an even sample of its run's ok requests."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db.models import F, OuterRef, Q, Subquery

from ..history import sampling
from ..history.forms import CompareForm
from ..models import RequestResult, Run
from ..models.outcomes import with_success_rate
from ..records import catalogue
from ..records import series_keys as series
from . import compare_figure
from .run_values import TOOL_FIELDS, VALUE_FIELDS


def runs_by_id(ids: list[int]) -> dict[int, dict[str, Any]]:
    """The values of the runs of ids that exist, by id: fields, the compared metrics, and their requests' span."""
    values = {f"value_{k}": F(catalogue.METRICS[k].column) for k in catalogue.COMPARE_METRICS}
    last_seq = RequestResult.objects.filter(run_id=OuterRef("pk")).order_by("-seq").values("seq")[:1]
    return {
        r["pk"]: r
        for r in with_success_rate(Run.objects.filter(pk__in=ids)).values(
            *VALUE_FIELDS,
            *TOOL_FIELDS,
            "provenance",
            **values,
            has_summary=Q(summary__isnull=False),
            last_seq=Subquery(last_seq),  # its requests' span (one seek), and whether it stores any
        )
    }


def shown(runs: list[dict[str, Any]], box_points: int) -> dict[str, Any]:
    """The chart of the runs (box_points shared between them) and how the runs differ."""
    # Each box an even sample of its run's ok requests (the run page's sampling), the chart's points
    # shared between its runs: a compare of two million-request runs reads and draws what one of 12 small ones does.
    spans = {r["pk"]: r["last_seq"] + 1 for r in runs if r["last_seq"] is not None}
    rows, samples = sampling.ok_sample(spans, {"value": F("tok_s")}, box_points // len(runs))
    drawn = Counter(run_id for run_id, tok_s in rows if tok_s is not None)
    sampled = [
        {"run": r, "points": drawn[r["pk"]], "step": samples[r["pk"]].step}
        for r in runs
        if r["pk"] in samples and not samples[r["pk"]].whole
    ]
    return dict(
        figure=compare_figure.compare(
            runs,
            [(run_id, True, tok_s) for run_id, tok_s in rows],
            stored=set(spans),
            sampled={s["run"]["pk"] for s in sampled},
        ),
        sampled=sampled,
        outliers_only=sum(drawn.values()) > compare_figure.DRAWN_STRIP_POINTS,
        strip_points=compare_figure.DRAWN_STRIP_POINTS,
        runs=runs,
        # at most MAX_RUNS values a field: name them all
        workloads_differ=series.describe(series.differences(runs, series.WORKLOAD_FIELDS), CompareForm.MAX_RUNS),
        configurations_differ=series.describe(series.differences(runs, series.CONFIG_FIELDS), CompareForm.MAX_RUNS),
        tools_differ=len({series.measured_by(r) for r in runs}) > 1,
        tools=list(dict.fromkeys(series.measured_by(r) or "?" for r in runs)),
    )
