"""The sizing page, GGUF head uploads, share snapshots and "explain this run"."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
import statistics
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.db.models import Q, Subquery
from django.http import HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from benchmarks.models import Run
from benchmarks.sweeps.host_facts import facts_note
from kvlab.http import HtmxHttpRequest
from kvlab.uploads import SizeLimitUploadHandler

from . import catalogue
from .cmdline import quant_in_file_name, to_command
from .forms import (
    GPU_FIELDS,
    MAX_GPU_MIB,
    MAX_GPU_VALUES,
    MIN_MEMORY_MIB,
    ExplainLogForm,
    GgufUploadForm,
    SizingForm,
    SizingInputs,
    as_query,
    flags_from_run,
    query_values,
    refusal,
)
from .gguf import GGUFError, read_gguf_head
from .hparams import ModelSpecError, model_params
from .kv import FORMULA_VERSION, ServerFlags, flags_key
from .memory import COMPUTE_FORMULA
from .models import GgufHead, SizingSnapshot
from .placement.speed import calibrate
from .placement.types import MAX_DEVICES
from .recommend import RANKING
from .render import page_view, text_report
from .report import Sizing, as_json, check_record, size
from .server_log import MAX_LOG_CHARS, MAX_LOG_LINES
from .workload import Workload

MAX_STORED_METADATA = 1 << 20  # bytes of JSON: what sizing reads of a head is far less


def _normalized(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def catalogue_id_for(model_name: str) -> str:
    """The catalogue entry a run's model file names, by its id's letters and digits."""
    wanted = _normalized(model_name)
    matches = [m.id for m in catalogue.models().values() if _normalized(m.id) in wanted]
    return max(matches, key=len) if matches else ""


HISTORY_SCAN = 10_000  # the latest runs searched for the same model and GPU: the page's cost stays bounded
HISTORY_SHOWN = 10


def _history(inputs: SizingInputs) -> list[Run]:
    """Measured runs of the same model (and GPU, when one is given), to show beside the prediction: of the
    latest HISTORY_SCAN runs, whatever the history's size."""
    catalogue_id = inputs.catalogue_id
    if not catalogue_id or len(inputs.devices) > 1:  # a run records one GPU
        return []
    latest = Run.objects.newest_first().values("pk")[:HISTORY_SCAN]
    runs = Run.objects.filter(pk__in=Subquery(latest)).newest_first()
    if inputs.gpu_mib:
        runs = runs.filter(Q(vram_total_mib=inputs.gpu_mib) | Q(vram_total_mib__isnull=True))
    first_word = catalogue_id.split("-")[0]
    candidates = runs.filter(model__icontains=first_word)[:200]
    return [r for r in candidates if catalogue_id_for(r.model) == catalogue_id][:HISTORY_SHOWN]


def _kv_place(flags: ServerFlags) -> str:
    return "on the GPU" if flags.kv_offload else "in system RAM"


def measured_speed(inputs: SizingInputs, result: Sizing, history: list[Run]) -> dict[str, object] | None:
    """The measured decode tok/s of the history's runs of this model and GPU beside kvlab's estimate for each
    run's own flags and workload (speed.calibrate: measured / estimate), and the estimate calibrated by the
    median ratio of the runs that kept the KV where this configuration does."""
    server = result.server
    if server is None or server.speed is None or server.speed.tok_s is None or len(inputs.devices) != 1:
        return None
    rows = []
    for run in history:
        if not run.tok_s_mean or (inputs.quant and quant_in_file_name(run.model) not in ("", inputs.quant)):
            continue
        flags = flags_from_run(run)
        workload = Workload(run.prompt_tokens_max or 1, max(0, run.n_predict_max or 0), run.concurrency or 1)
        try:
            theirs = size(
                inputs.model,
                flags,
                workload=workload,
                weights_bytes=inputs.weights_bytes,
                devices=inputs.devices,
                host=inputs.host,
                tensors=inputs.tensors,
                sm_counts=inputs.sm_counts,
                compute_capabilities=inputs.compute_capabilities,
                with_recommendations=False,
            )
        except (ValueError, ArithmeticError):
            continue
        speed = theirs.server.speed if theirs.server else None
        if speed is None or speed.tok_s is None:
            continue
        ratio = calibrate(speed.tok_s, [run.tok_s_mean])
        if ratio is None:
            continue
        rows.append(
            {
                "pk": run.pk,
                "label": run.label or run.key,
                "key": run.key,
                "measured": round(run.tok_s_mean, 2),
                "estimate": round(speed.tok_s, 2),
                "ratio": round(ratio, 3),
                "kv": _kv_place(flags),
            }
        )
    if not rows:
        return None
    place = _kv_place(result.flags)
    alike = [r["ratio"] for r in rows if r["kv"] == place]
    ratio = statistics.median(alike) if alike else None
    calibrated = server.speed.calibrated(ratio, len(alike)) if ratio else None
    return {
        "runs": rows,
        "placement": place,
        "ratio": ratio,
        "n": len(alike),
        "calibrated_tok_s": None if calibrated is None or calibrated.tok_s is None else round(calibrated.tok_s, 2),
        "label": "" if calibrated is None else calibrated.label,
    }


@require_GET
def size_page(request: HtmxHttpRequest) -> HttpResponse:
    form = SizingForm(request.GET or None)
    if request.GET.get("format") == "json":
        return _size_json(form)
    context = _page_context(form)
    host_id = request.GET.get("host", "")
    if host_id.isdigit() and len(host_id) <= 12:  # "size for this host" on /hosts/: say where the values came from
        context["host_note"] = facts_note(int(host_id))
    status = 200
    if form.is_bound:
        if form.is_valid() and form.inputs is not None:
            inputs = form.inputs
            result = inputs.size()
            history = _history(inputs)
            context.update(
                # The form as the result used it, defaults included: "Size it" again changes nothing.
                form=SizingForm(initial=inputs.effective),
                gpu_rows=gpu_rows(inputs.effective, add="add_gpu" in request.GET),
                inputs=inputs,
                result=result,
                view=_view(inputs, result, measured_speed(inputs, result, history)),
                effective=inputs.effective,
                history=history,
                calibration=calibration(inputs.model.name, inputs.flags, result.plan.compute_estimate),
                verify_url=_verify_url(result),
                query=request.GET.urlencode(),
                quant_links=_quant_links(inputs),
            )
        elif not form.is_valid():
            status = 400
        elif form.run_without_model is not None:
            context["unsized_run"] = form.run_without_model
    template = "sizing/size.html#results" if request.htmx else "sizing/size.html"
    return render(request, template, context, status=status)


def _size_json(form: SizingForm) -> JsonResponse:
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


def _view(inputs: SizingInputs, result: Sizing, measured: dict[str, object] | None = None) -> dict[str, object]:
    record = None
    run = inputs.run
    if run is not None and flags_key(flags_from_run(run)) == flags_key(inputs.flags):
        failed = run.requests.filter(ok=False) if run.n_ok < run.n_requests else run.requests.none()
        statuses = failed.values_list("http_status", flat=True)
        failure = ", ".join(f"HTTP {status}" for status in sorted(set(filter(None, statuses))))
        record = check_record(result, run.n_ok, run.n_requests, failure)
    return page_view(
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


def _quant_links(inputs: SizingInputs) -> list[tuple[str, str]]:
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


@csrf_exempt  # checked by upload_gguf_checked once the size cap is in place
@login_required
@require_POST
def upload_gguf(request: HtmxHttpRequest) -> HttpResponse:
    request.upload_handlers.insert(0, _HeadCapHandler(request, settings.KVLAB_GGUF_HEAD_MAX_BYTES))
    return upload_gguf_checked(request)


class _HeadCapHandler(SizeLimitUploadHandler):
    """Keeps only the first bytes of a GGUF: its head. The rest is never stored."""

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        room = self.limit - self.received
        self.received += len(raw_data)
        if room <= 0:
            return None
        return raw_data[:room]

    def handle_raw_input(self, *args: object, **kwargs: object) -> None:
        return None


@csrf_protect
def upload_gguf_checked(request: HtmxHttpRequest) -> HttpResponse:
    form = GgufUploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return _size_error(request, "Choose a GGUF file to upload.")
    upload = form.cleaned_data["head"]
    data = upload.read(settings.KVLAB_GGUF_HEAD_MAX_BYTES)
    try:
        head = read_gguf_head(io.BytesIO(data))
        model_params(head.metadata)
    except (GGUFError, ModelSpecError) as exc:
        return _size_error(request, f"{upload.name}: {exc}")
    metadata = head.metadata_without_vocab()
    if len(json.dumps(metadata)) > MAX_STORED_METADATA:
        return _size_error(request, f"{upload.name}: its metadata (without the tokenizer) is over 1 MiB")
    stored = GgufHead.objects.create(
        filename=upload.name.replace("\0", "")[:255],
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        metadata=metadata,
        weights_bytes=head.weights_bytes,
        n_tensors=len(head.tensors),
        tensors=GgufHead.table_of(head.tensors) if head.complete else None,
        uploaded_by=request.user,
    )
    return redirect(f"{reverse('sizing')}?{_with_head(request.POST.get('query', ''), stored.token)}")


# What describes the previous model; the flags, command, GPU and workload stay.
_MODEL_FIELDS = ("source", "gguf", "model", "quant", "params", "weights")


def _with_head(query: str, head_token: str) -> str:
    """The sizing page's query as it was before the upload, with the uploaded head as the model."""
    params = QueryDict(query[:20_000], mutable=True)
    for name in _MODEL_FIELDS:
        params.pop(name, None)
    params.update({"source": "gguf", "gguf": head_token})
    return params.urlencode()


def calibration(model_name: str, flags: ServerFlags, compute_estimate: int) -> dict[str, object]:
    """What launched servers reported for this model: the exact flags if measured, else a
    correction of the compute-buffer estimate (the median reported/estimated ratio)."""
    from benchmarks.models import CalibrationPoint

    points = list(
        CalibrationPoint.objects.filter(model_name=model_name).select_related("config").order_by("-created_at")[:200]
    )
    exact = next((p for p in points if p.flags_key == flags_key(flags)), None)
    ratios = [p.reported_compute_mib * 1048576 / p.predicted_compute_bytes for p in points if p.predicted_compute_bytes]
    ratio = statistics.median(ratios) if ratios else None
    return {
        "exact": exact,
        "n": len(ratios),
        "ratio": ratio,
        "calibrated_compute": int(compute_estimate * ratio) if ratio else None,
    }


def _verify_url(result: Sizing) -> str:
    """The sweep form, prefilled with the recommendations' flags."""
    flags = [shlex.join(r.command[3:]) for r in result.recommendations[:5]]  # without "llama-server -m MODEL"
    return f"{reverse('sweep-new')}?{urlencode([('flags', f) for f in flags])}" if flags else ""


def _page_context(form: SizingForm) -> dict[str, object]:
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


def _size_error(request: HtmxHttpRequest, message: str) -> HttpResponse:
    context = _page_context(SizingForm()) | {"upload_error": message}
    return render(request, "sizing/size.html", context, status=400)


@login_required
@require_POST
def share(request: HtmxHttpRequest) -> HttpResponse:
    query = request.POST.get("query", "")
    if any("\0" in name or "\0" in value for name, values in QueryDict(query).lists() for value in [*values, ""]):
        return _size_error(request, "The sizing to share holds a NUL character (%00); remove it and share again.")
    form = SizingForm(QueryDict(query))
    if not form.is_valid() or form.inputs is None:
        return render(request, "sizing/size.html", _page_context(form), status=400)
    inputs = form.inputs
    result = inputs.size()
    measured = measured_speed(inputs, result, _history(inputs))
    title = inputs.model_label + (f" on {inputs.gpu_label}" if inputs.gpu_label else "")
    snapshot = SizingSnapshot.objects.create(
        inputs=dict(QueryDict(query).lists()),
        title=title[:300],
        result=as_json(result),
        report_text=text_report(result, measured=measured),
        view=_view(inputs, result, measured),
        formula_version=FORMULA_VERSION,
        created_by=request.user,
    )
    return redirect("sizing-snapshot", slug=snapshot.slug)


@require_GET
def snapshot_page(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    snapshot = get_object_or_404(SizingSnapshot.objects.select_related("created_by"), slug=slug)
    live_url = f"{reverse('sizing')}?{urlencode(snapshot.inputs, doseq=True)}"
    return render(request, "sizing/snapshot.html", {"snapshot": snapshot, "live_url": live_url})


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
    if run.vram_total_mib:
        query["gpu_mib"] = run.vram_total_mib
    return redirect(f"{reverse('sizing')}?{urlencode(query)}")


@csrf_protect
@require_http_methods(["GET", "POST"])
def explain_log(request: HtmxHttpRequest) -> HttpResponse:
    """Paste a llama-server start-up log: kvlab's prediction beside every figure it printed. Read-only,
    open to anyone; POST because a log is too long for a URL."""
    context: dict[str, object] = {"max_chars": MAX_LOG_CHARS, "max_lines": MAX_LOG_LINES}
    status = 200
    try:
        data = request.POST if request.method == "POST" else None
        form = ExplainLogForm(data)
        bound = form.is_bound
    except RequestDataTooBig:
        form, bound, status = ExplainLogForm(), False, 413
        context["too_big"] = (
            f"The log is too large to send: kvlab reads start-up logs of at most {MAX_LOG_CHARS // (1024 * 1024)} MiB. "
            "Paste its first lines, up to 'server is listening'."
        )
    context["form"] = form
    if bound:
        if form.is_valid() and form.startup is not None:
            context.update(startup=form.startup, explanation=form.explanation, model_source=form.model_source)
        else:
            status = 400
    template = "sizing/explain_log.html#explanation" if request.htmx else "sizing/explain_log.html"
    return render(request, template, context, status=status)
