"""The sizing page, its share button and "explain this run": the sizing (sizing.page) with the history
beside it — a run's measured prompts as the workload, measured speed, server reports, the run's record."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from benchmarks.models import Run
from benchmarks.sweeps.host_facts import facts_note
from kvlab.http import HtmxHttpRequest
from sizing import catalogue
from sizing.cmdline import quant_in_file_name
from sizing.kv import FORMULA_VERSION
from sizing.models import SizingSnapshot
from sizing.page import page_context, results_context, size_error, size_json, sizing_view
from sizing.render import text_report
from sizing.report import as_json

from .history import calibration, history, measured_speed, record_check
from .runs import RunSizingForm, catalogue_gpu_for, catalogue_id_for, flags_from_run


@require_GET
def size_page(request: HtmxHttpRequest) -> HttpResponse:
    form = RunSizingForm(request.GET or None)
    if request.GET.get("format") == "json":
        return size_json(form)
    context = page_context(form)
    host_id = request.GET.get("host", "")
    if host_id.isdigit() and len(host_id) <= 12:  # "size for this host" on /hosts/: say where the values came from
        context["host_note"] = facts_note(int(host_id))
    status = 200
    if form.is_bound:
        if form.is_valid() and form.inputs is not None:
            inputs = form.inputs
            result = inputs.size()
            runs = history(inputs)
            measured = measured_speed(inputs, result, runs)
            context.update(
                results_context(request, inputs, result),
                view=sizing_view(inputs, result, measured=measured, record=record_check(form.run, inputs, result)),
                history=runs,
                calibration=calibration(inputs.model.name, inputs.flags, result.plan.compute_estimate),
            )
        elif not form.is_valid():
            status = 400
        elif form.run_without_model is not None:
            context["unsized_run"] = form.run_without_model
    template = "sizing/size.html#results" if request.htmx else "sizing/size.html"
    return render(request, template, context, status=status)


@login_required
@require_POST
def share(request: HtmxHttpRequest) -> HttpResponse:
    query = request.POST.get("query", "")
    if any("\0" in name or "\0" in value for name, values in QueryDict(query).lists() for value in [*values, ""]):
        return size_error(request, "The sizing to share holds a NUL character (%00); remove it and share again.")
    form = RunSizingForm(QueryDict(query))
    if not form.is_valid() or form.inputs is None:
        return render(request, "sizing/size.html", page_context(form), status=400)
    inputs = form.inputs
    result = inputs.size()
    measured = measured_speed(inputs, result, history(inputs))
    title = inputs.model_label + (f" on {inputs.gpu_label}" if inputs.gpu_label else "")
    snapshot = SizingSnapshot.objects.create(
        inputs=dict(QueryDict(query).lists()),
        title=title[:300],
        result=as_json(result),
        report_text=text_report(result, measured=measured),
        view=sizing_view(inputs, result, measured=measured, record=record_check(form.run, inputs, result)),
        formula_version=FORMULA_VERSION,
        created_by=request.user,
    )
    return redirect("sizing-snapshot", slug=snapshot.slug)


@require_GET
def explain_run(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Open the sizing for a run's model, GPU, flags and workload."""
    run = get_object_or_404(Run, pk=pk)
    flags = flags_from_run(run)
    query: dict[str, object] = {"run": run.pk}
    catalogue_id = catalogue_id_for(run.model)
    if catalogue_id:
        query["model"] = catalogue_id
        quant = quant_in_file_name(run.model)
        if quant and catalogue.weights_for(catalogue_id, quant):
            query["quant"] = quant
    if flags.ctx_size:
        query["ctx_size"] = flags.ctx_size
    if flags.parallel is not None:
        query["parallel"] = flags.parallel
        if flags.kv_unified is not None:
            query["kv_unified"] = "on" if flags.kv_unified else "off"
    query.update(type_k=flags.type_k, type_v=flags.type_v, flash_attn=flags.flash_attn)
    if not flags.kv_offload:
        query["no_kv_offload"] = "on"
    gpu_id = catalogue_gpu_for(run.gpu, run.vram_total_mib)
    if gpu_id:
        query["gpu"] = gpu_id  # its bandwidth and SMs, for the speed and what nvidia-smi shows
    if run.vram_total_mib:
        query["gpu_mib"] = run.vram_total_mib
    return redirect(f"{reverse('sizing')}?{urlencode(query)}")
