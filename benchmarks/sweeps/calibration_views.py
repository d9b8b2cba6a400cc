"""A host's calibration: start one (staff), follow it, cancel it; its runs are llama-bench's, in the history."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from kvlab.http import HtmxHttpRequest

from ..jobs.lifecycle import worker_available
from ..models import HostCalibration, LaunchHost, Run
from .calibration import create_calibration
from .calibration_form import CalibrationForm

MAX_RUNS_SHOWN = 50


@staff_member_required
@require_http_methods(["GET", "POST"])
def host_calibrate(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    host = get_object_or_404(LaunchHost, pk=pk)
    form = CalibrationForm(request.POST or None, host=host)
    recent = HostCalibration.objects.filter(host=host).order_by("-id")[:10]
    context = {"form": form, "host": host, "recent": recent}
    if request.method == "GET":
        return render(request, "benchmarks/calibration_form.html", context)
    if not host.launchable:
        context["submit_error"] = f"The worker on {host.name} announced no llama-server binary or model directory."
        return render(request, "benchmarks/calibration_form.html", context, status=400)
    if not form.is_valid():
        return render(request, "benchmarks/calibration_form.html", context, status=400)
    problem = worker_available()
    if problem:
        return render(request, "benchmarks/calibration_form.html", {**context, "submit_error": problem}, status=503)
    d = form.cleaned_data
    calibration = create_calibration(host, d["model_file"], form.params(), binary=d["binary"], user=request.user)
    return redirect("calibration-detail", pk=calibration.pk)


@staff_member_required
@require_GET
def calibration_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    calibration = get_object_or_404(HostCalibration.objects.select_related("host", "file_import"), pk=pk)
    runs = (
        list(Run.objects.filter(first_import=calibration.file_import).order_by("pk")[:MAX_RUNS_SHOWN])
        if calibration.file_import_id
        else []
    )
    rows = [(run, _kind(run.label), (run.summary or {}).get("total_tok_s")) for run in runs]
    context = {"calibration": calibration, "rows": rows}
    template = "benchmarks/calibration_detail.html#state" if request.htmx else "benchmarks/calibration_detail.html"
    return render(request, template, context)


def _kind(label: str) -> str:
    """llama-bench's test name in words: pp N is the prompt's rate, tg N the generation's."""
    return "prompt processing" if label.startswith("pp") else "generation" if label.startswith("tg") else "both"


@staff_member_required
@require_POST
def calibration_cancel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    calibration = get_object_or_404(HostCalibration.objects.only("pk"), pk=pk)
    HostCalibration.cancel(calibration.pk)
    return redirect("calibration-detail", pk=pk)
