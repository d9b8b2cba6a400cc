"""Servers and benchmark jobs: register, probe, measure prompts, submit, follow, cancel."""

from __future__ import annotations

import logging
import statistics
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from kvlab.celery import app as celery_app

from .. import tasks
from ..models import Job, Server
from .client.probe import ProbeError, probe
from .client.target import TargetRefused, resolve_target
from .execution import measure_prompts
from .forms import JobForm, ServerForm

log = logging.getLogger(__name__)


@login_required
@require_GET
def server_list(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/server_list.html", {"servers": Server.objects.all()})


@staff_member_required
@require_http_methods(["GET", "POST"])
def server_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
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
def server_detail(request: HttpRequest, pk: int) -> HttpResponse:
    server = get_object_or_404(Server, pk=pk)
    jobs = server.jobs.all()[:20]
    return render(request, "benchmarks/server_detail.html", {"server": server, "jobs": jobs})


@staff_member_required
@require_POST
def server_probe(request: HttpRequest, pk: int) -> HttpResponse:
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


def worker_available() -> str:
    """'' when a Celery worker answers; else why not (Redis down, no worker)."""
    try:
        replies = celery_app.control.ping(timeout=1.0)
    except Exception as exc:  # kombu raises several kinds when Redis is down
        return f"the job queue (Redis) cannot be reached: {type(exc).__name__}"
    if not replies:
        return "no benchmark worker is running (start one: make run, or celery -A kvlab worker -Q kvlab)"
    return ""


@login_required
@require_http_methods(["GET", "POST"])
def job_new(request: HttpRequest) -> HttpResponse:
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
    with transaction.atomic():
        job = Job.objects.create(
            server=server, label=form.cleaned_data["label"], params=form.params(), created_by=request.user
        )
        tasks.enqueue(job)
    return redirect("job-detail", pk=job.pk)


def _measure(request: HttpRequest, form: JobForm, server: Server) -> HttpResponse:
    params = form.params()
    context: dict[str, object] = {"form": form}
    if "prompts" not in params:
        context["measure_error"] = "A synthetic prompt has exactly the tokens you asked for; nothing to measure."
        return render(request, "benchmarks/job_form.html", context, status=400)
    try:
        counts = measure_prompts(resolve_target(server.base_url), params["prompts"], server.api_key)
    except (TargetRefused, ProbeError, OSError) as exc:
        context["measure_error"] = f"Could not tokenize on {server.name}: {exc}"
        return render(request, "benchmarks/job_form.html", context, status=502)
    ordered = sorted(counts)
    p95 = ordered[min(len(ordered) - 1, -(-95 * len(ordered) // 100) - 1)]
    context["measured"] = {
        "n": len(counts),
        "p50": int(statistics.median(ordered)),
        "p95": p95,
        "max": ordered[-1],
        "sizing_url": reverse("sizing")
        + "?"
        + urlencode(
            {
                "prompt_tokens": p95,
                "output_tokens": params["n_predict"],
                "concurrency": params["concurrency"],
                "command": server.launch_command,
            }
        ),
    }
    return render(request, "benchmarks/job_form.html", context)


@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(Job.objects.select_related("server"), 50).get_page(request.GET.get("page"))
    return render(request, "benchmarks/job_list.html", {"page": page})


@require_GET
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(Job.objects.select_related("server"), pk=pk)
    runs = list(job.runs.order_by("key"))
    template = (
        "benchmarks/job_detail.html#progress" if getattr(request, "htmx", False) else "benchmarks/job_detail.html"
    )
    return render(request, template, {"job": job, "runs": runs})


@login_required
@require_POST
def job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(Job, pk=pk)
    # A queued job is cancelled at once; a running one when its worker next looks.
    if not Job.objects.filter(pk=pk, state=Job.State.QUEUED).update(
        state=Job.State.CANCELLED, cancel_requested=True, finished_at=timezone.now(), error="cancelled before it ran"
    ):
        Job.objects.filter(pk=pk, state=Job.State.RUNNING).update(cancel_requested=True)
    messages.info(request, f"Cancelling job {job.pk}.")
    return redirect("job-detail", pk=job.pk)
