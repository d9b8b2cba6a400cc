"""Where the bytes go: weights, KV, compute buffers, against a GPU's memory. Pure.

Weights and KV are exact (tensor sizes from the GGUF; KV from sizing.kv). The compute
buffer is llama.cpp's worst-case graph reservation (llama_context::sched_reserve): the
graph of one micro-batch laid out by ggml-alloc's best-fit allocator, which reuses the
memory of tensors no later node needs. kvlab does not rebuild the graph; it adds the
inputs that live through the whole graph (the KQ masks) to the largest of a few peaks
(COMPUTE_FORMULA), each the live set at one point of the graph: the logits, the FFN, the
attention (with the f32 KQ scores when flash attention is off), the recurrent scan.

For the CPU backend this is checked against llama.cpp's own figure (`llama-fit-params`,
sizing/tests/test_oracle_fit_params.py): within COMPUTE_BOUND_MIB + COMPUTE_BOUND_SHARE of
it on every tested model and flag set, and equal to its 0.01 MiB on about half of them —
the rest is the allocator's fragmentation, which depends on the order of the graph's
nodes. On CUDA the figure can differ more (docs/sizing.md): other kernels, other buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hparams import ModelParams
from .kv import KVLayout, ServerFlags, effective_ubatch

MiB = 1024 * 1024
DEFAULT_MARGIN_MIB = 512  # CUDA context, allocator slack and fragmentation
# The tested bound of the CPU compute buffer: |kvlab - llama.cpp| <= 1 MiB + 20 % of llama.cpp's figure.
COMPUTE_BOUND_MIB = 1
COMPUTE_BOUND_SHARE = 0.20
COMPUTE_FORMULA = (
    "KQ masks + the largest of: logits (outputs × n_vocab × 4) + 5 activations; 3 FFN rows + 5 activations; "
    "attention (without flash attention: the f32 KQ scores, n_kv × n_ubatch × n_head × 4); the recurrent scan — "
    "for the CPU backend within 1 MiB + 20 % of llama.cpp's own figure (tested)"
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


def reserve_tokens(model: ModelParams, layout: KVLayout, flags: ServerFlags) -> tuple[int, int]:
    """(tokens, outputs) of the worst-case micro-batch llama.cpp reserves the graph for.

    sched_reserve takes min(n_ctx, n_ubatch) tokens (kv.effective_ubatch: llama_context's n_ubatch)
    and as many outputs, and graph_reserve rounds the tokens up to a multiple of the sequences
    (n_seq_max)."""
    n_outputs = min(layout.n_ctx, effective_ubatch(flags, model))
    n_seqs = max(1, layout.n_parallel)
    return -(-n_outputs // n_seqs) * n_seqs, n_outputs


def compute_buffer(model: ModelParams, layout: KVLayout, flags: ServerFlags) -> int:
    """The CPU backend's compute buffer in bytes, within the tested bound (COMPUTE_BOUND_*).

    Each peak counts f32 rows of the micro-batch: `act` one row of n_embd (the residual
    stream, its norm, the attention output, …), `q` the queries, `kv` one of K or V before
    they reach the cache. Five activations are alive at every peak of the layer loop."""
    t, n_outputs = reserve_tokens(model, layout, flags)
    f32 = 4
    act = t * model.n_embd * f32
    q = t * max(model.n_head, default=0) * model.head_k_full * f32
    kv = t * max(model.n_head_kv, default=0) * model.head_k_full * f32
    n_ff = model.ffn_width
    masks = sum(c.cells * t * (2 if layout.flash_attn else 4) for c in layout.caches)  # f16 with flash attention
    inputs = masks + 28 * t  # + positions, token ids, output ids, K/V cache indices
    peaks = [n_outputs * (model.n_vocab or 32000) * f32 + 5 * act, 3 * t * n_ff * f32 + 5 * act]
    if layout.caches:
        if layout.flash_attn:
            attention = 5 * act + q + (act if model.is_mla else 0)
        else:
            scores = max(c.cells for c in layout.caches) * t * max(model.n_head) * f32
            attention = scores + 5 * act + q + 2 * kv + (5 * act // 2 if model.is_mla else 0)
        peaks.append(attention)
    if layout.recurrent:
        # the conv and scan rows of one layer: 7.5 rows of d_inner for Mamba, 10.5 for Mamba-2 (grouped)
        per_token = 10.5 if model.ssm_n_group else 7.5
        peaks.append(int(per_token * t * model.ssm_d_inner * f32))
        inputs += layout.recurrent.bytes // max(1, layout.recurrent.layers)  # one layer's states, copied in
    return inputs + max(peaks)


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
    if flags.n_gpu_layers is None or flags.n_gpu_layers < 0 or flags.n_gpu_layers >= model.n_layer_all:
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
        compute_estimate=compute_buffer(model, layout, flags),
        gpu_bytes=None if gpu_mib is None else gpu_mib * MiB,
        margin_bytes=margin_mib * MiB,
    )
