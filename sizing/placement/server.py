"""What llama-server b11434 will do with a command on the user's devices. Pure.

One call ties the room's parts together, in the server's own order: its adjustments before the
fit (`server_pre_fit`: `-np` auto → 4 unified slots, `--kv-unified-per-slot`), the fit
(`fit.fit_params`, which measures candidate placements with `breakdown.make_measure`), the
context llama_context then makes (`fit.context_after_fit`), the memory per device at the fitted
placement (`breakdown.measure`), what nvidia-smi shows beyond it (`overhead`), and the decode
speed to expect (`speed.estimate`).

Weights are exact when the tensor table is known (a GGUF head, or computed from the catalogue's
shapes); with only a total they are spread evenly over the layers (`speed.approximate_tensors`),
and every figure that rests on that says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..hparams import ModelParams
from ..kv import KVLayout, ServerFlags, kv_layout
from . import breakdown, fit, overhead, prefill, speed
from . import cpu as cpu_types
from . import host_memory as host_ram
from .fit import ContextSize
from .prefill import PrefillEstimate
from .speed import SpeedEstimate
from .tensors import WeightTensor
from .types import DEFAULT_FIT_TARGET_MIB, Device, FitResult, Host, MiB, Params, Usage

APPROXIMATE_WEIGHTS = (
    "the weights' total spread evenly over the layers (no tensor table): per-device weights are approximate"
)


@dataclass(frozen=True)
class DeviceRow:
    """One device (or the host) at the fitted placement."""

    name: str  # "CUDA0" or "Host"
    description: str  # "NVIDIA GeForce RTX 5060 Ti" or "system RAM"
    total: int | None  # bytes; None: not given
    free: int | None  # before the server starts
    usage: Usage  # what llama.cpp counts (common_memory_breakdown_print's model + context + compute)
    margin: int  # --fit-target for a GPU; 0 for the host
    outside: overhead.Overhead | None = None  # what nvidia-smi shows beyond llama.cpp's count (GPUs)

    @property
    def is_host(self) -> bool:
        return self.name == "Host"

    @property
    def free_after(self) -> int | None:
        return None if self.free is None else self.free - self.usage.total

    @property
    def fits(self) -> bool | None:
        """Does llama.cpp's count fit the free memory (the allocation itself)? None for the host when
        its size is not given."""
        return None if self.free_after is None else self.free_after >= 0


@dataclass
class ServerPlan:
    fit: FitResult
    given: Params  # the parameters the command sets, after the server's own adjustments
    params: Params  # what the server runs with (after the fit)
    flags: ServerFlags  # the same as kvlab's flags: sizing.kv and the prediction use these
    layout: KVLayout
    context: ContextSize
    rows: list[DeviceRow] = field(default_factory=list)
    error: str = ""  # llama-server cannot load this placement (e.g. -sm row on CUDA); rows are empty
    weights_note: str = ""  # APPROXIMATE_WEIGHTS when the weights are spread evenly
    speed: SpeedEstimate | None = None
    prefill: PrefillEstimate | None = None  # the workload's prompt (sizing.placement.prefill)
    pre_fit_log: list[tuple[str, str]] = field(default_factory=list)
    cpu: cpu_types.Cpu | None = None  # the host CPU the answer assumed (None: not given)
    host_memory: host_ram.HostMemory | None = None  # the host's RAM beside what --fit counts
    host_notes: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> list[DeviceRow]:
        return [r for r in self.rows if not r.is_host]

    @property
    def host(self) -> DeviceRow | None:
        return next((r for r in self.rows if r.is_host), None)

    @property
    def loads(self) -> bool | None:
        """Will every GPU's allocation succeed (llama.cpp's count within its free memory)? None when a
        figure it rests on is unknown or no GPU is given."""
        if self.error:
            return False
        gpus = self.gpus
        if not gpus or any(r.fits is None for r in gpus):
            return None
        return all(r.fits for r in gpus)


def params_of(flags: ServerFlags, layout: KVLayout, n_devices: int) -> Params:
    """The llama_model_params / llama_context_params a command line gives (before the server's own
    adjustments): -np -1 stays -1 here (server_pre_fit resolves it)."""
    split = tuple(flags.tensor_split) + (0.0,) * max(0, n_devices - len(flags.tensor_split))
    return Params(
        n_ctx=flags.ctx_size or 0,
        n_gpu_layers=-1 if flags.n_gpu_layers is None else flags.n_gpu_layers,
        split_mode=flags.split_mode,
        main_gpu=flags.main_gpu,
        tensor_split=split if any(split) else (),
        overrides=tuple(flags.overrides),
        n_seq_max=max(1, flags.parallel or 1),
        kv_unified=bool(flags.kv_unified),
        kv_offload=flags.kv_offload,
        type_k=flags.type_k,
        type_v=flags.type_v,
        flash_attn=layout.flash_attn,
        n_batch=flags.n_batch,
        n_ubatch=flags.n_ubatch,
        use_extra_bufts=flags.repack,
        no_host=flags.no_host,
    )


def flags_after(flags: ServerFlags, params: Params) -> ServerFlags:
    """kvlab's flags for the parameters the server runs with (the fit never changes the slots;
    -np auto stays auto, which sizing.kv resolves as the server does)."""
    return replace(
        flags,
        ctx_size=params.n_ctx or None,
        n_gpu_layers=None if params.n_gpu_layers == -1 else params.n_gpu_layers,
        tensor_split=tuple(params.tensor_split),
        overrides=tuple(params.overrides),
    )


def approximate(model: ModelParams, weights_bytes: int) -> list[WeightTensor]:
    """Stand-in tensors for a model known only by its total: i8 rows of the given sizes."""
    return [WeightTensor(name, "i8", (max(0, size),)) for name, size in speed.approximate_tensors(model, weights_bytes)]


def plan_server(
    model: ModelParams,
    flags: ServerFlags,
    *,
    devices: Sequence[Device],
    host: Host | None = None,
    tensors: Sequence[WeightTensor] | None = None,
    tensors_in_file_order: bool = False,
    weights_bytes: int | None = None,
    prompt_tokens: int = 0,
    output_tokens: int = 0,
    concurrency: int = 1,
    sm_counts: Sequence[int | None] = (),
    compute_capabilities: Sequence[float | None] = (),
) -> ServerPlan:
    """The effective configuration, per-device memory and decode speed of `flags` on `devices`.
    `tensors_in_file_order`: the tensors are a GGUF's own table (what the mmap span needs).

    Without the weights (no tensors, no total) there is nothing to place: the fit is not run and
    the plan says so (its rows are empty)."""
    host = host or Host(total=0, free=0)
    layout0 = kv_layout(model, flags)
    given = params_of(flags, layout0, len(devices))
    pre = fit.server_pre_fit(
        given,
        n_parallel=-1 if flags.parallel is None else flags.parallel,
        kv_unified_per_slot=flags.kv_unified_per_slot,
        n_ctx_min=flags.fit_ctx,
    )
    weights_note = ""
    if tensors is None and weights_bytes is not None:
        tensors = approximate(model, weights_bytes)
        weights_note = APPROXIMATE_WEIGHTS
    if tensors is None:
        result = FitResult(
            "unknown",
            "",
            pre.params,
            [
                "kvlab cannot replay --fit without the model's weights: give the GGUF, a catalogue quantization or the "
                "weights' size"
            ],
        )
        plan = _plan(model, flags, pre, result, [])
        plan.pre_fit_log = pre.log
        return plan
    placed = breakdown.make_measure(model, tensors, devices, host, swa_full=flags.swa_full)

    def measure(params: Params) -> Sequence[Usage]:
        # a placement llama.cpp cannot load fails its no_alloc load the same way: "failed to load model"
        try:
            return placed(params)
        except breakdown.PlacementError as exc:
            raise fit.MeasureError("failed to load model") from exc

    margins = fit.expand_fit_target(flags.fit_target_mib or (DEFAULT_FIT_TARGET_MIB,))
    result = fit.fit_params(
        measure,
        devices,
        host,
        pre.params,
        n_layer=model.n_layer,
        n_ctx_train=model.n_ctx_train,
        n_expert=model.n_expert,
        margins=margins,
        n_ctx_min=flags.fit_ctx,
        fit=flags.fit,
    )
    plan = _plan(model, flags, pre, result, [])
    plan.pre_fit_log = pre.log
    plan.weights_note = weights_note
    try:
        usages = breakdown.measure(model, tensors, devices, host, result.params, swa_full=flags.swa_full)
    except (breakdown.PlacementError, fit.MeasureError) as exc:
        plan.error = str(exc)
        return plan
    used = breakdown.model_devices(devices, result.params)
    cells = prompt_tokens + output_tokens
    for i, device in enumerate(used):
        index = devices.index(device)
        outside = overhead.overhead(
            device.name,
            model=model,
            layout=plan.layout,
            flags=plan.flags,
            sm_count=sm_counts[index] if index < len(sm_counts) else None,
            compute_capability=compute_capabilities[index] if index < len(compute_capabilities) else None,
            cells_in_use=cells,
            holds_output=i == len(used) - 1,
        )
        plan.rows.append(
            DeviceRow(device.name, device.description, device.total, device.free, usages[i], margins[index], outside)
        )
    plan.rows.append(DeviceRow("Host", "system RAM", host.total or None, host.free or None, usages[-1], 0, None))
    _host_memory(plan, usages.placement, tensors, host, file_order=tensors_in_file_order)
    named = [(t.name, t.nbytes) for t in tensors]
    plan.speed = speed.estimate(
        model,
        plan.layout,
        plan.flags,
        devices=used,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        concurrency=concurrency,
        host=host if host.bandwidth else None,
        tensors=named,
        cpu=speed.cpu_flops(host),
    )
    if prompt_tokens > 0:  # without a workload there is no prompt to estimate
        # the approximation's rows are i8 of their bytes: their weights at Q4_K's 4.5 bits each
        elements = [(t.name, t.nbytes, t.n_elements if not weights_note else t.nbytes * 16 // 9) for t in tensors]
        plan.prefill = prefill.estimate(
            prefill.work_for(model, plan.flags, devices=used, tensors=elements, prompt_tokens=prompt_tokens),
            prompt_tokens=prompt_tokens,
            n_ubatch=plan.flags.n_ubatch,
            cpu_flops=speed.cpu_flops(host)[0],
            cpu_source=speed.cpu_flops(host)[1],
        )
    return plan


# What llama.cpp would do on CPUs of these kinds, said when the CPU is not given.
POTENTIAL_CPUS = {"AMX": "avx512+amx", "AVX2": "avx2", "ARM NEON and dotprod": "arm"}


def _host_memory(
    plan: ServerPlan,
    placement: breakdown.Placement,
    tensors: Sequence[WeightTensor],
    host: Host,
    *,
    file_order: bool,
) -> None:
    """The CPU's extra buffer types at the fitted placement, and what the host then really holds (the
    mapped span only when the tensors are a GGUF's own table, in file order)."""
    extra = placement.extra_bytes()
    potential: dict[str, dict[str, int]] = {}
    if host.cpu is None and placement.extras_apply:
        for label, spec in POTENTIAL_CPUS.items():
            potential[label] = breakdown.extra_on(placement, tensors, cpu_types.parse_cpu(spec))
    plan.cpu = host.cpu
    counted = plan.rows[-1].usage
    span = breakdown.mapped_span(placement, tensors) if file_order else 0
    quantized = {t.name for t in tensors if t.quantized}
    amx_quantized = any(buft == cpu_types.AMX and name in quantized for buft, name, _ in placement.extra)
    plan.host_memory = host_ram.HostMemory(counted, extra, plan.flags.load_mode, span, amx_quantized)
    plan.host_notes = host_ram.notes(
        plan.host_memory,
        host.cpu,
        total=host.total or None,
        extras_possible=placement.extras_apply,
        potential=potential,
    )


def _plan(
    model: ModelParams, flags: ServerFlags, pre: fit.ServerContext, result: FitResult, rows: list[DeviceRow]
) -> ServerPlan:
    effective = flags_after(flags, result.params)
    layout = kv_layout(model, effective)
    context = fit.context_after_fit(
        result.params, n_ctx_train=model.n_ctx_train, kv_unified_per_slot=flags.kv_unified_per_slot
    )
    return ServerPlan(result, pre.params, result.params, effective, layout, context, rows)


def mib(n: int) -> float:
    return n / MiB
