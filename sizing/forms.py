"""The sizing page's inputs: a model, flags (or a pasted command line), a GPU, a workload."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from django import forms

from benchmarks.history.metrics import at_rank
from benchmarks.models import Run

from . import catalogue
from .cmdline import ParsedCommand, parse_command
from .ggml_types import KV_CACHE_TYPES
from .hparams import ModelParams, ModelSpecError, model_params
from .kv import MAX_CTX, MAX_PARALLEL, ServerFlags
from .models import GgufHead
from .report import Sizing, size
from .workload import Workload

MAX_PARAMS_CHARS = 200_000


@dataclass
class SizingInputs:
    model: ModelParams
    model_label: str
    model_path: str
    weights_bytes: int | None
    weights_source: str
    flags: ServerFlags
    command: ParsedCommand | None
    gpu_mib: int | None
    gpu_label: str
    workload: Workload | None
    catalogue_id: str = ""

    def size(self) -> Sizing:
        return size(
            self.model,
            self.flags,
            workload=self.workload,
            gpu_mib=self.gpu_mib,
            weights_bytes=self.weights_bytes,
            weights_source=self.weights_source,
            model_path=self.model_path,
        )


def _choices(items: dict[str, Any], label: str) -> list[tuple[str, str]]:
    return [("", label)] + [(key, getattr(item, "name", key)) for key, item in items.items()]


class SizingForm(forms.Form):
    source = forms.ChoiceField(
        choices=[("catalogue", "built-in catalogue"), ("gguf", "uploaded GGUF head"), ("params", "pasted metadata")],
        initial="catalogue",
        required=False,
    )
    model = forms.ChoiceField(required=False, label="catalogue model")
    quant = forms.CharField(required=False, max_length=32, label="quantization (weights file)")
    gguf = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    params = forms.CharField(
        required=False,
        max_length=MAX_PARAMS_CHARS,
        widget=forms.Textarea(
            attrs={"rows": 4, "placeholder": '{"general.architecture": "llama", "llama.block_count": 32, ...}'}
        ),
        label="GGUF metadata (JSON)",
    )
    command = forms.CharField(
        required=False,
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "llama-server -m model.gguf -c 16384 -np 3 ..."}),
        label="or paste a llama-server command",
    )
    ctx_size = forms.IntegerField(required=False, min_value=0, max_value=MAX_CTX, label="-c (context)")
    parallel = forms.IntegerField(required=False, min_value=1, max_value=MAX_PARALLEL, label="-np (blank: auto)")
    kv_unified = forms.ChoiceField(
        choices=[("", "default"), ("on", "-kvu"), ("off", "--no-kv-unified")], required=False, label="unified KV"
    )
    type_k = forms.ChoiceField(choices=[(t, t) for t in KV_CACHE_TYPES], initial="f16", required=False, label="-ctk")
    type_v = forms.ChoiceField(choices=[(t, t) for t in KV_CACHE_TYPES], initial="f16", required=False, label="-ctv")
    flash_attn = forms.ChoiceField(choices=[(v, v) for v in ("auto", "on", "off")], required=False, label="-fa")
    swa_full = forms.BooleanField(required=False, label="--swa-full")
    no_kv_offload = forms.BooleanField(required=False, label="--no-kv-offload")
    n_ubatch = forms.IntegerField(required=False, min_value=1, max_value=65536, label="-ub")
    n_gpu_layers = forms.IntegerField(required=False, min_value=0, max_value=1000, label="-ngl")
    gpu = forms.ChoiceField(required=False, label="GPU")
    gpu_mib = forms.IntegerField(required=False, min_value=256, max_value=4_194_304, label="or its memory (MiB)")
    prompt_tokens = forms.IntegerField(required=False, min_value=1, max_value=MAX_CTX, label="p95 prompt tokens")
    output_tokens = forms.IntegerField(required=False, min_value=0, max_value=MAX_CTX, label="p95 output tokens")
    concurrency = forms.IntegerField(required=False, min_value=1, max_value=1024, label="concurrent requests")
    prefer = forms.ChoiceField(
        choices=[("throughput", "throughput"), ("latency", "latency")], required=False, label="what matters more"
    )
    run = forms.IntegerField(required=False, min_value=1, label="use the measured prompts of run #")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = _choices(catalogue.models(), "— pick a model —")
        self.fields["gpu"].choices = [("", "— none —")] + [
            (g.id, f"{g.name} ({g.memory_mib:,} MiB)") for g in catalogue.gpus().values()
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        try:
            self.inputs = self._inputs(data)
        except forms.ValidationError:
            raise
        except ModelSpecError as exc:
            raise forms.ValidationError(f"This model cannot be sized: {exc}") from None
        return data

    def _inputs(self, data: dict[str, Any]) -> SizingInputs | None:
        model, label, path, weights, weights_source, catalogue_id = self._model(data)
        flags = ServerFlags(
            ctx_size=data.get("ctx_size") or None,
            parallel=data.get("parallel"),
            kv_unified={"on": True, "off": False}.get(data.get("kv_unified") or ""),
            type_k=data.get("type_k") or "f16",
            type_v=data.get("type_v") or "f16",
            flash_attn=data.get("flash_attn") or "auto",
            swa_full=bool(data.get("swa_full")),
            kv_offload=not data.get("no_kv_offload"),
            n_ubatch=data.get("n_ubatch") or 512,
            n_gpu_layers=data.get("n_gpu_layers"),
        )
        command = None
        if data.get("command"):
            command = parse_command(data["command"], base=ServerFlags())
            if command.errors:
                raise forms.ValidationError("The command line: " + "; ".join(command.errors))
            flags = command.flags
            if command.model_path:
                path = command.model_path.rsplit("/", 1)[-1]
        gpu_mib, gpu_label = data.get("gpu_mib"), ""
        if data.get("gpu"):
            gpu = catalogue.gpus()[data["gpu"]]
            gpu_mib, gpu_label = gpu.memory_mib, gpu.name
        elif gpu_mib:
            gpu_label = f"{gpu_mib:,} MiB GPU"
        if model is None:
            return None
        return SizingInputs(
            model=model,
            model_label=label,
            model_path=path,
            weights_bytes=weights,
            weights_source=weights_source,
            flags=flags,
            command=command,
            gpu_mib=gpu_mib,
            gpu_label=gpu_label,
            workload=self._workload(data),
            catalogue_id=catalogue_id,
        )

    def _model(self, data: dict[str, Any]) -> tuple[ModelParams | None, str, str, int | None, str, str]:
        source = data.get("source") or "catalogue"
        if source == "gguf":
            if not data.get("gguf"):
                raise forms.ValidationError("Upload a GGUF file's head first.")
            head = GgufHead.objects.filter(pk=data["gguf"]).first()
            if head is None:
                raise forms.ValidationError("That uploaded GGUF head no longer exists; upload it again.")
            weights = head.weights_bytes
            return (
                model_params(head.metadata),
                head.filename,
                head.filename,
                weights,
                "gguf tensors" if weights is not None else "",
                "",
            )
        if source == "params":
            if not data.get("params"):
                raise forms.ValidationError("Paste the model's GGUF metadata as a JSON object.")
            try:
                metadata = json.loads(data["params"])
            except json.JSONDecodeError as exc:
                raise forms.ValidationError(f"The metadata is not JSON: {exc.msg} at line {exc.lineno}.") from None
            if not isinstance(metadata, dict):
                raise forms.ValidationError("The metadata must be a JSON object of GGUF keys and values.")
            model = model_params(metadata)
            return model, model.name, "MODEL.gguf", None, "", ""
        if not data.get("model"):
            return None, "", "", None, "", ""
        entry = catalogue.models()[data["model"]]
        quant = data.get("quant") or next(iter(entry.files), "")
        if data.get("quant") and quant not in entry.files:
            raise forms.ValidationError(
                f"{entry.name} has no {quant} file size in the catalogue"
                + (f" (known: {', '.join(entry.files)})." if entry.files else ".")
            )
        weights = entry.files.get(quant) if quant else None
        source_label = f"catalogue file size ({quant})" if weights else ""
        path = f"{entry.id}-{quant}.gguf" if quant else f"{entry.id}.gguf"
        return model_params(entry.metadata), entry.name, path, weights, source_label, entry.id

    def _workload(self, data: dict[str, Any]) -> Workload | None:
        prompt, output = data.get("prompt_tokens"), data.get("output_tokens")
        concurrency = data.get("concurrency") or 1
        if data.get("run"):
            measured = measured_workload(data["run"])
            if measured is None:
                raise forms.ValidationError(f"Run #{data['run']} does not exist or has no prompt sizes.")
            prompt = prompt or measured.prompt_tokens
            output = output if output is not None else measured.output_tokens
            concurrency = data.get("concurrency") or measured.concurrency
        if prompt is None and output is None:
            return None
        if prompt is None or output is None:
            raise forms.ValidationError("Give both the p95 prompt tokens and the p95 output tokens.")
        return Workload(prompt, output, concurrency, data.get("prefer") or "throughput")


def measured_workload(run_id: int) -> Workload | None:
    """p95 prompt and output tokens of a run's requests, and its concurrency."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return None
    rows = list(run.requests.values_list("prompt_tokens", "output_tokens", "n_predict"))
    prompts = sorted(p for p, _, _ in rows if p is not None)
    outputs = sorted(o if o is not None else n for _, o, n in rows if (o if o is not None else n) is not None)
    if not prompts:
        return None
    return Workload(at_rank(prompts, 95), at_rank(outputs, 95) if outputs else 0, run.concurrency or 1)


class GgufUploadForm(forms.Form):
    head = forms.FileField(label="GGUF file (only its first MiBs are sent)")


def flags_from_run(run: Run) -> ServerFlags:
    """The llama-server flags a run's record describes."""
    auto = run.parallel == 4 and run.kv_unified is True
    return replace(
        ServerFlags(),
        ctx_size=run.ctx_size or None,
        parallel=None if auto or run.parallel is None else run.parallel,
        kv_unified=None if auto else run.kv_unified,
        type_k=run.cache_type_k or "f16",
        type_v=run.cache_type_v or "f16",
        flash_attn={"on": "on", "off": "off"}.get(run.flash_attn, "auto"),
        kv_offload=run.kv_offload is not False,
    )
