"""The ggml type llama-quantize writes for each tensor: src/llama-quant.cpp of llama.cpp b11434.

A port of `llama_model_quantize_impl`'s type choice without a file: `tensor_allows_quantization`,
`tensor_get_category`, `llama_tensor_get_type_impl` (the per-ftype mixtures: the attn_v and
ffn_down upgrades, the first/last-layer rules of `use_more_bits`, the 8-expert and 70B rules) and
`tensor_type_fallback` (a row that is not whole blocks takes a smaller block, else F16). Branches
appear in llama.cpp's order, so that they can be read side by side. Not modelled: --pure,
--tensor-type / --output-tensor-type / --token-embedding-type overrides, --leave-output-tensor,
and the GLM5-next and Bailing-MoE-3 special cases (kvlab sizes neither).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..ggml_types import BY_NAME

# llama-quantize's ftype -> the default tensor type (llama_ftype_get_default_type).
FTYPE_DEFAULT_TYPE = {
    "F32": "f32",
    "F16": "f16",
    "BF16": "bf16",
    "Q4_0": "q4_0",
    "Q4_1": "q4_1",
    "Q5_0": "q5_0",
    "Q5_1": "q5_1",
    "Q8_0": "q8_0",
    "Q2_K": "q2_K",
    "Q2_K_S": "q2_K",
    "Q3_K_S": "q3_K",
    "Q3_K_M": "q3_K",
    "Q3_K_L": "q3_K",
    "Q4_K_S": "q4_K",
    "Q4_K_M": "q4_K",
    "Q5_K_S": "q5_K",
    "Q5_K_M": "q5_K",
    "Q6_K": "q6_K",
    "IQ1_S": "iq1_s",
    "IQ1_M": "iq1_m",
    "IQ2_XXS": "iq2_xxs",
    "IQ2_XS": "iq2_xs",
    "IQ2_S": "iq2_xs",
    "IQ2_M": "iq2_s",
    "IQ3_XXS": "iq3_xxs",
    "IQ3_XS": "iq3_s",
    "IQ3_S": "iq3_s",
    "IQ3_M": "iq3_s",
    "IQ4_NL": "iq4_nl",
    "IQ4_XS": "iq4_xs",
    "MXFP4": "mxfp4",  # llama-quantize's MXFP4_MOE
}
_UNQUANTIZED = {"f32", "f16", "bf16"}
# The ftypes llama-quantize refuses without an importance matrix (tensor_requires_imatrix: some
# tensor gets an IQ1/IQ2/IQ3_XXS type, or Q2_K in a Q2_K_S file); kvlab types them as if one is given.
REQUIRES_IMATRIX = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "Q2_K_S"}
_IQ1_IQ2 = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M"}

# The name fragments tensor_allows_quantization keeps as they are (besides norms, 1-D tensors and
# names not ending in "weight").
_NEVER_QUANTIZED = (
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    ".patch_embd",
)

# tensor_get_category: the first fragment a name contains decides (output and token_embd by name).
_CATEGORIES = (
    ("attn_qkv.weight", "attn_qkv"),
    ("attn_kv_b.weight", "attn_kv_b"),
    ("attn_v.weight", "attn_v"),
    ("attn_k.weight", "attn_k"),
    ("attn_q.weight", "attn_q"),
    ("attn_output.weight", "attn_output"),
    ("ffn_up", "ffn_up"),
    ("ffn_gate", "ffn_gate"),
    ("ffn_down", "ffn_down"),
)
_ATTN_V_LIKE = {"attn_v", "attn_qkv", "attn_kv_b"}  # category_is_attn_v
_ATTN_OUTPUT_Q5_K_WITH_8_EXPERTS = {
    *("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ3_S", "IQ3_M", "IQ4_XS")
}


@dataclass(frozen=True)
class ModelFacts:
    """What llama-quantize reads from the loaded model besides the tensors (qs.model)."""

    n_layer_all: int  # block_count, NextN layers included (n_ffn_down = n_ffn_gate = n_ffn_up)
    n_expert: int
    n_gqa: int  # hparams.n_gqa(): layer 0's n_head / n_head_kv, 0 where layer 0 has no KV heads
    is_70b: bool  # model.type == LLM_TYPE_70B


def allows_quantization(name: str, n_dims: int) -> bool:
    """tensor_allows_quantization (quantize_output_tensor on, as llama-quantize's default)."""
    return (
        n_dims >= 2
        and name.endswith("weight")
        and "_norm.weight" not in name
        and not any(fragment in name for fragment in _NEVER_QUANTIZED)
    )


def category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    return next((cat for fragment, cat in _CATEGORIES if fragment in name), "other")


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def fallback(new_type: str, ncols: int) -> str:
    """tensor_type_fallback: a row that is not whole blocks of the type takes a 32-block type, else F16."""
    if ncols % BY_NAME[new_type].block_size == 0:
        return new_type
    if new_type in ("iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq4_xs"):
        smaller = "iq4_nl"
    elif new_type in ("q2_0", "q2_K", "q3_K", "tq1_0", "tq2_0"):
        smaller = "q4_0"
    else:
        smaller = {"q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0"}.get(new_type, new_type)
        if smaller == new_type and BY_NAME[new_type].block_size > 32:
            raise ValueError(f"llama-quantize has no fallback for type {new_type}")
    return smaller if ncols % BY_NAME[smaller].block_size == 0 else "f16"


class _Counters:
    def __init__(self, n_attention_wv: int) -> None:
        self.n_attention_wv = n_attention_wv
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0


def _layer(name: str, counter: int, model: ModelFacts) -> int:
    """layer_info: with experts the layer is read from the name, else the tensor's running count."""
    if model.n_expert > 1:
        match = re.match(r"blk\.(\d+)\.", name)
        if match is None:
            raise ValueError(f"cannot tell the layer of {name}")
        return int(match.group(1))
    return counter


def _impl(
    qs: _Counters, model: ModelFacts, new_type: str, name: str, shape: tuple[int, ...], ftype: str, cat: str,
    *, tied: bool, imatrix: bool,
) -> str:  # fmt: skip
    """llama_tensor_get_type_impl, branch by branch."""
    n_layer = model.n_layer_all
    n_expert = model.n_expert
    gqa4 = model.n_gqa >= 4
    if cat == "output" or (tied and cat == "token_embd"):
        nx = shape[0]
        if ftype == "MXFP4" or nx % BY_NAME[new_type].block_size:
            new_type = "q8_0"
        elif ftype in ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"):
            new_type = "q5_K"
        elif new_type != "q8_0":
            new_type = "q6_K"
    elif ftype == "MXFP4":
        new_type = "mxfp4" if len(shape) > 2 and shape[2] > 1 else "q8_0"
    elif cat == "token_embd":
        if ftype in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
            new_type = "q2_K"
        elif ftype in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
            new_type = "iq3_s"
    elif ftype in _IQ1_IQ2:
        iq2_s_m = ftype in ("IQ2_S", "IQ2_M")
        if cat in _ATTN_V_LIKE:
            new_type = "q4_K" if gqa4 or n_expert >= 4 else "iq3_s" if iq2_s_m else "q2_K"
            qs.i_attention_wv += 1
        elif n_expert == 8 and cat == "attn_k":
            new_type = "q4_K"
        elif cat == "ffn_down":
            if qs.i_ffn_down < n_layer // 8:
                new_type = "iq3_s" if iq2_s_m else "q2_K"
            qs.i_ffn_down += 1
        elif cat == "attn_output":
            if n_expert == 8:
                new_type = "q5_K"
            elif ftype in ("IQ1_S", "IQ1_M"):
                new_type = "iq2_xxs"
            elif iq2_s_m:
                new_type = "iq3_s"
    elif cat in _ATTN_V_LIKE:
        i_wv = qs.i_attention_wv
        if ftype == "Q2_K":
            new_type = "q4_K" if gqa4 else "q3_K"
        elif ftype == "Q2_K_S" and gqa4:
            new_type = "q4_K"
        elif ftype == "IQ3_XXS":
            new_type = "q4_K" if gqa4 else "iq3_s" if not imatrix else "iq3_xxs"
        elif ftype in ("IQ3_XS", "IQ3_S") and gqa4 or ftype == "IQ3_M":
            new_type = "q4_K"
        elif ftype == "Q3_K_M":
            new_type = "q5_K" if i_wv < 2 else "q4_K"
        elif ftype == "Q3_K_L" or ftype in ("IQ4_NL", "IQ4_XS") and gqa4:
            new_type = "q5_K"
        elif ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(i_wv, qs.n_attention_wv):
            new_type = "q6_K"
        elif ftype == "Q4_K_S" and i_wv < 4:
            new_type = "q5_K"
        if model.is_70b and new_type in ("q3_K", "q4_K"):
            new_type = "q5_K"
        if n_expert == 8:
            new_type = "q8_0"
        qs.i_attention_wv += 1
    elif cat == "attn_k":
        if n_expert == 8:
            new_type = "q8_0"
        elif ftype == "IQ3_XS":
            new_type = "iq3_xxs"
        elif ftype == "IQ3_XXS":
            new_type = "iq2_s"
    elif cat == "attn_q":
        if ftype == "IQ3_XS":
            new_type = "iq3_xxs"
        elif ftype == "IQ3_XXS":
            new_type = "iq2_s"
    elif cat == "ffn_down":
        i_layer = _layer(name, qs.i_ffn_down, model)
        if ftype == "Q2_K":
            new_type = "q3_K"
        elif ftype == "Q2_K_S":
            if i_layer < n_layer // 8:
                new_type = "q4_K"
        elif ftype == "IQ3_XXS" and not imatrix:
            new_type = "q4_K" if i_layer < n_layer // 8 else "q3_K"
        elif ftype == "Q3_K_M":
            # llama.cpp: `arch != LLM_ARCH_FALCON || use_more_bits(...)`; kvlab sizes no falcon.
            new_type = "q5_K" if i_layer < n_layer // 16 else "q4_K"
        elif ftype == "IQ3_M" and (i_layer < n_layer // 8 or (n_expert == 8 and use_more_bits(i_layer, n_layer))):
            new_type = "q4_K"
        elif ftype == "Q3_K_L":
            new_type = "q5_K"
        elif ftype == "Q4_K_M":
            if use_more_bits(i_layer, n_layer):
                new_type = "q6_K"
        elif i_layer < n_layer // 8 and ftype in ("IQ4_NL", "IQ4_XS") and not imatrix:
            new_type = "q5_K"
        elif ftype == "Q5_K_M" and use_more_bits(i_layer, n_layer):
            new_type = "q6_K"
        elif ftype == "Q4_K_S" and i_layer < n_layer // 8:
            new_type = "q5_K"
        elif ftype in ("Q4_0", "Q5_0") and imatrix and i_layer < n_layer // 8:
            new_type = "q4_1" if ftype == "Q4_0" else "q5_1"
        qs.i_ffn_down += 1
    elif cat == "attn_output":
        if n_expert == 8:
            if ftype in _ATTN_OUTPUT_Q5_K_WITH_8_EXPERTS:
                new_type = "q5_K"
        else:
            new_type = {"Q2_K": "q3_K", "IQ3_XXS": "iq3_s", "Q3_K_M": "q4_K", "Q3_K_L": "q5_K", "IQ3_M": "q4_K"}.get(
                ftype, new_type
            )
    elif cat in ("ffn_gate", "ffn_up"):
        counter = qs.i_ffn_gate if cat == "ffn_gate" else qs.i_ffn_up
        i_layer = _layer(name, counter, model)
        if ftype == "IQ3_XS" and n_layer // 8 <= i_layer < 7 * n_layer // 8:
            new_type = "iq3_xxs"
        if cat == "ffn_gate":
            qs.i_ffn_gate += 1
        else:
            qs.i_ffn_up += 1
    return new_type


def loader_order(name: str) -> tuple[int, str]:
    """llama_model_loader's weights_map order (weight_name_comparer): layer, then name."""
    match = re.match(r"blk\.(\d+)\.", name)
    return (int(match.group(1)) if match else -1, name)


def choose_types(
    tensors: Sequence[tuple[str, tuple[int, ...], str]], model: ModelFacts, quant: str, *, imatrix: bool = False
) -> dict[str, str]:
    """The type of each (name, shape, source type) tensor after `llama-quantize <ftype>`, by name.

    Tensors are visited in the loader's order, since the attn_v and ffn_down rules count them.
    `imatrix`: an importance matrix was given (bartowski's and unsloth's files have one); it
    changes IQ3_XXS, IQ4_NL/IQ4_XS and (Q4_0, Q5_0) choices. The ftypes that require one are typed
    as if one was given.
    """
    ftype = quant.upper()
    if ftype not in FTYPE_DEFAULT_TYPE:
        raise ValueError(f"kvlab cannot compute {quant!r}; it knows {', '.join(FTYPE_DEFAULT_TYPE)}")
    default_type = FTYPE_DEFAULT_TYPE[ftype]
    imatrix = imatrix or ftype in REQUIRES_IMATRIX
    ordered = sorted(tensors, key=lambda t: loader_order(t[0]))
    cats = {name: category(name) for name, _, _ in ordered}
    tied = "output" not in cats.values()
    qs = _Counters(sum(1 for c in cats.values() if c in _ATTN_V_LIKE))
    types: dict[str, str] = {}
    for name, shape, source_type in ordered:
        n_dims = len(shape)
        while n_dims > 1 and shape[n_dims - 1] == 1:  # ggml_n_dims
            n_dims -= 1
        if not allows_quantization(name, n_dims):
            types[name] = source_type
            continue
        new_type = default_type
        if default_type not in _UNQUANTIZED:
            new_type = _impl(qs, model, new_type, name, shape, ftype, cats[name], tied=tied, imatrix=imatrix)
            new_type = fallback(new_type, shape[0])
        types[name] = new_type
    return types
