"""Real-size GGUF models that cost no disk: llama.cpp's loader sees every tensor, the data is a hole.

For the checks that never read a weight's value (llama-fit-params, the GPU fit check) or read
zeros happily (llama-server decoding from all-zero weights, for memory and speed): the tensor
table comes from sizing.weights (the converter's layout for the architecture), 1-D tensors are
f32, the rest `weight_type`, and the data region is a sparse hole (tiny_gguf.close_sparse).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from .ggml_types import BY_NAME
from .tiny_gguf import _add_key, close_sparse
from .weights import tensor_table

_GGUF_TYPES = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16}
_GGUF_TYPES["q8_0"] = gguf.GGMLQuantizationType.Q8_0
_GGUF_TYPES["q4_0"] = gguf.GGMLQuantizationType.Q4_0


def write_sparse(
    path: Path, metadata: Mapping[str, Any], *, weight_type: str = "f16", tied_embeddings: bool = False
) -> Path:
    """Write `metadata` (GGUF keys, `general.architecture` and `{arch}.vocab_size` among them) and the
    architecture's tensors with a hole for data. Returns the path."""
    arch = metadata["general.architecture"]
    n_vocab = int(metadata[f"{arch}.vocab_size"])
    w = gguf.GGUFWriter(str(path), arch)
    add_vocab(w, n_vocab)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for key, value in metadata.items():
        if key.startswith(f"{arch}.") and key != f"{arch}.vocab_size":
            _add_key(w, key, value)
    data = 0
    for t in tensor_table(metadata, tied_embeddings=tied_embeddings):
        type_name = "f32" if len(t.shape) == 1 or t.source_type == "f32" else weight_type
        ggml_type = BY_NAME[type_name]
        n_bytes = t.n_elements // ggml_type.block_size * ggml_type.type_size
        byte_shape = tuple(reversed(t.shape[1:])) + (t.shape[0] // ggml_type.block_size * ggml_type.type_size,)
        w.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), n_bytes, raw_dtype=_GGUF_TYPES[type_name])
        data += -(-n_bytes // 32) * 32
    close_sparse(w, path, data)
    return path


def add_vocab(w: gguf.GGUFWriter, n_vocab: int) -> None:
    """A SentencePiece-style vocab of n_vocab tokens: <unk>, <s>, </s>, the 256 byte tokens, then pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    tokens += [f"t{i}" for i in range(n_vocab - len(tokens))]
    types += [1] * (n_vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types(types)
