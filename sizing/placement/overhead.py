"""VRAM as nvidia-smi shows it: what a device holds beyond what llama.cpp itself counts. Pure.

llama.cpp counts, per device, the model, context (KV) and compute buffers (llama_context::memory_breakdown,
printed by common_memory_breakdown_print); kvlab's memory plan models the same three. nvidia-smi's "used"
for a llama-server process is more than that. Each item here says how it is known, and each is an estimate
unless it is read from llama.cpp's code:

* the CUDA context, per device and per process: the driver's state and the loaded kernels. Its bare size
  scales with the GPU's SM count: a cudaMemGetInfo that forces the primary context "permanently eats"
  555 MiB on an RTX PRO 6000 Blackwell (188 SMs) and 107 MiB on an RTX 4060 Ti (34 SMs), 2.95 and
  3.15 MiB per SM (https://github.com/ggml-org/llama.cpp/pull/23604); "120-550 MB depending on GPU"
  (https://github.com/ggml-org/llama.cpp/pull/20595). kvlab takes 3.05 MiB per SM. The ggml-cuda kernels
  loaded on first use (CUDA's lazy loading) come on top and are not estimated;
* cuBLAS's workspace: 32 MiB on compute capability 9.0 and up, else 4 MiB, per device and stream, made
  the first time a matrix product goes through cuBLAS (ggml/src/ggml-cuda/common.cuh, cublas_handle());
  quantized weights take ggml's own kernels, so it may never be allocated: counted as "up to";
* ggml-cuda's memory pool: temporary buffers outside the compute buffer, kept once grown. With a
  quantized KV cache and flash attention, prompt processing converts one layer's K and V to f16 there
  (cells × K/V row × 2 bytes each); activations quantized to q8_1 for the matrix products add one
  micro-batch row of the widest FFN (n_ubatch × n_ff × 36/32 bytes). An estimate from the kernels' code;
* the output (logits) buffer: n_vocab × max(outputs, n_seq_max) × 4 bytes (+ n_embd × the same with
  --embeddings), exactly as llama_context::output_reserve sizes it. memory_breakdown omits it, but it is
  allocated in the output device's *host* buffer type (CUDA_Host: pinned system RAM), so it is system
  RAM, not VRAM;
* the driver's reservation: the card's memory the driver keeps for itself is already outside the total
  nvidia-smi (and cudaMemGetInfo) reports, e.g. 16,311 of the RTX 5060 Ti's 16,384 MiB, so it is in
  neither "used" nor the fit's free memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ggml_types import BY_NAME
from ..hparams import ModelParams
from ..kv import KVLayout, ServerFlags, effective_ubatch
from .types import MiB

CONTEXT_MIB_PER_SM = 3.05  # (555 / 188 + 107 / 34) / 2, llama.cpp PR 23604
CONTEXT_SOURCE = (
    "bare CUDA primary context ≈ 3.05 MiB per SM: 555 MiB on an RTX PRO 6000 Blackwell (188 SMs), 107 MiB on "
    "an RTX 4060 Ti (34 SMs), https://github.com/ggml-org/llama.cpp/pull/23604; lazily loaded kernels not included"
)
CUBLAS_SOURCE = "ggml/src/ggml-cuda/common.cuh cublas_handle(): 32 MiB from compute capability 9.0, else 4 MiB"
POOL_SOURCE = "ggml-cuda pool: f16 copies of one layer's quantized K and V (flash attention) + q8_1 activations"
OUTPUT_SOURCE = "llama_context::output_reserve: n_vocab × max(outputs, n_seq_max) × 4 bytes, CUDA_Host (pinned RAM)"
RESERVED_SOURCE = "outside nvidia-smi's total: e.g. the RTX 5060 Ti reports 16,311 of its 16,384 MiB"


@dataclass(frozen=True)
class Item:
    name: str
    bytes: int | None  # None: unknown
    in_vram: bool  # part of nvidia-smi's "used" on this device
    upper_bound: bool  # counted at its most (it may not be allocated at all)
    source: str
    exact: bool = False  # read from llama.cpp's code, not estimated


@dataclass(frozen=True)
class Overhead:
    """One device's memory beyond llama.cpp's own breakdown, for one llama-server process."""

    device: str
    items: list[Item] = field(default_factory=list)

    @property
    def vram_bytes(self) -> int:
        """The likely VRAM beyond llama.cpp's count (items that may not be allocated left out)."""
        return sum(i.bytes or 0 for i in self.items if i.in_vram and not i.upper_bound)

    @property
    def vram_bytes_max(self) -> int:
        return sum(i.bytes or 0 for i in self.items if i.in_vram)

    @property
    def host_bytes(self) -> int:
        return sum(i.bytes or 0 for i in self.items if not i.in_vram)

    @property
    def label(self) -> str:
        known = [i for i in self.items if i.in_vram and i.bytes is not None]
        return (
            f"estimate: {self.vram_bytes / MiB:,.0f}–{self.vram_bytes_max / MiB:,.0f} MiB on {self.device} beyond "
            f"llama.cpp's own count ({', '.join(i.name for i in known)}), each with its source"
        )


def output_buffer_bytes(n_vocab: int, n_seq_max: int, n_outputs: int = 1, n_embd: int = 0) -> int:
    """llama_context::output_reserve: logits (and embeddings with --embeddings) for max(outputs, sequences)."""
    rows = max(n_outputs, n_seq_max)
    return (n_vocab + n_embd) * rows * 4


def cuda_context_bytes(sm_count: int | None) -> int | None:
    return None if sm_count is None else round(CONTEXT_MIB_PER_SM * sm_count * MiB)


def cublas_workspace_bytes(compute_capability: float | None) -> int:
    return (32 if compute_capability is not None and compute_capability >= 9.0 else 4) * MiB


def cuda_pool_bytes(model: ModelParams, layout: KVLayout, flags: ServerFlags, cells_in_use: int) -> int:
    """The pool's high-water mark after prompt processing (estimate, see the module's docstring)."""
    ubatch = effective_ubatch(flags, model)
    q8_1 = ubatch * max(max(model.n_ff, default=0), model.ffn_width, model.n_embd) * 36 // 32
    f16_kv = 0
    quantized = BY_NAME[flags.type_k].block_size > 1 or BY_NAME[flags.type_v].block_size > 1
    if layout.flash_attn and quantized and layout.caches:
        widest = max(model.n_embd_k_gqa(il) + model.n_embd_v_gqa(il) for il in range(model.n_layer_all))
        f16_kv = min(cells_in_use + ubatch, layout.n_ctx_seq) * widest * 2
    return q8_1 + f16_kv


def overhead(
    device: str,
    *,
    model: ModelParams,
    layout: KVLayout,
    flags: ServerFlags,
    sm_count: int | None,
    compute_capability: float | None,
    cells_in_use: int,
    holds_output: bool = True,
) -> Overhead:
    """What nvidia-smi shows for `device` beyond llama.cpp's breakdown. `holds_output`: the device of the
    output layer, whose host buffer holds the logits (system RAM)."""
    items = [
        Item("CUDA context", cuda_context_bytes(sm_count), True, False, CONTEXT_SOURCE),
        Item("cuBLAS workspace", cublas_workspace_bytes(compute_capability), True, True, CUBLAS_SOURCE, exact=True),
        Item("ggml-cuda pool", cuda_pool_bytes(model, layout, flags, cells_in_use), True, False, POOL_SOURCE),
    ]
    if holds_output:
        size = output_buffer_bytes(model.n_vocab or 0, max(1, layout.n_parallel))
        items.append(Item("output buffer (logits)", size, False, False, OUTPUT_SOURCE, exact=True))
    items.append(Item("driver reservation", 0, False, False, RESERVED_SOURCE))
    return Overhead(device, items)
