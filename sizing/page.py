"""What the sizing page shows of a sizing, whoever serves it: the form's context, its GPU rows, the links
beside the result, its JSON, and the refusal page. No history: benchmarks.run_sizing adds a run's."""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse

from kvlab.http import HtmxHttpRequest

from . import catalogue
from .cmdline import to_command
from .forms import SizingForm, refusal
from .inputs import SizingInputs
from .kv import FORMULA_VERSION
from .memory import COMPUTE_FORMULA
from .parsers import GPU_FIELDS, MAX_GPU_MIB, MAX_GPU_VALUES, MIN_MEMORY_MIB, as_query, query_values
from .placement.types import MAX_DEVICES
from .recommend import RANKING
from .render import page_data
from .report import RecordCheck, as_json
from .size import Sizing


def size_json(form: SizingForm) -> JsonResponse:
    """The sizing of the page's query as JSON: what kvsize --json prints for the same inputs (report.as_json),
    or each field's refusal with a 400 (forms.refusal)."""
    errors = refusal(form)
    if errors or form.inputs is None:
        return JsonResponse({"input_errors": errors}, status=400)
    return JsonResponse(as_json(form.inputs.size()))


def gpu_rows(values: object, *, add: bool = False) -> list[dict[str, str]]:
    """The form's GPU rows (GPU_FIELDS aligned by position) from the effective inputs or the query string;
    at least one, and one blank row more when "add a GPU" was pressed without JavaScript."""
    columns = {name: [v[:64] for v in query_values(values, name)][:MAX_GPU_VALUES] for name in GPU_FIELDS}
    n = max((len(c) for c in columns.values()), default=0)
    rows = [{name: (columns[name][i] if i < len(columns[name]) else "") for name in GPU_FIELDS} for i in range(n)]
    if not rows or (add and len(rows) < MAX_DEVICES):
        rows.append(dict.fromkeys(GPU_FIELDS, ""))
    gpus = catalogue.gpus()
    for row in rows:
        known = gpus.get(row["gpu"])
        row["gbps_placeholder"] = f"{known.bandwidth_gbps:g}" if known and known.bandwidth_gbps else "unknown"
    return rows


def sizing_view(
    inputs: SizingInputs,
    result: Sizing,
    *,
    measured: dict[str, object] | None = None,
    record: RecordCheck | None = None,
) -> dict[str, object]:
    """What the page shows of this sizing (render.page_data), with a run's measured speed and record check
    when the history has them."""
    return page_data(
        result,
        title=inputs.model_label,
        command_line=shlex.join(to_command(inputs.flags, inputs.model_path)),
        gpu_label=inputs.gpu_label,
        notes=inputs.command.notes if inputs.command else (),
        flags_from=inputs.flags_from if inputs.command else "",
        quant_options=inputs.quant_options if result.plan.weights_bytes is None else (),
        weights_notes=inputs.weights_notes,
        record=record,
        model_path=inputs.model_path,
        gpu_sources=inputs.gpu_sources,
        host_bandwidth_source=inputs.host_bandwidth_source,
        tensors_source=inputs.tensors_source,
        tensor_notes=inputs.tensor_notes,
        measured=measured,
    )


def quant_links(inputs: SizingInputs) -> list[tuple[str, str]]:
    """(quantization, URL of this sizing with it) for each the catalogue has, when the weights are unknown.

    Built from the values the result used (as the form shows them), not from the request's query
    string: pressing "Size it" again gives the same links.
    """
    if inputs.weights_bytes is not None:
        return []
    params = as_query({k: v for k, v in inputs.effective.items() if k not in ("weights", "command_synced")})
    links = []
    for figure in inputs.quant_options:
        params["quant"] = figure.quant
        links.append((figure.quant, f"{reverse('sizing')}?{params.urlencode()}"))
    return links


def verify_url(result: Sizing) -> str:
    """The sweep form, prefilled with the recommendations' flags."""
    flags = [shlex.join(r.command[3:]) for r in result.recommendations[:5]]  # without "llama-server -m MODEL"
    return f"{reverse('sweep-new')}?{urlencode([('flags', f) for f in flags])}" if flags else ""


def results_context(request: HtmxHttpRequest, inputs: SizingInputs, result: Sizing) -> dict[str, Any]:
    """The page's context for a valid sizing, but for what the history adds (its view, runs, calibration)."""
    return {
        # The form as the result used it, defaults included: "Size it" again changes nothing.
        "form": SizingForm(initial=inputs.effective),
        "gpu_rows": gpu_rows(inputs.effective, add="add_gpu" in request.GET),
        "inputs": inputs,
        "result": result,
        "effective": inputs.effective,
        "verify_url": verify_url(result),
        "query": request.GET.urlencode(),
        "quant_links": quant_links(inputs),
    }


def page_context(form: SizingForm) -> dict[str, object]:
    return {
        "form": form,
        # What was typed, when the form is invalid (the valid page shows the effective inputs instead).
        "gpu_rows": gpu_rows(form.data if form.is_bound else {}, add="add_gpu" in form.data),
        "gpu_choices": [(g.id, f"{g.name} ({g.memory_mib:,} MiB)") for g in catalogue.gpus().values()],
        "ranking": RANKING,
        "estimate_formula": COMPUTE_FORMULA,
        "formula_version": FORMULA_VERSION,
        "head_max": settings.KVLAB_GGUF_HEAD_MAX_BYTES,
        "gpu_mib_bounds": (MIN_MEMORY_MIB, MAX_GPU_MIB),
    }


def size_error(request: HtmxHttpRequest, message: str) -> HttpResponse:
    context = page_context(SizingForm()) | {"upload_error": message}
    return render(request, "sizing/size.html", context, status=400)
