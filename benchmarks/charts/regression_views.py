"""The regressions page: series whose latest run is worse than the runs before it."""

from __future__ import annotations

from typing import Any

from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from kvlab.http import HtmxHttpRequest

from ..models import Run
from . import figures, series
from .forms import RegressionForm
from .views import _render, with_success_rate

MAX_REGRESSIONS_SHOWN = 100  # the worst ones; the page says how many more there are


@require_GET
def regressions(request: HtmxHttpRequest) -> HttpResponse:
    form = RegressionForm(request.GET)
    context: dict[str, Any] = {"form": form, "page_title": "Regressions"}
    if not form.is_valid():
        return _render(request, "charts/regressions.html", context, status=400)
    grouping = form.cleaned_data.get("group") or "label"
    fields = figures.GROUPINGS[grouping][1]
    window = form.cleaned_data.get("window") or 10
    columns = [m.column for m in figures.METRICS.values()]
    # Only the latest window + 1 runs of each group matter: rank them in SQL.
    # Within each group, a run is compared only with runs of its configuration and workload.
    partition = list(dict.fromkeys((*fields, *series.SERIES_FIELDS)))
    ranked = with_success_rate(Run.objects.exclude(started_at=None)).annotate(
        rank=Window(
            RowNumber(), partition_by=[F(f) for f in partition], order_by=[F("started_at").desc(), F("id").desc()]
        )
    )
    rows = list(ranked.filter(rank__lte=window + 1).values("pk", "key", "started_at", *partition, *columns))
    rows.sort(key=lambda r: (r["started_at"], r["pk"]))
    for row in rows:
        row["group"] = figures.group_name(row, grouping)
    found = figures.regressions(rows, list(figures.METRICS.values()), form.thresholds(), window=window)
    context.update(
        found=found[:MAX_REGRESSIONS_SHOWN],  # the largest changes first: the page stays small
        n_found=len(found),
        max_shown=MAX_REGRESSIONS_SHOWN,
        grouping=grouping,
        grouping_label=figures.GROUPINGS[grouping][0],
        n_groups=len({r["group"] for r in rows}),
        n_series=len({(r["group"], *series.key(r)) for r in rows}),
    )
    return _render(request, "charts/regressions.html", context)
