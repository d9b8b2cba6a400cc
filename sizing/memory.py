"""Where the bytes go: weights, KV, compute buffers, against a GPU's memory. Pure.

Weights and KV are exact (tensor sizes from the GGUF; KV from sizing.kv). The compute
buffer is an estimate, always labelled so: llama.cpp sizes it by reserving a worst-case
graph, which depends on the backend. kvlab's estimate (ESTIMATE_FORMULA) is the
logits of one micro-batch plus its activations, plus the f32 attention scores of one
micro-batch against the whole context when flash attention is off.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hparams import ModelParams
from .kv import KVLayout, ServerFlags

MiB = 1024 * 1024
DEFAULT_MARGIN_MIB = 512  # CUDA context, allocator slack and fragmentation
ESTIMATE_FORMULA = (
    "n_ubatch × (4·n_vocab + 32·n_embd) bytes, + n_ubatch × n_ctx_seq × n_head × 4 bytes without flash attention"
)


@dataclass(frozen=True)
class MemoryPlan:
    weights_bytes: int | None
    weights_source: str  # "gguf tensors", "catalogue file size", or ""
    weights_on_gpu: int
    kv_bytes: int
    kv_on_gpu: int
    compute_estimate: int
    gpu_bytes: int | None
    margin_bytes: int

    @property
    def gpu_total(self) -> int:
        return self.weights_on_gpu + self.kv_on_gpu + self.compute_estimate

    @property
    def ram_total(self) -> int:
        return (self.weights_bytes or 0) - self.weights_on_gpu + self.kv_bytes - self.kv_on_gpu

    @property
    def free_after(self) -> int | None:
        return None if self.gpu_bytes is None else self.gpu_bytes - self.margin_bytes - self.gpu_total

    @property
    def fits(self) -> bool | None:
        """True or False when it can be judged; None without a GPU, or without the weights
        unless the KV and compute buffers alone already overflow it."""
        if self.free_after is None:
            return None
        if self.weights_bytes is None:
            return False if self.free_after < 0 else None
        return self.free_after >= 0


def compute_estimate(model: ModelParams, layout: KVLayout, flags: ServerFlags) -> int:
    n_ubatch = min(flags.n_ubatch, flags.n_batch)
    vocab = model.n_vocab or 32000
    estimate = n_ubatch * (4 * vocab + 32 * model.n_embd)
    if not layout.flash_attn and layout.caches:
        estimate += n_ubatch * layout.n_ctx_seq * max(model.n_head) * 4
    return estimate


def memory_plan(
    model: ModelParams,
    layout: KVLayout,
    flags: ServerFlags,
    *,
    weights_bytes: int | None,
    weights_source: str,
    gpu_mib: int | None,
    margin_mib: int = DEFAULT_MARGIN_MIB,
) -> MemoryPlan:
    # -ngl N puts N of the model's layers on the GPU; a layer's KV lives with it.
    if flags.n_gpu_layers is None or flags.n_gpu_layers >= model.n_layer_all:
        share = 1.0
    else:
        share = max(0, flags.n_gpu_layers) / model.n_layer_all
    kv_on_gpu = int(layout.kv_bytes * share) if flags.kv_offload else 0
    return MemoryPlan(
        weights_bytes=weights_bytes,
        weights_source=weights_source if weights_bytes is not None else "",
        weights_on_gpu=int((weights_bytes or 0) * share),
        kv_bytes=layout.kv_bytes,
        kv_on_gpu=kv_on_gpu,
        compute_estimate=compute_estimate(model, layout, flags),
        gpu_bytes=None if gpu_mib is None else gpu_mib * MiB,
        margin_bytes=margin_mib * MiB,
    )
