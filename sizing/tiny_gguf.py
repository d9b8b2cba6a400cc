"""Tiny random-weight GGUF models that the real llama-server loads, for the oracle tests.

Written with the `gguf` package's GGUFWriter, giving llama.cpp's loader exactly what it requires,
as the loaders of the pinned llama.cpp tree read it
(src/models/<arch>.cpp, load_arch_hparams / load_arch_tensors). Every model has f32
random weights, norms of 1 and a `llama` SentencePiece vocab (control tokens, the 256
byte tokens, a few pieces). The loader refuses unknown or missing tensors, so each writer
emits exactly the tensors its architecture asks for.

Shapes below are given in ggml `ne` order (fastest dimension first), as in the C++
sources; `_Model.tensor` reverses them into numpy order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import gguf
import numpy as np

CONTEXT_LENGTH = 8192
RMS_EPS = 1e-6

# A SentencePiece-style vocab: <unk>, <s>, </s>, the 256 byte tokens, some pieces.
_CONTROL = [("<unk>", gguf.TokenType.UNKNOWN), ("<s>", gguf.TokenType.CONTROL), ("</s>", gguf.TokenType.CONTROL)]
_PIECES = ["▁", "e", "t", "a", "o", "n", "▁t", "he", "▁the", "▁a", "in", "er", "▁hello", "▁world", "llo", "▁is"]


def _vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = [t for t, _ in _CONTROL]
    types = [int(k) for _, k in _CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [int(gguf.TokenType.BYTE)] * 256
    tokens += _PIECES
    types += [int(gguf.TokenType.NORMAL)] * len(_PIECES)
    scores = [0.0] * (len(_CONTROL) + 256) + [-float(i) for i in range(len(_PIECES))]
    return tokens, scores, types


N_VOCAB = len(_vocab()[0])


class _Model:
    """A GGUFWriter plus a seeded generator: keys first, then tensors, then write()."""

    def __init__(self, path: Path, arch: str, seed: int) -> None:
        self.path = Path(path)
        self.w = gguf.GGUFWriter(str(self.path), arch)
        self.rng = np.random.default_rng(seed)
        self.w.add_name(f"kvlab tiny {arch}")
        self.w.add_file_type(gguf.LlamaFileType.ALL_F32)
        tokens, scores, types = _vocab()
        self.w.add_tokenizer_model("llama")
        self.w.add_token_list(tokens)
        self.w.add_token_scores(scores)
        self.w.add_token_types(types)
        self.w.add_unk_token_id(0)
        self.w.add_bos_token_id(1)
        self.w.add_eos_token_id(2)
        self.w.add_context_length(CONTEXT_LENGTH)
        self.w.add_layer_norm_rms_eps(RMS_EPS)

    def tensor(self, name: str, ne: Sequence[int], fill: float | None = None, scale: float = 0.02) -> None:
        shape = tuple(reversed(ne))
        if fill is not None:
            data = np.full(shape, fill, dtype=np.float32)
        else:
            data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.w.add_tensor(name, data)

    def norm(self, name: str, ne: Sequence[int]) -> None:
        self.tensor(name, ne, fill=1.0)

    def embeddings(self, n_embd: int, *, output: bool = True) -> None:
        self.tensor("token_embd.weight", (n_embd, N_VOCAB))
        self.norm("output_norm.weight", (n_embd,))
        if output:
            self.tensor("output.weight", (n_embd, N_VOCAB))

    def attention(self, i: int, n_embd: int, n_head: int, n_head_kv: int, head_dim: int) -> None:
        self.tensor(f"blk.{i}.attn_q.weight", (n_embd, n_head * head_dim))
        self.tensor(f"blk.{i}.attn_k.weight", (n_embd, n_head_kv * head_dim))
        self.tensor(f"blk.{i}.attn_v.weight", (n_embd, n_head_kv * head_dim))
        self.tensor(f"blk.{i}.attn_output.weight", (n_head * head_dim, n_embd))

    def ffn(self, i: int, n_embd: int, n_ff: int) -> None:
        self.norm(f"blk.{i}.ffn_norm.weight", (n_embd,))
        self.tensor(f"blk.{i}.ffn_gate.weight", (n_embd, n_ff))
        self.tensor(f"blk.{i}.ffn_up.weight", (n_embd, n_ff))
        self.tensor(f"blk.{i}.ffn_down.weight", (n_ff, n_embd))

    def write(self) -> Path:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        return self.path


def write_llama(path: Path) -> Path:
    """llama, GQA: 4 layers, n_embd 256, 8 heads of 32, 2 KV heads."""
    n_embd, n_head, n_head_kv, n_ff, n_layer = 256, 8, 2, 256, 4
    hd = n_embd // n_head
    m = _Model(path, "llama", seed=1)
    m.w.add_embedding_length(n_embd)
    m.w.add_block_count(n_layer)
    m.w.add_feed_forward_length(n_ff)
    m.w.add_head_count(n_head)
    m.w.add_head_count_kv(n_head_kv)
    m.w.add_rope_dimension_count(hd)
    m.embeddings(n_embd)
    for i in range(n_layer):
        m.norm(f"blk.{i}.attn_norm.weight", (n_embd,))
        m.attention(i, n_embd, n_head, n_head_kv, hd)
        m.ffn(i, n_embd, n_ff)
    return m.write()


def write_gemma3(path: Path) -> Path:
    """gemma3, SWA: 6 layers (period 6: layers 0-4 slide), window 64, 4 heads of 64, 2 KV heads."""
    n_embd, n_head, n_head_kv, hd, n_ff, n_layer = 128, 4, 2, 64, 256, 6
    m = _Model(path, "gemma3", seed=2)
    m.w.add_embedding_length(n_embd)
    m.w.add_block_count(n_layer)
    m.w.add_feed_forward_length(n_ff)
    m.w.add_head_count(n_head)
    m.w.add_head_count_kv(n_head_kv)
    m.w.add_key_length(hd)
    m.w.add_value_length(hd)
    m.w.add_sliding_window(64)
    m.embeddings(n_embd, output=False)  # gemma3 ties the output to token_embd
    for i in range(n_layer):
        m.norm(f"blk.{i}.attn_norm.weight", (n_embd,))
        m.attention(i, n_embd, n_head, n_head_kv, hd)
        m.norm(f"blk.{i}.post_attention_norm.weight", (n_embd,))
        m.norm(f"blk.{i}.attn_q_norm.weight", (hd,))
        m.norm(f"blk.{i}.attn_k_norm.weight", (hd,))
        m.ffn(i, n_embd, n_ff)
        m.norm(f"blk.{i}.post_ffw_norm.weight", (n_embd,))
    return m.write()


def write_deepseek2(path: Path) -> Path:
    """deepseek2, MLA: 2 dense layers, 4 heads, kv_lora_rank 64, rope 32, nope 32, v_mla 64, no q LoRA."""
    n_embd, n_head, n_ff, n_layer = 128, 4, 256, 2
    kv_lora, rope, nope, v_mla = 64, 32, 32, 64
    m = _Model(path, "deepseek2", seed=3)
    m.w.add_embedding_length(n_embd)
    m.w.add_block_count(n_layer)
    m.w.add_feed_forward_length(n_ff)
    m.w.add_head_count(n_head)
    m.w.add_head_count_kv(1)
    m.w.add_key_length(kv_lora + rope)
    m.w.add_value_length(kv_lora)
    m.w.add_key_length_mla(nope + rope)
    m.w.add_value_length_mla(v_mla)
    m.w.add_kv_lora_rank(kv_lora)
    m.w.add_q_lora_rank(0)
    m.w.add_rope_dimension_count(rope)
    m.w.add_leading_dense_block_count(n_layer)
    m.w.add_expert_feed_forward_length(n_ff)
    m.w.add_expert_shared_count(1)
    m.embeddings(n_embd)
    for i in range(n_layer):
        m.norm(f"blk.{i}.attn_norm.weight", (n_embd,))
        m.norm(f"blk.{i}.attn_kv_a_norm.weight", (kv_lora,))
        m.tensor(f"blk.{i}.attn_q.weight", (n_embd, n_head * (nope + rope)))
        m.tensor(f"blk.{i}.attn_kv_a_mqa.weight", (n_embd, kv_lora + rope))
        m.tensor(f"blk.{i}.attn_k_b.weight", (nope, kv_lora, n_head))
        m.tensor(f"blk.{i}.attn_v_b.weight", (kv_lora, v_mla, n_head))
        m.tensor(f"blk.{i}.attn_output.weight", (n_head * v_mla, n_embd))
        m.ffn(i, n_embd, n_ff)
    return m.write()


def _ssm_a(m: _Model, name: str, ne: Sequence[int]) -> None:
    """A_log-style decay: negative values, as the converters store them."""
    shape = tuple(reversed(ne))
    m.w.add_tensor(name, (-np.exp(m.rng.uniform(0.0, 1.0, shape))).astype(np.float32))


def write_mamba(path: Path) -> Path:
    """mamba (v1), recurrent: 2 layers, n_embd 128, d_inner 256, d_state 32, d_conv 4, dt_rank 8."""
    n_embd, d_inner, d_state, d_conv, dt_rank, n_layer = 128, 256, 32, 4, 8, 2
    m = _Model(path, "mamba", seed=4)
    m.w.add_embedding_length(n_embd)
    m.w.add_block_count(n_layer)
    m.w.add_feed_forward_length(0)
    m.w.add_head_count(0)
    m.w.add_ssm_conv_kernel(d_conv)
    m.w.add_ssm_inner_size(d_inner)
    m.w.add_ssm_state_size(d_state)
    m.w.add_ssm_time_step_rank(dt_rank)
    m.embeddings(n_embd)
    for i in range(n_layer):
        m.norm(f"blk.{i}.attn_norm.weight", (n_embd,))
        m.tensor(f"blk.{i}.ssm_in.weight", (n_embd, 2 * d_inner))
        m.tensor(f"blk.{i}.ssm_conv1d.weight", (d_conv, d_inner))
        m.tensor(f"blk.{i}.ssm_conv1d.bias", (d_inner,))
        m.tensor(f"blk.{i}.ssm_x.weight", (d_inner, dt_rank + 2 * d_state))
        m.tensor(f"blk.{i}.ssm_dt.weight", (dt_rank, d_inner))
        m.tensor(f"blk.{i}.ssm_dt.bias", (d_inner,))
        _ssm_a(m, f"blk.{i}.ssm_a", (d_state, d_inner))
        m.norm(f"blk.{i}.ssm_d", (d_inner,))
        m.tensor(f"blk.{i}.ssm_out.weight", (d_inner, n_embd))
    return m.write()


GRANITE_KV_HEADS = [0, 2, 0, 2]  # 0 KV heads = a Mamba-2 layer (llama.cpp's rule for granitehybrid)


def write_granitehybrid(path: Path) -> Path:
    """granitehybrid: 4 layers alternating Mamba-2 and attention (4 heads of 32, 2 KV heads)."""
    n_embd, n_head, n_ff, n_layer = 128, 4, 256, len(GRANITE_KV_HEADS)
    d_inner, d_state, d_conv, n_group, n_ssm_head = 256, 64, 4, 2, 8
    hd = n_embd // n_head
    d_in_proj = 2 * d_inner + 2 * n_group * d_state + n_ssm_head
    m = _Model(path, "granitehybrid", seed=5)
    m.w.add_embedding_length(n_embd)
    m.w.add_block_count(n_layer)
    m.w.add_feed_forward_length(n_ff)
    m.w.add_head_count(n_head)
    m.w.add_head_count_kv(GRANITE_KV_HEADS)
    m.w.add_rope_dimension_count(hd)
    m.w.add_ssm_conv_kernel(d_conv)
    m.w.add_ssm_inner_size(d_inner)
    m.w.add_ssm_state_size(d_state)
    m.w.add_ssm_time_step_rank(n_ssm_head)
    m.w.add_ssm_group_count(n_group)
    m.embeddings(n_embd)
    for i, kv in enumerate(GRANITE_KV_HEADS):
        m.norm(f"blk.{i}.attn_norm.weight", (n_embd,))
        if kv == 0:
            m.tensor(f"blk.{i}.ssm_in.weight", (n_embd, d_in_proj))
            m.tensor(f"blk.{i}.ssm_conv1d.weight", (d_conv, d_inner + 2 * n_group * d_state))
            m.tensor(f"blk.{i}.ssm_conv1d.bias", (d_inner + 2 * n_group * d_state,))
            m.tensor(f"blk.{i}.ssm_dt.bias", (n_ssm_head,))
            _ssm_a(m, f"blk.{i}.ssm_a", (1, n_ssm_head))
            m.norm(f"blk.{i}.ssm_d", (1, n_ssm_head))
            m.norm(f"blk.{i}.ssm_norm.weight", (d_inner // n_group, n_group))
            m.tensor(f"blk.{i}.ssm_out.weight", (d_inner, n_embd))
        else:
            m.attention(i, n_embd, n_head, kv, hd)
        m.ffn(i, n_embd, n_ff)
    return m.write()


WRITERS: dict[str, Callable[[Path], Path]] = {
    "llama": write_llama,
    "gemma3": write_gemma3,
    "deepseek2": write_deepseek2,
    "mamba": write_mamba,
    "granitehybrid": write_granitehybrid,
}


def write_all(directory: Path) -> dict[str, Path]:
    """Write every tiny model into directory; returns {name: path}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return {name: writer(directory / f"tiny-{name}.gguf") for name, writer in WRITERS.items()}
