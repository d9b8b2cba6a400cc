"""Llama-shaped GGUFs of real models' shapes whose weights are absent: the real head, the data region a
sparse hole, so that llama-fit-params loads them at no disk cost."""

from __future__ import annotations

from pathlib import Path

from sizing.tiny_gguf import close_sparse

SHAPES = {
    "llama-3.1-8b": {"n_embd": 4096, "n_head": 32, "n_head_kv": 8, "n_ff": 14336, "n_vocab": 128256},
    "llama-2-7b": {"n_embd": 4096, "n_head": 32, "n_head_kv": 32, "n_ff": 11008, "n_vocab": 32000},
    "mistral-small-24b": {"n_embd": 5120, "n_head": 32, "n_head_kv": 8, "n_ff": 32768, "n_vocab": 131072},
    # three FFN rows outgrow the vocabulary: the FFN is the peak (42 % low before ModelParams had n_ff)
    "llama-2-70b": {"n_embd": 8192, "n_head": 64, "n_head_kv": 8, "n_ff": 28672, "n_vocab": 32000},
}


def write_sparse_llama(path: Path, *, n_embd: int, n_head: int, n_head_kv: int, n_ff: int, n_vocab: int) -> Path:
    """A 4-layer llama-shaped f16 GGUF: the real head, the data region a hole (no disk space)."""
    import gguf
    import numpy as np

    from sizing.sparse_gguf import add_vocab

    w = gguf.GGUFWriter(str(path), "llama")
    add_vocab(w, n_vocab)
    w.add_context_length(131072)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_embedding_length(n_embd)
    w.add_block_count(4)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    data = 0

    def tensor(name: str, ne: tuple[int, ...]) -> None:
        nonlocal data
        is_norm = len(ne) == 1
        n_bytes = int(np.prod(ne)) * (4 if is_norm else 2)
        dtype = gguf.GGMLQuantizationType.F32 if is_norm else gguf.GGMLQuantizationType.F16
        w.add_tensor_info(name, tuple(reversed(ne)), np.float32 if is_norm else np.float16, n_bytes, raw_dtype=dtype)
        data += -(-n_bytes // 32) * 32

    hd_kv = n_head_kv * (n_embd // n_head)
    tensor("token_embd.weight", (n_embd, n_vocab))
    tensor("output_norm.weight", (n_embd,))
    tensor("output.weight", (n_embd, n_vocab))
    for i in range(4):
        for name, ne in [
            ("attn_norm", (n_embd,)),
            ("attn_q", (n_embd, n_embd)),
            ("attn_k", (n_embd, hd_kv)),
            ("attn_v", (n_embd, hd_kv)),
            ("attn_output", (n_embd, n_embd)),
            ("ffn_norm", (n_embd,)),
            ("ffn_gate", (n_embd, n_ff)),
            ("ffn_up", (n_embd, n_ff)),
            ("ffn_down", (n_ff, n_embd)),
        ]:
            tensor(f"blk.{i}.{name}.weight", ne)
    close_sparse(w, path, data)
    return path
