"""The sizing pages that need no history: GGUF head uploads, shared snapshots and explaining a start-up log.

The sizing page itself, its share button and "explain this run" read runs of the history:
benchmarks.run_sizing serves them."""

from __future__ import annotations

import hashlib
import io
import json
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from kvlab.http import HtmxHttpRequest
from kvlab.uploads import SizeLimitUploadHandler

from .explain_log_form import ExplainLogForm
from .forms import GgufUploadForm
from .gguf import GGUFError, read_gguf_head
from .hparams import ModelSpecError, model_params
from .models import GgufHead, SizingSnapshot
from .page import size_error
from .server_log import MAX_LOG_CHARS, MAX_LOG_LINES

MAX_STORED_METADATA = 1 << 20  # bytes of JSON: what sizing reads of a head is far less


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
        return size_error(request, "Choose a GGUF file to upload.")
    upload = form.cleaned_data["head"]
    data = upload.read(settings.KVLAB_GGUF_HEAD_MAX_BYTES)
    try:
        head = read_gguf_head(io.BytesIO(data))
        model_params(head.metadata)
    except (GGUFError, ModelSpecError) as exc:
        return size_error(request, f"{upload.name}: {exc}")
    metadata = head.metadata_without_vocab()
    if len(json.dumps(metadata)) > MAX_STORED_METADATA:
        return size_error(request, f"{upload.name}: its metadata (without the tokenizer) is over 1 MiB")
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


@require_GET
def snapshot_page(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    snapshot = get_object_or_404(SizingSnapshot.objects.select_related("created_by"), slug=slug)
    live_url = f"{reverse('sizing')}?{urlencode(snapshot.inputs, doseq=True)}"
    return render(request, "sizing/snapshot.html", {"snapshot": snapshot, "live_url": live_url})


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
