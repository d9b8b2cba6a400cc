"""Views of the benchmark history: browse, open, compare, import and export runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Exists, Expression, F, FloatField, Func, Max, OuterRef, QuerySet, Value
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HttpResponseClientRedirect

from kvlab import slots
from kvlab.http import HtmxHttpRequest
from kvlab.paging import CappedPaginator
from kvlab.uploads import UploadRefused, uploads_capped

from ..models import FileImport, RequestResult, Run
from ..records import sources
from ..records.metrics import distribution
from ..records.summaries import median_of
from ..templatetags.units import ms, seconds, thousands, tok_s
from . import exporter, goodput, sampling
from . import forms as filter_forms
from .comparison import compare_rows, compare_warnings, noisy_pairs
from .exporter import export_lines
from .forms import CompareForm, ImportForm, RunFilterForm, ValueSearchForm
from .importer import import_uploads, read_server_log

REQUESTS_PER_PAGE = 200
REJECTS_PER_PAGE = 500
# The most ok requests a run page's distributions read; a larger run shows an even sample, and says so.
DISTRIBUTION_SAMPLE = 10_000


@require_GET
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    status = 200
    sort_window = None
    if form.is_valid():
        # a list loads only what it shows
        runs = Run.objects.defer("server_props", "server_log", "summary_extra", "telemetry")
        paginator = CappedPaginator(form.filter(runs), form.cleaned_data["per_page"])
        if form.narrows() and form.sorts_by_value():
            paginator.object_list, sort_window = _filtered_by_value(form, runs, paginator.capped)
        page = paginator.get_page(form.cleaned_data.get("page") or 1)
    else:
        page, status = CappedPaginator(Run.objects.none(), 50).get_page(1), 400
    page.object_list = _with_requests_stored(list(page.object_list))
    template = "benchmarks/run_list.html#run-table" if request.htmx else "benchmarks/run_list.html"
    context = {"form": form, "page": page, "sort": form.current_sort, "sort_window": sort_window}
    if form.is_valid() and form.cleaned_data.get("run"):  # a part of an id is looked for among the latest runs
        context["key_search_runs"] = filter_forms.KEY_SEARCH_RUNS
    return render(request, template, context, status=status)


SORT_WINDOW = 10_000  # the latest matching runs a filter's many matches are sorted among (as many as a list counts)


def _filtered_by_value(form: RunFilterForm, runs: QuerySet[Run], many: bool) -> tuple[QuerySet[Run], int | None]:
    """Filtered runs sorted by a value, at a cost that does not grow with the history; and the window used.

    Walking the sort's index and skipping the runs a filter rejects is fast while matches are common
    near the top, and reads the whole history when they are not (the failed runs, which have no tok/s,
    all sit at the bottom of it; a slow model's runs below every fast one's). So the matching runs are
    found by the filter's own index and sorted: all of them when at most LIST_CAP match (the count
    said so), else the latest SORT_WINDOW of them (a range of the filter's dated index), and the page
    says so.
    """
    if not many:
        return form.order(form.narrow(runs), by_index=False), None
    return form.order(form.latest_matches(runs, SORT_WINDOW), by_index=False), SORT_WINDOW


def _with_requests_stored(runs: list[Run]) -> list[Run]:
    """Mark each run that holds a tool's summary with whether any of its requests is stored (has_requests).

    One query of an index seek per such run of the page, only when the page shows one.
    """
    with_summary = [run.pk for run in runs if run.summary is not None]
    if with_summary:
        stored = RequestResult.objects.filter(run_id=OuterRef("pk"))
        found = dict(Run.objects.filter(pk__in=with_summary).values_list("pk", Exists(stored)))
        for run in runs:
            run.has_requests = found.get(run.pk, True)  # type: ignore[attr-defined]
    return runs


@require_GET
def value_suggestions(request: HtmxHttpRequest) -> HttpResponse:
    """The <option>s a filter's datalist offers for the text typed so far (?model=qw): at most 20."""
    form = ValueSearchForm(request.GET)
    if not form.is_valid():
        errors = [error for errors in form.errors.values() for error in errors]
        return render(request, "benchmarks/value_options.html", {"errors": errors}, status=400)
    return render(request, "benchmarks/value_options.html", {"values": form.suggestions()})


@require_GET
def run_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(goodput.with_job_objectives(Run.objects.all()), pk=pk)
    requests = run.requests.order_by("seq")
    # A summarised run's n_requests is its number of requests (an import stores both at once; a job's run,
    # 0 while it records, is summarised when its job ends or is reaped): no count of a million rows.
    # A run with a tool's summary counts the tool's requests, not the rows stored (none, or a sample).
    has_summary = run.summary is not None
    n_requests = requests.count() if has_summary else (run.n_requests or requests.count())
    page = _CountedPaginator(requests, REQUESTS_PER_PAGE, n_requests).get_page(request.GET.get("page"))
    # COUNT(*): request_failed_idx answers it alone (an index-only scan on PostgreSQL)
    failures = run.requests.filter(ok=False).values("error_type").annotate(n=Count("*")).order_by("-n", "error_type")
    metrics = [
        ("TTFT", "request sent → first streamed token", F("ttft_s"), "s"),
        ("E2E latency", "request sent → last chunk", F("elapsed_s"), "s"),
        ("decode tok/s (server)", "timings.predicted_per_second", F("tok_s"), "tok/s"),
        ("decode tok/s (client)", "(output tokens − 1) / (E2E − TTFT)", _JsonNumber("extra", "client_tok_s"), "tok/s"),
    ]
    rows, step = _distribution_sample(run, [m[2] for m in metrics])
    sampled = f" · a sample: every {step}th request, {len(rows):,} of {run.n_requests:,}" if step > 1 else ""
    distributions = [
        (name, formula + sampled, distribution(row[i] for row in rows), unit)
        for i, (name, formula, _, unit) in enumerate(metrics)
    ]
    provenance = run.provenance or {}
    context = {
        "run": run,
        "page": page,
        "failures": failures,
        "distributions": [d for d in distributions if d[2] is not None],
        "n_stored": n_requests,
        "requests_stored": sources.requests_stored(
            n_requests, run.n_requests, has_summary=has_summary, sampled=run.requests_sampled
        ),
        # run field -> "from the file" / "declared" / "derived", shown beside the field
        "field_source": {name: sources.FIELD_WORDS.get(kind, kind) for name, kind in provenance.items()},
        # figure column -> "tool" / "derived" / "kvlab", shown beside the figure
        "figure_source": {
            column: _source_tag(sources.figure_source(provenance, column, has_summary=has_summary))
            for column in FIGURE_COLUMNS
        },
        "tool_summary": tool_summary(run.summary) if has_summary else None,
    }
    goodput_form, context["goodputs"] = goodput.for_runs([run], request.GET)
    context["goodput_form"] = goodput_form
    status = 200 if goodput_form.is_valid() else 400
    return render(request, "benchmarks/run_detail.html", context, status=status)


FIGURE_COLUMNS = (
    "n_ok",
    "tok_s_mean",
    "effective_wall_s",
    "throughput_tok_s",
    "output_tokens_total",
    "ttft_p50",
    "ttft_p95",
    "e2e_p95",
    "e2e_p50",
    "itl_p50",
    "itl_p95",
    "tpot_p50",
    "tpot_p95",
)


def _source_tag(source: str) -> dict[str, str]:
    return {"tag": sources.SOURCE_TAGS[source], "title": sources.SOURCE_WORDS[source], "kind": source}


# The tool's summary as the run page shows it: (name, summary key, how to show it).
SUMMARY_FIGURES = (
    ("requests", "n_requests", thousands),
    ("ok", "n_ok", thousands),
    ("failed", "n_failed", thousands),
    ("incomplete", "n_incomplete", thousands),
    ("duration", "duration_s", seconds),
    ("request rate (measured)", "request_rate", lambda v: f"{thousands(v)} req/s" if v is not None else "—"),
    ("output throughput", "output_tok_s", tok_s),
    ("total throughput (input + output)", "total_tok_s", tok_s),
    ("input tokens", "input_tokens", thousands),
    ("output tokens", "output_tokens", thousands),
)
SUMMARY_LATENCIES = (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("TPOT", "tpot_ms"), ("E2E latency", "e2e_ms"))
SUMMARY_STAT_COLUMNS = ("mean", "median", "p90", "p95", "p99")


def tool_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The figures of a tool's summary, formatted (a figure the tool did not report is "—")."""
    latencies = []
    for name, key in SUMMARY_LATENCIES:
        stats = summary.get(key) or {}
        if stats:
            values = [stats.get("mean"), median_of(stats), *(stats.get(p) for p in ("p90", "p95", "p99"))]
            latencies.append((name, [ms(v) for v in values]))
    return {
        "figures": [(name, show(summary.get(key))) for name, key, show in SUMMARY_FIGURES if key in summary],
        "latencies": latencies,
        "stat_columns": SUMMARY_STAT_COLUMNS,
    }


class _CountedPaginator(Paginator):
    """A run's requests page by page: told how many it holds instead of counting them, and a page past
    the first found by its range of seq, not by skipping rows.

    An OFFSET reads every row it skips (the last page of a million requests read 999,800 of them);
    a run whose requests are numbered 0..n-1 (the usual case: an import numbers them so, a job by
    the order it sent them) has page k at seq (k-1)·per_page onward, one seek down (run, seq). Its
    largest seq, one more seek, tells whether the numbers have gaps (a cancelled job's unsent
    requests); then the page is an OFFSET as before.
    """

    def __init__(self, object_list: QuerySet[Any], per_page: int, count: int) -> None:
        super().__init__(object_list, per_page)
        self._count = count

    @cached_property
    def count(self) -> int:
        return self._count

    def page(self, number: Any) -> Any:
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        if bottom == 0 or self.object_list.aggregate(last=Max("seq"))["last"] != self._count - 1:
            return super().page(number)
        rows = self.object_list.filter(seq__gte=bottom, seq__lt=bottom + self.per_page)[: self.per_page]
        return self._get_page(rows, number, self)


class _JsonNumber(Func):
    """A JSON object's key as a float when it holds a JSON number, else NULL (strings and the rest)."""

    output_field = FloatField()

    def __init__(self, column: str, key: str) -> None:
        super().__init__(F(column), Value(key))
        self.key = key

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:  # noqa: ARG002
        column, params = compiler.compile(self.source_expressions[0])
        if connection.vendor == "postgresql":
            sql = f"(CASE WHEN jsonb_typeof({column} -> %s) = 'number' THEN ({column} ->> %s)::double precision END)"
            return sql, (*params, self.key, *params, self.key)
        path = '$."' + self.key + '"'
        sql = f"(CASE WHEN json_type({column}, %s) IN ('real', 'integer') THEN json_extract({column}, %s) END)"
        return sql, (*params, path, *params, path)


def _distribution_sample(run: Run, values: list[Expression]) -> tuple[list[tuple[Any, ...]], int]:
    """The values of the run's ok requests, for metrics.distribution: all of them, or an even sample
    (sampling.ok_sample: at most DISTRIBUTION_SAMPLE rows, one seek each, JSON keys read in SQL), so the
    page costs the same for a million requests as for ten thousand."""
    named = {f"v{i}": value for i, value in enumerate(values)}
    rows, samples = sampling.ok_sample({run.pk: run.n_requests}, named, DISTRIBUTION_SAMPLE)
    return [row[1:] for row in rows], samples[run.pk].step


@require_GET
def run_compare(request: HtmxHttpRequest) -> HttpResponse:
    form = CompareForm(request.GET)
    if not form.is_valid():
        return render(request, "benchmarks/run_compare.html", {"form": form}, status=400)
    ids = form.cleaned_data["run"]
    runs_by_id = goodput.with_job_objectives(Run.objects.all()).in_bulk(ids)
    missing = [i for i in ids if i not in runs_by_id]
    if missing:
        return render(
            request,
            "benchmarks/run_compare.html",
            {"form": form, "missing": missing},
            status=404,
        )
    runs = [runs_by_id[i] for i in ids]
    failures: dict[int, dict[str, int]] = {i: {} for i in ids}
    for row in (
        RequestResult.objects.filter(run_id__in=ids, ok=False)
        .values("run_id", "error_type")
        .annotate(n=Count("id"))
        .order_by()
    ):
        failures[row["run_id"]][row["error_type"] or "other"] = row["n"]
    # A run with a tool's summary may store none of its requests, or a sample: count what it stores
    # (one query, only when such a run is compared; a sample is small).
    with_summary = [run.pk for run in runs if run.summary is not None]
    stored: dict[int, int] = {}
    if with_summary:
        counted = RequestResult.objects.filter(run_id__in=with_summary).values("run_id").annotate(n=Count("id"))
        stored = {row["run_id"]: row["n"] for row in counted.order_by()}
    context = {
        "form": form,
        "runs": runs,
        "rows": compare_rows(runs, failures, stored),
        "warnings": compare_warnings(runs),
        "show_sources": bool(with_summary),
        "noisy": noisy_pairs(runs),
    }
    goodput_form, context["goodputs"] = goodput.for_runs(runs, request.GET)
    context.update(goodput_form=goodput_form, goodput_keep=ids)
    status = 200 if goodput_form.is_valid() else 400
    return render(request, "benchmarks/run_compare.html", context, status=status)


# Exports stream the history as JSONL (GB for a large one): a client streams at most EXPORTS_PER_CLIENT at
# once (kvlab.slots, across every web process), and without a login an export holds at most
# ANONYMOUS_EXPORT_RUNS runs and ANONYMOUS_EXPORT_REQUESTS requests (counted up to that, at a bounded cost).
EXPORTS_PER_CLIENT = 2
ANONYMOUS_EXPORT_RUNS = 1_000
ANONYMOUS_EXPORT_REQUESTS = 50_000


def _export_limits() -> tuple[int, int, int]:
    return (
        getattr(settings, "KVLAB_EXPORTS_PER_CLIENT", EXPORTS_PER_CLIENT),
        getattr(settings, "KVLAB_ANONYMOUS_EXPORT_RUNS", ANONYMOUS_EXPORT_RUNS),
        getattr(settings, "KVLAB_ANONYMOUS_EXPORT_REQUESTS", ANONYMOUS_EXPORT_REQUESTS),
    )


@require_GET
def export_download(request: HtmxHttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    if not form.is_valid():
        return render(request, "benchmarks/run_list.html", {"form": form, "page": None}, status=400)
    return _jsonl_download(request, form.filter(Run.objects.all()), "kvlab-runs")


@require_GET
def run_export(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=pk)
    return _jsonl_download(request, Run.objects.filter(pk=run.pk), f"kvlab-run-{run.pk}")


def _refusal(status: int, reason: str) -> HttpResponse:
    response = HttpResponse(reason + "\n", content_type="text/plain; charset=utf-8", status=status)
    if status == 429:
        response["Retry-After"] = "30"
    return response


def _jsonl_download(request: HtmxHttpRequest, runs: QuerySet[Run], name: str) -> HttpResponse:
    per_client, most_runs, most_requests = _export_limits()
    if not request.user.is_authenticated:
        ids = list(runs.order_by("pk").values_list("pk", flat=True)[: most_runs + 1])
        too_many = (
            f"more than {most_runs:,} runs"
            if len(ids) > most_runs
            else f"more than {most_requests:,} requests"
            if exporter.requests_at_most(ids, most_requests) > most_requests
            else ""
        )
        if too_many:
            login = f"{reverse('login')}?{urlencode({'next': request.get_full_path()})}"
            return _refusal(
                403,
                f"This export holds {too_many}: an export that large needs a login ({login}). "
                f"Without one, narrow the filter to at most {most_runs:,} runs and {most_requests:,} requests.",
            )
        runs = Run.objects.filter(pk__in=ids)  # what was counted is what is sent
    held = slots.take("export", request, per_client)
    if held is None:
        return _refusal(
            429,
            f"{per_client} exports from your address are already streaming: kvlab streams at most {per_client} at "
            "once per client. Try again when one has finished.",
        )
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response = StreamingHttpResponse(_releasing(export_lines(runs), held), content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.jsonl"'
    return response


class _releasing:  # noqa: N801 (an iterator, named for what it does)
    """The export's lines, its slot released when the response is closed (streamed out, or the client gone),
    whether or not the lines were ever read."""

    def __init__(self, lines: Iterator[bytes], held: slots.Held) -> None:
        self.lines, self.held = lines, held

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.lines
        finally:
            self.held.close()

    def close(self) -> None:
        self.held.close()


@require_GET
def import_list(request: HtmxHttpRequest) -> HttpResponse:
    imports = FileImport.objects.select_related("user").order_by("-id")  # newest first: the primary key's order
    page = CappedPaginator(imports, 50).get_page(request.GET.get("page"))
    return render(request, "benchmarks/import_list.html", {"page": page})


@require_GET
def import_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    file_import = get_object_or_404(FileImport.objects.select_related("user"), pk=pk)
    return _render_import(request, file_import)


def _render_import(request: HtmxHttpRequest, file_import: FileImport, status: int = 200) -> HttpResponse:
    rejects = Paginator(file_import.rejected_lines.all(), REJECTS_PER_PAGE).get_page(request.GET.get("page"))
    context = {"file_import": file_import, "rejects": rejects}
    return render(request, "benchmarks/import_detail.html", context, status=status)


def _too_large(request: HttpRequest, refused: UploadRefused) -> HttpResponse:
    form = ImportForm()
    context: dict[str, Any] = {"form": form, "limit": refused.limit, "too_large": True}
    return render(request, "benchmarks/import_form.html", context, status=413)


@login_required
@require_http_methods(["GET", "POST"])
@uploads_capped(lambda: settings.KVLAB_UPLOAD_MAX_BYTES, _too_large)
def import_upload(request: HtmxHttpRequest) -> HttpResponse:
    limit = settings.KVLAB_UPLOAD_MAX_BYTES
    if request.method == "GET":
        return render(request, "benchmarks/import_form.html", {"form": ImportForm(), "limit": limit})
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return render(request, "benchmarks/import_form.html", {"form": form, "limit": limit}, status=400)
    server_log = form.cleaned_data.get("server_log")
    results = import_uploads(
        form.cleaned_data["file"],
        origin=FileImport.Origin.UPLOAD,
        user=request.user,
        declared=form.declared(),
        server_log=read_server_log(server_log.read().decode("utf-8", "replace")) if server_log else None,
    )
    if len(results) > 1:
        status = 422 if any(r.status == FileImport.Status.REJECTED for r in results) else 200
        context = {"form": form, "limit": limit, "results": results}
        return render(request, "benchmarks/import_form.html", context, status=status)
    file_import = results[0]
    if file_import.status == FileImport.Status.REJECTED:
        return _render_import(request, file_import, status=422)
    summaries = f" and {file_import.n_summaries} run summaries" if file_import.n_summaries else ""
    messages.success(
        request,
        f"Imported {file_import.n_imported} records{summaries} "
        f"({file_import.n_duplicate} duplicates) into {file_import.n_runs} runs.",
    )
    url = reverse("import-detail", args=[file_import.pk])
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return HttpResponseRedirect(url)
