"""A model's weight tensors and the layer each belongs to, as llama.cpp b11434's loader sees them. Pure.

A tensor's layer decides its device (sizing.placement.breakdown): `load_tensors`
(src/llama-model.cpp:1594-1616) gives the *input* layer to the CPU always, each repeating layer
`blk.N` to a device by `-ngl`/`-ts`, and the *output* layer (index n_layer_all) likewise. Which
layer a name belongs to is `LLM_TENSOR_INFOS` (src/llama-arch.cpp:749-): token_embd, pos_embd,
token_types and per_layer_token_embd are input; token_embd_norm and gemma3n/gemma4's
per_layer_model_proj / per_layer_proj_norm are *repeating* tensors created with layer 0
(`tn(..., "weight", 0)`, e.g. src/models/bert.cpp:40, gemma3n.cpp:40-41); rope_freqs is created
for every layer with TENSOR_DUPLICATED (src/models/llama.cpp:66), so one copy lands in each buffer
type the layers use; every other name outside `blk.N` is an output-layer tensor.

A model without `output.weight` reuses token_embd for its logits: the loader creates it a second
time as an output tensor (TENSOR_DUPLICATED, llama-model-loader.cpp:1163-1168), a real second copy
unless the output lands in the same buffer type as the input (:1370-1376).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..ggml_types import BY_NAME

INPUT_NAMES = frozenset({"token_embd", "pos_embd", "token_types", "per_layer_token_embd"})
LAYER0_NAMES = frozenset({"token_embd_norm", "per_layer_model_proj", "per_layer_proj_norm"})
EVERY_LAYER_NAMES = frozenset({"rope_freqs"})
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class WeightTensor:
    """One weight as the GGUF stores it: its name, ggml type name ("q4_K") and shape in ggml order."""

    name: str
    type_name: str
    shape: tuple[int, ...]

    @property
    def n_elements(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n

    @property
    def nbytes(self) -> int:
        """ggml_nbytes: whole blocks of the type (the first dimension is a multiple of the block)."""
        t = BY_NAME[self.type_name]
        return self.n_elements // t.block_size * t.type_size

    @property
    def quantized(self) -> bool:
        """ggml_is_quantized: a block type (f32/f16/bf16 and the integer types are not)."""
        return BY_NAME[self.type_name].block_size > 1

    @property
    def base_name(self) -> str:
        """The name without `blk.N.` and its last suffix: "blk.3.ffn_up.weight" -> "ffn_up"."""
        name = _BLOCK_RE.sub("", self.name)
        return name.rsplit(".", 1)[0] if "." in name else name


def layer_of(name: str, n_layer_all: int) -> int | None:
    """The layer whose device holds a tensor: N for blk.N, None for the input layer (always the CPU),
    n_layer_all for the output layer; 0 for the repeating tensors made with layer 0."""
    m = _BLOCK_RE.match(name)
    if m:
        return int(m[1])
    base = name.rsplit(".", 1)[0] if "." in name else name
    if base in INPUT_NAMES:
        return None
    if base in LAYER0_NAMES or base in EVERY_LAYER_NAMES:
        return 0
    return n_layer_all


def uses_of(tensor: WeightTensor, n_layer_all: int, *, tied_output: bool) -> tuple[int | None, ...]:
    """Every layer that creates this tensor: one for most, each layer for rope_freqs, and input plus
    output for token_embd when the model has no output.weight (`tied_output`)."""
    if tensor.base_name in EVERY_LAYER_NAMES and not tensor.name.startswith("blk."):
        return tuple(range(n_layer_all))
    if tied_output and tensor.name == "token_embd.weight":
        return (None, n_layer_all)
    return (layer_of(tensor.name, n_layer_all),)


def has_tied_output(tensors: Sequence[WeightTensor]) -> bool:
    names = {t.name for t in tensors}
    return "token_embd.weight" in names and "output.weight" not in names


def from_gguf(infos: Sequence[Any]) -> list[WeightTensor]:
    """From a GGUF head's tensor table (sizing.gguf.TensorInfo: name, shape, type_name)."""
    tensors = []
    for info in infos:
        if info.type_name not in BY_NAME:
            raise ValueError(f"tensor {info.name} has a ggml type kvlab does not know ({info.type_name})")
        tensors.append(WeightTensor(info.name, info.type_name, tuple(info.shape)))
    return tensors


def from_table(table: Sequence[Any], types: Mapping[str, str]) -> list[WeightTensor]:
    """From the computed table (sizing.weights.tensor_table) and its types for a quantization
    (sizing.weights.tensor_types)."""
    return [WeightTensor(t.name, types[t.name], tuple(t.shape)) for t in table]


def computed(
    metadata: Mapping[str, Any],
    quant_name: str,
    *,
    tied_embeddings: bool,
    rope_freqs: bool = False,
    imatrix: bool = False,
    **hints: Any,
) -> list[WeightTensor]:
    """The tensors of a model quantized to `quant_name`, computed from its metadata (sizing.weights)."""
    from .. import weights

    table = weights.tensor_table(metadata, tied_embeddings=tied_embeddings, rope_freqs=rope_freqs, **hints)
    return from_table(table, weights.tensor_types(table, metadata, quant_name, imatrix=imatrix))
