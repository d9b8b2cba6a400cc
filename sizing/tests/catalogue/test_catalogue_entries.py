"""Every catalogue entry sizes: its KV from its metadata, its weights at every quantization it lists.

And where a GGUF's size is published, the computed tensor data lies below it by a GGUF head
(metadata, tokenizer, tensor table): the head depends on the tokenizer, not on the quantization.
"""

import pytest

from sizing import catalogue, weights
from sizing.hparams import model_params
from sizing.kv import ServerFlags, kv_layout

MiB = 1024 * 1024

# The head (file − computed tensor data) of the published files of the entries added
# later, in MiB: each is its tokenizer's size, as for the files test_weights checks.
PUBLISHED_HEADS_MIB = {
    ("gemma-3-27b", "Q4_K_M"): 5.99,  # Gemma 3's 262k vocabulary (ggml-org's file)
    ("granite-4.0-h-tiny", "Q4_K_M"): 3.42,  # the 100k vocabulary, as Granite 4.0 H Small
    ("lfm2-1.2b", "Q4_K_M"): 2.27,  # LFM2's 65k vocabulary
    ("smollm3-3b", "Q4_K_M"): 7.48,  # Llama 3's 128k vocabulary, as Llama 3.1 8B
    ("olmoe-1b-7b", "Q4_K_M"): 1.70,  # OLMo's 50k vocabulary
}


def _entries() -> list[str]:
    return sorted(catalogue.models())


@pytest.mark.parametrize("model_id", _entries())
def test_every_entry_sizes_its_kv(model_id: str) -> None:
    entry = catalogue.models()[model_id]
    params = model_params(entry.metadata)
    assert params.arch == entry.metadata["general.architecture"]
    layout = kv_layout(params, ServerFlags(ctx_size=4096, parallel=1))
    assert not layout.errors
    assert layout.kv_bytes > 0


@pytest.mark.parametrize("model_id", _entries())
def test_every_entry_has_weights_at_every_common_quantization(model_id: str) -> None:
    entry = catalogue.models()[model_id]
    for quant in catalogue.COMMON_QUANTS:
        figure = catalogue.weights_for(model_id, quant)
        assert figure is not None, f"{model_id} has no {quant}"
        assert figure.bytes > 0
        # Every entry's tensor table computes, published figure or not.
        assert entry.computed_bytes(quant, imatrix=False) > 0
    sizes = [entry.weights[q].bytes for q in catalogue.COMMON_QUANTS]
    assert sizes == sorted(sizes), "Q4_K_M < Q5_K_M < Q6_K < Q8_0"


@pytest.mark.parametrize(("model_id", "quant"), sorted(PUBLISHED_HEADS_MIB))
def test_a_published_file_is_the_computed_tensor_data_and_its_head(model_id: str, quant: str) -> None:
    entry = catalogue.models()[model_id]
    head = entry.files[quant] - entry.computed_bytes(quant)
    assert head / MiB == pytest.approx(PUBLISHED_HEADS_MIB[model_id, quant], abs=0.01)


def test_every_entry_names_where_its_figures_come_from() -> None:
    for entry in catalogue.models().values():
        assert entry.sources.get("metadata"), f"{entry.id} cites no config"
        if entry.files:
            assert "huggingface.co" in entry.sources.get("files", ""), f"{entry.id} cites no file listing"
        for figure in entry.weights.values():
            assert figure.computed == (figure.quant not in entry.files)
            arch = entry.metadata["general.architecture"]
            assert figure.source == (weights.computed_source(arch) if figure.computed else entry.sources["files"])


def test_a_hybrid_entry_keeps_kv_only_in_its_attention_layers() -> None:
    # Granite 4.0 H Tiny: 4 attention layers of 40 own a KV cache, the 36 Mamba-2 layers a state.
    params = model_params(catalogue.models()["granite-4.0-h-tiny"].metadata)
    assert sum(params.kv_layers) == 4
    assert sum(params.recr_layers) == 36
    # LFM2 1.2B: 6 attention layers of 16, the other 10 short convolutions.
    params = model_params(catalogue.models()["lfm2-1.2b"].metadata)
    assert sum(params.kv_layers) == 6
    assert sum(params.recr_layers) == 10


def test_the_newly_covered_architectures_cache_only_where_llama_cpp_does() -> None:
    def caches(model_id: str) -> list[int]:
        params = model_params(catalogue.models()[model_id].metadata)
        return [cache.layers for cache in kv_layout(params, ServerFlags(ctx_size=32768, parallel=1)).caches]

    # Gemma 3n E4B: only the first 20 of 35 layers own a cache, every 5th of them full (4 full, 16 SWA).
    assert caches("gemma-3n-e4b") == [4, 16]
    # GLM-4.5-Air: 46 trunk layers; its NextN layer (block 46) has no cache.
    assert caches("glm-4.5-air") == [46]
    # Llama 4 Scout: every 4th layer is global, the other 36 attend in 8192-token chunks.
    assert caches("llama-4-scout") == [12, 36]
    # EXAONE 4.0 32B: the 64-layer model slides 3 of every 4 layers over 4096 tokens.
    assert caches("exaone-4.0-32b") == [16, 48]
