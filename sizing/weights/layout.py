"""The tensors of a model, computed from its GGUF hyperparameters: a shared vocabulary with per-arch traits.

Each architecture's `load_arch_tensors` (src/models/<arch>.cpp of llama.cpp b11434) asks for the
same handful of parts in different combinations: a norm, standard attention (separate or fused
q/k/v, optional biases, q/k norms, a gated query, sinks), MLA, a dense FFN (gated, or one double-
width up projection), experts (with a router, shared experts, biases), a recurrent mixer (Mamba,
Mamba-2, LFM2's short convolution, Qwen3-Next's gated delta net) and NextN layers. `ARCHS` lists,
per architecture, which parts its layers have and with what traits, and names the llama.cpp
function it was read from, so that a reader can check it line by line.

Shapes are in ggml order (fastest dimension first). The source type of each tensor is what the
converter writes (conversion/base.py `prepare_tensors`): F32 for 1-D tensors, norms, expert
routers, conv1d kernels and names that do not end in ".weight"; the model's dtype (bf16 or f16:
both 2 bytes) for the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

# ---------------------------------------------------------------------------------------------
# Hyperparameters, as load_hparams reads them (src/llama-model.cpp llama_model_base::load_hparams)


class Hp:
    """The GGUF keys a tensor table needs. `{arch}.vocab_size` stands in for the tokenizer's size."""

    def __init__(self, metadata: Mapping[str, Any], hints: Mapping[str, Any]) -> None:
        self.metadata = metadata
        self.hints = hints
        self.arch: str = metadata["general.architecture"]
        self.n_layer_all = self.get("block_count")
        self.n_nextn = self.get("nextn_predict_layers", 0)
        self.n_layer = self.n_layer_all - self.n_nextn  # the trunk (hparams.n_layer())
        self.n_embd = self.get("embedding_length")
        self.n_vocab = self.get("vocab_size", 0)  # only the tensor table needs it
        self.n_head = self.per_layer("attention.head_count", 0)
        self.n_head_kv = self.per_layer("attention.head_count_kv", None) or self.n_head
        self.n_ff = self.per_layer("feed_forward_length", 0)
        head = self.n_embd // self.n_head[0] if self.n_head[0] else 0
        self.head_k = self.get("attention.key_length", head)
        self.head_v = self.get("attention.value_length", head)
        self.n_rot = self.get("rope.dimension_count", self.head_k)
        self.n_expert = self.get("expert_count", 0)
        self.n_expert_used = self.get("expert_used_count", 0)
        self.n_ff_exp = self.get("expert_feed_forward_length", 0)
        self.n_ff_shexp = self.get("expert_shared_feed_forward_length", 0)
        self.n_expert_shared = self.get("expert_shared_count", 0)
        self.n_dense_lead = self.get("leading_dense_block_count", 0)
        self.moe_step = self.get("interleave_moe_layer_step", 0)

    def value(self, name: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.arch}.{name}", default)

    def get(self, name: str, default: int | None = None) -> int:
        value = self.value(name, default)
        if value is None:
            raise ValueError(f"the metadata has no {self.arch}.{name}")
        return int(value)

    def per_layer(self, name: str, default: int | None) -> list[int]:
        """get_key_or_arr: one value for every layer, or an array of one per layer."""
        value = self.value(name, default)
        if value is None:
            return []
        if isinstance(value, list):
            return [int(v) for v in value]
        return [int(value)] * self.n_layer_all

    def ff_exp(self) -> int:
        """n_ff_exp(), or n_ff / n_expert_used where the model gives none (qwen2moe, qwen3moe, glm4moe)."""
        return self.n_ff_exp or self.n_ff[0] // max(self.n_expert_used, 1)


# ---------------------------------------------------------------------------------------------
# The vocabulary of parts


@dataclass
class Table:
    tensors: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)

    def add(self, name: str, *shape: int) -> None:
        f32 = len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight")
        f32 = f32 or any(
            part in name for part in ("ffn_gate_inp", "ssm_conv1d", "shortconv.conv", "altup_correct_coef")
        )
        f32 = f32 or "altup_predict_coef" in name
        self.tensors.append((name, tuple(shape), "f32" if f32 else "bf16"))


Layer = Callable[[Hp, int], bool]  # which layers a part is in


def every(hp: Hp, i: int) -> bool:
    return i < hp.n_layer


def with_nextn(hp: Hp, i: int) -> bool:
    """The trunk and the NextN layers, for loaders that give a NextN layer a whole block too."""
    return i < hp.n_layer_all


def attention_layers(hp: Hp, i: int) -> bool:
    """Layers with KV heads (hybrids write 0 KV heads for their recurrent layers)."""
    return i < hp.n_layer and hp.n_head_kv[i] > 0


def recurrent_layers(hp: Hp, i: int) -> bool:
    return i < hp.n_layer and hp.n_head_kv[i] == 0


def qwen3next_attention(hp: Hp, i: int) -> bool:
    """Qwen3-Next: every full_attention_interval-th layer is full attention (llm_arch_is_recurrent's rule)."""
    return (i + 1) % hp.get("full_attention_interval", 4) == 0


def dense_ffn_layers(hp: Hp, i: int) -> bool:
    """Layers whose FFN is dense: the leading dense blocks, or the non-MoE steps of an interleave."""
    if i >= hp.n_layer_all:
        return False
    if hp.moe_step:
        return (i + 1) % hp.moe_step != 0
    period = int(hp.hints.get("expert_layer_period", 0))  # Jamba: not in the GGUF (conversion/jamba.py)
    if period:
        offset = int(hp.hints.get("expert_layer_offset", 0))
        return not (i >= offset and (i - offset) % period == 0)
    return i < hp.n_dense_lead or hp.n_expert == 0


def moe_layers(hp: Hp, i: int) -> bool:
    return i < hp.n_layer_all and not dense_ffn_layers(hp, i)


@dataclass(frozen=True)
class Norm:
    """A per-layer norm of width n_embd (blk.N.<name>.weight)."""

    name: str
    where: Layer = every

    def add(self, t: Table, hp: Hp, i: int) -> None:
        t.add(f"blk.{i}.{self.name}.weight", hp.n_embd)


@dataclass(frozen=True)
class Attention:
    """create_tensor_qkv + attn_output, with the traits architectures differ in."""

    q_width: str = "heads"  # "heads": head_k × n_head; "embd": n_embd (qwen2, phi3, command-r, olmo …)
    fused: bool = False  # one attn_qkv (phi3)
    bias: bool = False  # q, k and v biases (qwen2, gpt-oss, glm4moe)
    out_bias: bool = False  # attn_output.bias (gpt-oss)
    qk_norm: str = ""  # "head": [head_k]; "full": q [n_embd], k [n_embd_k_gqa]; "per_head": [head_k, heads]
    gated_q: bool = False  # the query carries its output gate: twice as wide (qwen3next)
    sinks: bool = False  # attn_sinks [n_head] (gpt-oss)
    where: Layer = every

    def add(self, t: Table, hp: Hp, i: int) -> None:
        n_head, n_head_kv = hp.n_head[i], hp.n_head_kv[i]
        q = hp.n_embd if self.q_width == "embd" else hp.head_k * n_head
        k, v = hp.head_k * n_head_kv, hp.head_v * n_head_kv
        b = f"blk.{i}"
        if self.fused:
            t.add(f"{b}.attn_qkv.weight", hp.n_embd, q + k + v)
        else:
            for part, width in (("q", q * 2 if self.gated_q else q), ("k", k), ("v", v)):
                t.add(f"{b}.attn_{part}.weight", hp.n_embd, width)
                if self.bias:
                    t.add(f"{b}.attn_{part}.bias", width)
        t.add(f"{b}.attn_output.weight", q, hp.n_embd)
        if self.out_bias:
            t.add(f"{b}.attn_output.bias", hp.n_embd)
        if self.qk_norm == "head":
            t.add(f"{b}.attn_q_norm.weight", hp.head_k)
            t.add(f"{b}.attn_k_norm.weight", hp.head_k)
        elif self.qk_norm == "full":
            t.add(f"{b}.attn_q_norm.weight", q)
            t.add(f"{b}.attn_k_norm.weight", k)
        elif self.qk_norm == "per_head":
            t.add(f"{b}.attn_q_norm.weight", hp.head_k, n_head)
            t.add(f"{b}.attn_k_norm.weight", hp.head_k, n_head_kv)
        if self.sinks:
            t.add(f"{b}.attn_sinks.weight", n_head)


@dataclass(frozen=True)
class DeciAttention:
    """deci (Nemotron Super/Ultra): per-layer heads; a layer with heads but no KV heads is a linear
    layer (attn_output only), one without heads has no attention (src/models/deci.cpp)."""

    where: Layer = every

    def add(self, t: Table, hp: Hp, i: int) -> None:
        if hp.n_head[i] == 0:
            return
        t.add(f"blk.{i}.attn_norm.weight", hp.n_embd)
        if hp.n_head_kv[i] == 0:
            t.add(f"blk.{i}.attn_output.weight", hp.n_embd, hp.n_embd)
            return
        Attention().add(t, hp, i)


@dataclass(frozen=True)
class Mla:
    """DeepSeek-V2/V3 multi-head latent attention, as the current converter writes it: attn_kv_b
    split into attn_k_b and attn_v_b (src/models/deepseek2.cpp, is_mla)."""

    where: Layer = every

    def add(self, t: Table, hp: Hp, i: int) -> None:
        n_head = hp.n_head[i]
        head_k, head_v = hp.get("attention.key_length_mla"), hp.get("attention.value_length_mla")
        q_lora, kv_lora = hp.get("attention.q_lora_rank", 0), hp.get("attention.kv_lora_rank")
        b = f"blk.{i}"
        if q_lora:
            t.add(f"{b}.attn_q_a_norm.weight", q_lora)
            t.add(f"{b}.attn_q_a.weight", hp.n_embd, q_lora)
            t.add(f"{b}.attn_q_b.weight", q_lora, n_head * head_k)
        else:
            t.add(f"{b}.attn_q.weight", hp.n_embd, n_head * head_k)
        t.add(f"{b}.attn_kv_a_norm.weight", kv_lora)
        t.add(f"{b}.attn_kv_a_mqa.weight", hp.n_embd, kv_lora + hp.n_rot)
        t.add(f"{b}.attn_k_b.weight", head_k - hp.n_rot, kv_lora, n_head)
        t.add(f"{b}.attn_v_b.weight", kv_lora, head_v, n_head)
        t.add(f"{b}.attn_output.weight", n_head * head_v, hp.n_embd)


@dataclass(frozen=True)
class Ffn:
    """A dense FFN: gate/up/down, or (gate=False) up/down, or (up_doubled) one up of width 2·n_ff."""

    gate: bool = True
    up_doubled: bool = False  # phi3, glm4: gate and up fused in one ffn_up
    where: Layer = dense_ffn_layers

    def add(self, t: Table, hp: Hp, i: int) -> None:
        n_ff = hp.n_ff[i]
        if n_ff == 0:  # deci's FFN-free layers
            return
        if self.gate and not self.up_doubled:
            t.add(f"blk.{i}.ffn_gate.weight", hp.n_embd, n_ff)
        t.add(f"blk.{i}.ffn_down.weight", n_ff, hp.n_embd)
        t.add(f"blk.{i}.ffn_up.weight", hp.n_embd, n_ff * 2 if self.up_doubled else n_ff)


@dataclass(frozen=True)
class Experts:
    """A router, n_expert experts of width n_ff_exp, and shared experts.

    shared: "" none; "n_ff_shexp" one shared expert of expert_shared_feed_forward_length
    (qwen2moe, qwen3next, granite); "n_ff_exp" one of the experts' width (llama4);
    "count" expert_shared_count experts of the experts' width, fused (deepseek2, glm4moe).
    """

    shared: str = ""
    shared_gate: bool = False  # ffn_gate_inp_shexp [n_embd] (qwen2moe, qwen3next)
    probs_bias: bool = False  # exp_probs_b.bias [n_expert] (deepseek2, glm4moe, lfm2moe)
    biases: bool = False  # router and expert biases (gpt-oss)
    width: str = "exp"  # "exp": n_ff_exp (or n_ff / n_expert_used); "ff": feed_forward_length (olmoe, jamba, granite)
    where: Layer = moe_layers

    def add(self, t: Table, hp: Hp, i: int) -> None:
        n_embd, n_expert = hp.n_embd, hp.n_expert
        n_ff = hp.n_ff[i] if self.width == "ff" else hp.ff_exp()
        b = f"blk.{i}"
        t.add(f"{b}.ffn_gate_inp.weight", n_embd, n_expert)
        t.add(f"{b}.ffn_gate_exps.weight", n_embd, n_ff, n_expert)
        t.add(f"{b}.ffn_down_exps.weight", n_ff, n_embd, n_expert)
        t.add(f"{b}.ffn_up_exps.weight", n_embd, n_ff, n_expert)
        if self.probs_bias:
            t.add(f"{b}.exp_probs_b.bias", n_expert)
        if self.biases:
            t.add(f"{b}.ffn_gate_inp.bias", n_expert)
            t.add(f"{b}.ffn_gate_exps.bias", n_ff, n_expert)
            t.add(f"{b}.ffn_down_exps.bias", n_embd, n_expert)
            t.add(f"{b}.ffn_up_exps.bias", n_ff, n_expert)
        shexp = {"n_ff_shexp": hp.n_ff_shexp, "n_ff_exp": n_ff, "count": n_ff * hp.n_expert_shared}.get(self.shared, 0)
        if shexp:
            t.add(f"{b}.ffn_gate_shexp.weight", n_embd, shexp)
            t.add(f"{b}.ffn_down_shexp.weight", shexp, n_embd)
            t.add(f"{b}.ffn_up_shexp.weight", n_embd, shexp)
        if self.shared_gate:
            t.add(f"{b}.ffn_gate_inp_shexp.weight", n_embd)


@dataclass(frozen=True)
class Mamba2:
    """Mamba-2 mixer (src/models/mamba2.cpp, granite-hybrid.cpp, nemotron-h.cpp, falcon-h1.cpp)."""

    where: Layer = recurrent_layers

    def add(self, t: Table, hp: Hp, i: int) -> None:
        d_conv, d_inner = hp.get("ssm.conv_kernel"), hp.get("ssm.inner_size")
        d_state, n_group, n_head = hp.get("ssm.state_size"), hp.get("ssm.group_count"), hp.get("ssm.time_step_rank")
        conv_dim = d_inner + 2 * n_group * d_state
        b = f"blk.{i}"
        t.add(f"{b}.ssm_in.weight", hp.n_embd, d_inner + conv_dim + n_head)
        t.add(f"{b}.ssm_conv1d.weight", d_conv, conv_dim)
        t.add(f"{b}.ssm_conv1d.bias", conv_dim)
        t.add(f"{b}.ssm_dt.bias", n_head)
        t.add(f"{b}.ssm_a", 1, n_head)
        t.add(f"{b}.ssm_d", 1, n_head)
        t.add(f"{b}.ssm_norm.weight", d_inner // n_group, n_group)
        t.add(f"{b}.ssm_out.weight", d_inner, hp.n_embd)


@dataclass(frozen=True)
class Mamba1:
    """Mamba mixer (src/models/mamba.cpp), with Jamba's dt/B/C norms (src/models/jamba.cpp)."""

    norms: bool = True
    where: Layer = recurrent_layers

    def add(self, t: Table, hp: Hp, i: int) -> None:
        d_conv, d_inner = hp.get("ssm.conv_kernel"), hp.get("ssm.inner_size")
        d_state, dt_rank = hp.get("ssm.state_size"), hp.get("ssm.time_step_rank")
        b = f"blk.{i}"
        t.add(f"{b}.ssm_in.weight", hp.n_embd, 2 * d_inner)
        t.add(f"{b}.ssm_conv1d.weight", d_conv, d_inner)
        t.add(f"{b}.ssm_conv1d.bias", d_inner)
        t.add(f"{b}.ssm_x.weight", d_inner, dt_rank + 2 * d_state)
        t.add(f"{b}.ssm_dt.weight", dt_rank, d_inner)
        t.add(f"{b}.ssm_dt.bias", d_inner)
        if self.norms:
            t.add(f"{b}.ssm_dt_norm.weight", dt_rank)
            t.add(f"{b}.ssm_b_norm.weight", d_state)
            t.add(f"{b}.ssm_c_norm.weight", d_state)
        t.add(f"{b}.ssm_a", d_state, d_inner)
        t.add(f"{b}.ssm_d", d_inner)
        t.add(f"{b}.ssm_out.weight", d_inner, hp.n_embd)


@dataclass(frozen=True)
class ShortConv:
    """LFM2's gated short convolution (src/models/lfm2.cpp)."""

    where: Layer = recurrent_layers

    def add(self, t: Table, hp: Hp, i: int) -> None:
        b = f"blk.{i}.shortconv"
        t.add(f"{b}.conv.weight", hp.get("shortconv.l_cache"), hp.n_embd)
        t.add(f"{b}.in_proj.weight", hp.n_embd, 3 * hp.n_embd)
        t.add(f"{b}.out_proj.weight", hp.n_embd, hp.n_embd)


@dataclass(frozen=True)
class GatedDeltaNet:
    """Qwen3-Next's linear attention (src/models/qwen3next.cpp)."""

    where: Layer = lambda hp, i: i < hp.n_layer and not qwen3next_attention(hp, i)  # noqa: E731

    def add(self, t: Table, hp: Hp, i: int) -> None:
        d_state, n_k_heads, n_v_heads = (
            hp.get("ssm.state_size"),
            hp.get("ssm.group_count"),
            hp.get("ssm.time_step_rank"),
        )
        key_dim, value_dim = d_state * n_k_heads, d_state * n_v_heads
        b = f"blk.{i}"
        t.add(f"{b}.attn_qkv.weight", hp.n_embd, key_dim * 2 + value_dim)
        t.add(f"{b}.attn_gate.weight", hp.n_embd, value_dim)
        t.add(f"{b}.ssm_conv1d.weight", hp.get("ssm.conv_kernel"), key_dim * 2 + value_dim)
        t.add(f"{b}.ssm_dt.bias", n_v_heads)
        t.add(f"{b}.ssm_a", n_v_heads)
        t.add(f"{b}.ssm_ba.weight", hp.n_embd, 2 * n_v_heads)
        t.add(f"{b}.ssm_norm.weight", d_state)
        t.add(f"{b}.ssm_out.weight", value_dim, hp.n_embd)


def nextn_layers(hp: Hp, i: int) -> bool:
    return hp.n_layer <= i < hp.n_layer_all


@dataclass(frozen=True)
class NextN:
    """A NextN/MTP layer's own tensors; the converter writes no embed_tokens or shared_head_head
    (conversion/glm.py and deepseek.py drop them: they equal token_embd and output)."""

    where: Layer = nextn_layers

    def add(self, t: Table, hp: Hp, i: int) -> None:
        t.add(f"blk.{i}.nextn.eh_proj.weight", 2 * hp.n_embd, hp.n_embd)
        t.add(f"blk.{i}.nextn.enorm.weight", hp.n_embd)
        t.add(f"blk.{i}.nextn.hnorm.weight", hp.n_embd)
        t.add(f"blk.{i}.nextn.shared_head_norm.weight", hp.n_embd)


@dataclass(frozen=True)
class Gemma3nPerLayer:
    """Gemma 3n's per-layer inputs, AltUp and LAuReL tensors (src/models/gemma3n.cpp)."""

    where: Layer = every

    def add(self, t: Table, hp: Hp, i: int) -> None:
        n_embd, n_altup, n_altup_embd, laurel = hp.n_embd, 4, hp.get("embedding_length_per_layer_input"), 64
        b = f"blk.{i}"
        t.add(f"{b}.inp_gate.weight", n_embd, n_altup_embd)
        t.add(f"{b}.proj.weight", n_altup_embd, n_embd)
        t.add(f"{b}.post_norm.weight", n_embd)
        t.add(f"{b}.altup_correct_coef.weight", n_altup, n_altup)
        t.add(f"{b}.altup_correct_scale.weight", n_embd)
        t.add(f"{b}.altup_predict_coef.weight", n_altup, n_altup * n_altup)
        t.add(f"{b}.altup_router.weight", n_embd, n_altup)
        t.add(f"{b}.altup_router_norm.weight", n_embd)
        t.add(f"{b}.laurel_l.weight", n_embd, laurel)
        t.add(f"{b}.laurel_r.weight", laurel, n_embd)
        t.add(f"{b}.laurel_post_norm.weight", n_embd)


def _gemma3n_globals(t: Table, hp: Hp) -> None:
    n_embd, n_altup_embd = hp.n_embd, hp.get("embedding_length_per_layer_input")
    t.add("altup_proj.weight", n_embd, n_embd, 3)
    t.add("altup_unembd_proj.weight", n_embd, n_embd, 3)
    t.add("per_layer_token_embd.weight", n_altup_embd * hp.n_layer, hp.n_vocab)
    t.add("per_layer_model_proj.weight", n_embd, n_altup_embd * hp.n_layer)
    t.add("per_layer_proj_norm.weight", n_altup_embd)


class Part(Protocol):
    @property
    def where(self) -> Layer: ...

    def add(self, t: Table, hp: Hp, i: int) -> None: ...


@dataclass(frozen=True)
class ArchLayout:
    source: str  # the llama.cpp function the parts were read from
    parts: tuple[Part, ...]
    output: str = "optional"  # "optional": untied unless the model ties; "tied": never written; "required"
    output_norm: str = "output_norm"
    extra: Callable[[Table, Hp], None] | None = None


# ---------------------------------------------------------------------------------------------
# The architectures. Parts are listed in load_arch_tensors' order; per-layer norms by their GGUF name.

_PRE = (Norm("attn_norm"),)
_FFN = (Norm("ffn_norm"), Ffn())
_LLAMA = (*_PRE, Attention(), Norm("ffn_norm"), Ffn(), Experts(width="ff", shared="n_ff_shexp"))
_GEMMA = (*_PRE, Attention(qk_norm="head"), Norm("post_attention_norm"), *_FFN, Norm("post_ffw_norm"))
_POST_ONLY = (Norm("post_attention_norm"), Norm("post_ffw_norm"))


def _src(name: str, cls: str | None = None) -> str:
    return f"src/models/{name}.cpp llama_model_{cls or name.replace('-', '_')}::load_arch_tensors"


ARCHS: dict[str, ArchLayout] = {
    "llama": ArchLayout(_src("llama"), _LLAMA),
    "mistral3": ArchLayout(_src("mistral3"), _LLAMA),
    "granite": ArchLayout(_src("granite"), _LLAMA),
    "granitemoe": ArchLayout(_src("granite-moe"), _LLAMA),
    "smollm3": ArchLayout(_src("smollm3"), (*_PRE, Attention(), *_FFN)),
    "qwen2": ArchLayout(_src("qwen2"), (*_PRE, Attention(q_width="embd", bias=True), *_FFN)),
    "qwen2moe": ArchLayout(
        _src("qwen2moe"),
        (*_PRE, Attention(q_width="embd", bias=True), Norm("ffn_norm"), Experts(shared="n_ff_shexp", shared_gate=True)),
        output="required",
    ),
    "qwen3": ArchLayout(_src("qwen3"), (*_PRE, Attention(qk_norm="head"), *_FFN)),
    "qwen3moe": ArchLayout(_src("qwen3moe"), (*_PRE, Attention(qk_norm="head"), Norm("ffn_norm"), Experts())),
    "qwen3next": ArchLayout(
        _src("qwen3next"),
        (
            *_PRE,
            Norm("post_attention_norm"),
            Attention(qk_norm="head", gated_q=True, where=qwen3next_attention),
            GatedDeltaNet(),
            Experts(shared="n_ff_shexp", shared_gate=True),
        ),
    ),
    "gemma2": ArchLayout(
        _src("gemma2"), (*_PRE, Attention(), Norm("post_attention_norm"), *_FFN, Norm("post_ffw_norm")), output="tied"
    ),
    "gemma3": ArchLayout(_src("gemma3"), _GEMMA),
    "gemma3n": ArchLayout(_src("gemma3n"), (*_GEMMA, Gemma3nPerLayer()), extra=_gemma3n_globals),
    "phi3": ArchLayout(
        _src("phi3"), (*_PRE, Attention(q_width="embd", fused=True), Norm("ffn_norm"), Ffn(up_doubled=True))
    ),
    "command-r": ArchLayout(
        _src("command-r"),
        (
            *_PRE,
            Attention(q_width="embd", where=lambda hp, i: hp.n_layer < 64),
            Attention(q_width="embd", qk_norm="per_head", where=lambda hp, i: hp.n_layer >= 64),  # Command-A
            Ffn(),
        ),
        output="tied",
    ),
    "cohere2": ArchLayout(_src("cohere2"), (*_PRE, Attention(q_width="embd"), Ffn()), output="tied"),
    "glm4": ArchLayout(
        _src("glm4"),
        (
            Norm("attn_norm", where=with_nextn),
            Attention(bias=True, where=with_nextn),
            Norm("post_attention_norm", where=with_nextn),
            Norm("ffn_norm", where=with_nextn),
            Ffn(up_doubled=True),
            Norm("post_ffw_norm", where=with_nextn),
            NextN(),
        ),
    ),
    "glm4moe": ArchLayout(
        _src("glm4-moe"),
        (
            Norm("attn_norm", where=with_nextn),
            Attention(bias=True, where=with_nextn),
            Norm("post_attention_norm", where=with_nextn),
            Ffn(),
            Experts(shared="count", probs_bias=True),
            NextN(),
        ),
    ),
    "deepseek2": ArchLayout(
        _src("deepseek2"),
        (
            Norm("attn_norm", where=with_nextn),
            Mla(where=with_nextn),
            Norm("ffn_norm", where=with_nextn),
            Ffn(),
            Experts(shared="count", probs_bias=True),
            NextN(),
        ),
    ),
    "llama4": ArchLayout(_src("llama4"), (*_PRE, Attention(), Norm("ffn_norm"), Ffn(), Experts(shared="n_ff_exp"))),
    "gpt-oss": ArchLayout(
        _src("openai-moe"),
        (*_PRE, Norm("post_attention_norm"), Attention(bias=True, out_bias=True, sinks=True), Experts(biases=True)),
        output="required",
    ),
    "olmoe": ArchLayout(
        _src("olmoe"),
        (*_PRE, Attention(q_width="embd", qk_norm="full"), Norm("ffn_norm"), Experts(width="ff")),
        output="required",
    ),
    "olmo2": ArchLayout(
        _src("olmo2"), (Attention(q_width="embd", qk_norm="full"), *_POST_ONLY, Ffn()), output="required"
    ),
    "exaone4": ArchLayout(
        _src("exaone4"),
        (
            Attention(qk_norm="head", where=with_nextn),
            Norm("post_attention_norm", where=with_nextn),
            Norm("post_ffw_norm", where=with_nextn),
            Ffn(),
            NextN(),
        ),
    ),
    "lfm2": ArchLayout(
        _src("lfm2"),
        (*_FFN, *_PRE, Attention(q_width="embd", qk_norm="head", where=attention_layers), ShortConv()),
        output_norm="token_embd_norm",
    ),
    "lfm2moe": ArchLayout(
        _src("lfm2moe"),
        (
            *_FFN,
            Experts(probs_bias=True),
            *_PRE,
            Attention(q_width="embd", qk_norm="head", where=attention_layers),
            ShortConv(),
        ),
        output_norm="token_embd_norm",
    ),
    "deci": ArchLayout(_src("deci"), (DeciAttention(), Norm("ffn_norm", where=lambda hp, i: hp.n_ff[i] > 0), Ffn())),
    "mamba": ArchLayout(_src("mamba"), (*_PRE, Mamba1(norms=False, where=every))),
    "mamba2": ArchLayout(_src("mamba2"), (*_PRE, Mamba2(where=every))),
    "granitehybrid": ArchLayout(
        _src("granite-hybrid"),
        (
            *_PRE,
            Mamba2(),
            Attention(where=attention_layers),
            Norm("ffn_norm"),
            Ffn(),
            Experts(width="ff", shared="n_ff_shexp"),
        ),
    ),
    "falcon-h1": ArchLayout(_src("falcon-h1"), (Mamba2(where=every), Attention(), *_PRE, *_FFN)),
    "jamba": ArchLayout(
        _src("jamba"),
        (
            *_PRE,
            Mamba1(),
            Attention(q_width="embd", where=attention_layers),
            Norm("ffn_norm"),
            Ffn(),
            Experts(width="ff"),
        ),
    ),
    "nemotron_h": ArchLayout(
        _src("nemotron-h"),
        (
            *_PRE,
            Mamba2(),
            Attention(where=lambda hp, i: attention_layers(hp, i) and hp.n_ff[i] == 0),
            Ffn(gate=False, where=lambda hp, i: attention_layers(hp, i) and hp.n_ff[i] > 0),
        ),
    ),
}
# Architectures whose 80-layer models are LLM_TYPE_70B (their load_hparams), for llama-quant's 70B rule.
TYPE_70B_LAYERS = {"llama": 80, "qwen2": 80, "deci": 80, "olmo": 80}


def tensor_table(
    metadata: Mapping[str, Any], *, tied_embeddings: bool, rope_freqs: bool = False, **hints: Any
) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, source type) of every tensor the converter writes for a model.

    `tied_embeddings`: no output.weight (the model reuses token_embd), for architectures where
    output is optional. `rope_freqs`: a llama3-style rope_freqs.weight is written (Llama 3.1+).
    `hints`: layout facts the GGUF metadata does not hold (Jamba's expert_layer_period/offset).
    """
    arch = metadata["general.architecture"]
    layout = ARCHS.get(arch)
    if layout is None:
        raise ValueError(f"kvlab cannot compute the weights of architecture {arch!r}")
    hp = Hp(metadata, hints)
    if not hp.n_vocab:
        raise ValueError(f"the metadata has no {arch}.vocab_size")
    t = Table()
    t.add("token_embd.weight", hp.n_embd, hp.n_vocab)
    t.add(f"{layout.output_norm}.weight", hp.n_embd)
    if layout.output == "required" or (layout.output == "optional" and not tied_embeddings):
        t.add("output.weight", hp.n_embd, hp.n_vocab)
    if rope_freqs:
        t.add("rope_freqs.weight", hp.n_rot // 2)
    if layout.extra is not None:
        layout.extra(t, hp)
    # Only loaders with NextN parts read the layers past the trunk (llama's loops `i < n_layer`).
    has_nextn = any(isinstance(part, NextN) for part in layout.parts)
    for i in range(hp.n_layer_all if has_nextn else hp.n_layer):
        for part in layout.parts:
            if part.where(hp, i):
                part.add(t, hp, i)
    return t.tensors
