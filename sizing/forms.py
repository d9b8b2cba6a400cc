"""The sizing page's inputs: a model, flags (or a pasted command line), a GPU, a workload.

The form shows what its result used (STYLE 15): `SizingInputs.effective` holds every field's
value as the sizing used it, defaults included, and the page renders the form with it.
Flags have one source: a pasted command that changed since the page last showed it sets
the flags (the fields then show them); otherwise the fields set them and the command is
rewritten to match.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from django import forms
from django.http import QueryDict

from benchmarks.models import Run
from benchmarks.records.metrics import at_rank

from . import catalogue
from .cmdline import ArgNote, ParsedCommand, parse_command, quant_in_file_name, to_command
from .explain_log import Explanation, explain, model_metadata
from .ggml_types import KV_CACHE_TYPES
from .hparams import ModelParams, ModelSpecError, model_params
from .kv import MAX_CTX, MAX_PARALLEL, ServerFlags
from .models import GgufHead
from .placement import tensors as placement_tensors
from .placement.cpu import MAX_SPEC_CHARS, Cpu, CpuSpecError, parse_cpu
from .placement.speed import DEFAULT_HOST_BANDWIDTH, DEFAULT_HOST_BANDWIDTH_SOURCE
from .placement.tensors import WeightTensor
from .placement.types import MAX_DEVICES, UINT32_MAX, Device, Host, MiB
from .report import Sizing, size
from .server_log import LogError, StartupLog, parse_startup_log
from .weights import WeightsFigure
from .workload import Workload

MAX_PARAMS_CHARS = 200_000
GiB = 1024**3
MAX_WEIGHTS_BYTES = 1 << 50  # 1 PiB: beyond any model
# Without a unit, a number this large is bytes; a smaller one is GiB.
BARE_BYTES_FROM = 1 << 20
WEIGHT_UNITS = {"b": 1, "bytes": 1, "kib": 1024, "mib": 1024**2, "gib": GiB, "tib": 1024**4}
WEIGHT_UNITS |= {"kb": 1000, "mb": 10**6, "gb": 10**9, "tb": 10**12}
# The one set of bounds of the sizing page and kvsize (README, "The sizing inputs"). Memory in whole MiB:
# below 256 MiB no device or host runs a model with llama.cpp (its CUDA context alone takes more), and a
# smaller number is GiB typed as MiB; 4 TiB is 14 times the largest GPU (288 GB) and covers unified-memory
# superchips (GB300's 784 GB); 16 TiB is the largest 8-socket server's RAM and beyond any host kvlab sizes.
MIN_MEMORY_MIB = 256
MAX_GPU_MIB = 4_194_304  # 4 TiB
MAX_RAM_MIB = 16 * 1024 * 1024  # 16 TiB
# Bandwidth in GB/s: 0.1 is below the slowest RAM a model runs from (a Pi Zero's LPDDR2 gives ~1 GB/s)
# and keeps the tok/s estimate finite; 100,000 is 12 times B200's HBM3e (8 TB/s).
MIN_GBPS, MAX_GBPS = 0.1, 100_000.0
MAX_NUMBER_CHARS = 64  # a number typed in a field: longer is never valid, and is not echoed back
# The repeated per-GPU query parameters, aligned by position: gpu=ID&gpu_mib=&gpu_used=&gpu_gbps=
GPU_FIELDS = ("gpu", "gpu_mib", "gpu_used", "gpu_gbps")
MAX_GPU_VALUES = 4 * MAX_DEVICES  # values read per parameter; more is refused, not parsed
DEFAULT_RAM_GBPS = DEFAULT_HOST_BANDWIDTH / 1e9


def parse_pasted_metadata(text: str) -> dict[str, Any]:
    """The pasted GGUF metadata as a dict, or a ValidationError that says what is wrong with it."""
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(f"The metadata is not JSON: {exc.msg} at line {exc.lineno}.") from None
    except RecursionError:
        raise forms.ValidationError("The metadata is nested too deeply to be GGUF metadata.") from None
    except ValueError:  # an integer beyond Python's conversion limit (4,300 digits)
        raise forms.ValidationError("The metadata holds a number with too many digits.") from None
    if not isinstance(metadata, dict):
        raise forms.ValidationError("The metadata must be a JSON object of GGUF keys and values.")
    if _holds_nul(metadata):
        raise forms.ValidationError("The metadata holds a NUL character (\\u0000), which no GGUF name or value has.")
    return metadata


def _holds_nul(value: object) -> bool:
    """Whether a key or string anywhere in a JSON value holds a NUL (iterative: JSON nests deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\0" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_weights_size(text: str) -> int:
    """Bytes from "13.35 GiB", "13.35GiB", "14,333,922,848", "14333922848 B", "14.3 GB"; a bare number
    below 1,048,576 is GiB, a larger one bytes. The one parser of the sizing page and kvsize --weights."""
    match = re.fullmatch(r"\s*(\d[\d,_]{0,39}(?:\.\d{1,12})?|\.\d{1,12})\s*([A-Za-z]{0,8})\s*", text)
    if not match:
        raise forms.ValidationError(
            "Give the weights' size as a number of GiB (13.35 GiB), GB (14.3 GB) or bytes (14,333,922,848)."
        )
    number_text, unit = match.group(1).replace(",", "").replace("_", ""), match.group(2).lower()
    try:
        number = Decimal(number_text)
    except InvalidOperation:
        raise forms.ValidationError(f"{number_text!r} is not a number.") from None
    if unit and unit not in WEIGHT_UNITS:
        raise forms.ValidationError(f"Unknown unit {match.group(2)!r}: use TiB, GiB, MiB, KiB, TB, GB, MB, kB or B.")
    scale = WEIGHT_UNITS[unit] if unit else (1 if number >= BARE_BYTES_FROM else GiB)
    value = int(number * scale)
    if not 0 < value <= MAX_WEIGHTS_BYTES:
        raise forms.ValidationError("The weights' size must be above 0 and at most 1 PiB.")
    return value


def _whole(text: str) -> int | None:
    """A whole number as people write one ("16384", "16,384", "16_384"), or None."""
    return int(text.replace(",", "").replace("_", "")) if re.fullmatch(r"\d[\d,_]{0,15}", text) else None


def parse_mib(text: str, what: str, high: int) -> int:
    """A memory size in whole MiB, MIN_MEMORY_MIB to high; the message says when it looks like GiB."""
    value = _whole(text.strip())
    if value is None or not MIN_MEMORY_MIB <= value <= high:
        hint = ""
        if value is not None and 0 < value < MIN_MEMORY_MIB:
            hint = f" ({value} looks like GiB: {value} GiB is {value * 1024:,} MiB)"
        raise forms.ValidationError(f"{what} must be a whole number of MiB from {MIN_MEMORY_MIB} to {high:,}{hint}.")
    return value


def parse_gbps(text: str, what: str) -> float:
    """A bandwidth in GB/s, a plain decimal number from MIN_GBPS to MAX_GBPS (no exponent, no inf or nan)."""
    text = text.strip()
    ok = re.fullmatch(r"\d{1,7}(\.\d{0,6})?|\.\d{1,6}", text)
    value = float(text) if ok else -1.0
    if not MIN_GBPS <= value <= MAX_GBPS:
        raise forms.ValidationError(f"{what}: the bandwidth must be a number of GB/s from 0.1 to {MAX_GBPS:,.0f}.")
    return value


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
    quant: str = ""  # the catalogue quantization whose weights count ("" if none)
    quant_options: list[WeightsFigure] = field(default_factory=list)  # the catalogue's, for this model
    weights_notes: list[str] = field(default_factory=list)  # why a quantization gave no weights
    flags_from: str = "fields"  # "fields" or "command": which one set the flags
    effective: dict[str, Any] = field(default_factory=dict)  # every field as the sizing used it
    run: Run | None = None  # the run whose measured prompts are the workload
    devices: list[Device] = field(default_factory=list)  # the GPUs, in order (CUDA0, CUDA1, ...)
    gpu_sources: list[str] = field(default_factory=list)  # where each GPU's bandwidth comes from
    host: Host | None = None  # system RAM, when its size or bandwidth is given
    host_bandwidth_source: str = ""
    tensors: list[WeightTensor] | None = None  # the weight tensors, when known exactly
    tensors_source: str = ""  # where the tensor table comes from ("" when the weights are spread)
    tensor_notes: list[str] = field(default_factory=list)  # why the tensors are not known exactly
    sm_counts: list[int | None] = field(default_factory=list)  # per GPU, from the catalogue (None: unknown)
    compute_capabilities: list[float | None] = field(default_factory=list)

    @property
    def refusals(self) -> list[ArgNote]:
        return self.command.refusals if self.command else []

    def size(self) -> Sizing:
        return size(
            self.model,
            self.flags,
            workload=self.workload,
            weights_bytes=self.weights_bytes,
            weights_source=self.weights_source,
            model_path=self.model_path,
            devices=self.devices or None,
            host=self.host,
            tensors=self.tensors,
            tensors_in_file_order=self.tensors_source == UPLOADED_TABLE,  # a GGUF's own table: in file order
            sm_counts=self.sm_counts,
            compute_capabilities=self.compute_capabilities,
        )


def _choices(items: dict[str, Any], label: str) -> list[tuple[str, str]]:
    return [("", label)] + [(key, getattr(item, "name", key)) for key, item in items.items()]


def _same_text(a: str, b: str) -> bool:
    """Equal but for whitespace (browsers send a textarea's newlines as CRLF)."""
    return a.split() == b.split()


def catalogue_figures(model_id: str) -> list[WeightsFigure]:
    """The catalogue's weights of a model, one per quantization, in quantizations() order."""
    figures = (catalogue.weights_for(model_id, q) for q in catalogue.quantizations(model_id))
    return [f for f in figures if f is not None]


def weights_source_label(figure: WeightsFigure) -> str:
    if figure.computed:  # the source already says how: "computed from the tensor shapes (...)"
        return f"catalogue {figure.quant}: {figure.source}"
    return f"catalogue {figure.quant}: a published GGUF's file size — {figure.source}"


UPLOADED_TABLE = "the uploaded head's tensor table"  # the tensors' source when they are a GGUF's own
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

    def __init__(self, *args: Any, head: GgufHead | None = None, cpu: Cpu | None = None, **kwargs: Any) -> None:
        """`head` and `cpu`: what only a command on this machine gives (kvsize --gguf FILE, --cpu host),
        in place of an uploaded head's token and of a CPU named in the query."""
        super().__init__(*args, **kwargs)
        models = catalogue.models()
        self.fields["model"].choices = _choices(models, "— pick a model —")
        self.fields["model"].error_messages["invalid_choice"] = (
            "Unknown model '%(value).64s'; the catalogue has: " + ", ".join(sorted(models)) + "."
        )
        self.inputs: SizingInputs | None = None
        self.run_without_model: Run | None = None  # a run whose measured prompts came without a model
        self._local_head, self._local_cpu = head, cpu

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
        known = [catalogue.gpus().get(gpu_id) for gpu_id in gpu_effective["gpu"]]
        gpu_mib = devices[0].total // MiB if devices else None
        gpu_label = " + ".join(d.description for d in devices)
        host, host_source = _host(data, self._local_cpu)
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

    def _workload(self, data: dict[str, Any]) -> tuple[Workload | None, Run | None]:
        prompt, output = data.get("prompt_tokens"), data.get("output_tokens")
        concurrency = data.get("concurrency") or 1
        run = None
        if data.get("run"):
            run = Run.objects.filter(pk=data["run"]).first()
            measured = measured_workload(run) if run else None
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
        return Workload(prompt, output, concurrency, data.get("prefer") or "throughput"), run


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


def as_query(values: dict[str, Any]) -> QueryDict:
    """The sizing page's query string for these field values (SizingInputs.effective, or kvsize's
    options): a list is a repeated parameter, True is "on", and False, None and "" are left out."""
    query = QueryDict(mutable=True)
    for name, value in values.items():
        if isinstance(value, list | tuple):
            query.setlist(name, [str(v) for v in value])
        elif value is True:
            query[name] = "on"
        elif value is not False and value is not None and value != "":  # 0 is a value (-c 0)
            query[name] = str(getattr(value, "pk", value))
    return query


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


def measured_workload(run: Run) -> Workload | None:
    """p95 prompt and output tokens of a run's requests, and its concurrency."""
    rows = list(run.requests.values_list("prompt_tokens", "output_tokens", "n_predict"))
    prompts = sorted(p for p, _, _ in rows if p is not None)
    outputs = sorted(o if o is not None else n for _, o, n in rows if (o if o is not None else n) is not None)
    if not prompts:
        return None
    return Workload(at_rank(prompts, 95), at_rank(outputs, 95) if outputs else 0, run.concurrency or 1)


def query_values(data: Any, name: str) -> list[str]:
    """Every value of a repeated query parameter (a QueryDict), or the one value of a plain dict."""
    if hasattr(data, "getlist"):
        return [str(v) for v in data.getlist(name)]
    value = data.get(name)
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list | tuple) else [str(value)]


def parse_gpus(columns: dict[str, list[str]]) -> tuple[list[Device], list[str], dict[str, list[str]]]:
    """The GPUs of the repeated parameters GPU_FIELDS, aligned by position. Each GPU is a catalogue id
    (`gpu`) or a memory size (`gpu_mib`; the id wins when a row has both, as a single `gpu`/`gpu_mib`
    link always did), with the MiB already in use (`gpu_used`) and a bandwidth in GB/s (`gpu_gbps`; a
    catalogue GPU's published figure otherwise). Returns the devices, the source of each one's bandwidth
    ("" when unknown), and the fields as the sizing used them (one list per parameter). A refusal is a
    ValidationError on the parameter at fault."""
    n_rows = max((len(values) for values in columns.values()), default=0)
    rows = [
        [(columns[name][i] if i < len(columns[name]) else "").strip() for name in GPU_FIELDS] for i in range(n_rows)
    ]
    rows = [row for row in rows if any(row)]
    if len(rows) > MAX_DEVICES:
        raise forms.ValidationError(
            {"gpu": f"At most {MAX_DEVICES} GPUs (llama.cpp's llama_max_devices), not {len(rows)}."}
        )
    devices, sources = [], []
    effective: dict[str, list[str]] = {name: [] for name in GPU_FIELDS}
    for i, (gpu_id, mib_text, used_text, gbps_text) in enumerate(rows):
        what = f"GPU {i + 1}"
        try:
            bandwidth = parse_gbps(gbps_text, what) * 1e9 if gbps_text else None
        except forms.ValidationError as exc:
            raise forms.ValidationError({"gpu_gbps": exc}) from None
        source = "given" if gbps_text else ""
        if gpu_id:
            gpu = catalogue.gpus().get(gpu_id[:64])
            if gpu is None:
                message = f"{what}: {gpu_id[:64]!r} is not a GPU of the catalogue; pick one or give its memory in MiB."
                raise forms.ValidationError({"gpu": message})
            total_mib, description, mib_text = gpu.memory_mib, gpu.name, ""
            if bandwidth is None and gpu.bandwidth is not None:
                bandwidth, source = gpu.bandwidth, f"the catalogue: {gpu.bandwidth_source}"
        elif mib_text:
            try:
                total_mib = parse_mib(mib_text, f"{what}: its memory", MAX_GPU_MIB)
            except forms.ValidationError as exc:
                raise forms.ValidationError({"gpu_mib": exc}) from None
            description, mib_text = f"a GPU of {total_mib:,} MiB", str(total_mib)
        else:
            raise forms.ValidationError({"gpu": f"{what}: pick a GPU from the catalogue or give its memory in MiB."})
        used = _whole(used_text) if used_text else 0
        if used is None or used >= total_mib:
            raise forms.ValidationError(
                {"gpu_used": f"{what}: the memory already in use must be whole MiB below its {total_mib:,} MiB."}
            )
        devices.append(Device(f"CUDA{i}", description, total_mib * MiB, used * MiB, bandwidth))
        sources.append(source)
        for name, value in zip(GPU_FIELDS, (gpu_id, mib_text, str(used) if used else "", gbps_text), strict=True):
            effective[name].append(value)
    return devices, sources, effective


def _host(data: dict[str, Any], local_cpu: Cpu | None = None) -> tuple[Host | None, str]:
    """System RAM: its size (the fit's host memory), bandwidth (the speed estimate) and CPU (where
    llama.cpp keeps weights in RAM: sizing.placement.cpu), when given. `local_cpu`: the CPU kvsize read
    from this machine (--cpu host), which no query string can name."""
    ram_mib, gbps, cpu_text = data.get("ram_mib"), data.get("ram_gbps"), (data.get("cpu") or "").strip()
    try:
        cpu = parse_cpu(cpu_text) if cpu_text else local_cpu
    except CpuSpecError as exc:
        raise forms.ValidationError({"cpu": f"Host CPU: {exc}"}) from None
    if ram_mib is None and gbps is None and cpu is None:
        return None, f"default: {DEFAULT_HOST_BANDWIDTH_SOURCE}"
    total = (ram_mib or 0) * MiB
    return Host(
        total, total, None if gbps is None else gbps * 1e9, cpu=cpu
    ), "given" if gbps else f"default: {DEFAULT_HOST_BANDWIDTH_SOURCE}"


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


class _NotEchoed(forms.Textarea):
    """A textarea that never sends back what was posted in it: the explain-log page answers with what it read
    of the log (its lines, its size, the lines that mattered), not with a copy of up to 2 MiB of text."""

    def format_value(self, value: Any) -> str | None:
        return None


class ExplainLogForm(forms.Form):
    """A llama-server start-up log to explain, and what it may lack: the model, its weights, the command."""

    log = forms.CharField(
        strip=False,  # its length is checked by parse_startup_log (MAX_LOG_CHARS), with a clear message
        widget=_NotEchoed(attrs={"rows": 12, "placeholder": "llama_context: n_ctx = 16384 …"}),
        label="llama-server's start-up log (best with -lv 4)",
    )
    model = forms.ChoiceField(required=False, label="the model, if the log does not print its metadata")
    quant = forms.CharField(required=False, max_length=32, label="its quantization (for the model buffer)")
    weights = forms.CharField(required=False, max_length=40, label="or the weights' size (GiB, or bytes)")
    gguf = forms.CharField(required=False, max_length=16, label="an uploaded GGUF head's token")
    params = forms.CharField(
        required=False,
        max_length=MAX_PARAMS_CHARS,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="or GGUF metadata (JSON)",
    )
    command = forms.CharField(
        required=False,
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "llama-server -m model.gguf -c 16384 …"}),
        label="the command you ran (to see what the server changed)",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = _choices(catalogue.models(), "— from the log —")
        self.startup: StartupLog | None = None
        self.explanation: Explanation | None = None
        self.model_source = ""
        self.tensors: list[WeightTensor] | None = None  # an uploaded GGUF head's table, in file order

    def clean_log(self) -> str:
        text: str = self.cleaned_data["log"]
        try:
            self.startup = parse_startup_log(text)
        except LogError as exc:
            raise forms.ValidationError(str(exc)) from None
        return text

    def clean_weights(self) -> int | None:
        text = self.cleaned_data.get("weights") or ""
        return parse_weights_size(text) if text.strip() else None

    def clean(self) -> dict[str, Any]:
        super().clean()
        data: dict[str, Any] = self.cleaned_data
        if self.errors or self.startup is None:
            return data
        intended = None
        if (data.get("command") or "").strip():
            parsed = parse_command(data["command"])
            if parsed.errors:
                raise forms.ValidationError("The command line: " + "; ".join(parsed.errors))
            intended = parsed.flags
        try:
            model, weights = self._model(data)
            self.explanation = explain(
                self.startup, model, weights_bytes=weights, intended=intended, tensors=self.tensors
            )
        except ModelSpecError as exc:
            raise forms.ValidationError(f"This model cannot be sized: {exc}") from None
        return data

    def _model(self, data: dict[str, Any]) -> tuple[ModelParams | None, int | None]:
        weights = data.get("weights")
        if data.get("gguf"):
            head = GgufHead.objects.filter(token=data["gguf"]).first()
            if head is None:
                raise forms.ValidationError("That uploaded GGUF head no longer exists; upload it again.")
            self.model_source = f"the uploaded GGUF head {head.filename}"
            self.tensors = head.weight_tensors()
            return model_params(head.metadata), weights or head.weights_bytes
        if (data.get("params") or "").strip():
            self.model_source = "the pasted GGUF metadata"
            return model_params(parse_pasted_metadata(data["params"])), weights
        if data.get("model"):
            entry = catalogue.models()[data["model"]]
            quant = (data.get("quant") or "").strip().upper()
            figure = catalogue.weights_for(entry.id, quant) if quant else None
            self.model_source = f"the catalogue's {entry.name}" + (f" {quant}" if figure else "")
            return model_params(entry.metadata), weights or (figure.bytes if figure else None)
        metadata = model_metadata(self.startup) if self.startup else None
        if metadata is None:
            return None, weights
        self.model_source = "the GGUF metadata the log printed"
        return model_params(metadata), weights
