"""The prefill estimate and the time to the first token (sizing.placement.prefill).

The investigation gives one prefill measurement by subtraction: C3P's single request (one slot, q8_0 KV on the
RTX 5060 Ti) took 72 s end to end (the data file's elapsed_s, whole seconds) for a 4,362-token prompt and
1,738 tokens at the measured 25.7 tok/s, so its prompt took 72 - 1,738 / 25.7 = 4.37 s (3.9-4.9 s with the
second's rounding): about 1,000 tok/s. kvlab's estimate, from CUDA's factors derived on other GPUs, is set
beside it.
"""

from __future__ import annotations

import itertools

import pytest

from benchmarks.tests.investigation import investigation_lines
from sizing import catalogue
from sizing.hparams import model_params
from sizing.kv import ServerFlags
from sizing.placement import efficiency, prefill, speed
from sizing.placement.types import Device

GPU = catalogue.gpus()["rtx-5060-ti-16gb"]
ENTRY = catalogue.models()["devstral-small-2-24b"]
MODEL = model_params(ENTRY.metadata)
TENSORS = speed.catalogue_tensors(ENTRY.metadata, "Q4_K_M", **ENTRY.tensor_layout)
CUDA0 = GPU.device()


def elements() -> list[tuple[str, int, int]]:
    from sizing.weights import tensor_table

    table = {t.name: t.n_elements for t in tensor_table(ENTRY.metadata, **ENTRY.tensor_layout)}
    return [(name, size, table[name]) for name, size in TENSORS]


def c3p_estimate(prompt: int = 4362) -> prefill.PrefillEstimate:
    flags = ServerFlags(ctx_size=12288, parallel=1, type_k="q8_0", type_v="q8_0", flash_attn="on")
    work = prefill.work_for(MODEL, flags, devices=[CUDA0], tensors=elements(), prompt_tokens=prompt)
    return prefill.estimate(work, prompt_tokens=prompt, n_ubatch=512, cpu_flops=speed.DEFAULT_CPU_FLOPS)


def test_the_investigations_prompt_is_within_30_percent_of_what_its_timing_gives() -> None:
    record = next(r for r in investigation_lines() if r["run"] == "c3p-single")
    assert (record["elapsed_s"], record["tok_s"], record["n_predict"], record["prompt_tokens"]) == (
        72,
        25.7,
        1738,
        4362,
    )
    measured_low = record["prompt_tokens"] / (record["elapsed_s"] + 0.5 - record["n_predict"] / record["tok_s"])
    measured_high = record["prompt_tokens"] / (record["elapsed_s"] - 0.5 - record["n_predict"] / record["tok_s"])
    estimate = c3p_estimate()
    assert estimate.tok_s is not None and estimate.label.startswith("estimate, not a measurement")
    assert 0.7 * measured_low <= estimate.tok_s <= 1.3 * measured_high, (estimate.tok_s, measured_low, measured_high)
    assert estimate.inputs["ubatches"] == 9  # 4,362 tokens in ubatches of 512


def test_a_prompt_pays_its_products_its_attention_and_a_read_of_the_weights_per_ubatch() -> None:
    (work,) = prefill.work_for(MODEL, ServerFlags(), devices=[CUDA0], tensors=elements(), prompt_tokens=1000)
    # every weight but the input embedding (a lookup; Devstral's output is its own tensor) is a product
    products = sum(n for name, _, n in elements() if not name.startswith("token_embd.") and "norm" not in name)
    assert work.flop_per_token == 2 * products
    assert work.weight_bytes == sum(size for _, size in TENSORS) and work.nodes == 40 * efficiency.NODES_DENSE
    heads = MODEL.n_head[0] * MODEL.head_k(0)
    assert work.attention_flop == pytest.approx(40 * 4 * heads * 1000 * 1001 / 2)
    # each token writes and reads back (f32) its norms, Q, K, V, attention output, products and FFN rows
    e, q, kv, ff = MODEL.n_embd, heads, MODEL.n_head_kv[0] * MODEL.head_k(0), MODEL.n_ff[0]
    assert work.activation_bytes == 40 * 2 * 4 * (3 * e + 2 * q + 2 * kv + 3 * e + 3 * ff)
    cuda = efficiency.EFFICIENCY["cuda"]
    one = prefill.prefill_seconds([work], prompt_tokens=1000, n_ubatch=512, cpu_flops=1.0)[0]
    rate = cuda.tensor * CUDA0.fp16_flops if CUDA0.fp16_flops and cuda.tensor else cuda.matmul * (CUDA0.fp32_flops or 0)
    bandwidth = cuda.bandwidth * (CUDA0.bandwidth or 0)
    expected = (
        (work.flop_per_token * 1000 + work.attention_flop) / rate
        + 2 * (work.weight_bytes / bandwidth + work.nodes * cuda.node_s)
        + 1000 * work.activation_bytes / bandwidth
    )
    assert one == pytest.approx(expected)


def test_a_moe_layer_moves_its_used_experts_rows_for_few_flop() -> None:
    dense = prefill.activation_bytes(2048, 4096, 512, 6144)
    moe = prefill.activation_bytes(2048, 4096, 512, 8 * 768, n_expert=128, n_expert_used=8)
    # the same FFN rows (8 × 768 = 6,144), but the router's 2 × 128, each used expert's down product and its
    # weighted copy (2 × 8 × 2,048) and the 7 adds that sum them, for the dense FFN's one down product
    assert moe - dense == 2 * 4 * (2 * 128 + 2 * 8 * 2048 + 7 * 2048 - 2048)


def test_kv_in_ram_moves_the_attention_to_the_cpu_and_weights_in_ram_cross_pcie_per_ubatch() -> None:
    flags = ServerFlags(kv_offload=False, n_gpu_layers=30)
    work = prefill.work_for(MODEL, flags, devices=[CUDA0], tensors=elements(), prompt_tokens=2048)
    gpu, cpu = work
    assert gpu.device is CUDA0 and cpu.device is None
    assert gpu.attention_flop == 0 and cpu.attention_flop > 0  # --no-kv-offload: the CPU attends
    seconds, unknown, used = prefill.prefill_seconds([cpu], prompt_tokens=2048, n_ubatch=512, cpu_flops=1e12)
    assert unknown == [] and "CPU" in used
    alone = (cpu.flop_per_token * 2048 + cpu.attention_flop) / 1e12
    assert seconds == pytest.approx(alone)  # no GPU: nothing crosses PCIe
    both, _, used = prefill.prefill_seconds(work, prompt_tokens=2048, n_ubatch=512, cpu_flops=1e12)
    assert "products on CUDA0 after crossing PCIe 4.0" in used["CPU"] and both is not None
    # op offload: the CPU's weights cross PCIe once per ubatch (4) and the GPU runs their products
    gpu_alone = prefill.prefill_seconds([gpu], prompt_tokens=2048, n_ubatch=512, cpu_flops=1e12)[0] or 0
    rate = prefill._gpu_rate(CUDA0)[0]
    crossing = 4 * cpu.weight_bytes / prefill.PCIE_BANDWIDTH
    assert both == pytest.approx(gpu_alone + cpu.flop_per_token * 2048 / rate + crossing + cpu.attention_flop / 1e12)
    # a ubatch below 32 tokens stays on the CPU
    small = prefill.prefill_seconds(work, prompt_tokens=2048, n_ubatch=16, cpu_flops=1e12)[0] or 0
    assert small > (cpu.flop_per_token * 2048 + cpu.attention_flop) / 1e12


def test_the_routed_experts_count_at_the_share_each_token_uses() -> None:
    entry = catalogue.models()["qwen3-coder-30b-a3b"]
    model = model_params(entry.metadata)
    from sizing.weights import tensor_table

    table = tensor_table(entry.metadata, **entry.tensor_layout)
    rows = [(t.name, 1, t.n_elements) for t in table]
    (work,) = prefill.work_for(model, ServerFlags(), devices=[CUDA0], tensors=rows, prompt_tokens=16)
    experts = sum(t.n_elements for t in table if "_exps." in t.name)
    rest = sum(t.n_elements for t in table if "_exps." not in t.name and "norm" not in t.name)
    embedding = sum(t.n_elements for t in table if t.name.startswith("token_embd."))
    assert work.flop_per_token == pytest.approx(2 * (experts * 8 // 128 + rest - embedding), rel=1e-6)
    assert work.nodes == model.n_layer_all * efficiency.nodes_per_layer(128, 8)


@pytest.mark.parametrize(("p", "d", "w"), list(itertools.product([1, 7, 64], [0, 5, 100], [0, 4, 32, 200])))
def test_the_attention_closed_form_is_the_sum_over_tokens(p: int, d: int, w: int) -> None:
    brute = sum(min(w, d + i + 1) if w else d + i + 1 for i in range(p))
    assert prefill.attention_flop(p, d, [3], [w]) == pytest.approx(4 * 3 * brute)


def test_ttft_shares_the_prefill_in_flight_and_queues_past_the_slots() -> None:
    estimate = prefill.PrefillEstimate(tok_s=1000.0, seconds=4.0, prompt_tokens=4000, n_ubatch=512, label="")
    assert estimate.ttft(concurrency=1, slots=4, output_tokens=100, decode_tok_s=20.0) == 4.0
    assert estimate.ttft(concurrency=3, slots=4, output_tokens=100, decode_tok_s=20.0) == 12.0  # shared prefill
    # 3 requests, 1 slot: the third waits for two whole requests (4 s + 100 / 20 s each), then its own prompt
    assert estimate.ttft(concurrency=3, slots=1, output_tokens=100, decode_tok_s=20.0) == pytest.approx(2 * 9.0 + 4.0)
    # 3 on 2 slots: the third waits for the first wave (2 × 4 s shared, then 5 s of output), then prefills alone
    assert estimate.ttft(concurrency=3, slots=2, output_tokens=100, decode_tok_s=20.0) == pytest.approx(13.0 + 4.0)
    assert estimate.ttft(concurrency=3, slots=1, output_tokens=100, decode_tok_s=None) is None
    unknown = prefill.PrefillEstimate(tok_s=None, seconds=None, prompt_tokens=4000, n_ubatch=512, label="")
    assert unknown.ttft(concurrency=1, slots=1, output_tokens=0, decode_tok_s=20.0) is None


def test_a_gpu_without_a_compute_figure_gets_no_estimate_and_says_why() -> None:
    bare = Device("CUDA0", "a GPU of 16,000 MiB", 16_000 * 2**20, 0, 448e9, "cuda")
    work = prefill.work_for(MODEL, ServerFlags(), devices=[bare], tensors=elements(), prompt_tokens=100)
    estimate = prefill.estimate(work, prompt_tokens=100, n_ubatch=512, cpu_flops=1e12)
    assert estimate.tok_s is None and estimate.unknown == ["CUDA0"]
    assert estimate.label == "no estimate: the compute peak (FP16 matrix or FP32) or the bandwidth of CUDA0 is unknown"


@pytest.mark.parametrize(("tok_s", "text"), [(862.09, "862"), (1234.5, "1,234"), (14.04, "14.0"), (0.2567, "0.26")])
def test_a_prompt_rate_keeps_its_figures_however_slow(tok_s: float, text: str) -> None:
    from sizing.recommendation_facts import rate_text

    assert rate_text(tok_s) == text
