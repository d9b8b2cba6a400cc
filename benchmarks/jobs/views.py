"""Servers and benchmark jobs: register, probe, measure prompts, submit, follow, cancel."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from kvlab.http import HtmxHttpRequest
from kvlab.paging import CappedPaginator
from kvlab.uploads import UploadRefused, uploads_capped

from ..models import Job, Server
from .client.probe import ProbeError, probe, tokenize
from .client.target import TargetRefused, resolve_target
from .datasets import MAX_DATASET_BYTES, length_distribution
from .forms import MAX_PROMPT_FILE_BYTES, JobForm, ServerForm
from .lifecycle import prompt_stats, submit_job, worker_available
from .pool import server_pool
from .preflight import pool_warning, sizing_url, warning_for


@login_required
@require_GET
def server_list(request: HtmxHttpRequest) -> HttpResponse:
    servers = [(s, server_pool(s.launch_command, s.last_probe)) for s in Server.objects.all()]
    return render(request, "benchmarks/server_list.html", {"servers": servers})


@staff_member_required
@require_http_methods(["GET", "POST"])
def server_edit(request: HtmxHttpRequest, pk: int | None = None) -> HttpResponse:
    server = get_object_or_404(Server, pk=pk) if pk else None
    form = ServerForm(request.POST or None, instance=server)
    if request.method == "POST":
        if not form.is_valid():
            return render(request, "benchmarks/server_form.html", {"form": form, "server": server}, status=400)
        server = form.save(commit=False)
        _probe(server)  # before the one save: a probe that fails leaves no half-registered server
        server.save()
        form.save_m2m()
        messages.success(request, f"Saved {server.name}.")
        return redirect("server-detail", pk=server.pk)
    return render(request, "benchmarks/server_form.html", {"form": form, "server": server})


@login_required
@require_GET
def server_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(Server, pk=pk)
    jobs = server.jobs.defer("params", "recent_errors", "telemetry")[:20]
    context = {"server": server, "jobs": jobs, "pool": server_pool(server.launch_command, server.last_probe)}
    return render(request, "benchmarks/server_detail.html", context)


@staff_member_required
@require_POST
def server_probe(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(Server, pk=pk)
    _probe(server)
    server.save(update_fields=["last_probe", "last_probed_at"])
    return redirect("server-detail", pk=server.pk)


def _probe(server: Server) -> None:
    """Ask the server about itself: its last_probe, with what kvlab refused of its answers and why; unsaved."""
    try:
        result = probe(resolve_target(server.base_url), server.api_key)
    except TargetRefused as exc:
        result = {"reachable": False, "error": str(exc)}
    server.last_probe, server.last_probed_at = result, timezone.now()


# The job form's files stop at their limit while they stream in (kvlab.uploads), not once written whole.
UPLOAD_LIMITS = {"prompt_file": MAX_PROMPT_FILE_BYTES, "dataset_file": MAX_DATASET_BYTES}
UPLOAD_NAMES = {"prompt_file": "prompt file", "dataset_file": "dataset"}


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 1048576:g} MiB" if n_bytes >= 1048576 else f"{n_bytes / 1024:g} KiB"


def _upload_refused(request: HttpRequest, refused: UploadRefused) -> HttpResponse:
    what = f"The {UPLOAD_NAMES[refused.field]}" if refused.field in UPLOAD_NAMES else "The upload"
    context = {
        "form": JobForm(initial=request.GET.dict() or None),
        "submit_error": f"{what} is larger than {_size(refused.limit)}: kvlab stopped reading it there, "
        "and nothing was submitted.",
    }
    return render(request, "benchmarks/job_form.html", context, status=413)


@login_required
@require_http_methods(["GET", "POST"])
@uploads_capped(
    lambda: max(UPLOAD_LIMITS.values()),
    _upload_refused,
    per_field=lambda: UPLOAD_LIMITS,
    other_fields=settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 65_536,  # the other fields, and the parts' headers
)
def job_new(request: HtmxHttpRequest) -> HttpResponse:
    form = JobForm(request.POST or None, request.FILES or None, initial=request.GET.dict() or None)
    context: dict[str, object] = {"form": form}
    if request.method == "GET":
        return render(request, "benchmarks/job_form.html", context)
    if not form.is_valid():
        return render(request, "benchmarks/job_form.html", context, status=400)
    server: Server = form.cleaned_data["server"]
    if "measure" in request.POST:
        return _measure(request, form, server)
    if not form.cleaned_data["run_anyway"]:
        context["warning"] = pool_warning(form.params(), server)
        if context["warning"]:  # nothing submitted: the user reads what will happen, then decides
            return render(request, "benchmarks/job_form.html", context)
    problem = worker_available()
    if problem:
        context["submit_error"] = f"Nothing was submitted: {problem}."
        return render(request, "benchmarks/job_form.html", context, status=503)
    params = form.params()
    if "dataset" in params:
        params["dataset"].update(_dataset_lengths(server, params))
    job = submit_job(server=server, label=form.cleaned_data["label"], params=params, user=request.user)
    return redirect("job-detail", pk=job.pk)


def _dataset_lengths(server: Server, params: dict[str, Any]) -> dict[str, Any]:
    """The sampled prompts' token lengths as the server counts them, kept with the job's dataset;
    nothing if they cannot be measured now (the job records each request's length as it runs)."""
    try:
        counts = tokenize(resolve_target(server.base_url), params["prompts"], server.api_key, timeout_s=15)
    except (TargetRefused, ProbeError, OSError, TimeoutError):
        return {}
    return {"lengths": counts, "distribution": length_distribution(counts)}


def _measure(request: HtmxHttpRequest, form: JobForm, server: Server) -> HttpResponse:
    params = form.params()
    context: dict[str, object] = {"form": form}
    if "prompts" not in params:
        context["measure_error"] = "A synthetic prompt has exactly the tokens you asked for; nothing to measure."
        return render(request, "benchmarks/job_form.html", context, status=400)
    try:
        counts = tokenize(resolve_target(server.base_url), params["prompts"], server.api_key)
    except (TargetRefused, ProbeError, OSError) as exc:
        context["measure_error"] = f"Could not tokenize on {server.name}: {exc}"
        return render(request, "benchmarks/job_form.html", context, status=502)
    stats = prompt_stats(counts)
    context["measured"] = {
        **stats._asdict(),
        "sizing_url": sizing_url(server, stats.p95, params),
        "distribution": length_distribution(counts),
        "dataset": params.get("dataset"),
    }
    longest_sent = max(counts[: int(params["requests"])])  # request i sends prompt i modulo their number
    context["warning"] = warning_for(server, longest_sent, "the longest prompt the job sends, measured", params)
    return render(request, "benchmarks/job_form.html", context)


# What the job list shows of a job (STYLE 16: never its params, whose prompts may be megabytes).
JOB_LIST_COLUMNS = (
    "pk",
    "server__name",
    "base_url",
    "sweep_config",  # a stranger is told a sweep's server from another's without its URL (kvlab.visibility)
    "label",
    "state",
    "error",
    "n_done",
    "n_failed",
    "n_total",
    "created_at",
)
# The params the job page shows: read from the JSON in SQL, never the prompts.
JOB_PAGE_PARAMS = (
    "requests",
    "repeats",
    "concurrency",
    "n_predict",
    "prompt_tokens",
    "arrival",
    "rate",
    "rates",
    "seed",
    "slo_ttft_ms",
    "slo_tpot_ms",
)


@require_GET
def job_list(request: HtmxHttpRequest) -> HttpResponse:
    # newest first by the primary key (ids grow with created_at): a walk down an index, never a sort
    jobs = Job.objects.select_related("server").only(*JOB_LIST_COLUMNS).order_by("-id")
    page = CappedPaginator(jobs, 50).get_page(request.GET.get("page"))
    return render(request, "benchmarks/job_list.html", {"page": page})


@require_GET
def job_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    shown = {f"param_{key}": F(f"params__{key}") for key in JOB_PAGE_PARAMS}
    shown["param_dataset"] = F("params__dataset__name")  # not the dataset's lengths: one per prompt
    job = get_object_or_404(
        Job.objects.select_related("server").defer("params", "server__last_probe").annotate(**shown), pk=pk
    )
    job.params = {key: getattr(job, f"param_{key}") for key in (*JOB_PAGE_PARAMS, "dataset")}  # what the page shows
    runs = list(job.runs.only("pk", "key", "n_ok", "n_requests", "job_id").order_by("pk"))  # in the order they ran
    template = "benchmarks/job_detail.html#progress" if request.htmx else "benchmarks/job_detail.html"
    context = {"job": job, "runs": runs, "may_cancel": job.may_cancel(request.user)}
    if job.finished and not job.telemetry and runs:  # the live chart stays: the last run's own series
        context["kept"] = (
            job.runs.filter(telemetry__isnull=False).order_by("-pk").values("pk", "key", "telemetry").first()
        )
    return render(request, template, context)


@login_required
@require_POST
def job_cancel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(Job.objects.only("pk", "created_by_id"), pk=pk)
    if not job.may_cancel(request.user):
        raise PermissionDenied("Only the user who submitted a job, or staff, may cancel it.")
    if Job.cancel(job.pk) == "finished":
        messages.info(request, f"Job {job.pk} had already finished.")
    else:
        messages.info(request, f"Cancelling job {job.pk}.")
    return redirect("job-detail", pk=job.pk)
