"""The architecture table's traits, each on an architecture that has it, with llama.cpp's numbers. No database."""

import pytest

from sizing.archs import ARCHS, REFUSED
from sizing.hparams import ModelSpecError, model_params
from sizing.kv import ServerFlags, kv_layout


def spec(arch, **keys):
    base = {"block_count": 4, "embedding_length": 256, "context_length": 65536, "attention.head_count": 4}
    return model_params({"general.architecture": arch, **{f"{arch}.{k}": v for k, v in {**base, **keys}.items()}})


def layout(model, **flags):
    return kv_layout(model, ServerFlags(**{"ctx_size": 4096, "parallel": 1, **flags}))


def test_every_architecture_of_llama_cpp_b11434_is_sized_or_refused_never_both():
    # src/llama-arch.cpp LLM_ARCH_NAMES has 154 names besides "(unknown)"
    assert len(ARCHS) + len(REFUSED) == 154 and not set(ARCHS) & set(REFUSED)
    assert len(ARCHS) == 124


@pytest.mark.parametrize(
    ("arch", "reason"),
    [
        ("nomic-bert", "an embedding/encoder model"),
        ("llada", "a diffusion language model"),
        ("clip", "a vision/audio encoder"),
        ("t5encoder", "an encoder-only model"),
        ("eagle3", "a speculative-decoding draft head"),
        ("deepseek4", "llama_kv_cache_dsv4"),
    ],
)
def test_a_refused_architecture_is_named_with_the_reason(arch, reason):
    with pytest.raises(ModelSpecError, match=f"architecture '{arch}' is not one kvlab sizes: .*{reason}"):
        spec(arch)


def test_an_unknown_architecture_is_named_never_guessed():
    with pytest.raises(ModelSpecError, match="architecture 'llama9' is not one llama.cpp b11434 knows"):
        spec("llama9")


def test_deci_layers_without_kv_heads_keep_an_empty_cache_row_but_pad_v_without_flash_attention():
    model = spec("deci", **{"attention.head_count_kv": [2, 0, 2, 0]})
    (cache,) = layout(model).caches
    assert cache.layers == 4  # llama_kv_cache: has_kv() is true for every layer, 0 heads or not
    assert cache.k_bytes == 2 * 4096 * 2 * 64 * 2  # two layers of 2 heads x 64
    (no_fa,) = layout(model, flash_attn="off").caches
    assert no_fa.v_bytes == 4 * 4096 * 2 * 64 * 2  # [TAG_V_CACHE_VARIABLE]: every V row padded to the widest


def test_gemma3n_keeps_kv_only_in_its_first_20_layers():
    # gemma3n.cpp: n_layer_kv_from_start = 20; period 5 (layers 4, 9, 14, 19 full)
    model = spec("gemma3n", block_count=35, **{"attention.sliding_window": 512, "attention.head_count_kv": 2})
    full, swa = layout(model).caches
    assert (full.layers, swa.layers) == (4, 16)


def test_gemma4_shares_the_last_layers_kv():
    pattern = [True, True, True, False, True, False]
    model = spec(
        "gemma4",
        block_count=6,
        **{
            "attention.sliding_window": 64,
            "attention.sliding_window_pattern": pattern,
            "attention.shared_kv_layers": 2,
            "attention.key_length_swa": 32,
            "attention.value_length_swa": 32,
        },
    )
    full, swa = layout(model).caches
    assert (full.layers, swa.layers) == (1, 3)
    assert swa.k_bytes == 3 * 768 * 4 * 32 * 2  # SWA layers use key_length_swa


def test_the_nextn_layer_has_no_cache_but_a_router_layer_has_one():
    assert layout(spec("glm4moe", block_count=5, nextn_predict_layers=1)).caches[0].layers == 4
    router = spec("graniteswitch")  # granite-switch.cpp: a 1-head router layer after the 4 trunk layers
    (cache,) = layout(router).caches
    assert (router.n_layer_all, router.n_layer, cache.layers) == (5, 4, 5)
    assert cache.k_bytes == (4 * 4 + 1) * 64 * 4096 * 2


def test_nanbeige_repeats_its_layers_num_loops_times():
    assert layout(spec("nanbeige", num_loops=3)).caches[0].layers == 12


def test_cohere2moe_starts_with_a_dense_layer():
    full, swa = layout(spec("cohere2moe", **{"attention.sliding_window": 64})).caches
    assert (full.layers, swa.layers) == (1, 3)
    assert spec("cohere2moe", **{"attention.sliding_window": 64}).is_swa == (False, True, True, True)


def test_gemma2_slides_with_a_4096_window_when_the_key_is_absent():
    model = spec("gemma2", block_count=6)
    assert model.n_swa == 4096 and model.is_swa == (True, False) * 3


def test_exaone4_slides_only_as_the_64_layer_model():
    assert not spec("exaone4", **{"attention.sliding_window": 64}).has_swa
    assert spec("exaone4", block_count=64, **{"attention.sliding_window": 64}).has_swa


def test_phi3_never_slides():
    assert not spec("phi3", **{"attention.sliding_window": 2048}).has_swa


def test_llama4_chunks_8192_tokens_unless_the_window_is_zero():
    model = spec("llama4", block_count=8, **{"attention.sliding_window": 1234})
    assert (model.swa_type, model.n_swa) == ("chunked", 8192)
    full, chunked = layout(model, ctx_size=32768).caches
    assert (full.layers, chunked.layers, chunked.cells) == (2, 6, 8704)  # pad256(8192 + 512)
    assert not spec("llama4", **{"attention.sliding_window": 0}).has_swa


def test_smallthinker_uses_4096_whatever_window_the_key_gives():
    assert spec("smallthinker", **{"attention.sliding_window": 64}).n_swa == 4096


@pytest.mark.parametrize(
    ("flags", "cells"),
    [
        ({}, 768),  # pad256(64 + 512)
        ({"n_ubatch": 256}, 512),  # pad256(64 + 256)
        ({"n_batch": 128}, 256),  # n_ubatch = min(-ub, -b)
        ({"parallel": 2, "kv_unified": True}, 768),  # pad256(2 x 64 + 512)
        ({"parallel": 2, "swa_full": True}, 2048),  # the slot's n_ctx_seq
        ({"ctx_size": 300}, 512),  # n_batch = min(-c, -b): pad256(min(512, 64 + 300))
    ],
)
def test_the_swa_cache_holds_the_window_per_slot_and_one_micro_batch(flags, cells):
    model = spec("gpt-oss", **{"attention.sliding_window": 64})
    assert layout(model, **flags).caches[1].cells == cells


def test_lfm2_slides_every_attention_layer_when_it_has_a_window():
    keys = {"attention.head_count_kv": [0, 2, 0, 2], "shortconv.l_cache": 3}
    model = spec("lfm2", **keys, **{"attention.sliding_window": 512})
    full, swa = layout(model).caches
    assert (full.layers, swa.layers) == (0, 2)
    assert layout(model).recurrent.r_bytes == 2 * 4 * 256 * 2  # shortconv: n_embd x (l_cache - 1), f32
    assert not spec("lfm2", **keys).has_swa


def test_rwkv_state_is_token_shift_and_wkv():
    model = spec("rwkv7", embedding_length=2560, **{"wkv.head_size": 64, "attention.head_count": 0})
    assert (model.n_embd_r, model.n_embd_s) == (2 * 2560, 2560 * 64)
    assert layout(model, parallel=3).recurrent.s_bytes == 4 * 3 * 2560 * 64 * 4


def test_kimi_linear_kda_state_and_mla_layers():
    model = spec(
        "kimi-linear",
        embedding_length=2304,
        **{
            "attention.head_count": 32,
            "attention.head_count_kv": [0, 0, 0, 1],
            "kda.head_dim": 128,
            "ssm.conv_kernel": 4,
            "attention.key_length": 576,
            "attention.key_length_mla": 192,
            "attention.value_length_mla": 128,
        },
    )
    # llama-hparams.cpp: "32 * 128 = 4096" conv per q/k/v, "128 * 128 * 32 = 524288"
    assert (model.n_embd_r, model.n_embd_s) == (3 * 3 * 4096, 524288)
    (cache,) = layout(model).caches
    assert (cache.layers, cache.v_bytes, layout(model).recurrent.layers) == (1, 0, 3)


def test_minimax_01_lightning_state_and_every_eighth_layer_attends():
    model = spec("minimax-01", block_count=16, **{"attention.head_count": 64, "attention.key_length": 128})
    assert model.n_embd_s == 1048576  # llama-hparams.cpp: "128 * 128 * 64"
    assert layout(model).caches[0].layers == 2 and layout(model).recurrent.layers == 14


def test_jamba_ignores_group_count_and_falcon_h1_caches_every_layer_twice():
    jamba = spec("jamba", **{"attention.head_count_kv": [0, 2, 0, 0], "ssm.conv_kernel": 4, "ssm.inner_size": 512,
                             "ssm.state_size": 16, "ssm.group_count": 8})  # fmt: skip
    assert jamba.n_embd_r == 3 * 512
    falcon = spec("falcon-h1", **{"ssm.conv_kernel": 4, "ssm.inner_size": 512, "ssm.state_size": 16,
                                  "ssm.group_count": 1})  # fmt: skip
    assert layout(falcon).caches[0].layers == 4 and layout(falcon).recurrent.layers == 4


def test_nemotron_h_mlp_layers_hold_neither_kv_nor_state():
    model = spec(
        "nemotron_h",
        **{"attention.head_count_kv": [0, 0, 2, 0], "feed_forward_length": [0, 256, 0, 256], "ssm.conv_kernel": 4,
           "ssm.inner_size": 512, "ssm.state_size": 16, "ssm.group_count": 2},
    )  # fmt: skip
    assert layout(model).caches[0].layers == 1 and layout(model).recurrent.layers == 1


def test_deepseek32_keeps_an_indexer_key_cache_beside_mla():
    model = spec(
        "deepseek32",
        **{"attention.head_count_kv": 1, "attention.key_length": 576, "attention.key_length_mla": 192,
           "attention.value_length_mla": 128, "attention.indexer.key_length": 128},
    )  # fmt: skip
    mla, indexer = layout(model).caches
    assert (mla.k_bytes, mla.v_bytes) == (4 * 4096 * 576 * 2, 0)
    assert (indexer.name, indexer.layers, indexer.k_bytes, indexer.v_bytes) == ("indexer", 4, 4 * 4096 * 128 * 2, 0)


def test_grok_turns_flash_attention_off_so_a_quantized_v_cache_is_refused():
    model = spec("grok")
    assert not layout(model).flash_attn
    assert "llama.cpp turns it off for grok" in layout(model, type_v="q8_0", type_k="q8_0").errors[0]


def test_the_ffn_width_is_the_widest_dense_layer_or_the_routed_experts():
    # Llama 2 70B: dense; deci: per-layer, 0 where a layer has no FFN
    assert spec("llama", feed_forward_length=28672).ffn_width == 28672
    assert spec("deci", feed_forward_length=[0, 14336, 0, 28672]).ffn_width == 28672
    # Qwen3-30B-A3B: 8 experts of 768 per token; OLMoE (no expert width): 8 experts of feed_forward_length
    moe = {"expert_count": 128, "expert_used_count": 8}
    assert spec("qwen3moe", feed_forward_length=6144, expert_feed_forward_length=768, **moe).ffn_width == 6144
    assert spec("olmoe", feed_forward_length=1024, **moe).ffn_width == 8192
    # DeepSeek-V3-like: dense layers of 18432 beside 8 routed experts of 2048; gpt-oss: 4 of 2880
    assert spec("deepseek2", feed_forward_length=18432, expert_feed_forward_length=2048, **moe).ffn_width == 18432
    gpt_oss = {
        "expert_count": 32,
        "expert_used_count": 4,
        "expert_feed_forward_length": 2880,
        "attention.sliding_window": 128,
    }
    assert spec("gpt-oss", feed_forward_length=2880, **gpt_oss).ffn_width == 11520
