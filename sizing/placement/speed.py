"""The decode speed to expect: bytes moved per generated token over the bandwidth of where they live. Pure.

Generating a token reads every weight the token passes through once (a matrix-vector product is bound
by memory, not arithmetic) and, for each sequence, the KV cache it attends over. So the seconds per
token are, summed over where the bytes live (layers run one after the other, across GPUs too):

    active weights there / that memory's bandwidth  +  n × KV read there / that memory's bandwidth

* active weights: every tensor except `token_embd` (the input lookup reads one row; a tied output reads
  it all), and of a MoE model's routed experts (`*_exps`) only n_expert_used / n_expert; from the
  per-tensor layout where kvlab has it (sizing.weights), else the approximation `approximate_tensors`
  states;
* KV read: per sequence, the cells in use at the workload's context (prompt + half the output: the
  mean over the generated tokens, since the read grows linearly) × bytes per cell of the layers with
  KV; a sliding-window cache reads at most its own cells; a recurrent state is read once whole;
* n sequences decoding at once (min(slots, concurrency)) share one read of the weights per step, each
  reads its own KV: the aggregate grows, each request slows (`SpeedEstimate.per_request_tok_s`);
* KV in system RAM (`--no-kv-offload`, or layers kept on the CPU by `-ngl`): llama.cpp runs the
  attention over it on the CPU ("all nodes between the KV store and the attention output are run on
  the CPU", src/llama-graph.cpp), and `-fa auto` then turns flash attention off (the fused op is on
  another device than its layer, llama_context::resolve_fused_ops). The CPU's matrix products read each
  KV head once for every query head that shares it: ggml-cpu's mul_mat maps query head i12 to KV head
  i12 / r2 (r2 = n_head / n_head_kv, ggml/src/ggml-cpu/ggml-cpu.c), and a KV head's slice at thousands
  of cells (1.3 MB at 5,231 cells for Devstral) is read again from RAM by the next query head's chunk
  rather than kept in cache, so the read is n_head / n_head_kv × the KV (CPU_KV_TRAFFIC) — 4× for
  Devstral. That part costs the larger of that read at system RAM bandwidth and its arithmetic
  (4 × heads × head size × cells per layer) at the CPU's rate, plus a hand-off per layer whose weights
  are on a GPU (HANDOFF_S: the layer's activations to the CPU and its attention output back, with a
  synchronisation each way);

This is an estimate, not a measurement: real decoding reaches a share of the peak bandwidth and pays for each
kernel it launches. Both are per backend (sizing.placement.efficiency: derived from public llama-bench rows
of other GPUs, the reported accuracy is over held-out GPUs): each location's reads run at its backend's
share of its bandwidth, and each graph node (NODES_DENSE a dense layer, more for a MoE layer) adds the
backend's node_s. Measured runs of the same model and GPU calibrate it further (`calibrate`).
sizing/tests/placement/test_speed.py sets it beside the investigation's measurements.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from ..hparams import ModelParams
from ..kv import KVLayout, ServerFlags
from . import efficiency
from .overrides import match as override_match
from .types import Device, Host

# System RAM: dual-channel DDR4-3200, the common desktop floor. JEDEC DDR4-3200 moves 3,200 MT/s on a
# 64-bit (8-byte) channel: 25.6 GB/s per channel, 51.2 GB/s for two. DDR5-5600 dual channel is 89.6.
DEFAULT_HOST_BANDWIDTH = 2 * 8 * 3200e6
DEFAULT_HOST_BANDWIDTH_SOURCE = "dual-channel DDR4-3200: 2 channels × 8 bytes × 3,200 MT/s (JEDEC DDR4-3200)"
# The CPU's arithmetic for attention: the FMA peak of an 8-core AVX2 desktop CPU at 3.5 GHz, two 8-wide
# f32 FMA units per core (8 × 3.5e9 × 2 × 8 × 2 FLOP). ggml's f16 dot products reach well below it.
DEFAULT_CPU_FLOPS = 8 * 3.5e9 * 32
DEFAULT_CPU_FLOPS_SOURCE = "FMA peak of an 8-core AVX2 CPU at 3.5 GHz (8 × 3.5 GHz × 32 FLOP/cycle)"
CPU = "CPU"


def cpu_flops(host: Host | None) -> tuple[float, str]:
    """The CPU's FP32 peak the estimates use, and its source: the host's when given, else DEFAULT_CPU_FLOPS."""
    if host is not None and host.flops:
        return host.flops, host.flops_source or "given"
    return DEFAULT_CPU_FLOPS, DEFAULT_CPU_FLOPS_SOURCE


# What moving a layer's attention to the CPU costs beyond its bytes: llama.cpp PR 4812 measured llama 7B
# Q4_0 (32 layers) on an RTX 3090 Ti at tg 128 — a context of at most 128 cells, so the attention itself
# is negligible — at 127.43 tok/s with the KV on the GPU and 59.99 with -nkvo: (1/59.99 - 1/127.43) / 32
# = 276 µs per layer (https://github.com/ggml-org/llama.cpp/pull/4812, build 32d9f7d9). Not fitted: a
# published measurement of the hand-off alone, on another GPU and model than any kvlab checks it against.
HANDOFF_S = (1 / 59.99 - 1 / 127.43) / 32
HANDOFF_SOURCE = "llama.cpp PR 4812: 276 µs per layer (RTX 3090 Ti, llama 7B Q4_0, tg 128, -nkvo 0 vs 1)"
CPU_KV_TRAFFIC = (
    "the CPU reads each KV head once per query head sharing it (ggml-cpu mul_mat: KV head = query head / "
    "(n_head / n_head_kv))"
)


@dataclass(frozen=True)
class Location:
    """One memory a generated token reads from, and what it reads there."""

    name: str  # "CUDA0", … or "CPU" (system RAM)
    bandwidth: float | None  # bytes/s; None: unknown
    weights: int = 0  # active weight bytes, read once per step whatever the number of sequences
    kv: int = 0  # KV (and recurrent state) bytes one sequence reads per token
    attention_flops: float = 0.0  # per sequence per token; counted for the CPU only (the GPU's is hidden)
    # the CPU only: the bytes its attention reads from RAM per sequence per token (the KV, each head once per
    # query head sharing it: CPU_KV_TRAFFIC), and the layers whose attention it runs for a GPU (HANDOFF_S each)
    kv_traffic: int = 0
    handoffs: int = 0
    backend: str = ""  # the llama.cpp backend that runs there (sizing.placement.efficiency); "cpu" for system RAM
    nodes: int = 0  # graph nodes (kernels) one decoding step runs there


@dataclass(frozen=True)
class Part:
    """Seconds per decoding step spent on one kind of read in one place."""

    name: str  # "weights on CUDA0", "KV on CUDA0", "attention on the CPU (KV in RAM)"
    where: str
    bytes: int  # per step (KV: for all sequences decoding at once)
    seconds: float
    bound: str  # "bandwidth" or "CPU arithmetic"


@dataclass(frozen=True)
class SpeedEstimate:
    tok_s: float | None  # per request (one sequence) at the given concurrency; None: a bandwidth is unknown
    aggregate_tok_s: float | None  # all sequences decoding at once together
    sequences: int  # decoding at once
    parts: list[Part]
    inputs: dict[str, Any]  # what the estimate used, for the page and --json
    label: str
    unknown: list[str] = field(default_factory=list)  # locations without a bandwidth
    calibration: float | None = None  # measured / estimate applied (None: first principles only)

    @property
    def seconds_per_step(self) -> float | None:
        return None if self.unknown else sum(p.seconds for p in self.parts)

    def calibrated(self, ratio: float, runs: int) -> SpeedEstimate:
        """The estimate scaled by a measured/estimate ratio (`calibrate`) of `runs` runs."""
        return replace(
            self,
            tok_s=None if self.tok_s is None else self.tok_s * ratio,
            aggregate_tok_s=None if self.aggregate_tok_s is None else self.aggregate_tok_s * ratio,
            calibration=ratio,
            label=f"{self.label}; calibrated ×{ratio:.2f} by {runs} measured run{'s' if runs != 1 else ''} "
            "of this model and GPU",
        )


def calibrate(estimate: float, measured_runs: Sequence[float]) -> float | None:
    """measured / estimate: the median of the measured tok/s of runs of the same model, GPU and placement
    (KV on the GPU or in RAM), over kvlab's estimate for them. None without runs or estimate."""
    runs = [m for m in measured_runs if m > 0]
    if not runs or estimate <= 0:
        return None
    return median(runs) / estimate


def decode_speed(
    locations: Sequence[Location],
    *,
    sequences: int = 1,
    cpu_flops: float = DEFAULT_CPU_FLOPS,
    inputs: Mapping[str, Any] | None = None,
) -> SpeedEstimate:
    """Seconds per decoding step from what each location holds, for `sequences` decoding at once."""
    n = max(1, sequences)
    parts: list[Part] = []
    unknown = [loc.name for loc in locations if loc.bandwidth is None and (loc.weights or loc.kv)]
    used_efficiency: dict[str, str] = {}
    for loc in locations:
        eff, why = efficiency.for_backend(loc.backend or ("cpu" if loc.name == CPU else ""))
        share = eff.bandwidth if eff else 1.0
        used_efficiency[loc.name] = (eff.source if eff else "none: peak bandwidth") + (f" ({why})" if why else "")
        bandwidth = (loc.bandwidth or 0.0) * share
        if loc.weights:
            seconds = loc.weights / bandwidth if bandwidth else 0.0
            parts.append(Part(f"weights on {_place(loc.name)}", loc.name, loc.weights, seconds, "bandwidth"))
        if loc.kv:
            read = n * loc.kv
            seconds = read / bandwidth if bandwidth else 0.0
            if loc.name == CPU:
                read = n * (loc.kv_traffic or loc.kv)
                seconds = read / bandwidth if bandwidth else 0.0
                arithmetic = n * loc.attention_flops / cpu_flops
                bound = "CPU arithmetic" if arithmetic > seconds else "bandwidth"
                parts.append(Part("attention on the CPU (KV in RAM)", loc.name, read, max(seconds, arithmetic), bound))
                if loc.handoffs:
                    handoff = loc.handoffs * HANDOFF_S
                    parts.append(Part(f"hand-offs to the CPU ({loc.handoffs} layers)", loc.name, 0, handoff, "latency"))
            else:
                parts.append(Part(f"KV on {_place(loc.name)}", loc.name, read, seconds, "bandwidth"))
        if loc.nodes and eff and eff.node_s:
            parts.append(Part(f"kernels on {_place(loc.name)} ({loc.nodes} graph nodes)", loc.name, 0,
                              loc.nodes * eff.node_s, "latency"))  # fmt: skip
    step = sum(p.seconds for p in parts)
    tok_s = None if unknown or step <= 0 else 1.0 / step
    used = dict(inputs or {})
    used.update({"sequences": n, "cpu_flops": cpu_flops})
    used["bandwidth"] = {loc.name: loc.bandwidth for loc in locations}
    used["efficiency"] = used_efficiency
    return SpeedEstimate(
        tok_s=tok_s,
        aggregate_tok_s=None if tok_s is None else tok_s * n,
        sequences=n,
        parts=parts,
        inputs=used,
        label=_label(locations, unknown),
        unknown=unknown,
    )


def _place(name: str) -> str:
    return "system RAM" if name == CPU else name


def _label(locations: Sequence[Location], unknown: list[str]) -> str:
    if unknown:
        return f"no estimate: the memory bandwidth of {', '.join(_place(u) for u in unknown)} is unknown"
    where = ", ".join(f"{_place(loc.name)} {loc.bandwidth / 1e9:,.1f} GB/s" for loc in locations if loc.bandwidth)
    return (
        "estimate, not a measurement: bytes read per generated token (active weights + KV at the workload's "
        f"context) over the share of peak memory bandwidth ({where}) its backend reaches, plus each kernel's "
        "cost (sizing/placement/efficiency.py)"
    )


# ---- what each location holds -------------------------------------------------------------------------

_LAYER = re.compile(r"^blk\.(\d+)\.")


def layer_devices(n_layer_all: int, n_gpu_layers: int | None, splits: Sequence[float]) -> list[int | None]:
    """The GPU index of each layer and, last, of the output layer (None: the CPU), as llama_model::load_tensors
    assigns them with split mode layer: the last `n_gpu_layers` go to the GPUs in proportion to `splits`."""
    n_devices = len(splits)
    if not n_devices:
        return [None] * (n_layer_all + 1)
    ngl = n_layer_all + 1 if n_gpu_layers is None or n_gpu_layers < 0 else n_gpu_layers
    start = max(n_layer_all + 1 - ngl, 0)
    active = min(ngl, n_layer_all + 1)
    total = sum(splits) or float(n_devices)
    shares = list(splits) if sum(splits) else [1.0] * n_devices
    points, acc = [], 0.0
    for s in shares:
        acc += s
        points.append(acc / total)
    out: list[int | None] = []
    for il in range(n_layer_all + 1):
        if il < start or il - start >= active:
            out.append(None)
            continue
        x = (il - start) / active
        out.append(min(next((i for i, p in enumerate(points) if p > x), n_devices - 1), n_devices - 1))
    return out


def active_weight_bytes(name: str, size: int, model: ModelParams, tied_output: bool) -> int:
    """Bytes of one tensor a generated token reads."""
    if name.startswith("token_embd."):
        return size if tied_output else 0  # the input lookup reads one row
    if "_exps." in name and model.n_expert:
        return size * model.n_expert_used // model.n_expert
    return size


def approximate_tensors(model: ModelParams, weights_bytes: int) -> list[tuple[str, int]]:
    """A stand-in for the per-tensor layout when kvlab has only the total: the weights spread evenly over the
    layers, and for a MoE model the routed experts' share by element count (3 × n_embd × n_ff_exp per
    expert per layer, against the attention and dense FFN rows), all at the file's average bytes per weight.
    The experts' row is named as llama.cpp names an expert tensor (`ffn_up_exps`), so that --cpu-moe, --n-cpu-moe
    and the fit's expert overrides (`ffn_(up|down|gate)_exps`) move it as they move the real ones."""
    if not model.n_expert:
        per_layer = weights_bytes // max(1, model.n_layer_all)
        return [(f"blk.{il}.weights", per_layer) for il in range(model.n_layer_all)]
    head = model.head_k_full
    attention = model.n_embd * head * (2 * max(model.n_head, default=0) + 2 * max(model.n_head_kv, default=0))
    experts = 3 * model.n_embd * (model.n_ff_exp or max(model.n_ff, default=0)) * model.n_expert
    share = experts / (experts + attention) if experts + attention else 0.0
    per_layer = weights_bytes // max(1, model.n_layer_all)
    rows: list[tuple[str, int]] = []
    for il in range(model.n_layer_all):
        rows.append((f"blk.{il}.ffn_up_exps.approx", int(per_layer * share)))
        rows.append((f"blk.{il}.dense.approx", per_layer - int(per_layer * share)))
    return rows


def approximate_weights_bytes(model: ModelParams, bits_per_weight: float = 4.5) -> int:
    """A stand-in for unknown weights, for comparing configurations only: the attention, FFN (or routed
    experts) and embedding/output matrices from the hyperparameters at Q4_K's 4.5 bits per weight."""
    head = model.head_k_full
    attention = model.n_embd * head * (2 * max(model.n_head, default=0) + 2 * max(model.n_head_kv, default=0))
    if model.n_expert:
        ffn = 3 * model.n_embd * (model.n_ff_exp or max(model.n_ff, default=0)) * model.n_expert
    else:
        ffn = 3 * model.n_embd * max(model.n_ff, default=0)
    elements = model.n_layer * (attention + ffn) + 2 * (model.n_vocab or 32000) * model.n_embd
    return int(elements * bits_per_weight / 8)


def _override(name: str, overrides: Sequence[tuple[str, str]]) -> str | None:
    # llama.cpp: the first pattern found in the name (std::regex_search) wins
    return override_match(name, overrides)


def locations_for(
    model: ModelParams,
    layout: KVLayout,
    flags: ServerFlags,
    *,
    devices: Sequence[Device],
    host: Host | None = None,
    context: int,
    tensors: Sequence[tuple[str, int]] | None = None,
    weights_bytes: int | None = None,
) -> list[Location]:
    """Where a generated token's bytes live for these flags (split mode layer: -ngl, -ts, -ot / --cpu-moe,
    --no-kv-offload), `context` cells in use per sequence. `tensors` is the per-tensor layout (name, bytes);
    without it `weights_bytes` is spread by `approximate_tensors`."""
    names = [d.name for d in devices]
    host_bw = host.bandwidth if host and host.bandwidth else DEFAULT_HOST_BANDWIDTH
    bandwidth: dict[str, float | None] = {d.name: d.bandwidth for d in devices}
    bandwidth[CPU] = host_bw
    weights: dict[str, int] = dict.fromkeys([*names, CPU], 0)
    kv: dict[str, int] = dict.fromkeys([*names, CPU], 0)
    flops: dict[str, float] = dict.fromkeys([*names, CPU], 0.0)
    traffic = 0  # the CPU's attention read (CPU_KV_TRAFFIC)
    handed: set[int] = set()  # layers on a GPU whose attention the CPU runs

    device_of = layer_placer(model, flags, devices)
    rows = list(tensors) if tensors is not None else approximate_tensors(model, weights_bytes or 0)
    tied = not any(name.startswith("output.weight") for name, _ in rows) and tensors is not None
    for name, size in rows:
        where = tensor_place(name, model, flags, device_of, names)
        weights[where] += active_weight_bytes(name, size, model, tied)

    # the KV each sequence reads, layer by layer: it lives with its layer, or in RAM with --no-kv-offload
    for cache in layout.caches:
        cells = min(context, cache.cells)
        per_layer = cache.bytes_per_cell // max(1, cache.layers)
        layers = [il for il in range(model.n_layer_all) if _cache_has(model, cache.name, il)]
        for il in layers:
            where = device_of(il) if flags.kv_offload else CPU
            kv[where] += per_layer * cells
            flops[where] += 4.0 * model.n_head[il] * model.head_k(il) * cells
            if where == CPU:
                traffic += per_layer * cells * max(1, model.n_head[il] // max(1, model.n_head_kv[il]))
                if device_of(il) != CPU:
                    handed.add(il)
    if layout.recurrent and layout.recurrent.layers:
        per_layer = layout.recurrent.bytes // max(1, layout.recurrent.cells) // layout.recurrent.layers
        for il in range(model.n_layer):
            if model.recr_layers and model.recr_layers[il]:
                kv[device_of(il) if flags.kv_offload else CPU] += per_layer

    per_layer_nodes = efficiency.nodes_per_layer(model.n_expert, model.n_expert_used)
    nodes: dict[str, int] = dict.fromkeys([*names, CPU], 0)
    for il in range(model.n_layer_all):
        nodes[device_of(il)] += per_layer_nodes
    backends = {d.name: efficiency.key(d.backend, d.vendor) for d in devices} | {CPU: "cpu"}
    return [
        Location(
            name,
            bandwidth[name],
            weights[name],
            kv[name],
            flops[name],
            traffic if name == CPU else 0,
            len(handed) if name == CPU else 0,
            backends[name],
            nodes[name],
        )
        for name in [*names, CPU]
        if weights[name] or kv[name]
    ]


def layer_placer(model: ModelParams, flags: ServerFlags, devices: Sequence[Device]) -> Callable[[int], str]:
    """The device name ("CPU" for system RAM) of each layer (n_layer_all: the output layer), split mode layer."""
    names = [d.name for d in devices]
    split = flags.tensor_split if any(flags.tensor_split) else tuple(float(max(d.free, 1)) for d in devices)
    if flags.split_mode == "none":
        split = tuple(1.0 if i == flags.main_gpu else 0.0 for i in range(len(devices)))
    assign = layer_devices(model.n_layer_all, flags.n_gpu_layers, split)

    def device_of(layer: int) -> str:
        index = assign[min(layer, len(assign) - 1)]
        return CPU if index is None else names[index]

    return device_of


def tensor_place(
    name: str, model: ModelParams, flags: ServerFlags, device_of: Callable[[int], str], names: Sequence[str]
) -> str:
    """Where a weight lives: its -ot / --cpu-moe override, else its layer's device."""
    match = _LAYER.match(name)
    layer = int(match.group(1)) if match else model.n_layer_all  # output, norms: the output layer
    where = _override(name, flags.overrides) or device_of(layer)
    return where if where in names else CPU


def _cache_has(model: ModelParams, cache: str, il: int) -> bool:
    if cache == "indexer":
        return bool(model.indexer_layers and model.indexer_layers[il])
    if not model.kv_layers or not model.kv_layers[il]:
        return False
    if not model.has_swa:
        return cache == "full"
    return model.is_swa[il] == (cache == "swa")


def estimate(
    model: ModelParams,
    layout: KVLayout,
    flags: ServerFlags,
    *,
    devices: Sequence[Device],
    prompt_tokens: int,
    output_tokens: int,
    concurrency: int = 1,
    host: Host | None = None,
    tensors: Sequence[tuple[str, int]] | None = None,
    weights_bytes: int | None = None,
    cpu: tuple[float, str] = (DEFAULT_CPU_FLOPS, DEFAULT_CPU_FLOPS_SOURCE),
) -> SpeedEstimate:
    """Decode tok/s for a workload: each sequence at prompt + output/2 cells (the mean over its tokens);
    min(slots, concurrency) sequences decoding at once. `cpu`: the CPU's FP32 peak and its source
    (`cpu_flops`)."""
    context = prompt_tokens + output_tokens // 2
    sequences = max(1, min(layout.n_parallel, concurrency))
    locations = locations_for(
        model, layout, flags, devices=devices, host=host, context=context, tensors=tensors, weights_bytes=weights_bytes
    )
    host_bandwidth = host.bandwidth if host and host.bandwidth else None
    inputs = {
        "context_cells": context,
        "weights": "per-tensor layout" if tensors is not None else "total spread over the layers (approximation)",
        "host_bandwidth": host_bandwidth or DEFAULT_HOST_BANDWIDTH,
        "host_bandwidth_source": "given" if host_bandwidth else DEFAULT_HOST_BANDWIDTH_SOURCE,
        "cpu_flops_source": cpu[1],
        "handoff_source": HANDOFF_SOURCE,
        "cpu_kv_traffic": CPU_KV_TRAFFIC,
    }
    return decode_speed(locations, sequences=sequences, cpu_flops=cpu[0], inputs=inputs)


def catalogue_tensors(metadata: Mapping[str, Any], quant: str, **layout: Any) -> list[tuple[str, int]]:
    """(name, bytes) of every tensor of a model at a quantization, computed as sizing.weights computes the total."""
    from ..ggml_types import BY_NAME
    from ..weights import tensor_table, tensor_types

    imatrix = bool(layout.pop("imatrix", False))
    table = tensor_table(metadata, **layout)
    types = tensor_types(table, metadata, quant, imatrix=imatrix)
    return [
        (t.name, t.n_elements // BY_NAME[types[t.name]].block_size * BY_NAME[types[t.name]].type_size) for t in table
    ]
