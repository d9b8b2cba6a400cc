"""Per-device memory of one set of parameters, as llama.cpp b11434 measures it for `--fit`. Pure.

`measure` returns what `common_get_device_memory_data_impl` (common/fit.cpp:30-154) returns: one
`Usage` (model, context, compute bytes) per *model device* — the devices `llama_prepare_model_devices`
keeps (src/llama.cpp:158-313; `-sm none` keeps only `devices[main_gpu]`) — then the host's.

Exact to the byte (the no_alloc sizes of `llama_get_memory_breakdown`, llama-context.cpp:3487-3511):

* weights: each tensor goes to the first `-ot`/`--cpu-moe`/`--n-cpu-moe` override that matches
  its name, else to its layer's device (`load_tensors`, llama-model.cpp:1558-1616: `-ngl N` puts the
  last N-1 repeating layers and the output layer on the GPUs, split by `-ts` or by free memory with
  `upper_bound` over the cumulative float splits; token_embd is always on the CPU). A buffer's
  size is Σ per tensor of `GGML_PAD(get_alloc_size, alignment)` (ggml-backend.cpp:75-98): CUDA
  aligns to 128 and adds `ggml_row_size(type, 512 - ne0 % 512)` to a quantized tensor whose ne0 is
  not a multiple of MATRIX_ROW_PADDING = 512 (ggml-cuda.cu:897-920, common.cuh:186); host buffers
  (CPU, CUDA_Host: ggml-cuda.cu:1306-1323) align to TENSOR_ALIGNMENT = 32 (ggml-impl.h:44) and add
  nothing. Every host buffer type is bucketed into Host (fit.cpp:78-83).
* context: per layer, K `[n_embd_k_gqa, kv_size, n_stream]` and V tensors (no V for MLA; V padded to
  the widest layer without flash attention), the SWA and DSA-indexer caches, and the recurrent r/s
  states, each on its layer's device, or on the host with `-nkvo` or for a CPU layer
  (llama-kv-cache.cpp:165-250, llama-memory-recurrent.cpp:80-100) — cells and streams as sizing.kv.

An estimate (COMPUTE_BOUND says how good): the compute buffers, which llama.cpp sizes by
reserving the worst-case graph with the scheduler. kvlab starts from sizing.memory.compute_buffer
(the CPU backend's graph peak, tested against llama-fit-params) and follows what the scheduler
does with it (ggml-backend.cpp:1095-1125, llama-context.cpp:410-460):

* a GPU holding layers reserves the graph's peak (with the logits only where the output layer is);
* the host (the CPU backend, whose buffer is the first GPU's pinned CUDA_Host type) holds the
  graph inputs: the token embeddings (token_embd is on the CPU) and the f32 KQ masks;
* with batches of 32+ tokens (op offload), ops whose weights are in host memory run on the first
  GPU: the weights of one CPU layer (its largest) and, for a layer whose KV is in RAM (CPU layers,
  `-nkvo`), that layer's K and V are copied into that GPU's compute buffer;
* pipeline parallelism (more than one GPU, every layer offloaded, `-sm layer`, KV offloaded, no
  overrides: llama-context.cpp:432-437) keeps N_COPIES = 4 copies of each split's inputs.

Not counted, as llama.cpp does not count them: the output (logits) buffer, the CUDA context,
cuBLAS workspaces and the CUDA pool (common_memory_breakdown_print's "unaccounted").
The CPU's extra buffer types (sizing.placement.cpu): a weight kept in RAM goes to AMX or
CPU_REPACK when the CPU and its op allow and nothing comes before them in the CPU's list (no GPU,
or `--no-host`; not with `-nr`). They are neither host nor a model device, so the fit's
measurement leaves them out (fit.cpp:78-97) and `measure` does the same; its `extra` gives them,
one figure per type, as llama.cpp's breakdown prints them on rows of their own.

Not modelled: `-sm row` (this build cannot load it on CUDA: SplitModeRowError) and `-sm tensor`
(one Meta device splitting each tensor by llama_meta_device_get_split_state: UnsupportedPlacement);
what op offload copies of a weight held in AMX or CPU_REPACK (`--no-host` with a GPU); backends
other than CUDA (their alignment and padding differ).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..ggml_types import BY_NAME, row_size
from ..hparams import ModelParams
from ..kv import KVLayout, ServerFlags, kv_layout
from ..memory import compute_buffer, reserve_tokens
from . import cpu as cpu_types
from . import overrides as ot
from .tensors import WeightTensor, has_tied_output, uses_of
from .types import Device, Host, Measure, Params, Usage

CUDA_ALIGNMENT = 128  # ggml_backend_cuda_buffer_type_get_alignment
HOST_ALIGNMENT = 32  # TENSOR_ALIGNMENT: CPU and CUDA_Host buffer types
MATRIX_ROW_PADDING = 512  # ggml-cuda/common.cuh
N_COPIES = 4  # GGML_SCHED_MAX_COPIES: pipeline parallelism
OP_OFFLOAD_MIN_BATCH = 32  # ggml-cuda: op_offload_min_batch_size
# The compute buffers' tested bound (sizing/tests/test_placement_breakdown.py, public CUDA logs):
# |kvlab - llama.cpp| <= COMPUTE_BOUND_MIB + COMPUTE_BOUND_SHARE of llama.cpp's figure.
COMPUTE_BOUND_MIB = 1
COMPUTE_BOUND_SHARE = 0.20

HOST = -1  # the bucket index of system RAM in a Placement


class PlacementError(ValueError):
    """Parameters llama-server b11434 refuses or cannot load with; the message says what it prints."""


class SplitModeRowError(PlacementError):
    """`-sm row`: ggml-cuda exports no split buffer type, so make_gpu_buft_list throws."""


class UnsupportedPlacement(PlacementError):
    """A placement llama.cpp runs but kvlab does not model (the message says which)."""


def _pad(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def _f32(x: float) -> float:
    """A C++ float: round to single precision."""
    result: float = struct.unpack("f", struct.pack("f", x))[0]
    return result


def cuda_alloc_size(type_name: str, shape: Sequence[int]) -> int:
    """ggml_backend_cuda_buffer_type_get_alloc_size + 128-byte alignment, for a weight or KV tensor."""
    t = BY_NAME[type_name]
    n = 1
    for dim in shape:
        n *= dim
    size = n // t.block_size * t.type_size
    ne0 = shape[0] if shape else 1
    if t.block_size > 1 and ne0 % MATRIX_ROW_PADDING:
        size += row_size(type_name, MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING)
    return _pad(size, CUDA_ALIGNMENT)


def host_alloc_size(type_name: str, shape: Sequence[int]) -> int:
    """A CPU or CUDA_Host buffer: ggml_nbytes, aligned to 32 bytes."""
    t = BY_NAME[type_name]
    n = 1
    for dim in shape:
        n *= dim
    return _pad(n // t.block_size * t.type_size, HOST_ALIGNMENT)


def extra_alloc_size(buft: str, type_name: str, shape: tuple[int, ...]) -> int:
    """A weight in one of the CPU's extra buffer types: AMX's repacked size (cpu.amx_alloc_size), else
    ggml_nbytes (CPU_REPACK has no get_alloc_size), aligned to 32 bytes like the host types."""
    if buft == cpu_types.AMX:
        return _pad(cpu_types.amx_alloc_size(type_name, shape), HOST_ALIGNMENT)
    return host_alloc_size(type_name, shape)


def alloc_size(bucket: int, type_name: str, shape: Sequence[int]) -> int:
    return host_alloc_size(type_name, shape) if bucket == HOST else cuda_alloc_size(type_name, shape)


def model_devices(devices: Sequence[Device], params: Params) -> list[Device]:
    """The devices the model uses (llama_prepare_model_devices): all of them, or `devices[main_gpu]`
    with `-sm none` (none at all for `-mg -1`)."""
    if params.split_mode not in ("none", "layer", "row", "tensor"):
        raise PlacementError(f"-sm must be none, layer, row or tensor, not {params.split_mode!r}")
    if params.split_mode == "row" and devices:
        raise SplitModeRowError(
            f"-sm row cannot load in llama.cpp b11434 on CUDA: make_gpu_buft_list throws "
            f"'device {devices[0].name} does not support split buffers' (ggml-cuda has no split buffer type); "
            "llama-server exits with 'failed to load model'. Use -sm layer."
        )
    if params.split_mode == "tensor" and devices:
        raise UnsupportedPlacement(
            "-sm tensor splits every tensor across the GPUs (one Meta device, llama_meta_device_get_split_state): "
            "kvlab does not model its per-device memory, and --fit does not run with it"
        )
    if params.split_mode == "none" and devices:
        if params.main_gpu < 0:
            return []
        if params.main_gpu >= len(devices):
            raise PlacementError(f"invalid value for main_gpu: {params.main_gpu} (available devices: {len(devices)})")
        return [devices[params.main_gpu]]
    return list(devices)


def layer_devices(n_layer_all: int, devices: Sequence[Device], host: Host, params: Params) -> list[int]:
    """The device index of every layer 0..n_layer_all (the last is the output layer), HOST for the CPU.

    load_tensors: i_gpu_start = max(n_layer_all + 1 - ngl, 0); a layer at or past it goes to the
    device `upper_bound(cum_splits, float(il - i_gpu_start) / act_gpu_layers)`, in float32."""
    nd = len(devices)
    ngl = params.n_gpu_layers if params.n_gpu_layers >= 0 else n_layer_all + 1
    i_gpu_start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1) if nd else 0
    splits = [float(x) for x in params.tensor_split[:nd]] + [0.0] * (nd - len(params.tensor_split[:nd]))
    if all(x == 0.0 for x in splits):
        splits = [float(d.free if (d.free or d.total) else host.free) for d in devices]
    cum: list[float] = []
    total = 0.0
    for x in splits:
        total = _f32(total + _f32(x))
        cum.append(total)
    cum = [_f32(c / total) for c in cum] if total else [0.0] * nd
    result = []
    for il in range(n_layer_all + 1):
        if il < i_gpu_start or il - i_gpu_start >= act:
            result.append(HOST)
        else:
            at = bisect_right(cum, _f32(_f32(float(il - i_gpu_start)) / act))
            result.append(at)
    if any(d >= nd for d in result):
        raise PlacementError(f"-ts {params.tensor_split}: a layer falls past the last device")
    return result


@dataclass
class Placement:
    """Where every byte of the weights and the KV goes: (bucket, tensor name, bytes), bucket HOST or a
    model-device index; the layers' devices; and the facts the compute model needs."""

    devices: list[Device]
    layers: list[int]  # device per layer 0..n_layer_all (HOST = CPU)
    weights: list[tuple[int, str, int]] = field(default_factory=list)
    kv: list[tuple[int, str, int, int]] = field(default_factory=list)  # (bucket, name, layer, bytes)
    host_layer_weights: dict[int, int] = field(default_factory=dict)  # layer -> CUDA bytes of its host weights
    dropped: list[str] = field(default_factory=list)  # overridden to a GPU the model does not use
    extra: list[tuple[str, str, int]] = field(default_factory=list)  # (AMX | CPU_REPACK, tensor name, bytes)
    extras_apply: bool = False  # the CPU's extra types come first for weights in RAM (whatever the CPU)

    def extra_bytes(self) -> dict[str, int]:
        """Bytes per CPU extra buffer type that holds something, in the order llama.cpp prints them."""
        totals = {name: 0 for name in cpu_types.PRINT_ORDER}
        for name, _, size in self.extra:
            totals[name] += size
        return {name: size for name, size in totals.items() if size}

    def bucket_bytes(self, bucket: int) -> tuple[int, int]:
        model = sum(b for k, _, b in self.weights if k == bucket)
        context = sum(b for k, _, _, b in self.kv if k == bucket)
        return model, context


def flags_for(params: Params, *, swa_full: bool = False) -> ServerFlags:
    """The sizing.kv flags of these parameters (n_seq_max sequences; unified or one stream each)."""
    return ServerFlags(
        ctx_size=params.n_ctx or None,
        parallel=params.n_seq_max,
        kv_unified=params.kv_unified,
        type_k=params.type_k,
        type_v=params.type_v,
        flash_attn="on" if params.flash_attn else "off",
        swa_full=swa_full,
        n_batch=params.n_batch,
        n_ubatch=params.n_ubatch,
        kv_offload=params.kv_offload,
    )


def kv_tensors(model: ModelParams, layout: KVLayout) -> list[tuple[str, int, str, tuple[int, ...]]]:
    """(name, layer, type, shape) of every KV and recurrent-state tensor, as the caches make them
    (the per-layer form of sizing.kv's caches: same layers, cells, streams and widths)."""
    result: list[tuple[str, int, str, tuple[int, ...]]] = []
    by_name = {c.name: c for c in layout.caches}
    attention = [il for il in range(model.n_layer_all) if model.kv_layers[il]]
    groups: list[tuple[str, list[int]]] = []
    if model.has_swa:
        groups = [
            ("full", [il for il in attention if not model.is_swa[il]]),
            ("swa", [il for il in attention if model.is_swa[il]]),
        ]
    elif model.memory != "recurrent":
        groups = [("full", attention)]
    for name, layers in groups:
        cache = by_name[name]
        for il in layers:
            k_type, v_type = cache.type_k, cache.type_v
            result.append((f"cache_{name}_k_l{il}", il, k_type, (model.n_embd_k_gqa(il), cache.cells, cache.streams)))
            if not model.is_mla:
                width = model.n_embd_v_gqa(il) if layout.flash_attn else model.n_embd_v_gqa_max
                result.append((f"cache_{name}_v_l{il}", il, v_type, (width, cache.cells, cache.streams)))
    if "indexer" in by_name:
        cache = by_name["indexer"]
        for il in range(model.n_layer_all):
            if model.indexer_layers[il]:
                shape = (model.indexer_head_size, cache.cells, cache.streams)
                result.append((f"cache_idx_k_l{il}", il, cache.type_k, shape))
    if layout.recurrent:
        rows = layout.recurrent.cells
        for il in range(model.n_layer):
            if model.recr_layers[il]:
                result.append((f"cache_r_l{il}", il, "f32", (model.n_embd_r * rows,)))
                result.append((f"cache_s_l{il}", il, "f32", (model.n_embd_s * rows,)))
    return result


def place(
    model: ModelParams,
    tensors: Sequence[WeightTensor],
    devices: Sequence[Device],
    host: Host,
    params: Params,
    layout: KVLayout,
) -> Placement:
    """Every weight and KV tensor to its bucket, with its allocated size there."""
    used = model_devices(devices, params)
    names = [d.name for d in used]
    ot.validate(params.overrides, [d.name for d in devices])
    layers = layer_devices(model.n_layer_all, used, host, params)
    placement = Placement(used, layers)
    tied = has_tied_output(tensors)
    # the CPU's extra types come first in its list when no pinned host type precedes them
    placement.extras_apply = params.use_extra_bufts and (not used or params.no_host)
    cpu = host.cpu if placement.extras_apply else None
    for t in tensors:
        buckets: set[int] = set()
        extras: set[str] = set()
        for layer in uses_of(t, model.n_layer_all, tied_output=tied):
            buft = ot.match(t.name, params.overrides)
            if buft == ot.CPU:
                bucket = HOST
            elif buft is not None:
                if buft not in names:  # a GPU the model does not use: the fit's measurement drops it
                    placement.dropped.append(t.name)
                    continue
                bucket = names.index(buft)
            else:
                bucket = HOST if layer is None else layers[layer]
            if bucket == HOST and layer is not None:
                held = placement.host_layer_weights
                held[layer] = held.get(layer, 0) + cuda_alloc_size(t.type_name, t.shape)
            as_output = tied and t.name == "token_embd.weight" and layer == model.n_layer_all
            extra = cpu_types.extra_buffer_type(t.name, t.type_name, t.shape, cpu, as_output=as_output)
            if bucket == HOST and extra:
                extras.add(extra)  # one copy per buffer type (llama-model-loader.cpp:1370-1376)
            else:
                buckets.add(bucket)
        for bucket in sorted(buckets):
            placement.weights.append((bucket, t.name, alloc_size(bucket, t.type_name, t.shape)))
        for extra in sorted(extras):
            placement.extra.append((extra, t.name, extra_alloc_size(extra, t.type_name, t.shape)))
    for name, il, type_name, shape in kv_tensors(model, layout):
        bucket = layers[il] if params.kv_offload else HOST
        placement.kv.append((bucket, name, il, alloc_size(bucket, type_name, shape)))
    return placement


def pipeline_parallel(model: ModelParams, placement: Placement, params: Params) -> bool:
    """llama-context.cpp:432-437 (CUDA devices support async compute and events)."""
    ngl = params.n_gpu_layers if params.n_gpu_layers >= 0 else model.n_layer_all + 1
    return (
        len(placement.devices) > 1
        and ngl > model.n_layer_all
        and params.split_mode == "layer"
        and params.kv_offload
        and not params.overrides
    )


def compute_buffers(
    model: ModelParams, layout: KVLayout, flags: ServerFlags, placement: Placement, params: Params
) -> tuple[list[int], int]:
    """(per model device, host) compute buffer bytes: an estimate within COMPUTE_BOUND_* where tested."""
    full = compute_buffer(model, layout, flags)
    if not placement.devices:
        return [], full  # the CPU backend runs the whole graph: sizing.memory's tested figure
    no_logits = compute_buffer(replace(model, n_vocab=1), layout, flags)
    t, _ = reserve_tokens(model, layout, flags)
    act = t * model.n_embd * 4
    masks = sum(c.cells * t * 4 for c in layout.caches)  # the f32 KQ mask inputs, filled on the host
    host = masks + act + 28 * t
    output = placement.layers[-1]
    kv_of_layer: dict[int, int] = {}
    for bucket, _, il, size in placement.kv:
        if bucket == HOST:
            kv_of_layer[il] = kv_of_layer.get(il, 0) + size
    gpus = []
    for d in range(len(placement.devices)):
        on_d = [il for il, dev in enumerate(placement.layers) if dev == d]
        if not on_d:
            gpus.append(0)
            continue
        own = full if output == d else no_logits
        # -nkvo: the attention of this device's layers reads K and V copied from RAM
        own += max((kv_of_layer.get(il, 0) for il in on_d), default=0)
        gpus.append(own)
    if pipeline_parallel(model, placement, params):
        gpus = [g + (N_COPIES - 1) * (masks + act) if g else 0 for g in gpus]
    on_host = [il for il, dev in enumerate(placement.layers) if dev == HOST] + list(placement.host_layer_weights)
    if on_host:
        if t >= OP_OFFLOAD_MIN_BATCH:  # op offload: the first GPU runs the host layers' large batches
            copied = max(placement.host_layer_weights.get(il, 0) + kv_of_layer.get(il, 0) for il in on_host)
            gpus[0] = max(gpus[0], copied + (full if output == HOST else no_logits))
        else:
            host = max(host, full if output == HOST else no_logits)
    return gpus, host


class Measurement(list[Usage]):
    """A measurement (one Usage per model device, then the host's) and the placement it sums, whose
    CPU extra buffer types the fit does not count but llama.cpp's breakdown table prints."""

    placement: Placement

    @property
    def extra(self) -> dict[str, int]:
        return self.placement.extra_bytes()


def measure(
    model: ModelParams,
    tensors: Sequence[WeightTensor],
    devices: Sequence[Device],
    host: Host,
    params: Params,
    *,
    swa_full: bool = False,
) -> Measurement:
    """One Usage per model device (after `-sm none`/`-mg`), then the host's, as fit.cpp measures them
    (and, apart, the CPU's extra buffer types: Measurement.extra).

    Raises PlacementError (SplitModeRowError, UnsupportedPlacement), overrides.OverrideError, or
    ValueError when the KV cache cannot be made (sizing.kv's errors)."""
    flags, layout, placement = _placed(model, tensors, devices, host, params, swa_full=swa_full)
    gpus, host_compute = compute_buffers(model, layout, flags, placement, params)
    result = []
    for d in range(len(placement.devices)):
        weights, context = placement.bucket_bytes(d)
        result.append(Usage(weights, context, gpus[d]))
    weights, context = placement.bucket_bytes(HOST)
    result.append(Usage(weights, context, host_compute))
    measurement = Measurement(result)
    measurement.placement = placement
    return measurement


def _placed(
    model: ModelParams,
    tensors: Sequence[WeightTensor],
    devices: Sequence[Device],
    host: Host,
    params: Params,
    *,
    swa_full: bool,
) -> tuple[ServerFlags, KVLayout, Placement]:
    flags = flags_for(params, swa_full=swa_full)
    layout = kv_layout(model, flags)
    if layout.errors:
        raise PlacementError("; ".join(layout.errors))
    return flags, layout, place(model, tensors, devices, host, params, layout)


def mapped_span(placement: Placement, tensors: Sequence[WeightTensor], alignment: int = HOST_ALIGNMENT) -> int:
    """With mmap, the bytes of the model file the plain CPU weights' buffer maps (CPU_Mapped): from the
    first to the end of the last of them (llama-model-loader.cpp:1449-1464 get_mapping_range), so
    weights in AMX, CPU_REPACK or a GPU that lie between are inside it. The tensors must be in file
    order, each padded to the GGUF's alignment (general.alignment, 32 by default)."""
    plain = {name for bucket, name, _ in placement.weights if bucket == HOST}
    first, last, offset = None, 0, 0
    for t in tensors:
        if t.name in plain:
            first = offset if first is None else first
            last = offset + t.nbytes
        offset += _pad(t.nbytes, alignment)
    return 0 if first is None else last - first


def extra_on(placement: Placement, tensors: Sequence[WeightTensor], cpu: cpu_types.Cpu) -> dict[str, int]:
    """What the CPU's extra types would take, on `cpu`, of a placement made without them (no CPU given):
    each plain CPU weight tried as `place` tries it, without placing everything again."""
    by_name = {t.name: t for t in tensors}
    output_on_host = bool(placement.layers) and placement.layers[-1] == HOST
    tied = has_tied_output(tensors)
    totals = {name: 0 for name in cpu_types.PRINT_ORDER}
    for bucket, name, _ in placement.weights:
        t = by_name.get(name)
        if bucket != HOST or t is None:
            continue
        uses = [False, True] if tied and name == "token_embd.weight" and output_on_host else [False]
        for extra in {cpu_types.extra_buffer_type(name, t.type_name, t.shape, cpu, as_output=o) for o in uses}:
            if extra:
                totals[extra] += extra_alloc_size(extra, t.type_name, t.shape)
    return {name: size for name, size in totals.items() if size}


def host_placement(
    model: ModelParams,
    tensors: Sequence[WeightTensor],
    devices: Sequence[Device],
    host: Host,
    params: Params,
    *,
    swa_full: bool = False,
) -> Placement:
    """The placement alone, without the compute buffers (explain_log: a log's weights per buffer)."""
    return _placed(model, tensors, devices, host, params, swa_full=swa_full)[2]


def make_measure(
    model: ModelParams,
    tensors: Sequence[WeightTensor],
    devices: Sequence[Device],
    host: Host,
    *,
    swa_full: bool = False,
) -> Measure:
    """The measurement the fit calls again and again: Params -> one Usage per model device, then host."""
    frozen = list(tensors)
    gpus = list(devices)

    def measure_params(params: Params) -> list[Usage]:
        return measure(model, frozen, gpus, host, params, swa_full=swa_full)

    return measure_params
