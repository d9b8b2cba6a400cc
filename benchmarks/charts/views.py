"""Chart pages: timeline, compare, load curve, regressions, and the dashboard home.

Every chart's state lives in its URL (a GET form); the data comes from a fixed number
of queries and reaches Plotly through json_script; `?format=csv|json` downloads it.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from datetime import timedelta
from typing import Any

from django.db.models import Avg, Count, F, Max, Min, OuterRef, Q, Subquery
from django.db.models.fields.json import KT
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from kvlab import visibility
from kvlab.http import HtmxHttpRequest

from ..history import derived, sampling
from ..history.forms import CompareForm
from ..models import RequestResult, Run
from ..models.outcomes import OUTCOME_Q, WITH_FAILURES_Q, with_success_rate
from ..records import catalogue, sources
from ..records import series_keys as series
from ..records.outcomes import FAILED
from . import figures, timeline_data
from .days import UtcDay
from .forms import ChartForm, LoadCurveForm
from .rendering import render_chart as _render

MAX_TIMELINE_POINTS = timeline_data.RAW_MAX  # the benchmarks check the cap they expect
VALUE_FIELDS = (
    "pk",
    "key",
    "label",
    "model",
    "gpu",
    "started_at",
    "n_ok",
    "n_requests",
    "ctx_size",
    "parallel",
    "kv_unified",
    "cache_type_k",
    "cache_type_v",
    "kv_offload",
    "flash_attn",
    "concurrency",
    "prompt_tokens_max",
    "n_predict_max",
)
# Who measured a run and how it was served, read with VALUE_FIELDS for the charts' warnings and hovers
# (a tool's run beside kvlab's, a vLLM run beside llama.cpp's); the timeline's download keeps VALUE_FIELDS.
TOOL_FIELDS = ("tool", "source", "engine", "server_flags", "request_rate")
# Runs whose speed figures are a tool's own (or derived from them), not computed from stored requests.
TOOL_FIGURES = (
    Q(provenance__has_key="throughput_tok_s") | Q(provenance__has_key="tok_s_mean") | Q(provenance__has_key="ttft_p95")
)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may run as a formula


def csv_safe(value: Any) -> Any:
    """A cell a spreadsheet shows as text, never runs: text that could start a formula gets a leading quote.

    Only text: a number (a negative one too) stays a number.
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


DOWNLOAD_FORMATS = ("json", "csv")


def _download(request: HtmxHttpRequest, rows: list[dict[str, Any]], name: str) -> HttpResponse | None:
    fmt = request.GET.get("format")
    if fmt == "json":
        response = JsonResponse({"rows": rows}, json_dumps_params={"default": str})
    elif fmt == "csv":
        out = io.StringIO()
        if rows:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({k: csv_safe(v) for k, v in row.items()} for row in rows)
        response = HttpResponse(out.getvalue(), content_type="text/csv")
    else:
        return None
    response["Content-Disposition"] = f'attachment; filename="kvlab-{name}.{fmt}"'
    return response


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
    group_fields = catalogue.GROUPINGS[grouping][1]
    runs = with_success_rate(form.filter(Run.objects.all())).exclude(started_at=None)
    raw_values = {
        "args": (
            *VALUE_FIELDS,
            *TOOL_FIELDS,
            *[f for f in group_fields if f not in VALUE_FIELDS and f not in TOOL_FIELDS],
        ),
        "kwargs": {
            "value": F(metric.column),
            "build": F("server_props__props__build_info"),
            # "file" / "derived" when the figure is the tool's: the point's hover says so
            "value_source": KT(f"provenance__{sources.provenance_key(metric.column)}"),
        },
    }
    besides_outcome = form.besides_outcome(Run.objects.exclude(started_at=None))
    data = timeline_data.read(runs, form.cleaned_data, metric, grouping, raw_values, besides_outcome)
    span_word = timeline_data.SPAN_WORDS.get(data.span_s, "")
    rows = data.rows
    if grouping == "server":
        visibility.server_lines(rows, request.user)  # a stranger's lines are tags, not the servers' names
    rows.sort(key=lambda r: (figures.group_name(r, grouping), r["started_at"], r["pk"]))
    if request.GET.get("format") in DOWNLOAD_FORMATS:  # the flat rows only for a download
        flat = [_flat_bucket(b, metric, grouping, data.span_s) for b in data.buckets] or [
            _flat(r, metric) for r in rows
        ]
        download = _download(request, flat, "timeline")
        if download:
            return download
    mixed = figures.mixed_lines(rows, grouping)
    if data.buckets:
        figure = figures.timeline_reduced(data.buckets, metric, grouping, data.span_s, span_word)
    else:
        figure = figures.timeline(rows, metric, grouping, mixed) if rows else None
    x0, x1 = form.cleaned_data.get("x0"), form.cleaned_data.get("x1")
    if figure and x0 and x1:
        figure["layout"]["xaxis"]["range"] = [x0.isoformat(), x1.isoformat()]
    context.update(
        metric=metric,
        grouping=grouping,
        grouping_label=catalogue.GROUPINGS[grouping][0],
        mixed=mixed,
        figure=figure,
        n_points=data.n_runs if data.buckets else len(rows),
        n_buckets=len(data.buckets),
        span_word=span_word,
        truncated=data.truncated,
        why_raw=data.why_raw,
        window=data.window,
        ranged=bool(x0 or x1),
        # the figure holds less than every run of its range: a zoom or a pan fetches the range's detail
        partial=bool(data.buckets or data.truncated or x0 or x1),
        max_points=timeline_data.RAW_MAX,
        compare_max_runs=CompareForm.MAX_RUNS,
    )
    if data.buckets:  # the overview is read from buckets a large import's runs may not be counted in yet
        context["derived_pending"], context["derived_pending_since"] = derived.pending()
        context["derived_what"] = "this overview"
    return _render(request, "charts/timeline.html", context)


def _flat(row: dict[str, Any], metric: catalogue.Metric) -> dict[str, Any]:
    flat = {k: row.get(k) for k in VALUE_FIELDS}
    flat[metric.key] = row.get("value")
    return flat


def _flat_bucket(bucket: dict[str, Any], metric: catalogue.Metric, grouping: str, span_s: int) -> dict[str, Any]:
    """A reduced point as the download gives it: the bucket, its counts, its min and max (no run)."""
    start = timeline_data.when(bucket["start"])
    return {
        grouping: figures.group_name(bucket, grouping),
        "bucket_from": start.isoformat(),
        "bucket_to": timeline_data.when(bucket["start"] + span_s).isoformat(),
        "runs": bucket["runs"],
        "failed_runs": bucket["failed"],
        f"runs_with_{metric.key}": bucket["valued"],
        f"min_{metric.key}": bucket["lo"],
        f"max_{metric.key}": bucket["hi"],
    }


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
    values = {f"value_{k}": F(catalogue.METRICS[k].column) for k in catalogue.COMPARE_METRICS}
    last_seq = RequestResult.objects.filter(run_id=OuterRef("pk")).order_by("-seq").values("seq")[:1]
    found = {
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
    missing = [i for i in ids if i not in found]
    if missing:
        context["missing"] = missing
        return _render(request, "charts/compare.html", context, status=404)
    runs = [found[i] for i in ids]
    download = _download(request, [{k: v for k, v in r.items() if k != "last_seq"} for r in runs], "compare")
    if download:
        return download
    # Each box an even sample of its run's ok requests (the run page's sampling), the chart's points
    # shared between its runs: a compare of two million-request runs reads and draws what one of 12 small ones does.
    spans = {r["pk"]: r["last_seq"] + 1 for r in runs if r["last_seq"] is not None}
    rows, samples = sampling.ok_sample(spans, {"value": F("tok_s")}, COMPARE_BOX_POINTS // len(runs))
    drawn = Counter(run_id for run_id, tok_s in rows if tok_s is not None)
    sampled = [
        {"run": r, "points": drawn[r["pk"]], "step": samples[r["pk"]].step}
        for r in runs
        if r["pk"] in samples and not samples[r["pk"]].whole
    ]
    context.update(
        figure=figures.compare(
            runs,
            [(run_id, True, tok_s) for run_id, tok_s in rows],
            stored=set(spans),
            sampled={s["run"]["pk"] for s in sampled},
        ),
        sampled=sampled,
        outliers_only=sum(drawn.values()) > figures.DRAWN_STRIP_POINTS,
        strip_points=figures.DRAWN_STRIP_POINTS,
        runs=runs,
        # at most MAX_RUNS values a field: name them all
        workloads_differ=series.describe(series.differences(runs, series.WORKLOAD_FIELDS), CompareForm.MAX_RUNS),
        configurations_differ=series.describe(series.differences(runs, series.CONFIG_FIELDS), CompareForm.MAX_RUNS),
        tools_differ=len({series.measured_by(r) for r in runs}) > 1,
        tools=list(dict.fromkeys(series.measured_by(r) or "?" for r in runs)),
    )
    return _render(request, "charts/compare.html", context)


LOAD_CURVE_RUNS = 5_000  # the latest runs a load curve averages; older ones by narrowing (GPU, label)


@require_GET
def load_curve(request: HtmxHttpRequest) -> HttpResponse:
    form = LoadCurveForm(request.GET)
    context: dict[str, Any] = {"form": form, "page_title": "Load curve"}
    if not form.is_valid():
        return _render(request, "charts/load_curve.html", context, status=400)
    if not form.cleaned_data["model"]:
        return _render(request, "charts/load_curve.html", context)
    x_name = form.cleaned_data.get("x") or "concurrency"
    # the other axis is held fixed along a curve: GuideLLM's rate points are not one concurrency curve
    fixed = (*figures.CURVE_FIELDS, "request_rate" if x_name == "concurrency" else "concurrency")
    runs = Run.objects.filter(model=form.cleaned_data["model"]).exclude(**{x_name: None})
    if form.cleaned_data["gpu"]:
        runs = runs.filter(gpu=form.cleaned_data["gpu"])
    if form.cleaned_data["label"]:
        runs = runs.filter(label=form.cleaned_data["label"])
    # The latest LOAD_CURVE_RUNS runs (a walk down run_model_idx), not every run a model ever had: the
    # page's cost does not grow with the history, and it says when older runs were left out.
    # (id NULLS LAST too, as run_model_idx holds it on PostgreSQL; and the check past the cap keeps the
    # order, which .exists() would drop, so that it walks the same index instead of scanning the runs)
    newest_first = runs.order_by(F("started_at").desc(nulls_last=True), F("id").desc(nulls_last=True)).values("pk")
    capped = len(newest_first[LOAD_CURVE_RUNS : LOAD_CURVE_RUNS + 1]) > 0
    runs = Run.objects.filter(pk__in=Subquery(newest_first[:LOAD_CURVE_RUNS]))
    not_failed = ~OUTCOME_Q[FAILED]  # a failed run has no speed: never averaged in as a zero
    points = list(
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
    download = _download(request, points, "load-curve")
    if download:
        return download
    curves = figures.curves(points, fields=fixed, x=x_name)
    drawable = [c for c in curves if len(c.points) >= 2]
    drawn = drawable[: figures.MAX_CURVES]
    context.update(
        x_name=x_name,
        x_word="concurrency" if x_name == "concurrency" else "request rate",
        figure=figures.load_curve(drawn, x_name) if drawn else None,
        curves=drawn,
        n_drawable=len(drawable),
        single_level=[c for c in curves if len(c.points) < 2],
        points=points,
        capped=capped,
        max_runs=LOAD_CURVE_RUNS,
    )
    return _render(request, "charts/load_curve.html", context)


@require_GET
def home(request: HtmxHttpRequest) -> HttpResponse:
    latest = list(
        Run.objects.defer("server_props", "server_log", "summary_extra", "telemetry").order_by(
            F("started_at").desc(nulls_last=True), "-id"
        )[:10]
    )
    since = timezone.now() - timedelta(days=30)
    failures = list(
        Run.objects.filter(started_at__gte=since, n_requests__gt=0)
        .annotate(day=UtcDay("started_at"))  # one per day; from run_started_idx alone
        .values("day")
        .annotate(failed=Count("id", filter=WITH_FAILURES_Q), total=Count("id"))
        .order_by("day")
    )
    trend_rows = list(
        with_success_rate(Run.objects.exclude(started_at=None))
        .order_by(F("started_at").desc(nulls_last=True), "-id")
        .values(*VALUE_FIELDS, *TOOL_FIELDS, value=F("tok_s_mean"), build=F("server_props__props__build_info"))[:2000]
    )
    trend_rows.sort(key=lambda r: (figures.group_name(r, "label"), r["started_at"], r["pk"]))
    trend, hidden_models = (
        figures.timeline_by_model(trend_rows, catalogue.METRICS["tok_s"], "label") if trend_rows else (None, [])
    )
    failure_figure = figures.failures_by_day(failures) if failures else None
    context = {
        "latest": latest,
        "trend": trend,
        "hidden_models": hidden_models,
        "trend_mixed": series.mixed_groups(trend_rows, lambda row: f"{row['label'] or '(none)'} ({row['model']})"),
        "failure_figure": failure_figure,
        "since": since,
    }
    return render(request, "charts/home.html", context)
