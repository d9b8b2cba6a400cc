"""What every chart page shares: the success-rate annotation and the render of the page or its chart part."""

from __future__ import annotations

from typing import Any

from django.db.models import F, FloatField, QuerySet
from django.db.models.functions import Cast, NullIf
from django.http import HttpResponse
from django.shortcuts import render

from kvlab.http import HtmxHttpRequest

from ..models import Run


def with_success_rate(runs: QuerySet[Run]) -> QuerySet[Run]:
    return runs.annotate(success_rate=Cast(F("n_ok"), FloatField()) / NullIf(F("n_requests"), 0))


def render_chart(request: HtmxHttpRequest, template: str, context: dict[str, Any], status: int = 200) -> HttpResponse:
    """The whole page, or only its #chart partial for an htmx swap."""
    partial = f"{template}#chart" if request.htmx else template
    return render(request, partial, context, status=status)
