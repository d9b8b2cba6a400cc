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

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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


# ---------------------------------------------------------------------------------------------
# Any architecture: the metadata by hand, the tensor table learnt from llama.cpp's own loader.
#
# A loader asks for its tensors one by one (llama_model_loader::create_tensor) and stops at the
# first it cannot find ("missing tensor 'blk.0.attn_q.weight'") or whose shape differs ("tensor
# 'blk.0.attn_q.weight' has wrong shape; expected 128, 512, got 1, 1"; src/llama-model-loader.cpp
# check_tensor_dims). `learn_tensors` answers those two messages until the model loads, so a tiny
# model of an architecture needs only its hyperparameters: the tensors come from the llama.cpp
# that will run it, and a loader change shows up as a new question, not as a stale table.

_MISSING_RE = re.compile(r"missing tensor '([^']+)'|tensor '([^']+)' not found")
_SHAPE_RE = re.compile(r"tensor '([^']+)' has wrong shape; expected ([\d ,]+), got")
_LAYER_RE = re.compile(r"^blk\.(\d+)\.")
MAX_QUESTIONS = 2000
LOADED = "llama_context:"  # logged once the weights are loaded, when the context is being made


def close_sparse(w: gguf.GGUFWriter, path: Path, data_bytes: int) -> None:
    """Write a GGUF's header, metadata and tensor infos, and give it data_bytes of tensor data as a
    sparse hole (no bytes written): a real-size model that costs no disk, for readers that do not
    load the weights (kvlab's head reader, llama-fit-params)."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    start = -(-path.stat().st_size // 32) * 32  # the data region starts at the next 32-byte alignment
    with path.open("r+b") as f:
        f.truncate(start + data_bytes)


class LoaderQuestion(RuntimeError):
    """The loader stopped for a reason the tensor table cannot answer (a missing key, an assertion)."""


def write_model(path: Path, arch: str, metadata: dict[str, object], tensors: dict[str, tuple[int, ...]]) -> Path:
    """A tiny GGUF: the common vocab, `{arch}.*` keys from metadata, and f32 tensors of the given shapes.

    Tensors named like norms are 1, `ssm_a` is negative (a decay, as converters store it), the
    rest small random values.
    """
    m = _Model(path, arch, seed=sum(map(ord, arch)))
    for key, value in metadata.items():
        _add_key(m.w, f"{arch}.{key}", value)
    for name, ne in tensors.items():
        if "norm" in name or name.endswith(".ssm_d") or "ln" in name.split(".")[-2:-1]:
            m.tensor(name, ne, fill=1.0)
        elif name.endswith("ssm_a"):
            _ssm_a(m, name, ne)
        else:
            m.tensor(name, ne)
    return m.write()


def _add_key(w: gguf.GGUFWriter, key: str, value: object) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, list):
        w.add_array(key, value)
    else:
        raise TypeError(f"no GGUF type for {key} = {value!r}")


def learn_tensors(
    load: Callable[[Path], str],
    directory: Path,
    arch: str,
    metadata: dict[str, object],
    optional: dict[str, tuple[int, ...]] | None = None,
) -> dict[str, tuple[int, ...]]:
    """The tensor table the loader of `arch` asks for, learnt by answering its error messages.

    `load(path)` runs llama.cpp on a model file and returns its log. A shape learnt for one layer
    is tried first for the same tensor of the other layers. `optional`: tensors the loader does not
    ask for but needs one of (rwkv6: time_mix_lerp_fused or _w), "{i}" standing for every layer.
    """
    n_layer = metadata.get("block_count")
    tensors = {
        name.format(i=i): shape
        for name, shape in (optional or {}).items()
        for i in (range(n_layer) if "{i}" in name and isinstance(n_layer, int) else [0])
    }
    per_layer: dict[str, tuple[int, ...]] = {}  # "attn_q.weight" -> shape learnt on some layer
    path = Path(directory) / f"learn-{arch}.gguf"
    for _ in range(MAX_QUESTIONS):
        write_model(path, arch, metadata, tensors)
        log = load(path)
        if missing := _MISSING_RE.search(log):
            name = missing[1] or missing[2]
            layer = _LAYER_RE.match(name)
            tensors[name] = per_layer.get(name[layer.end() :], (1,)) if layer else (1,)
        elif wrong := _SHAPE_RE.search(log):
            name, shape = wrong[1], tuple(int(n) for n in wrong[2].split(","))
            if tensors.get(name) == shape:
                raise LoaderQuestion(f"{arch}: {name} keeps the wrong shape {shape}")
            tensors[name] = shape
            if layer := _LAYER_RE.match(name):
                per_layer[name[layer.end() :]] = shape
        elif LOADED in log:
            return tensors
        else:
            lines = [line for line in log.splitlines() if "GGML_ASSERT" in line or "error loading model" in line]
            raise LoaderQuestion(f"{arch}: the loader stopped: {' | '.join((lines or log.splitlines()[-3:])[:2])}")
    raise LoaderQuestion(f"{arch}: still asking after {MAX_QUESTIONS} tensors")


@dataclass(frozen=True)
class TinySpec:
    """A tiny model of one architecture: its `{arch}.*` keys over COMMON_KEYS, and the KV rule it tests."""

    arch: str
    family: str  # the KV rule it exercises (docs/sizing.md)
    keys: dict[str, object] = field(default_factory=dict)
    optional: dict[str, tuple[int, ...]] = field(default_factory=dict)  # see learn_tensors

    def metadata(self) -> dict[str, object]:
        return {**COMMON_KEYS, **self.keys}


# Every tiny model: 4 layers, 128 wide, 4 heads of 32 (2 KV heads), a 256-wide FFN; context 8192
# and the RMS epsilon come from _Model. A key an architecture does not read is ignored by llama.cpp.
COMMON_KEYS: dict[str, object] = {
    "embedding_length": 128,
    "block_count": 4,
    "feed_forward_length": 256,
    "attention.head_count": 4,
    "attention.head_count_kv": 2,
    "attention.layer_norm_epsilon": 1e-5,
}
_MOE: dict[str, object] = {"expert_count": 2, "expert_used_count": 1, "expert_feed_forward_length": 256}
_SSM: dict[str, object] = {"ssm.conv_kernel": 4, "ssm.inner_size": 256, "ssm.state_size": 16, "ssm.time_step_rank": 8}
_RWKV7: dict[str, object] = {
    "wkv.head_size": 32,
    "attention.decay_lora_rank": 16,
    "attention.iclr_lora_rank": 16,
    "attention.value_residual_mix_lora_rank": 16,
    "attention.gate_lora_rank": 16,
}
_RWKV6: dict[str, object] = {
    "wkv.head_size": 32,
    "time_mix_extra_dim": 32,
    "time_decay_extra_dim": 64,
    "rescale_every_n_layers": 0,
}
# rwkv6.cpp asserts lerp_fused or lerp_w
_LERP: dict[str, tuple[int, ...]] = {"blk.{i}.time_mix_lerp_fused.weight": (128, 1, 1, 5)}

SPECS: dict[str, TinySpec] = {
    # the standard layout
    **{
        arch: TinySpec(arch, "standard")
        for arch in (
            "qwen2",
            "qwen3",
            "mistral3",
            "smollm3",
            "starcoder2",
            "internlm2",
            "stablelm",
            "gpt2",
            "bloom",
            "falcon",
            "olmo",
            "exaone",
            "chatglm",
            "glm4",
        )
    },  # fmt: skip
    "granite": TinySpec("granite", "standard", {"logit_scale": 1.0}),
    "command-r": TinySpec("command-r", "standard", {"logit_scale": 1.0}),
    "qwen2moe": TinySpec("qwen2moe", "standard", {**_MOE, "expert_shared_feed_forward_length": 256}),
    "qwen3moe": TinySpec("qwen3moe", "standard", _MOE),
    "granitemoe": TinySpec("granitemoe", "standard", {**_MOE, "logit_scale": 1.0}),
    # K and V heads of different widths (48 and 32): V padded to the widest layer without flash attention
    "llama-nextn": TinySpec("llama", "nextn", {"block_count": 5, "nextn_predict_layers": 1}),
    # glm4 and exaone4 keep a whole block on their NextN layer (the loader skips it)
    "glm4-nextn": TinySpec("glm4", "nextn", {"block_count": 5, "nextn_predict_layers": 1}),
    "exaone4-nextn": TinySpec("exaone4", "nextn", {"block_count": 5, "nextn_predict_layers": 1}),
    "deci": TinySpec(
        "deci",
        "per-layer KV heads",
        {"attention.head_count_kv": [2, 0, 2, 0], "feed_forward_length": [256, 256, 0, 256]},
    ),
    "gemma4": TinySpec(
        "gemma4",
        "shared KV",
        {
            "block_count": 6,
            "attention.sliding_window": 64,
            "attention.sliding_window_pattern": [True, True, True, False, True, False],
            "attention.shared_kv_layers": 2,
            "attention.key_length": 64,
            "attention.value_length": 64,
            "attention.key_length_swa": 32,
            "attention.value_length_swa": 32,
            "rope.dimension_count_swa": 32,
            "embedding_length_per_layer_input": 0,
        },
    ),
    "gemma2": TinySpec("gemma2", "SWA period", {"attention.sliding_window": 64}),
    "cohere2": TinySpec("cohere2", "SWA period", {"attention.sliding_window": 64, "logit_scale": 1.0}),
    "cohere2moe": TinySpec(
        "cohere2moe",
        "SWA dense-first",
        {**_MOE, "attention.sliding_window": 64, "leading_dense_block_count": 1, "logit_scale": 1.0},
    ),
    # exaone4 slides only at 64 layers (exaone4.cpp): a 4-layer model has one plain cache
    "exaone4": TinySpec("exaone4", "standard", {"attention.sliding_window": 64}),
    "olmo2": TinySpec("olmo2", "SWA if a window", {"attention.sliding_window": 64}),
    "olmo2-noswa": TinySpec("olmo2", "SWA if a window", {}),
    "gpt-oss": TinySpec(
        "gpt-oss",
        "SWA period",
        {**_MOE, "attention.sliding_window": 64, "attention.key_length": 32, "attention.value_length": 32},
    ),
    "exaone-moe": TinySpec(
        "exaone-moe",
        "SWA period",
        {**_MOE, "attention.sliding_window": 64, "expert_gating_func": 1, "leading_dense_block_count": 1},
    ),
    "granite_swa": TinySpec(
        "granite_swa",
        "SWA array",
        {
            "attention.sliding_window": 64,
            "attention.sliding_window_pattern": [True, True, True, False],
            "logit_scale": 1.0,
        },
    ),
    "step35": TinySpec(
        "step35",
        "SWA array",
        {**_MOE, "attention.sliding_window": 64, "attention.sliding_window_pattern": [True, False, True, False]},
    ),
    "llama4": TinySpec("llama4", "chunked", {**_MOE, "interleave_moe_layer_step": 1}),
    "mamba2": TinySpec("mamba2", "recurrent", {**_SSM, "attention.head_count": 0, "ssm.group_count": 2}),
    "rwkv6qwen2": TinySpec("rwkv6qwen2", "recurrent", {**_RWKV6, "token_shift_count": 1}, _LERP),
    "rwkv7": TinySpec("rwkv7", "recurrent", {**_RWKV7, "attention.head_count": 0}),
    "arwkv7": TinySpec("arwkv7", "recurrent", {**_RWKV7, "token_shift_count": 1}),
    "jamba": TinySpec("jamba", "hybrid", {**_SSM, "attention.head_count_kv": [0, 2, 0, 0]}),
    "lfm2": TinySpec("lfm2", "hybrid", {"attention.head_count_kv": [0, 2, 0, 2], "shortconv.l_cache": 3}),
    "lfm2-swa": TinySpec(
        "lfm2",
        "hybrid SWA",
        {"attention.head_count_kv": [0, 2, 0, 2], "shortconv.l_cache": 3, "attention.sliding_window": 64},
    ),
    "plamo2": TinySpec(
        "plamo2",
        "hybrid",
        {**_SSM, "ssm.group_count": 0, "attention.head_count_kv": [0, 2, 0, 2], "attention.key_length": 32},
    ),
    "minimax-01": TinySpec("minimax-01", "hybrid", {**_MOE, "residual_scale": 1.0, "full_attention_interval": 2}),
}
