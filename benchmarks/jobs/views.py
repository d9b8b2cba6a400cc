"""Servers and benchmark jobs: register, probe, measure prompts, submit, follow, cancel."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from kvlab.http import HtmxHttpRequest

from ..models import Job, Server
from .client.probe import ProbeError, probe, tokenize
from .client.target import TargetRefused, resolve_target
from .forms import JobForm, ServerForm
from .lifecycle import prompt_stats, submit_job, worker_available


@login_required
@require_GET
def server_list(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "benchmarks/server_list.html", {"servers": Server.objects.all()})


@staff_member_required
@require_http_methods(["GET", "POST"])
def server_edit(request: HtmxHttpRequest, pk: int | None = None) -> HttpResponse:
    server = get_object_or_404(Server, pk=pk) if pk else None
    form = ServerForm(request.POST or None, instance=server)
    if request.method == "POST":
        if not form.is_valid():
            return render(request, "benchmarks/server_form.html", {"form": form, "server": server}, status=400)
        server = form.save()
        _probe(server)
        messages.success(request, f"Saved {server.name}.")
        return redirect("server-detail", pk=server.pk)
    return render(request, "benchmarks/server_form.html", {"form": form, "server": server})


@login_required
@require_GET
def server_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(Server, pk=pk)
    jobs = server.jobs.defer("params", "recent_errors")[:20]
    return render(request, "benchmarks/server_detail.html", {"server": server, "jobs": jobs})


@staff_member_required
@require_POST
def server_probe(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(Server, pk=pk)
    _probe(server)
    return redirect("server-detail", pk=server.pk)


def _probe(server: Server) -> None:
    try:
        result = probe(resolve_target(server.base_url), server.api_key)
    except TargetRefused as exc:
        result = {"reachable": False, "error": str(exc)}
    server.last_probe, server.last_probed_at = result, timezone.now()
    server.save(update_fields=["last_probe", "last_probed_at"])


@login_required
@require_http_methods(["GET", "POST"])
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
    problem = worker_available()
    if problem:
        context["submit_error"] = f"Nothing was submitted: {problem}."
        return render(request, "benchmarks/job_form.html", context, status=503)
    job = submit_job(server=server, label=form.cleaned_data["label"], params=form.params(), user=request.user)
    return redirect("job-detail", pk=job.pk)


def _measure(request: HtmxHttpRequest, form: JobForm, server: Server) -> HttpResponse:
    params = form.params()
    context: dict[str, object] = {"form": form}
    if "prompts" not in params:
        context["measure_error"] = "A synthetic prompt has exactly the tokens you asked for; nothing to measure."
        return render(request, "benchmarks/job_form.html", context, status=400)
    try:
        stats = prompt_stats(tokenize(resolve_target(server.base_url), params["prompts"], server.api_key))
    except (TargetRefused, ProbeError, OSError) as exc:
        context["measure_error"] = f"Could not tokenize on {server.name}: {exc}"
        return render(request, "benchmarks/job_form.html", context, status=502)
    workload = {
        "prompt_tokens": stats.p95,
        "output_tokens": params["n_predict"],
        "concurrency": params["concurrency"],
        "command": server.launch_command,
    }
    context["measured"] = {**stats._asdict(), "sizing_url": reverse("sizing") + "?" + urlencode(workload)}
    return render(request, "benchmarks/job_form.html", context)


@require_GET
def job_list(request: HtmxHttpRequest) -> HttpResponse:
    jobs = Job.objects.select_related("server").defer("params", "recent_errors", "server__last_probe")
    page = Paginator(jobs, 50).get_page(request.GET.get("page"))
    return render(request, "benchmarks/job_list.html", {"page": page})


@require_GET
def job_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(Job.objects.select_related("server").defer("server__last_probe"), pk=pk)
    runs = list(job.runs.only("pk", "key", "n_ok", "n_requests", "job_id").order_by("key"))
    template = "benchmarks/job_detail.html#progress" if request.htmx else "benchmarks/job_detail.html"
    context = {"job": job, "runs": runs, "may_cancel": job.may_cancel(request.user)}
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
