"""The regressions page: series whose latest run is worse than the runs before it.

It reads what history.baselines keeps as runs arrive, never the history itself: the worst
comparisons beyond the thresholds (an index range per metric), how many there are (counted up to
MAX_COUNTED), and, when none is worse, the series it looked at (walked one by one, up to MAX_COUNTED).
Runs stored behind kvlab's back (a bulk fill) it queues for the worker and says it is catching up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Subquery
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from kvlab import visibility
from kvlab.http import HtmxHttpRequest

from ..history import baselines, derived
from ..models import DerivedBacklog, Run
from ..records import catalogue, series_keys
from ..records.catalogue import Comparison, Metric
from . import figure_common, regression_figure
from .forms import RegressionForm
from .rendering import render_chart

MAX_REGRESSIONS_SHOWN = 100  # the worst ones; the page says how many more there are
MAX_COUNTED = 1_000  # regressions and series are counted up to this many; more read "1,000+"
# Runs stored by neither an import nor a job (a bulk fill) are queued for the worker to file when the page
# is viewed, this many at a time (a GET writes no derived row); `manage.py rebuild_derived` files them all.
MAX_QUEUED_ON_VIEW = 10_000
FAMILY_OF = {"label": "label", "server": "server"}  # every other grouping's groups are made of whole series


@dataclass(frozen=True)
class Regression:
    group: str
    configuration: str  # model, GPU and flags: the same for the latest run and its baseline
    workload: str  # concurrency, prompt tokens, n_predict: the same too
    metric: Metric
    latest: float
    baseline: float
    change: float  # relative, signed so that negative is worse
    spread: float | None
    latest_run_id: int
    latest_key: str
    history: int


def regression(latest: Mapping[str, Any], metric: Metric, compared: Comparison) -> Regression:
    """A row of the regressions page: the latest run (its group, fields, pk and key) and its comparison."""
    return Regression(
        group=latest["group"],
        configuration=f"{latest.get('model') or '?'} on {latest.get('gpu') or '?'}: " + series_keys.flags_label(latest),
        workload=series_keys.workload_label(latest),
        metric=metric,
        latest=latest[metric.column],
        baseline=compared.baseline,
        change=compared.change,
        spread=compared.spread,
        latest_run_id=latest["pk"],
        latest_key=latest["key"],
        history=compared.history,
    )


def _queued_by_a_view() -> bool:
    """The oldest pending change is a bulk fill's runs (its first stored by neither an import nor a job). One seek."""
    oldest = DerivedBacklog.objects.order_by("pk").values("first_run_id")[:1]
    return Run.objects.filter(pk=Subquery(oldest), first_import=None, job=None).exists()


@require_GET
def regressions(request: HtmxHttpRequest) -> HttpResponse:
    form = RegressionForm(request.GET)
    context: dict[str, Any] = {"form": form, "page_title": "Regressions", "windows": baselines.WINDOWS}
    if not form.is_valid():
        return render_chart(request, "charts/regressions.html", context, status=400)
    grouping = form.cleaned_data.get("group") or "label"
    window = form.cleaned_data.get("window") or 10
    family = FAMILY_OF.get(grouping, "series")
    rows, n_found, n_unfiled = baselines.worst(
        family,
        window,
        form.thresholds(),
        limit=MAX_REGRESSIONS_SHOWN,
        count_up_to=MAX_COUNTED,
        unfiled_up_to=MAX_QUEUED_ON_VIEW,
    )
    found = [
        regression(row, catalogue.METRICS[row["metric"]], row["compared"])
        for row in _grouped(rows, grouping, request.user)
    ]
    context.update(
        _backlog(n_unfiled),
        found=found,
        n_found=min(n_found, MAX_COUNTED),
        found_capped=n_found > MAX_COUNTED,
        max_shown=MAX_REGRESSIONS_SHOWN,
        grouping=grouping,
        grouping_label=catalogue.GROUPINGS[grouping][0],
    )
    if found:
        context["figure"] = regression_figure.baseline_bands(found, form.thresholds())
        context["figure_rows"] = min(len(found), regression_figure.FIGURE_ROWS)
    else:
        context.update(_series_looked_at(family, grouping, request.user))
    return render_chart(request, "charts/regressions.html", context)


def _backlog(n_unfiled: int) -> dict[str, Any]:
    """What the worker has still to compare, for the page to say: a large import's runs (counted by the
    worker just after it), or a bulk fill's, which this view queues for the worker to file."""
    n_pending, pending_since = derived.pending()
    queued = 0
    if n_unfiled and not n_pending:
        queued = _queue_unfiled()
        n_pending, pending_since = derived.pending()
    return {
        "queued": queued,
        # what the worker is counting: a bulk fill's runs this page queued, or an import's
        "catching_up": bool(queued) or (n_pending > 0 and _queued_by_a_view()),
        "unfiled_capped": n_unfiled > MAX_QUEUED_ON_VIEW,
        "max_queued": MAX_QUEUED_ON_VIEW,
        "derived_pending": n_pending,
        "derived_pending_since": pending_since,
        "derived_what": "the comparisons",
    }


def _queue_unfiled() -> int:
    """Queue a bulk fill's runs for the worker to file (Celery, once this commits; the beat should the
    message be lost), unless something is pending already; how many were queued.

    SQLite's IMMEDIATE transaction makes the check and the queueing one step, so two views do not queue
    the same runs twice (on PostgreSQL they may: counted twice, harmless).
    """
    with transaction.atomic():
        if derived.pending()[0]:
            return 0
        ids = baselines.unfiled_runs(MAX_QUEUED_ON_VIEW)
        derived.defer(ids)
        return len(ids)


def _grouped(rows: list[dict[str, Any]], grouping: str, user: Any) -> list[dict[str, Any]]:
    """The rows, each named by its group ("group"); a server's name a tag for a stranger."""
    if grouping == "server":  # only this grouping asks who is looking
        visibility.server_lines(rows, user)
    for row in rows:
        row["group"] = figure_common.group_name(row, grouping)
    return rows


def _series_looked_at(family: str, grouping: str, user: Any) -> dict[str, Any]:
    """How many series and groups were looked at, when none regressed (walked one by one, up to MAX_COUNTED)."""
    sample = _grouped(baselines.series_sample(family, MAX_COUNTED), grouping, user)
    return {
        "n_series": min(len(sample), MAX_COUNTED),
        "series_capped": len(sample) > MAX_COUNTED,
        "n_groups": len({r["group"] for r in sample}),
    }
