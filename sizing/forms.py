"""The sizing page's form (a model, flags or a pasted command line, GPUs, a host, a workload) and the GGUF
head upload's. The typed values' parsers are sizing.parsers; what the form hands the sizing, sizing.inputs.

The form shows what its result used (STYLE 15): `SizingInputs.effective` holds every field's
value as the sizing used it, defaults included, and the page renders the form with it.
Flags have one source: a pasted command that changed since the page last showed it sets
the flags (the fields then show them); otherwise the fields set them and the command is
rewritten to match.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from django import forms

from . import catalogue
from .cmdline import ParsedCommand, parse_command, quant_in_file_name, to_command
from .ggml_types import KV_CACHE_TYPES
from .hparams import ModelParams, ModelSpecError, model_params
from .inputs import UPLOADED_TABLE, RunRecord, SizingInputs, weights_source_label
from .kv import MAX_CTX, MAX_PARALLEL, ServerFlags
from .models import GgufHead
from .parsers import (
    DEFAULT_RAM_GBPS,
    GPU_FIELDS,
    MAX_CPU_CORES,
    MAX_CPU_GHZ,
    MAX_GBPS,
    MAX_GPU_VALUES,
    MAX_NUMBER_CHARS,
    MAX_PARAMS_CHARS,
    MAX_RAM_MIB,
    MIN_GBPS,
    MIN_MEMORY_MIB,
    parse_gbps,
    parse_gpus,
    parse_host,
    parse_mib,
    parse_pasted_metadata,
    parse_weights_size,
)
from .placement import tensors as placement_tensors
from .placement.cpu import MAX_SPEC_CHARS, Cpu
from .placement.efficiency import BACKENDS
from .placement.tensors import WeightTensor
from .placement.types import MAX_DEVICES, UINT32_MAX, MiB
from .workload import Workload


class RepeatedValues(forms.Field):
    """A repeated query parameter (gpu=…&gpu=…) as a list of strings: at most MAX_GPU_VALUES, no NUL."""

    widget = forms.MultipleHiddenInput

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, **kwargs)

    def to_python(self, value: Any) -> list[str]:
        if value in self.empty_values:
            return []
        values = [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]
        if len(values) > MAX_GPU_VALUES:
            raise forms.ValidationError(f"At most {MAX_DEVICES} GPUs (llama.cpp's llama_max_devices).")
        if any("\0" in v for v in values):
            raise forms.ValidationError("A GPU field holds a NUL character (%00); remove it.")
        return values


def choices_of(items: dict[str, Any], label: str) -> list[tuple[str, str]]:
    return [("", label)] + [(key, getattr(item, "name", key)) for key, item in items.items()]


def _same_text(a: str, b: str) -> bool:
    """Equal but for whitespace (browsers send a textarea's newlines as CRLF)."""
    return a.split() == b.split()


CACHE_TYPE_REFUSAL = "unknown cache type (llama-server takes " + ", ".join(KV_CACHE_TYPES) + ")"
MAX_RUN_ID = 2**63 - 1  # a run's id is a 64-bit integer in every database kvlab runs on


def _number(low: float, high: float, **attrs: Any) -> forms.NumberInput:
    """A number input with the field's bounds, so that the browser says what the server will."""

    def shown(value: float) -> str:
        return str(int(value)) if float(value).is_integer() else str(value)

    return forms.NumberInput(attrs={"min": shown(low), "max": shown(high), **attrs})


def _cache_type_field(flag: str) -> forms.ChoiceField:
    """The K or V cache type's field, refused as llama-server refuses the flag."""
    return forms.ChoiceField(
        choices=[(t, t) for t in KV_CACHE_TYPES],
        initial="f16",
        required=False,
        label=flag,
        error_messages={"invalid_choice": f"{flag} %(value).64s: " + CACHE_TYPE_REFUSAL},
    )


class SizingForm(forms.Form):
    source = forms.ChoiceField(
        choices=[("catalogue", "built-in catalogue"), ("gguf", "uploaded GGUF head"), ("params", "pasted metadata")],
        initial="catalogue",
        required=False,
    )
    model = forms.ChoiceField(required=False, label="catalogue model")
    quant = forms.CharField(
        required=False,
        max_length=32,
        label="quantization (weights file)",
        widget=forms.TextInput(attrs={"list": "quant-options", "placeholder": "e.g. Q4_K_M", "autocomplete": "off"}),
    )
    weights = forms.CharField(
        required=False,
        max_length=40,
        label="or the weights' size (GiB, or bytes)",
        widget=forms.TextInput(attrs={"placeholder": "13.35 GiB"}),
    )
    gguf = forms.CharField(required=False, max_length=16, widget=forms.HiddenInput)  # a GgufHead's token
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
    # The command as the page last showed it: a command that differs was pasted or edited
    # since, and sets the flags; an unchanged one follows the fields.
    command_synced = forms.CharField(required=False, max_length=20_000, widget=forms.HiddenInput)
    # The flag fields are read as llama-server reads the flag (sizing.cmdline): the field -c and a
    # command's -c are one rule, with one message.
    ctx_size = forms.CharField(
        required=False, max_length=MAX_NUMBER_CHARS, label="-c (context)", widget=_number(0, MAX_CTX)
    )
    parallel = forms.CharField(
        required=False, max_length=MAX_NUMBER_CHARS, label="-np (blank: auto)", widget=_number(1, MAX_PARALLEL)
    )
    kv_unified = forms.ChoiceField(
        choices=[("", "default"), ("on", "-kvu"), ("off", "--no-kv-unified")],
        required=False,
        label="unified KV",
        error_messages={"invalid_choice": "Unified KV: on (-kvu), off (--no-kv-unified) or blank, not '%(value).64s'."},
    )
    type_k = _cache_type_field("-ctk")
    type_v = _cache_type_field("-ctv")
    flash_attn = forms.ChoiceField(
        choices=[(v, v) for v in ("auto", "on", "off")],
        initial="auto",
        required=False,
        label="-fa",
        error_messages={"invalid_choice": "-fa %(value).64s: give on, off or auto."},
    )
    swa_full = forms.BooleanField(required=False, label="--swa-full")
    no_kv_offload = forms.BooleanField(required=False, label="--no-kv-offload")
    n_ubatch = forms.CharField(
        required=False, max_length=MAX_NUMBER_CHARS, initial=512, label="-ub", widget=_number(1, MAX_CTX)
    )
    n_gpu_layers = forms.CharField(
        required=False,
        max_length=MAX_NUMBER_CHARS,
        label="-ngl (N or all; blank: auto)",
        widget=forms.TextInput(attrs={"placeholder": "auto", "size": 6}),
    )
    # The GPUs: repeated parameters (GPU_FIELDS) read together by parse_gpus().
    gpu = RepeatedValues()
    gpu_mib = RepeatedValues()
    gpu_used = RepeatedValues()
    gpu_gbps = RepeatedValues()
    backend = forms.ChoiceField(
        required=False,
        choices=[("", "each GPU's usual (catalogue)"), *((b, b) for b in BACKENDS if b != "cpu")],
        label="llama.cpp backend",
        help_text="The backend the speed estimates assume for every GPU (blank: the catalogue's for each, CUDA "
        "for a GPU given by its memory).",
        error_messages={"invalid_choice": "The backend: cuda, rocm, vulkan, metal or sycl, not '%(value).64s'."},
    )
    ram_mib = forms.CharField(
        required=False,
        max_length=MAX_NUMBER_CHARS,
        label="system RAM (MiB)",
        widget=_number(MIN_MEMORY_MIB, MAX_RAM_MIB),
    )
    ram_gbps = forms.CharField(
        required=False,
        max_length=MAX_NUMBER_CHARS,
        label=f"RAM bandwidth (GB/s, blank: {DEFAULT_RAM_GBPS:g})",
        widget=_number(MIN_GBPS, MAX_GBPS, step="any"),
    )
    cpu = forms.CharField(
        required=False,
        max_length=MAX_SPEC_CHARS,
        label="host CPU (blank: unknown)",
        widget=forms.TextInput(attrs={"placeholder": "avx512+amx, avx2, arm… or llama.cpp's system_info line"}),
    )
    cpu_cores = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_CPU_CORES, label="CPU cores (blank: 8)",
        help_text="Physical cores: with the clock and the CPU's SIMD, the arithmetic peak of what runs on the CPU.",
    )  # fmt: skip
    cpu_ghz = forms.FloatField(
        required=False, min_value=0.1, max_value=MAX_CPU_GHZ, label="CPU clock (GHz, blank: 3.5)",
        widget=forms.NumberInput(attrs={"step": "any", "min": 0.1, "max": MAX_CPU_GHZ}),
    )  # fmt: skip
    prompt_tokens = forms.IntegerField(required=False, min_value=1, max_value=MAX_CTX, label="p95 prompt tokens")
    output_tokens = forms.IntegerField(required=False, min_value=0, max_value=MAX_CTX, label="p95 output tokens")
    # 4 × LLAMA_MAX_SEQ: more requests than slots only queue, and a measured run can have waited on that many.
    concurrency = forms.IntegerField(required=False, min_value=1, max_value=1024, label="concurrent requests")
    prefer = forms.ChoiceField(
        choices=[("throughput", "throughput"), ("latency", "latency")],
        initial="throughput",
        required=False,
        label="what matters more",
        error_messages={"invalid_choice": "What matters more: throughput or latency, not '%(value).64s'."},
    )
    run = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_RUN_ID, label="use the measured prompts of run #"
    )
    headroom = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=100,
        label="headroom (% more cells)",
        help_text="Recommendations hold each request's p95 prompt + output this much larger (blank: 0 %).",
    )

    def __init__(self, *args: Any, head: GgufHead | None = None, cpu: Cpu | None = None, **kwargs: Any) -> None:
        """`head` and `cpu`: what only a command on this machine gives (kvsize --gguf FILE, --cpu host),
        in place of an uploaded head's token and of a CPU named in the query."""
        super().__init__(*args, **kwargs)
        models = catalogue.models()
        self.fields["model"].choices = choices_of(models, "— pick a model —")
        self.fields["model"].error_messages["invalid_choice"] = (
            "Unknown model '%(value).64s'; the catalogue has: " + ", ".join(sorted(models)) + "."
        )
        self.inputs: SizingInputs | None = None
        self.run_without_model: RunRecord | None = None  # a run whose measured prompts came without a model
        self._local_head, self._local_cpu = head, cpu

    def read_run(self, pk: int) -> RunRecord | None:
        """The run of the history with this id. This form knows no history: a run is always unknown here;
        benchmarks.run_sizing's form reads it from the database."""
        return None

    def clean_weights(self) -> int | None:
        text = self.cleaned_data.get("weights") or ""
        return parse_weights_size(text) if text.strip() else None

    def _flag(self, name: str, flag: str) -> ServerFlags | None:
        """A flag field as llama-server reads `flag TEXT` (None when blank); its refusal is the command's."""
        text = (self.cleaned_data.get(name) or "").strip()
        if not text:
            return None
        parsed = parse_command(shlex.join([flag, text]))
        if parsed.errors:
            raise forms.ValidationError(parsed.errors[0])
        return parsed.flags

    def clean_ctx_size(self) -> int | None:
        # 0 stays 0: like -c 0, it asks for the model's whole context, which --fit may not shrink
        return None if self._flag("ctx_size", "-c") is None else int(self.cleaned_data["ctx_size"])

    def clean_parallel(self) -> int | None:
        flags = self._flag("parallel", "-np")
        return None if flags is None else flags.parallel  # -1: auto, as blank

    def clean_n_ubatch(self) -> int | None:
        flags = self._flag("n_ubatch", "-ub")
        return None if flags is None else flags.n_ubatch

    def clean_n_gpu_layers(self) -> int | None:
        flags = self._flag("n_gpu_layers", "-ngl")
        return None if flags is None else flags.n_gpu_layers  # None: auto, -2: all

    def clean_ram_mib(self) -> int | None:
        text = (self.cleaned_data.get("ram_mib") or "").strip()
        return parse_mib(text, "System RAM: its size", MAX_RAM_MIB) if text else None

    def clean_ram_gbps(self) -> float | None:
        text = (self.cleaned_data.get("ram_gbps") or "").strip()
        return parse_gbps(text, "System RAM") if text else None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        try:
            self.inputs = self._inputs(data)
        except ModelSpecError as exc:
            field = {"gguf": "gguf", "params": "params"}.get(data.get("source") or "", "model")
            raise forms.ValidationError({field: f"This model cannot be sized: {exc}"}) from None
        return data

    def _field_flags(self, data: dict[str, Any]) -> ServerFlags:
        ctx_size = data.get("ctx_size")
        return ServerFlags(
            ctx_size=ctx_size or None,
            parallel=data.get("parallel"),
            kv_unified={"on": True, "off": False}.get(data.get("kv_unified") or ""),
            type_k=data.get("type_k") or "f16",
            type_v=data.get("type_v") or "f16",
            flash_attn=data.get("flash_attn") or "auto",
            swa_full=bool(data.get("swa_full")),
            kv_offload=not data.get("no_kv_offload"),
            n_ubatch=data.get("n_ubatch") or 512,
            n_gpu_layers=data.get("n_gpu_layers"),
            fit_ctx=UINT32_MAX if ctx_size == 0 else ServerFlags.fit_ctx,
        )

    def _inputs(self, data: dict[str, Any]) -> SizingInputs | None:
        flags = self._field_flags(data)
        command, flags_from, command_text = None, "fields", (data.get("command") or "").strip()
        if command_text:
            command = parse_command(command_text, base=ServerFlags())
            if command.errors:
                raise forms.ValidationError({"command": "The command line: " + "; ".join(command.errors)})
            if _same_text(command_text, data.get("command_synced") or ""):
                # Unchanged since the page showed it: the fields set the flags they have, the
                # command the rest (-b), and the command is rewritten to match.
                flags = command.flags = replace(command.flags, **_field_overrides(flags, command.flags))
            else:
                # Pasted or edited since: the command is the whole configuration.
                flags_from, flags = "command", command.flags
        model, label, path, catalogue_id = self._model(data)
        if command and command.model_path:
            path = command.model_path.rsplit("/", 1)[-1]
        weights, weights_source, quant, notes = self._weights(data, catalogue_id, command, flags_from)
        devices, gpu_sources, gpu_effective = parse_gpus({name: data.get(name) or [] for name in GPU_FIELDS})
        if data.get("backend"):
            devices = [replace(d, backend=data["backend"]) for d in devices]
        known = [catalogue.gpus().get(gpu_id) for gpu_id in gpu_effective["gpu"]]
        gpu_mib = devices[0].total // MiB if devices else None
        gpu_label = " + ".join(d.description for d in devices)
        host, host_source = parse_host(data, self._local_cpu)
        tensors, tensors_source, tensor_notes = self._tensors(data, catalogue_id, quant)
        workload, run = self._workload(data)
        if model is None:
            self.run_without_model = run
            return None
        if command and flags_from == "fields":
            command_text = shlex.join(to_command(flags, command.model_path or path) + command.other_args)
        effective = {
            **{name: data.get(name) for name in self.fields},
            **flag_fields(flags),
            "source": data.get("source") or "catalogue",
            "quant": quant or data.get("quant") or "",
            "weights": self.data.get("weights", "") if weights is not None else "",
            "command": command_text,
            "command_synced": command_text,
            "prompt_tokens": workload.prompt_tokens if workload else None,
            "output_tokens": workload.output_tokens if workload else None,
            "concurrency": workload.concurrency if workload else data.get("concurrency"),
            "prefer": workload.preference if workload else data.get("prefer") or "throughput",
            "headroom": workload.headroom_pct if workload else data.get("headroom"),
            **gpu_effective,
        }
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
            workload=workload,
            catalogue_id=catalogue_id,
            quant=quant,
            quant_options=[
                f for q in catalogue.quantizations(catalogue_id) if (f := catalogue.weights_for(catalogue_id, q))
            ],
            weights_notes=notes,
            tensor_notes=tensor_notes,
            sm_counts=[g.sm_count if g else None for g in known],
            compute_capabilities=[g.compute_capability if g else None for g in known],
            flags_from=flags_from,
            effective={k: "" if v is None else v for k, v in effective.items()},
            run=run,
            devices=devices,
            gpu_sources=gpu_sources,
            host=host,
            host_bandwidth_source=host_source,
            tensors=tensors,
            tensors_source=tensors_source,
        )

    def _tensors(
        self, data: dict[str, Any], catalogue_id: str, quant: str
    ) -> tuple[list[WeightTensor] | None, str, list[str]]:
        """The weight tensors, for an exact placement: an uploaded head's table, or the catalogue's shapes
        at the quantization. None (the weights' total spread over the layers) for a size typed in."""
        if data.get("weights") is not None:
            return None, "", []
        if (data.get("source") or "catalogue") == "gguf":
            head = self._head(data)
            table = head.weight_tensors()
            if table is not None:
                return table, UPLOADED_TABLE, []
            if head.weights_bytes is None:
                return None, "", []
            return (
                None,
                "",
                [
                    "This GGUF head was stored without its tensor table (uploaded before kvlab kept it): the "
                    "weights' total is spread evenly over the layers. Upload the file's head again for exact "
                    "per-device weights."
                ],
            )
        if not catalogue_id or not quant:
            return None, "", []
        entry = catalogue.models()[catalogue_id]
        if "tied_embeddings" not in entry.tensor_layout:
            return None, "", []
        try:
            table = placement_tensors.computed(entry.metadata, quant, imatrix=entry.imatrix, **entry.tensor_layout)
        except (KeyError, ValueError, TypeError):
            return None, "", []
        return table, f"computed from the catalogue's tensor shapes at {quant}", []

    def _model(self, data: dict[str, Any]) -> tuple[ModelParams | None, str, str, str]:
        source = data.get("source") or "catalogue"
        if source == "gguf":
            head = self._head(data)
            return model_params(head.metadata), head.filename, head.filename, ""
        if source == "params":
            if not data.get("params"):
                raise forms.ValidationError({"params": "Give the model's GGUF metadata as a JSON object."})
            try:
                metadata = parse_pasted_metadata(data["params"])
            except forms.ValidationError as exc:
                raise forms.ValidationError({"params": exc}) from None
            model = model_params(metadata)
            return model, model.name, "MODEL.gguf", ""
        if not data.get("model"):
            return None, "", "", ""
        entry = catalogue.models()[data["model"]]
        quant = (data.get("quant") or "").strip().upper()
        path = f"{entry.id}-{quant}.gguf" if quant else f"{entry.id}.gguf"
        return model_params(entry.metadata), entry.name, path, entry.id

    def _head(self, data: dict[str, Any]) -> GgufHead:
        if self._local_head is not None:
            return self._local_head
        if not data.get("gguf"):
            raise forms.ValidationError({"gguf": "Upload a GGUF file's head first."})
        if not hasattr(self, "_gguf_head"):
            self._gguf_head = GgufHead.objects.filter(token=data["gguf"]).first()
        if self._gguf_head is None:
            raise forms.ValidationError({"gguf": "That uploaded GGUF head no longer exists; upload it again."})
        return self._gguf_head

    def _weights(
        self, data: dict[str, Any], catalogue_id: str, command: ParsedCommand | None, flags_from: str
    ) -> tuple[int | None, str, str, list[str]]:
        """The weights' bytes, where they come from, the quantization used, and notes.

        A size typed in wins; then an uploaded head's tensor table; then the catalogue's
        figure for the quantization typed in (or named by the command's -m file, when
        the command sets the flags or no quantization is typed). Never a guess."""
        typed_quant = (data.get("quant") or "").strip()
        file_quant = quant_in_file_name(command.model_path) if command and command.model_path else ""
        quant = file_quant if file_quant and (flags_from == "command" or not typed_quant) else typed_quant
        if data.get("weights") is not None:
            return data["weights"], "the size you gave", "", []
        if (data.get("source") or "catalogue") == "gguf":
            head = self._head(data)
            if head.weights_bytes is not None:
                return head.weights_bytes, "gguf tensors", "", []
            return None, "", "", ["the uploaded head's tensor table is incomplete: its weights are unknown"]
        if not catalogue_id or not quant:
            return None, "", "", []
        figure = catalogue.weights_for(catalogue_id, quant)
        if figure is not None:
            return figure.bytes, weights_source_label(figure), figure.quant, []
        entry = catalogue.models()[catalogue_id]
        known = catalogue.quantizations(catalogue_id)
        message = f"{entry.name} has no {quant} weights in the catalogue" + (
            f" (it has: {', '.join(known)})." if known else " (it has none yet)."
        )
        if quant == typed_quant:
            raise forms.ValidationError({"quant": message})
        return None, "", "", [f"The command's model file names {quant}, but {message[0].lower()}{message[1:]}"]

    def _workload(self, data: dict[str, Any]) -> tuple[Workload | None, RunRecord | None]:
        prompt, output = data.get("prompt_tokens"), data.get("output_tokens")
        concurrency = data.get("concurrency") or 1
        run = None
        if data.get("run"):
            run = self.read_run(data["run"])
            measured = run.workload if run else None
            if measured is None:
                raise forms.ValidationError({"run": f"Run #{data['run']} does not exist or has no prompt sizes."})
            prompt = prompt or measured.prompt_tokens
            output = output if output is not None else measured.output_tokens
            concurrency = data.get("concurrency") or measured.concurrency
        if prompt is None and output is None:
            return None, run
        if prompt is None or output is None:
            missing = "prompt_tokens" if prompt is None else "output_tokens"
            raise forms.ValidationError({missing: "Give both the p95 prompt tokens and the p95 output tokens."})
        return Workload(prompt, output, concurrency, data.get("prefer") or "throughput", data.get("headroom") or 0), run


def _field_overrides(fields: ServerFlags, commanded: ServerFlags) -> dict[str, Any]:
    """Every flag the sizing form has a field for (the rest, such as -b, only a command sets): the
    fields' flags over a command's. The -c field's 0 is -c 0, which also keeps --fit from shrinking
    the context; blanked where the command had -c 0, it lets --fit choose again."""
    overrides = {
        name: getattr(fields, name)
        for name in (
            "ctx_size",
            "parallel",
            "kv_unified",
            "type_k",
            "type_v",
            "flash_attn",
            "swa_full",
            "kv_offload",
            "n_ubatch",
            "n_gpu_layers",
        )
    }
    if fields.fit_ctx == UINT32_MAX:
        overrides["fit_ctx"] = UINT32_MAX
    elif commanded.fit_ctx == UINT32_MAX and fields.ctx_size is None:
        overrides["fit_ctx"] = ServerFlags.fit_ctx
    return overrides


def flag_fields(flags: ServerFlags) -> dict[str, Any]:
    """The form's flag fields for these flags."""
    full_context = flags.ctx_size is None and flags.fit_ctx == UINT32_MAX  # -c 0
    return {
        "ctx_size": 0 if full_context else flags.ctx_size,
        "parallel": flags.parallel,
        "kv_unified": "" if flags.kv_unified is None else ("on" if flags.kv_unified else "off"),
        "type_k": flags.type_k,
        "type_v": flags.type_v,
        "flash_attn": flags.flash_attn,
        "swa_full": flags.swa_full,
        "no_kv_offload": not flags.kv_offload,
        "n_ubatch": flags.n_ubatch,
        "n_gpu_layers": "all" if flags.n_gpu_layers == -2 else flags.n_gpu_layers,
    }


def refusal(form: SizingForm) -> dict[str, list[str]]:
    """Why these inputs give no sizing, machine-readable (the page's ?format=json and kvsize --json):
    each field's messages ("__all__" for what no one field is at fault for); {} when they give one."""
    if not form.is_valid():
        return {field: [str(message) for message in messages] for field, messages in form.errors.items()}
    if form.inputs is not None:
        return {}
    run = form.run_without_model
    because = f"run #{run.pk}'s model is not in the catalogue; " if run is not None else ""
    return {"model": [f"Nothing to size: {because}pick a model, give its GGUF metadata or a GGUF head."]}


class GgufUploadForm(forms.Form):
    head = forms.FileField(label="GGUF file (only its first MiBs are sent)")
