"""Launch hosts and sweeps in the browser (staff create them), and the sweep result page."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from kvlab.http import HtmxHttpRequest

from ..history.forms import CompareForm
from ..jobs.lifecycle import worker_available
from ..models import LaunchHost, Run, Sweep
from . import demo
from .forms import LaunchHostForm, SweepForm
from .lifecycle import create_sweep
from .results import config_rows


@staff_member_required
@require_GET
def host_list(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "benchmarks/host_list.html", {"hosts": LaunchHost.objects.all()})


@staff_member_required
@require_http_methods(["GET", "POST"])
def host_edit(request: HtmxHttpRequest, pk: int | None = None) -> HttpResponse:
    host = get_object_or_404(LaunchHost, pk=pk) if pk else None
    form = LaunchHostForm(request.POST or None, instance=host)
    if request.method == "POST":
        if not form.is_valid():
            return render(request, "benchmarks/host_form.html", {"form": form, "host": host}, status=400)
        form.save()
        return redirect("host-list")
    return render(request, "benchmarks/host_form.html", {"form": form, "host": host})


@require_GET
def sweep_list(request: HtmxHttpRequest) -> HttpResponse:
    sweeps = Sweep.objects.select_related("host").defer("params")[:100]
    return render(request, "benchmarks/sweep_list.html", {"sweeps": sweeps})


@staff_member_required
@require_http_methods(["GET", "POST"])
def sweep_new(request: HtmxHttpRequest) -> HttpResponse:
    initial = {"flag_sets": "\n".join(request.GET.getlist("flags"))} if request.GET.getlist("flags") else None
    form = SweepForm(request.POST or None, initial=initial)
    if request.method == "GET":
        return render(request, "benchmarks/sweep_form.html", {"form": form})
    if not form.is_valid():
        return render(request, "benchmarks/sweep_form.html", {"form": form}, status=400)
    problem = worker_available()
    if problem:
        return render(request, "benchmarks/sweep_form.html", {"form": form, "submit_error": problem}, status=503)
    d = form.cleaned_data
    sweep = create_sweep(
        d["host"], d["model_file"], d["flag_sets"], form.params(), label=d["label"], preference=d["preference"],
        user=request.user,
    )  # fmt: skip
    return redirect("sweep-detail", pk=sweep.pk)


@staff_member_required
@require_POST
def sweep_demo(request: HtmxHttpRequest) -> HttpResponse:
    problem = worker_available()
    if problem:
        return render(request, "benchmarks/sweep_form.html", {"form": SweepForm(), "submit_error": problem}, status=503)
    sweep = create_sweep(
        demo.ensure_demo_host(), demo.DEMO_MODEL, demo.DEMO_FLAG_SETS, demo.DEMO_PARAMS, label="demo",
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
