"""KV arithmetic against llama.cpp's rules and published figures. No database."""

import pytest

from sizing.ggml_types import row_size
from sizing.hparams import ModelSpecError, model_params
from sizing.kv import ServerFlags, kv_layout, pad256

MiB = 1024 * 1024


def llama(layers=32, heads=32, kv_heads=8, embd=4096, ctx=131072, **extra):
    return model_params(
        {
            "general.architecture": "llama",
            "llama.block_count": layers,
            "llama.embedding_length": embd,
            "llama.context_length": ctx,
            "llama.attention.head_count": heads,
            "llama.attention.head_count_kv": kv_heads,
            **{f"llama.{k}": v for k, v in extra.items()},
        }
    )


DEVSTRAL = dict(
    layers=40,
    heads=32,
    kv_heads=8,
    embd=5120,
    ctx=393216,
    **{"attention.key_length": 128, "attention.value_length": 128},
)


def gpt_oss_20b():
    return model_params(
        {
            "general.architecture": "gpt-oss",
            "gpt-oss.block_count": 24,
            "gpt-oss.embedding_length": 2880,
            "gpt-oss.context_length": 131072,
            "gpt-oss.attention.head_count": 64,
            "gpt-oss.attention.head_count_kv": 8,
            "gpt-oss.attention.key_length": 64,
            "gpt-oss.attention.value_length": 64,
            "gpt-oss.attention.sliding_window": 128,
        }
    )


@pytest.mark.parametrize(
    ("type_name", "n", "expected"),
    [
        ("f32", 1024, 4096),
        ("f16", 1024, 2048),
        ("bf16", 1024, 2048),
        ("q8_0", 1024, 1088),
        ("q4_0", 1024, 576),
        ("iq4_nl", 1024, 576),
        ("q4_1", 1024, 640),
        ("q5_0", 1024, 704),
        ("q5_1", 1024, 768),
    ],
)
def test_every_cache_type_uses_its_block_arithmetic(type_name, n, expected):
    assert row_size(type_name, n) == expected


def test_a_row_that_is_not_whole_blocks_is_refused():
    with pytest.raises(ValueError, match="not whole q8_0 blocks"):
        row_size("q8_0", 48)


def test_padding_is_to_256_cells():
    assert [pad256(n) for n in (1, 256, 257, 4362, 16384)] == [256, 256, 512, 4608, 16384]


def test_llama_3_1_8b_at_4096_cells_is_512_mib():
    layout = kv_layout(llama(), ServerFlags(ctx_size=4096, parallel=1))
    (cache,) = layout.caches
    assert (cache.cells, cache.layers, cache.k_bytes, cache.v_bytes) == (4096, 32, 256 * MiB, 256 * MiB)
    assert layout.kv_bytes == 512 * MiB


def test_the_demo_model_costs_160_kib_per_token_in_f16_and_85_in_q8_0():
    model = llama(**DEVSTRAL)
    assert kv_layout(model, ServerFlags(ctx_size=16384)).bytes_per_token == 160 * 1024
    q8 = kv_layout(model, ServerFlags(ctx_size=12288, parallel=1, type_k="q8_0", type_v="q8_0", flash_attn="on"))
    assert q8.bytes_per_token == 85 * 1024 == 87040


def test_no_np_means_four_slots_sharing_one_unified_pool():
    layout = kv_layout(llama(**DEVSTRAL), ServerFlags(ctx_size=16384))
    assert (layout.n_parallel, layout.kv_unified, layout.auto_parallel) == (4, True, True)
    assert (layout.n_ctx, layout.n_ctx_seq, layout.n_stream) == (16384, 16384, 1)
    assert layout.kv_bytes == 16384 * 160 * 1024  # 2.5 GiB


def test_explicit_np_turns_unified_off_and_divides_the_context():
    layout = kv_layout(llama(), ServerFlags(ctx_size=2048, parallel=3))
    assert (layout.n_ctx, layout.n_ctx_seq, layout.n_stream, layout.kv_unified) == (2304, 768, 3, False)
    assert layout.caches[0].cells == 768 and layout.caches[0].streams == 3


def test_np_with_kvu_keeps_one_pool():
    layout = kv_layout(llama(), ServerFlags(ctx_size=9000, parallel=3, kv_unified=True))
    assert (layout.n_ctx, layout.n_ctx_seq, layout.n_stream) == (9216, 9216, 1)


def test_no_kv_unified_without_np_is_ignored_with_a_warning():
    layout = kv_layout(llama(), ServerFlags(ctx_size=4096, kv_unified=False))
    assert layout.kv_unified is True and "no effect without -np" in layout.warnings[0]


def test_the_tiny_test_model_matches_the_server_log():
    # The tiny test model: 4 layers, 2 KV heads x 32, -c 2048 -np 3 -> 768 cells, 2.25 MiB, K 1.12 + V 1.12
    model = llama(layers=4, heads=8, kv_heads=2, embd=256, ctx=4096)
    layout = kv_layout(model, ServerFlags(ctx_size=2048, parallel=3))
    (cache,) = layout.caches
    assert (cache.cells, cache.layers, cache.streams) == (768, 4, 3)
    assert cache.k_bytes == cache.v_bytes == 4 * 768 * 3 * 64 * 2
    assert round(layout.kv_bytes / MiB, 2) == 2.25


def test_gqa_per_layer_kv_heads_and_layers_without_kv():
    model = llama(layers=4, **{"attention.head_count_kv": [8, 4, 0, 8]})
    (cache,) = kv_layout(model, ServerFlags(ctx_size=256, parallel=1)).caches
    assert cache.k_bytes == 256 * (8 + 4 + 0 + 8) * 128 * 2


def test_gpt_oss_20b_at_131072_cells_is_3072_mib_full_and_18_mib_swa():
    layout = kv_layout(gpt_oss_20b(), ServerFlags(ctx_size=131072, parallel=1))
    full, swa = layout.caches
    assert (full.cells, full.layers, full.bytes) == (131072, 12, 3072 * MiB)
    assert (swa.cells, swa.layers, swa.bytes) == (768, 12, 18 * MiB)


def test_swa_full_gives_the_swa_layers_the_whole_context():
    layout = kv_layout(gpt_oss_20b(), ServerFlags(ctx_size=131072, parallel=1, swa_full=True))
    assert layout.caches[1].cells == 131072 and layout.kv_bytes == 6144 * MiB


def test_a_unified_swa_cache_holds_the_window_of_every_slot():
    unified = kv_layout(gpt_oss_20b(), ServerFlags(ctx_size=32768, parallel=4, kv_unified=True))
    per_slot = kv_layout(gpt_oss_20b(), ServerFlags(ctx_size=32768, parallel=4))
    assert unified.caches[1].cells == pad256(128 * 4 + 512) == 1024
    assert (per_slot.caches[1].cells, per_slot.caches[1].streams) == (768, 4)


def test_gemma3_slides_five_layers_of_six():
    model = model_params(
        {
            "general.architecture": "gemma3",
            "gemma3.block_count": 6,
            "gemma3.embedding_length": 256,
            "gemma3.context_length": 8192,
            "gemma3.attention.head_count": 4,
            "gemma3.attention.head_count_kv": 2,
            "gemma3.attention.key_length": 64,
            "gemma3.attention.value_length": 64,
            "gemma3.attention.sliding_window": 64,
        }
    )
    full, swa = kv_layout(model, ServerFlags(ctx_size=4096, parallel=1)).caches
    assert (full.cells, full.layers, swa.cells, swa.layers) == (4096, 1, 768, 5)


def test_gemma3_without_a_window_has_one_plain_cache():
    model = model_params(
        {
            "general.architecture": "gemma3",
            "gemma3.block_count": 6,
            "gemma3.embedding_length": 256,
            "gemma3.context_length": 8192,
            "gemma3.attention.head_count": 4,
        }
    )
    assert [c.name for c in kv_layout(model, ServerFlags(ctx_size=512, parallel=1)).caches] == ["full"]


def deepseek_v3():
    return model_params(
        {
            "general.architecture": "deepseek2",
            "deepseek2.block_count": 61,
            "deepseek2.embedding_length": 7168,
            "deepseek2.context_length": 163840,
            "deepseek2.attention.head_count": 128,
            "deepseek2.attention.head_count_kv": 1,
            "deepseek2.attention.key_length": 576,
            "deepseek2.attention.value_length": 512,
            "deepseek2.attention.key_length_mla": 192,
            "deepseek2.attention.value_length_mla": 128,
            "deepseek2.attention.kv_lora_rank": 512,
        }
    )


def test_mla_keeps_one_576_wide_k_row_per_layer_and_no_v_cache():
    layout = kv_layout(deepseek_v3(), ServerFlags(ctx_size=4096, parallel=1))
    (cache,) = layout.caches
    assert cache.v_bytes == 0 and cache.k_bytes == 61 * 4096 * 576 * 2


def test_mla_refuses_different_k_and_v_types():
    layout = kv_layout(deepseek_v3(), ServerFlags(ctx_size=4096, type_k="q8_0", type_v="f16"))
    assert layout.errors and "same K and V cache types" in layout.errors[0] and not layout.caches


def test_a_quantized_v_cache_needs_flash_attention():
    layout = kv_layout(llama(), ServerFlags(ctx_size=4096, type_v="q8_0", flash_attn="off"))
    assert "needs flash attention" in layout.errors[0]
    assert not kv_layout(llama(), ServerFlags(ctx_size=4096, type_v="q8_0", flash_attn="auto")).errors


def test_a_block_that_does_not_divide_the_head_size_is_refused():
    model = llama(layers=2, heads=4, kv_heads=2, embd=320, **{"attention.key_length": 80, "attention.value_length": 80})
    layout = kv_layout(model, ServerFlags(ctx_size=256, type_k="q8_0", type_v="q8_0", flash_attn="on"))
    assert "do not divide the head size 80" in layout.errors[0]


def test_the_nextn_layer_holds_no_kv_in_the_main_context():
    model = llama(layers=5, **{"nextn_predict_layers": 1})
    (cache,) = kv_layout(model, ServerFlags(ctx_size=256, parallel=1)).caches
    assert cache.layers == 4


def mamba():
    return model_params(
        {
            "general.architecture": "mamba",
            "mamba.block_count": 2,
            "mamba.embedding_length": 256,
            "mamba.context_length": 1024,
            "mamba.ssm.conv_kernel": 4,
            "mamba.ssm.inner_size": 512,
            "mamba.ssm.state_size": 16,
            "mamba.ssm.time_step_rank": 16,
        }
    )


def test_recurrent_state_is_per_sequence_and_ignores_the_context():
    small = kv_layout(mamba(), ServerFlags(ctx_size=256, parallel=3))
    large = kv_layout(mamba(), ServerFlags(ctx_size=65536, parallel=3, type_k="q8_0", type_v="q8_0"))
    assert small.caches == [] and small.recurrent == large.recurrent
    rec = small.recurrent
    assert (rec.cells, rec.layers) == (3, 2)
    assert rec.r_bytes == 2 * 4 * 3 * (3 * 512) and rec.s_bytes == 2 * 4 * 3 * (16 * 512)


def test_a_hybrid_splits_attention_and_recurrent_layers():
    model = model_params(
        {
            "general.architecture": "granitehybrid",
            "granitehybrid.block_count": 4,
            "granitehybrid.embedding_length": 256,
            "granitehybrid.context_length": 4096,
            "granitehybrid.attention.head_count": 4,
            "granitehybrid.attention.head_count_kv": [0, 2, 0, 0],
            "granitehybrid.ssm.conv_kernel": 4,
            "granitehybrid.ssm.inner_size": 512,
            "granitehybrid.ssm.state_size": 16,
            "granitehybrid.ssm.group_count": 1,
        }
    )
    layout = kv_layout(model, ServerFlags(ctx_size=1024, parallel=2))
    (cache,) = layout.caches
    assert (cache.layers, cache.cells, cache.streams) == (1, 512, 2)
    assert layout.recurrent.layers == 3
    assert layout.recurrent.r_bytes == 3 * 4 * 2 * (3 * (512 + 2 * 16))


def test_qwen3next_caches_every_fourth_layer():
    model = model_params(
        {
            "general.architecture": "qwen3next",
            "qwen3next.block_count": 8,
            "qwen3next.embedding_length": 256,
            "qwen3next.context_length": 4096,
            "qwen3next.attention.head_count": 4,
            "qwen3next.attention.head_count_kv": 2,
            "qwen3next.ssm.conv_kernel": 4,
            "qwen3next.ssm.inner_size": 512,
            "qwen3next.ssm.state_size": 128,
            "qwen3next.ssm.group_count": 16,
        }
    )
    layout = kv_layout(model, ServerFlags(ctx_size=1024, parallel=1))
    assert layout.caches[0].layers == 2 and layout.recurrent.layers == 6


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({}, "missing 'general.architecture'"),
        ({"general.architecture": "bert"}, "architecture 'bert' is not one kvlab sizes: an embedding/encoder model"),
        ({"general.architecture": "qwen9"}, "architecture 'qwen9' is not one llama.cpp b11434 knows"),
        ({"general.architecture": "llama"}, "lacks llama.block_count, llama.embedding_length, llama.context_length"),
        (
            {
                "general.architecture": "llama",
                "llama.block_count": 0,
                "llama.embedding_length": 64,
                "llama.context_length": 64,
                "llama.attention.head_count": 4,
            },
            "llama.block_count must be at least 1",
        ),
        (
            {
                "general.architecture": "gpt-oss",
                "gpt-oss.block_count": 2,
                "gpt-oss.embedding_length": 64,
                "gpt-oss.context_length": 64,
                "gpt-oss.attention.head_count": 4,
            },
            "lacks gpt-oss.attention.sliding_window",
        ),
        (
            {
                "general.architecture": "llama",
                "llama.block_count": 2,
                "llama.embedding_length": 64,
                "llama.context_length": 64,
                "llama.attention.head_count": 4,
                "llama.attention.head_count_kv": [1, 2, 3],
            },
            "has 3 entries for 2 layers",
        ),
    ],
)
def test_metadata_that_cannot_be_sized_says_what_is_missing(metadata, message):
    with pytest.raises(ModelSpecError, match=message):
        model_params(metadata)
