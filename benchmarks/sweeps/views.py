"""Launch hosts (announced by their workers, described by staff), sweeps, and the sweep result page."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from kvlab.http import HtmxHttpRequest

from ..history.forms import CompareForm
from ..jobs.lifecycle import worker_available
from ..models import LaunchHost, Run, Sweep
from . import demo, host_facts, worker_host
from .forms import LaunchHostForm, SweepForm, announced
from .lifecycle import create_sweep
from .results import config_rows

MAX_HOSTS = 200


@staff_member_required
@require_GET
def host_list(request: HtmxHttpRequest) -> HttpResponse:
    now = timezone.now()
    hosts = [(host, host_facts.shown(host, now)) for host in LaunchHost.objects.all()[:MAX_HOSTS]]
    context = {"hosts": hosts, "max_hosts": MAX_HOSTS, "refreshed": request.GET.get("refreshed", "")[:200]}
    return render(request, "benchmarks/host_list.html", context)


@staff_member_required
@require_POST
def host_refresh(request: HtmxHttpRequest) -> HttpResponse:
    """Ask the workers to announce again (after models were added on a host)."""
    outcome = worker_host.ask_workers_to_announce()
    return redirect(f"{reverse('host-list')}?{urlencode({'refreshed': outcome})}")


@staff_member_required
@require_http_methods(["GET", "POST"])
def host_edit(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    host = get_object_or_404(LaunchHost, pk=pk)
    form = LaunchHostForm(request.POST or None, instance=host)
    if request.method == "POST":
        if not form.is_valid():
            return render(request, "benchmarks/host_form.html", {"form": form, "host": host}, status=400)
        form.save()
        return redirect("host-list")
    return render(request, "benchmarks/host_form.html", {"form": form, "host": host})


@require_GET
def sweep_list(request: HtmxHttpRequest) -> HttpResponse:
    sweeps = Sweep.objects.select_related("host").defer("params").order_by("-id")[:100]  # newest: the key's order
    return render(request, "benchmarks/sweep_list.html", {"sweeps": sweeps})


@staff_member_required
@require_http_methods(["GET", "POST"])
def sweep_new(request: HtmxHttpRequest) -> HttpResponse:
    initial = {"flag_sets": "\n".join(request.GET.getlist("flags"))} if request.GET.getlist("flags") else None
    form = SweepForm(request.POST or None, initial=initial)
    context = {"form": form, "announced": announced()}
    if request.method == "GET":
        return render(request, "benchmarks/sweep_form.html", context)
    if not form.is_valid():
        return render(request, "benchmarks/sweep_form.html", context, status=400)
    problem = worker_available()
    if problem:
        return render(request, "benchmarks/sweep_form.html", {**context, "submit_error": problem}, status=503)
    d = form.cleaned_data
    sweep = create_sweep(
        d["host"], d["model_file"], d["flag_sets"], form.params(), label=d["label"], preference=d["preference"],
        user=request.user, binary=d["binary"],
    )  # fmt: skip
    return redirect("sweep-detail", pk=sweep.pk)


@staff_member_required
@require_POST
def sweep_demo(request: HtmxHttpRequest) -> HttpResponse:
    problem = worker_available()
    host = demo.demo_host()
    if problem or host is None:
        context = {"form": SweepForm(), "announced": announced(), "submit_error": problem or demo.NO_DEMO_HOST}
        return render(request, "benchmarks/sweep_form.html", context, status=503)
    sweep = create_sweep(
        host, demo.DEMO_MODEL, demo.DEMO_FLAG_SETS, demo.DEMO_PARAMS, label="demo",
        user=request.user,
    )  # fmt: skip
    return redirect("sweep-detail", pk=sweep.pk)


@login_required
@require_POST
def sweep_cancel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    sweep = get_object_or_404(Sweep.objects.only("pk", "created_by_id"), pk=pk)
    if not sweep.may_cancel(request.user):
        raise PermissionDenied("Only the user who started a sweep, or staff, may cancel it.")
    Sweep.cancel(sweep.pk)
    return redirect("sweep-detail", pk=pk)


@require_GET
def sweep_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    sweep = get_object_or_404(Sweep.objects.select_related("host"), pk=pk)
    run_ids = list(
        Run.objects.filter(job__sweep_config__sweep=sweep)
        .order_by("job__sweep_config__position")
        .values_list("pk", flat=True)[: CompareForm.MAX_RUNS]
    )
    context = {
        "sweep": sweep,
        "rows": config_rows(sweep),
        "run_ids": run_ids,
        "may_cancel": sweep.may_cancel(request.user),
    }
    template = "benchmarks/sweep_detail.html#results" if request.htmx else "benchmarks/sweep_detail.html"
    return render(request, template, context)
