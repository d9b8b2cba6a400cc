"""Chart pages: timeline, compare, load curve, regressions, and the dashboard home.

Every chart's state lives in its URL (a GET form); the data comes from a fixed number
of queries and reaches Plotly through json_script; `?format=csv|json` downloads it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Count, F
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from kvlab import visibility
from kvlab.http import HtmxHttpRequest

from ..history import derived, values
from ..history.forms import CompareForm
from ..models import Run
from ..models.outcomes import WITH_FAILURES_Q, with_success_rate
from ..records import catalogue
from ..records import series_keys as series
from . import (
    compare_page,
    downloads,
    figure_common,
    home_figure,
    home_story,
    load_curves,
    timeline_data,
    timeline_figure,
    timeline_page,
)
from .days import UtcDay
from .downloads import DOWNLOAD_FORMATS
from .forms import ChartForm, LoadCurveForm
from .rendering import render_chart as _render
from .run_values import TOOL_FIELDS, VALUE_FIELDS

MAX_TIMELINE_POINTS = timeline_data.RAW_MAX  # the benchmarks check the cap they expect


@require_GET
def timeline(request: HtmxHttpRequest) -> HttpResponse:
    """The runs of the filter over time: run by run where the visible range holds at most
    timeline_data.RAW_MAX of them, else each line's min and max per bucket; zooming (x0..x1) reads
    the detail of the range."""
    form = ChartForm(request.GET)
    context: dict[str, Any] = {"form": form, "page_title": "Timeline"}
    if not form.is_valid():
        return _render(request, "charts/timeline.html", context, status=400)
    metric, grouping = form.metric_obj(), form.grouping()
    runs = with_success_rate(form.filter(Run.objects.all())).exclude(started_at=None)
    raw_values = timeline_page.raw_values(metric, grouping)
    besides_outcome = form.besides_outcome(Run.objects.exclude(started_at=None))
    data = timeline_data.read(runs, form.cleaned_data, metric, grouping, raw_values, besides_outcome)
    if grouping == "server":
        visibility.server_lines(data.rows, request.user)  # a stranger's lines are tags, not the servers' names
    data.rows.sort(key=lambda r: (figure_common.group_name(r, grouping), r["started_at"], r["pk"]))
    if request.GET.get("format") in DOWNLOAD_FORMATS:  # the flat rows only for a download
        download = downloads.download(request, timeline_page.download_rows(data, metric, grouping), "timeline")
        if download:
            return download
    context.update(
        timeline_page.shown(data, metric, grouping, form.cleaned_data.get("x0"), form.cleaned_data.get("x1"))
    )
    if data.buckets:  # the overview is read from buckets a large import's runs may not be counted in yet
        context["derived_pending"], context["derived_pending_since"] = derived.pending()
        context["derived_what"] = "this overview"
    return _render(request, "charts/timeline.html", context)


# The compare chart's box points, its runs together (history.views.DISTRIBUTION_SAMPLE, the run page's
# sample): each run an even sample of its ok requests past its share; the page says so.
COMPARE_BOX_POINTS = 10_000


@require_GET
def compare_chart(request: HtmxHttpRequest) -> HttpResponse:
    form = CompareForm(request.GET)
    context: dict[str, Any] = {"form": form, "page_title": "Compare"}
    if not form.is_valid():
        return _render(request, "charts/compare.html", context, status=400)
    ids = form.cleaned_data["run"]
    found = compare_page.runs_by_id(ids)
    missing = [i for i in ids if i not in found]
    if missing:
        context["missing"] = missing
        return _render(request, "charts/compare.html", context, status=404)
    runs = [found[i] for i in ids]
    download = downloads.download(request, [{k: v for k, v in r.items() if k != "last_seq"} for r in runs], "compare")
    if download:
        return download
    context.update(compare_page.shown(runs, COMPARE_BOX_POINTS))
    return _render(request, "charts/compare.html", context)


LOAD_CURVE_RUNS = 5_000  # the latest runs a load curve averages; older ones by narrowing (GPU, label)
LOAD_CURVE_OFFERED = 12  # the most used models a load curve page without one offers as links


@require_GET
def load_curve(request: HtmxHttpRequest) -> HttpResponse:
    form = LoadCurveForm(request.GET)
    if "model" not in request.GET and (only := values.only_value("model")):  # the history's one model: drawn
        form = LoadCurveForm({**request.GET.dict(), "model": only})
    context: dict[str, Any] = {"form": form, "page_title": "Load curve"}
    if not form.is_valid():
        return _render(request, "charts/load_curve.html", context, status=400)
    if not form.curve_model:
        if not form.model_matched:  # nothing typed: the most used models to pick from
            context["offered"] = values.top_values(("model",), LOAD_CURVE_OFFERED)["model"]
        return _render(request, "charts/load_curve.html", context)
    x_name = form.x_name()
    fixed = load_curves.held_fixed(x_name)
    # the latest LOAD_CURVE_RUNS runs, not every run a model ever had; the page says when older ones are left out
    runs, capped = load_curves.latest(form.matching(Run.objects.all()), LOAD_CURVE_RUNS)
    points = load_curves.points(runs, fixed, x_name)
    download = downloads.download(request, points, "load-curve")
    if download:
        return download
    context.update(load_curves.shown(points, fixed, x_name), capped=capped, max_runs=LOAD_CURVE_RUNS)
    return _render(request, "charts/load_curve.html", context)


@require_GET
def home(request: HtmxHttpRequest) -> HttpResponse:
    latest = list(Run.objects.for_list().newest_first()[:10])
    # The 30 days up to the newest run's start, not the clock's: a history imported from September
    # still shows its failures in December. The latest runs come newest first, undated ones last.
    newest = latest[0].started_at if latest else None
    until = min(newest, timezone.now()) if newest else timezone.now()
    since = until - timedelta(days=30)
    failures = list(
        Run.objects.filter(started_at__gte=since, n_requests__gt=0)
        .annotate(day=UtcDay("started_at"))  # one per day; from run_started_idx alone
        .values("day")
        .annotate(failed=Count("id", filter=WITH_FAILURES_Q), total=Count("id"))
        .order_by("day")
    )
    trend_rows = list(
        with_success_rate(Run.objects.exclude(started_at=None))
        .newest_first()
        .values(*VALUE_FIELDS, *TOOL_FIELDS, value=F("tok_s_mean"), build=F("server_props__props__build_info"))[:2000]
    )
    trend_rows.sort(key=lambda r: (figure_common.group_name(r, "label"), r["started_at"], r["pk"]))
    trend, hidden_models = (
        timeline_figure.timeline_by_model(trend_rows, catalogue.METRICS["tok_s"], "label") if trend_rows else (None, [])
    )
    failure_figure = home_figure.failures_by_day(failures) if failures else None
    context = {
        "latest": latest,
        "story": home_story.story(),
        "trend": trend,
        "hidden_models": hidden_models,
        "trend_mixed": series.mixed_groups(trend_rows, lambda row: f"{row['label'] or '(none)'} ({row['model']})"),
        "failure_figure": failure_figure,
        "since": since,
        "until": until,
        "until_newest": newest is not None and until == newest,
    }
    return render(request, "charts/home.html", context)
