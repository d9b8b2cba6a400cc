"""Views of the benchmark history: browse, open, compare, import and export runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HttpResponseClientRedirect

from kvlab import slots
from kvlab.http import HtmxHttpRequest
from kvlab.paging import CappedPaginator
from kvlab.uploads import UploadRefused, uploads_capped

from ..models import FileImport, RequestResult, Run
from ..records import sources
from . import exporter, goodput, run_page
from . import forms as filter_forms
from .comparison import compare_rows, compare_warnings, noisy_pairs
from .exporter import export_lines
from .forms import CompareForm, ImportForm, RunFilterForm, ValueSearchForm
from .importer import import_uploads, read_server_log
from .pagination import CountedPaginator
from .summary_figures import tool_summary

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
        runs = Run.objects.for_list()
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
    page = CountedPaginator(requests, REQUESTS_PER_PAGE, n_requests).get_page(request.GET.get("page"))
    context = {
        "run": run,
        "page": page,
        "failures": run_page.failures_by_type(run),
        "distributions": run_page.distributions(run, DISTRIBUTION_SAMPLE),
        "n_stored": n_requests,
        "requests_stored": sources.requests_stored(
            n_requests, run.n_requests, has_summary=has_summary, sampled=run.requests_sampled
        ),
        "field_source": run_page.field_sources(run),
        "figure_source": run_page.figure_sources(run, has_summary=has_summary),
        "tool_summary": tool_summary(run.summary) if has_summary else None,
    }
    goodput_form, context["goodputs"] = goodput.for_runs([run], request.GET)
    context["goodput_form"] = goodput_form
    status = 200 if goodput_form.is_valid() else 400
    return render(request, "benchmarks/run_detail.html", context, status=status)


@require_GET
def run_compare(request: HtmxHttpRequest) -> HttpResponse:
    form = CompareForm(request.GET)
    if not form.is_valid():
        return render(request, "benchmarks/run_compare.html", {"form": form}, status=400)
    ids = form.cleaned_data["run"]
    runs_by_id = goodput.with_job_objectives(Run.objects.all()).in_bulk(ids)
    missing = [i for i in ids if i not in runs_by_id]
    if missing:
        return render(request, "benchmarks/run_compare.html", {"form": form, "missing": missing}, status=404)
    runs = [runs_by_id[i] for i in ids]
    failures = run_page.failures_by_run(ids)
    # A run with a tool's summary may store none of its requests, or a sample: count what it stores
    # (one query, only when such a run is compared; a sample is small).
    stored = run_page.stored_of_summarised(runs)
    context = {
        "form": form,
        "runs": runs,
        "rows": compare_rows(runs, failures, stored),
        "warnings": compare_warnings(runs),
        "show_sources": any(run.summary is not None for run in runs),
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
