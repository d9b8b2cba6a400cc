"""The prompt-processing speed to expect (llama-bench's ``pp P``) and, from it, the time to the first token. Pure.

A prompt of P tokens runs in ubatches of ``-ub`` tokens (llama_context::decode). Each ubatch

* multiplies every token through the weights it passes: 2 FLOP per active weight (of a MoE's routed experts
  n_expert_used / n_expert; the input embedding is a lookup, not a product, unless the output shares it)
  plus the attention's 4 × heads × head size FLOP per cell attended (a token at position p attends p + 1
  cells of each layer with a KV cache, a sliding window at most its window);
* reads every weight once (a ubatch of hundreds of tokens touches nearly every expert, too);
* runs every node of the graph once.

    seconds = FLOP / (matmul × FP32 peak) + bytes / (bandwidth × peak bandwidth) + nodes × node_s

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
        used[d.name] = eff.source + (f" ({why})" if why else "")
    return (None if unknown else total), unknown, used


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
    per_layer = efficiency.nodes_per_layer(model.n_expert, model.n_expert_used)
    for il in range(model.n_layer_all):
        where = device_of(il)
        nodes[where] += per_layer
        if model.kv_layers and il < len(model.kv_layers) and model.kv_layers[il]:
            window = model.n_swa if model.is_swa[il] else 0
            hh = model.n_head[il] * model.head_k(il)
            attention[where if flags.kv_offload else speed.CPU] += attention_flop(prompt_tokens, depth, [hh], [window])
    by_name = {d.name: d for d in devices}
    return [
        DeviceWork(by_name.get(name), flop[name], attention[name], read[name], nodes[name])
        for name in [*names, speed.CPU]
        if read[name] or attention[name]
    ]
