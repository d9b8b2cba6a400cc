"""The prompt-processing speed to expect (llama-bench's ``pp P``) and, from it, the time to the first token. Pure.

A prompt of P tokens runs in ubatches of ``-ub`` tokens (llama_context::decode). Each ubatch

* multiplies every token through the weights it passes: 2 FLOP per active weight (of a MoE's routed experts
  n_expert_used / n_expert; the input embedding is a lookup, not a product, unless the output shares it)
  plus the attention's 4 × heads × head size FLOP per cell attended (a token at position p attends p + 1
  cells of each layer with a KV cache, a sliding window at most its window);
* reads every weight once (a ubatch of hundreds of tokens touches nearly every expert, too);
* writes each token's intermediate tensors (f32: the norms, Q, K, V, the attention's output, the FFN's gate,
  up and GLU rows, each routed expert's rows and its weighted output, the residual adds) and reads them back
  (`activation_bytes`): the element-wise kernels between the products are bound by these bytes, and a MoE
  layer has n_expert_used times a dense layer's rows for far fewer FLOP;
* runs every node of the graph once.

    seconds = FLOP / (matmul × FP32 peak) + (weights + activations) / (bandwidth × peak bandwidth) + nodes × node_s

with the backend's factors (sizing.placement.efficiency: the FP16 matrix peak where the GPU has matrix units
and the catalogue a figure, else the FP32 peak: derived per backend from public llama-bench
rows of other GPUs, never this one). Weights kept in system RAM are copied to the GPU for each ubatch, which
runs their products (llama.cpp's op offload, on by default: ggml-cuda offloads an op of 32 tokens or more,
ggml_backend_cuda_device_offload_op's min_batch_size) at PCIe 4.0 ×16's peak; without a GPU, or for the
attention over a KV in RAM, the CPU's FLOP rate does the work.

The time to the first token of a burst of ``concurrency`` requests of P tokens on ``slots`` slots: the
prompts in flight share the prefill (the server batches every slot's tokens together), so the first wave's
last first token comes after min(concurrency, slots) × P / rate; a request that finds every slot busy waits
for a wave to finish its whole request (its prompt and its output at the decode rate), then shares the
prefill with the others of its wave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..hparams import ModelParams
from ..kv import ServerFlags
from . import efficiency, speed
from .types import Device

# PCIe 4.0 ×16: 16 GT/s × 16 lanes × 128/130 encoding / 8 bits (PCI-SIG's PCIe 4.0 base specification).
PCIE_BANDWIDTH = 16e9 * 16 * 128 / 130 / 8
PCIE_SOURCE = "PCIe 4.0 ×16: 16 GT/s × 16 lanes × 128/130 / 8 = 31.5 GB/s (PCI-SIG)"
OP_OFFLOAD_MIN_BATCH = 32  # ggml-backend: a batch this large moves CPU weights' products to the GPU


@dataclass(frozen=True)
class DeviceWork:
    """What a ubatch asks of one device: its products' FLOP per token, the attention FLOP of the whole
    prompt, the weight bytes it reads, and the graph nodes it runs."""

    device: Device | None  # None: the CPU
    flop_per_token: float
    attention_flop: float  # for the whole prompt (grows with its square)
    weight_bytes: int
    nodes: int
    activation_bytes: float = 0.0  # per token: its intermediate tensors written and read back


@dataclass(frozen=True)
class PrefillEstimate:
    tok_s: float | None  # prompt tokens per second; None: a figure is missing
    seconds: float | None  # for the whole prompt
    prompt_tokens: int
    n_ubatch: int
    label: str
    inputs: dict[str, Any] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)

    def ttft(self, *, concurrency: int, slots: int, output_tokens: int, decode_tok_s: float | None) -> float | None:
        """Seconds to the last first token of a burst of `concurrency` requests on `slots` slots."""
        if self.seconds is None:
            return None
        in_flight = max(1, min(concurrency, slots))
        first_wave = in_flight * self.seconds
        waves = -(-max(1, concurrency) // max(1, slots))
        if waves == 1:
            return first_wave
        if not decode_tok_s:
            return None
        last_wave = max(1, concurrency) - (waves - 1) * in_flight  # the requests that waited, prefilled together
        return (waves - 1) * (first_wave + output_tokens / decode_tok_s) + last_wave * self.seconds


def _gpu_rate(d: Device) -> tuple[float, efficiency.Efficiency | None, str]:
    """The FLOP/s a GPU's products reach (0: unknown), its backend's factors and why those."""
    eff, why = efficiency.for_backend(efficiency.key(d.backend, d.vendor))
    if eff is not None and eff.tensor and d.fp16_flops:
        return eff.tensor * d.fp16_flops, eff, why  # the class with matrix units
    if eff is not None and eff.matmul and d.fp32_flops:
        return eff.matmul * d.fp32_flops, eff, why
    return 0.0, eff, why


def prefill_seconds(
    work: Sequence[DeviceWork], *, prompt_tokens: int, n_ubatch: int, cpu_flops: float, cpu_source: str = ""
) -> tuple[float | None, list[str], dict[str, str]]:
    """Seconds for a prompt, the devices whose figures are missing, and each device's factors' source
    (`cpu_source`: how the CPU's FLOP rate was counted)."""
    tokens = max(1, prompt_tokens)
    ubatch = max(1, min(n_ubatch, tokens))
    n_ubatches = -(-tokens // ubatch)
    gpus = [w.device for w in work if w.device is not None]
    total, unknown, used = 0.0, [], {}
    for w in work:
        if w.device is None:
            products = w.flop_per_token * tokens
            offload = gpus and ubatch >= OP_OFFLOAD_MIN_BATCH and products
            rate = _gpu_rate(gpus[0])[0] if offload else 0.0
            if offload and rate:
                # op offload: the weights cross PCIe to the first GPU each ubatch, which runs their products
                total += products / rate + n_ubatches * w.weight_bytes / PCIE_BANDWIDTH
            else:
                total += products / cpu_flops
            total += w.attention_flop / cpu_flops  # the CPU attends over a KV in RAM
            used["CPU"] = (
                f"CPU {cpu_flops / 1e12:.2f} TFLOP/s"
                + (f" ({cpu_source})" if cpu_source else "")
                + (
                    f"; its weights' products on {gpus[0].name} after crossing {PCIE_SOURCE}"
                    if offload and rate
                    else ""
                )
            )
            continue
        d = w.device
        rate, eff, why = _gpu_rate(d)
        if eff is None or not rate or d.bandwidth is None:
            unknown.append(d.name)
            continue
        total += (w.flop_per_token * tokens + w.attention_flop) / rate
        total += n_ubatches * (w.weight_bytes / (eff.bandwidth * d.bandwidth) + w.nodes * eff.node_s)
        total += tokens * w.activation_bytes / (eff.bandwidth * d.bandwidth)
        used[d.name] = eff.source + (f" ({why})" if why else "")
    return (None if unknown else total), unknown, used


F32 = 4


def activation_bytes(
    n_embd: int, q_rows: int, kv_rows: int, ffn_rows: float, *, n_expert: int = 0, n_expert_used: int = 0
) -> float:
    """The bytes one token's intermediate tensors of one layer take, written once and read back once (f32).

    Attention: its norm, Q (q_rows), K and V (kv_rows each), the attention's output (q_rows), the output
    product and the residual add (n_embd each). A dense FFN: its norm, gate, up and GLU rows (ffn_rows each),
    the down product and the add. A MoE FFN (n_expert > 0; ffn_rows: n_expert_used × n_ff_exp): its norm,
    the router's logits and probabilities (n_expert each), the gate, up and GLU rows, each used expert's
    down product and its weighted copy (n_embd each), the adds that sum them and the residual add
    (llm_graph_context::build_moe_ffn)."""
    rows: float = 3 * n_embd + 2 * q_rows + 2 * kv_rows
    if n_expert:
        used = max(1, n_expert_used)
        rows += n_embd + 2 * n_expert + 3 * ffn_rows + 2 * used * n_embd + (used - 1) * n_embd + n_embd
    else:
        rows += 3 * n_embd + 3 * ffn_rows
    return 2.0 * F32 * rows


def attention_flop(prompt_tokens: int, depth: int, heads_x_head: Sequence[int], window: Sequence[int]) -> float:
    """The attention FLOP of a prompt of P tokens after `depth` cells: per layer with KV, 4 × heads × head
    size per (token, cell attended); a layer's window (0: none) caps the cells."""
    total = 0.0
    p, d = max(0, prompt_tokens), max(0, depth)
    for hh, w in zip(heads_x_head, window, strict=True):
        cells: float
        if w and w < d + p:  # min(w, d + i + 1) summed over i < p: rising until the window, then flat
            k = max(0, min(p, w - d - 1))
            cells = k * (d + 1) + k * (k - 1) / 2 + (p - k) * w
        else:
            cells = p * d + p * (p + 1) / 2
        total += 4.0 * hh * cells
    return total


def estimate(
    work: Sequence[DeviceWork], *, prompt_tokens: int, n_ubatch: int, cpu_flops: float, cpu_source: str = ""
) -> PrefillEstimate:
    seconds, unknown, used = prefill_seconds(
        work, prompt_tokens=prompt_tokens, n_ubatch=n_ubatch, cpu_flops=cpu_flops, cpu_source=cpu_source
    )
    if unknown:
        label = (
            f"no estimate: the compute peak (FP16 matrix or FP32) or the bandwidth of {', '.join(unknown)} is unknown"
        )

    else:
        label = (
            "estimate, not a measurement: 2 FLOP per active weight per prompt token plus the attention, over "
            "the share of the GPU's FP16 matrix (else FP32) peak its backend's kernels reach, plus a read of the "
            "weights and each kernel's cost per ubatch (sizing/placement/prefill.py)"
        )
    return PrefillEstimate(
        tok_s=None if seconds is None or seconds <= 0 else prompt_tokens / seconds,
        seconds=seconds,
        prompt_tokens=prompt_tokens,
        n_ubatch=n_ubatch,
        label=label,
        inputs={"efficiency": used, "ubatches": -(-max(1, prompt_tokens) // max(1, n_ubatch))},
        unknown=unknown,
    )


def work_for(
    model: ModelParams,
    flags: ServerFlags,
    *,
    devices: Sequence[Device],
    tensors: Sequence[tuple[str, int, int]],
    prompt_tokens: int,
    depth: int = 0,
) -> list[DeviceWork]:
    """What a prompt of `prompt_tokens` after `depth` cells asks of each device: `tensors` are (name, bytes,
    elements) of every weight, placed as the decode estimate places them (sizing.placement.speed)."""
    names = [d.name for d in devices]
    device_of = speed.layer_placer(model, flags, devices)
    tied = not any(name.startswith("output.weight") for name, _, _ in tensors)
    flop: dict[str, float] = dict.fromkeys([*names, speed.CPU], 0.0)
    read: dict[str, int] = dict.fromkeys([*names, speed.CPU], 0)
    for name, size, elements in tensors:
        where = speed.tensor_place(name, model, flags, device_of, names)
        read[where] += size
        if name.startswith("token_embd.") and not tied:
            continue  # a lookup, not a product
        if "_exps." in name and model.n_expert:
            elements = elements * model.n_expert_used // model.n_expert
        if not name.endswith("_norm.weight") and ".norm" not in name:
            flop[where] += 2.0 * elements
    attention: dict[str, float] = dict.fromkeys([*names, speed.CPU], 0.0)
    nodes: dict[str, int] = dict.fromkeys([*names, speed.CPU], 0)
    activations: dict[str, float] = dict.fromkeys([*names, speed.CPU], 0.0)
    per_layer = efficiency.nodes_per_layer(model.n_expert, model.n_expert_used)
    for il in range(model.n_layer_all):
        where = device_of(il)
        nodes[where] += per_layer
        activations[where] += _layer_activations(model, il)
        if model.kv_layers and il < len(model.kv_layers) and model.kv_layers[il]:
            window = model.n_swa if model.is_swa[il] else 0
            hh = model.n_head[il] * model.head_k(il)
            attention[where if flags.kv_offload else speed.CPU] += attention_flop(prompt_tokens, depth, [hh], [window])
    by_name = {d.name: d for d in devices}
    return [
        DeviceWork(by_name.get(name), flop[name], attention[name], read[name], nodes[name], activations[name])
        for name in [*names, speed.CPU]
        if read[name] or attention[name]
    ]


def _layer_activations(model: ModelParams, il: int) -> float:
    """`activation_bytes` of layer il of a model (its routed experts' rows where it has experts)."""
    n_head = model.n_head[il] if il < len(model.n_head) else 0
    n_head_kv = model.n_head_kv[il] if il < len(model.n_head_kv) else 0
    q_rows, kv_rows = n_head * model.head_k(il), n_head_kv * model.head_k(il)
    n_ff = model.n_ff[il] if il < len(model.n_ff) else 0
    if model.n_expert and model.n_expert_used:
        routed = model.n_expert_used * (model.n_ff_exp or n_ff)
        return activation_bytes(model.n_embd, q_rows, kv_rows, routed, n_expert=model.n_expert,
                                n_expert_used=model.n_expert_used)  # fmt: skip
    return activation_bytes(model.n_embd, q_rows, kv_rows, n_ff)
