"""Weights computed from the tensor shapes, checked against published GGUFs and real tensor tables."""

from pathlib import Path

import pytest

from sizing import catalogue, tiny_gguf, weights
from sizing.gguf import read_gguf_head

MiB = 1024 * 1024
# A GGUF file is its tensor data plus a head: the metadata with the tokenizer (token strings,
# scores or types, BPE merges: 5.7 MiB for Qwen's 152k vocab, 7.5 MiB for Llama 3's 128k,
# 12.4 MiB for gpt-oss's 201k), the tensor table and up to 31 B of alignment per tensor.
GGUF_HEAD_BOUND = 16 * MiB

# Published files whose tensor types are not llama-quantize b11434's defaults, with the tensors
# that differ: with these types, the file is again the tensor data plus its head.
PUBLISHER_TYPES: dict[tuple[str, str], dict[str, str]] = {
    # microsoft/phi-4-gguf's Q4_K predates b11434: its fused attn_qkv got the old ATTENTION_QKV
    # rule (all Q5_K), where llama-quant.cpp now applies the attn_v rule (half Q6_K, half Q4_K).
    ("phi-4", "Q4_K_M"): {f"blk.{i}.attn_qkv.weight": "q5_K" for i in range(40)},
    # unsloth's IQ4_XS keeps token_embd in Q4_K (llama-quantize: the ftype's IQ4_XS).
    ("qwen3-coder-30b-a3b", "IQ4_XS"): {"token_embd.weight": "q4_K"},
}
# unsloth's Qwen3-Coder-Next K-quants and MXFP4_MOE are its own per-tensor mixes, which no
# published list names: their BF16 and Q8_0 match to the head, so the shapes are right.
PUBLISHER_MIXES = {
    ("qwen3-coder-next", q) for q in ("Q2_K", "Q3_K_M", "Q4_0", "IQ4_XS", "Q4_K_M", "Q5_K_M", "Q6_K", "MXFP4")
}


def _published_size(model_id: str, quant: str) -> int:
    entry = catalogue.models()[model_id]
    return entry.files.get(quant) or entry.checks[quant]


def _published() -> list[tuple[str, str]]:
    return [
        (m.id, quant)
        for m in catalogue.models().values()
        for quant in (*m.files, *m.checks)
        if quant.upper() in weights.FTYPE_DEFAULT_TYPE and (m.id, quant) not in PUBLISHER_MIXES
    ]


def _computed(model_id: str, quant: str) -> int:
    entry = catalogue.models()[model_id]
    tensors = weights.tensor_table(entry.metadata, **entry.tensor_layout)
    types = weights.tensor_types(tensors, entry.metadata, quant, imatrix=entry.imatrix)
    publisher = PUBLISHER_TYPES.get((model_id, quant), {})
    assert set(publisher) <= set(types), "a publisher override names a tensor the model does not have"
    return weights.tensor_data_bytes(tensors, types | publisher)


@pytest.mark.parametrize(("model_id", "quant"), _published())
def test_the_computed_tensor_data_is_the_published_file_less_its_head(model_id: str, quant: str) -> None:
    published = _published_size(model_id, quant)
    assert 0 < published - _computed(model_id, quant) < GGUF_HEAD_BOUND


@pytest.mark.parametrize(("model_id", "quant"), sorted(PUBLISHER_MIXES))
def test_a_publishers_own_mix_is_named_as_one(model_id: str, quant: str) -> None:
    # Should kvlab ever explain one of these, it moves to PUBLISHER_TYPES with its tensors.
    published = catalogue.models()[model_id].files[quant]
    assert not 0 < published - _computed(model_id, quant) < GGUF_HEAD_BOUND


def test_the_head_is_the_same_for_every_quantization_of_a_file_family() -> None:
    # The head does not depend on the quantization, so one model's differences agree to the byte
    # or nearly (its string lengths are the same; only general.file_type's value differs).
    heads = {catalogue.models()["qwen3-8b"].files[q] - _computed("qwen3-8b", q) for q in ("Q4_K_M", "Q6_K", "Q8_0")}
    assert max(heads) - min(heads) < 64


def test_q4_k_m_gives_half_the_attn_v_and_ffn_down_of_llama_3_1_8b_six_bits() -> None:
    entry = catalogue.models()["llama-3.1-8b"]
    tensors = weights.tensor_table(entry.metadata, tied_embeddings=False, rope_freqs=True)
    types = weights.tensor_types(tensors, entry.metadata, "Q4_K_M")
    attn_v = [types[f"blk.{i}.attn_v.weight"] for i in range(32)]
    assert attn_v.count("q6_K") == 16 and attn_v.count("q4_K") == 16
    assert types["blk.0.ffn_down.weight"] == "q6_K"
    assert types["blk.0.ffn_gate.weight"] == "q4_K"
    assert types["output.weight"] == "q6_K"
    assert types["token_embd.weight"] == "q4_K"
    assert types["blk.0.attn_norm.weight"] == "f32"
    assert types["rope_freqs.weight"] == "f32"


def test_a_row_that_is_not_whole_k_blocks_falls_back_to_a_32_block_type() -> None:
    entry = catalogue.models()["gpt-oss-20b"]  # n_embd 2880 = 11.25 blocks of 256
    tensors = weights.tensor_table(entry.metadata, tied_embeddings=False)
    types = weights.tensor_types(tensors, entry.metadata, "Q4_K_M")
    assert types["token_embd.weight"] == "q5_0"
    assert types["output.weight"] == "q8_0"
    assert types["blk.0.ffn_gate_inp.weight"] == "f32"
    mxfp4 = weights.tensor_types(tensors, entry.metadata, "MXFP4")
    assert mxfp4["blk.0.ffn_up_exps.weight"] == "mxfp4"
    assert mxfp4["blk.0.attn_q.weight"] == "q8_0"


def test_tied_embeddings_are_quantized_like_the_output() -> None:
    entry = catalogue.models()["gemma-3-27b"]
    tensors = weights.tensor_table(entry.metadata, tied_embeddings=True)
    assert "output.weight" not in {t.name for t in tensors}
    assert weights.tensor_types(tensors, entry.metadata, "Q4_K_M")["token_embd.weight"] == "q6_K"


@pytest.mark.parametrize("arch", sorted(set(tiny_gguf.WRITERS) & set(weights.computed_architectures())))
def test_the_tensor_table_is_the_one_llama_server_loads(tmp_path: Path, arch: str) -> None:
    # The tiny models are written with exactly the tensors llama.cpp's loader asks for (the
    # oracle tests load them in the real llama-server).
    path = tiny_gguf.WRITERS[arch](tmp_path / f"{arch}.gguf")
    with path.open("rb") as stream:
        head = read_gguf_head(stream)
    real = {t.name: t.shape for t in head.tensors}
    table = weights.tensor_table(head.metadata_without_vocab(), tied_embeddings="output.weight" not in real)
    assert {t.name: t.shape for t in table} == real
    f32 = weights.tensor_types(table, head.metadata, "F32")
    assert weights.tensor_data_bytes(table, f32) == sum(t.n_bytes for t in head.tensors)


def test_every_catalogue_model_has_the_common_quantizations() -> None:
    for model in catalogue.models().values():
        for quant in ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"):
            figure = catalogue.weights_for(model.id, quant)
            assert figure is not None, f"{model.id} has no {quant}"
            assert figure.computed == (quant not in model.files)


def test_devstral_small_2_q4_k_m_is_computed_and_says_so() -> None:
    figure = catalogue.weights_for("devstral-small-2-24b", "Q4_K_M")
    assert figure is not None
    assert figure.computed
    assert figure.source == weights.COMPUTED_SOURCE
    assert figure.bytes == 14_326_026_240  # 13.34 GiB; published file sizes say "14.33 GB"
    assert catalogue.quantizations("gpt-oss-20b")[:2] == ["Q4_K_M", "MXFP4"]


def test_a_layout_no_check_has_confirmed_says_so_where_its_weights_are_shown() -> None:
    checked = set(tiny_gguf.WRITERS) | {spec.arch for spec in tiny_gguf.SPECS.values()}  # the loader oracle's
    checked |= {m.metadata["general.architecture"] for m in catalogue.models().values() if m.files}  # published
    assert set(weights.UNCHECKED_LAYOUTS) == set(weights.computed_architectures()) - checked
    gemma3n = catalogue.weights_for("gemma-3n-e4b", "Q4_K_M")
    assert gemma3n is not None and gemma3n.source.endswith(
        "the gemma3n tensor layout is not yet checked against a real file or the loader"
    )
    devstral = catalogue.weights_for("devstral-small-2-24b", "Q4_K_M")
    assert devstral is not None and "not yet checked" not in devstral.source


def test_it_refuses_an_architecture_or_quantization_it_cannot_compute() -> None:
    with pytest.raises(ValueError, match="architecture 'rwkv7'"):
        weights.tensor_table({"general.architecture": "rwkv7"}, tied_embeddings=False)
    entry = catalogue.models()["llama-3.2-3b"]
    tensors = weights.tensor_table(entry.metadata, tied_embeddings=True)
    with pytest.raises(ValueError, match="'Q3_K_XL'"):  # unsloth's dynamic mixes are not llama-quantize ftypes
        weights.tensor_types(tensors, entry.metadata, "Q3_K_XL")


def _tiny_spec(arch: str) -> dict[str, object]:
    """A small model of an architecture: every key any part reads, in shapes llama.cpp accepts."""
    keys: dict[str, object] = {
        "block_count": 4, "embedding_length": 512, "feed_forward_length": 1024, "vocab_size": 1000,
        "attention.head_count": 8, "attention.head_count_kv": [2, 0, 2, 0], "attention.key_length": 64,
        "attention.value_length": 64, "rope.dimension_count": 64, "expert_count": 4, "expert_used_count": 2,
        "expert_feed_forward_length": 256, "expert_shared_feed_forward_length": 256, "expert_shared_count": 1,
        "leading_dense_block_count": 1, "ssm.conv_kernel": 4, "ssm.inner_size": 1024, "ssm.state_size": 64,
        "ssm.group_count": 2, "ssm.time_step_rank": 16, "shortconv.l_cache": 3, "full_attention_interval": 2,
        "attention.key_length_mla": 96, "attention.value_length_mla": 64, "attention.kv_lora_rank": 128,
        "embedding_length_per_layer_input": 128, "interleave_moe_layer_step": 0,
    }  # fmt: skip
    if arch not in ("granitehybrid", "jamba", "lfm2", "lfm2moe", "nemotron_h", "deci"):
        keys["attention.head_count_kv"] = 2  # layers without KV heads are a hybrid's recurrent ones
    if arch in ("deci", "nemotron_h"):
        keys["feed_forward_length"] = [1024, 0, 0, 1024]
    if arch in ("glm4moe", "deepseek2"):
        keys["nextn_predict_layers"] = 1
    return {"general.architecture": arch, **{f"{arch}.{k}": v for k, v in keys.items()}}


@pytest.mark.parametrize("arch", weights.computed_architectures())
def test_every_architecture_computes_every_ftype(arch: str) -> None:
    spec = _tiny_spec(arch)
    tensors = weights.tensor_table(spec, tied_embeddings=False)
    names = [t.name for t in tensors]
    assert len(names) == len(set(names)), "a tensor is written twice"
    assert all(dim > 0 for t in tensors for dim in t.shape)
    sizes = {q: weights.computed_bytes(spec, q, tied_embeddings=False) for q in ("Q2_K", "Q4_K_M", "Q8_0", "F16")}
    assert sizes["Q2_K"] < sizes["Q4_K_M"] < sizes["Q8_0"] < sizes["F16"]
