"""The load curve page's reads: the latest runs of a model, averaged per configuration and load level."""

from __future__ import annotations

from typing import Any

from django.db.models import Avg, Count, Max, Min, QuerySet, Subquery

from ..models import Run
from ..models.outcomes import OUTCOME_Q
from ..records.outcomes import FAILED
from . import load_curve_figure
from .run_values import TOOL_FIGURES


def held_fixed(x_name: str) -> tuple[str, ...]:
    """The fields held fixed along a curve: the configuration's, and the other load axis (GuideLLM's rate
    points are not one concurrency curve)."""
    return (*load_curve_figure.CURVE_FIELDS, "request_rate" if x_name == "concurrency" else "concurrency")


def latest(runs: QuerySet[Run], n: int) -> tuple[QuerySet[Run], bool]:
    """The latest n of the runs (a walk down run_model_idx), and whether older ones were left out.

    Not every run a model ever had: the page's cost does not grow with the history. (The check past
    the cap keeps the order, which .exists() would drop, so that it walks the same index instead of
    scanning the runs.)
    """
    newest_first = runs.newest_first().values("pk")
    capped = len(newest_first[n : n + 1]) > 0
    return Run.objects.filter(pk__in=Subquery(newest_first[:n])), capped


def points(runs: QuerySet[Run], fixed: tuple[str, ...], x_name: str) -> list[dict[str, Any]]:
    """The runs averaged per configuration and level of x_name, in the curves' order."""
    not_failed = ~OUTCOME_Q[FAILED]  # a failed run has no speed: never averaged in as a zero
    return list(
        runs.values(*fixed, x_name)
        .annotate(
            throughput=Avg("throughput_tok_s", filter=not_failed),
            tok_s=Avg("tok_s_mean", filter=not_failed),
            ttft_p95=Avg("ttft_p95", filter=not_failed),
            runs=Count("id"),
            failed=Count("id", filter=OUTCOME_Q[FAILED]),
            tool_runs=Count("id", filter=TOOL_FIGURES),  # whose figures: the hover says
            label_min=Min("label"),
            label_max=Max("label"),
        )
        .order_by(*fixed, x_name)
    )


def shown(points: list[dict[str, Any]], fixed: tuple[str, ...], x_name: str) -> dict[str, Any]:
    """The curves drawn (those of two load levels or more, up to load_curve_figure.MAX_CURVES) and the rest."""
    curves = load_curve_figure.curves(points, fields=fixed, x=x_name)
    drawable = [c for c in curves if len(c.points) >= 2]
    drawn = drawable[: load_curve_figure.MAX_CURVES]
    return {
        "x_name": x_name,
        "x_word": "concurrency" if x_name == "concurrency" else "request rate",
        "figure": load_curve_figure.load_curve(drawn, x_name) if drawn else None,
        "curves": drawn,
        "n_drawable": len(drawable),
        "single_level": [c for c in curves if len(c.points) < 2],
        "points": points,
    }
