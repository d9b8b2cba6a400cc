"""The decode speed estimate beside the investigation's measurements (sizing.placement.speed).

RTX 5060 Ti 16 GB (448 GB/s, catalogue), Devstral Small 2 24B Q4_K_M, 4,362 prompt + 1,738 output tokens,
all from the investigation's published figures (benchmarks/tests/investigation.py, as in the demo data).
What the first-principles estimate gives, and how far it is from each measurement, is pinned here and stated
in docs/sizing.md:

| run | measured tok/s | kvlab's estimate | measured / estimate |
|---|---|---|---|
| c3p-single: 1 slot, q8_0 KV on the GPU | 25.7 | 23.97 | 1.07 |
| orig-single: KV in RAM (--no-kv-offload), f16 | 5.84 | 7.17 | 0.81 |
| c2-single: KV in RAM, per-slot | 7.93 | 7.17 | 1.11 |
| c2-x3: KV in RAM, 3 decoding at once (per request) | 2.15 | 3.17 | 0.68 |

On the GPU the estimate is 7 % below the measurement: CUDA reaches 81.4 % of peak bandwidth and each of the
760 graph nodes costs 2.92 µs (sizing.placement.efficiency, derived from other GPUs' public llama-bench
rows: nothing of this GPU or model). With the KV in RAM the CPU reads each KV head once per query head
sharing it (4× for Devstral) at the CPU's 76.1 % of RAM's peak, and every layer hands its attention to the
CPU and back (276 µs, llama.cpp PR 4812): one request lies between its two measurements; three at once are
still 1.47× too fast (the goal of ±30 % is not met: an xfail below).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from benchmarks.tests.investigation import investigation_lines
from sizing import catalogue
from sizing.hparams import model_params
from sizing.kv import ServerFlags, kv_layout
from sizing.placement import efficiency, speed
from sizing.placement.types import Device, Host

GPU = catalogue.gpus()["rtx-5060-ti-16gb"]
ENTRY = catalogue.models()["devstral-small-2-24b"]
MODEL = model_params(ENTRY.metadata)
TENSORS = speed.catalogue_tensors(ENTRY.metadata, "Q4_K_M", **ENTRY.tensor_layout)
CUDA0 = Device("CUDA0", GPU.name, GPU.memory_mib * 1024 * 1024, 0, GPU.bandwidth)


def runs() -> dict[str, list[dict[str, Any]]]:
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in investigation_lines():
        by_run[record["run"]].append(record)
    return by_run


def flags_of(record: dict[str, Any]) -> ServerFlags:
    parallel = record["parallel"]
    ctx = record["ctx_size"]
    if record["run"].startswith("c2"):
        # the post's C2 context is inconsistent (README of the data): its requests only succeed with
        # 9,216 cells per slot, so the server had 3 × 9,216
        ctx *= parallel
    return ServerFlags(
        ctx_size=ctx,
        parallel=None if record["label"] == "original" else parallel,  # the original gave no -np
        kv_unified=record["kv_unified"],
        type_k=record["cache_type_k"],
        type_v=record["cache_type_v"],
        flash_attn="on" if record["flash_attn"] else "auto",
        kv_offload=record["kv_offload"],
    )


def estimate_for(run: str) -> tuple[speed.SpeedEstimate, list[float]]:
    records = runs()[run]
    first = records[0]
    assert first["gpu"] == "RTX 5060 Ti 16GB" and first["model"] == "Devstral-Small-2-24B-Q4_K_M.gguf"
    flags = flags_of(first)
    estimate = speed.estimate(
        MODEL,
        kv_layout(MODEL, flags),
        flags,
        devices=[CUDA0],
        prompt_tokens=first["prompt_tokens"],  # the workload's context comes from the data file
        output_tokens=first["n_predict"],
        concurrency=first["concurrency"],
        tensors=TENSORS,
    )
    return estimate, [r["tok_s"] for r in records if r["ok"] and r["tok_s"]]


def test_the_catalogue_gives_the_5060_ti_its_published_bandwidth() -> None:
    assert GPU.bandwidth_gbps == 448.0 and GPU.bandwidth_source.startswith("https://www.techpowerup.com/")


@pytest.mark.parametrize(
    ("run", "estimate_tok_s", "ratio"),
    [
        ("c3p-single", 23.97, 1.072),
        ("orig-single", 7.17, 0.815),
        ("c2-single", 7.17, 1.106),
        ("c2-x3", 3.17, 0.678),
    ],
)
def test_the_estimate_beside_the_investigations_measurement(run: str, estimate_tok_s: float, ratio: float) -> None:
    estimate, measured = estimate_for(run)
    assert estimate.tok_s == pytest.approx(estimate_tok_s, abs=0.01)
    assert speed.calibrate(estimate.tok_s or 0, measured) == pytest.approx(ratio, abs=0.005)
    assert estimate.label.startswith("estimate, not a measurement")


def test_on_the_gpu_the_estimate_is_within_10_percent_of_the_measurement() -> None:
    estimate, measured = estimate_for("c3p-single")
    assert measured == [25.7]
    assert 0.9 < (estimate.tok_s or 0) / 25.7 < 1.0
    # the weights dominate: 13.95 GB (all but token_embd) against 0.46 GB of q8_0 KV at 5,231 cells, both at
    # CUDA's share of the peak; then 40 layers × 19 kernels
    weights, kv, kernels = estimate.parts
    assert weights.bytes == 13_948_538_880 and kv.bytes == 5_231 * 40 * 2 * 1088
    cuda = efficiency.EFFICIENCY["cuda"]
    assert weights.seconds == pytest.approx(weights.bytes / (448e9 * cuda.bandwidth))
    assert kernels.name == "kernels on CUDA0 (760 graph nodes)" and kernels.seconds == pytest.approx(760 * cuda.node_s)
    assert estimate.inputs["efficiency"]["CUDA0"].startswith("cuda: 81% of peak bandwidth")
    assert estimate.inputs["context_cells"] == 4362 + 1738 // 2


def test_kv_in_ram_reads_each_kv_head_once_per_query_head_and_hands_every_layer_to_the_cpu() -> None:
    estimate, measured = estimate_for("orig-single")
    _, _, attention, handoffs = estimate.parts
    assert attention.name == "attention on the CPU (KV in RAM)" and attention.bound == "bandwidth"
    kv = 5_231 * 40 * 2 * 2048  # f16 K and V, 8 heads × 128, at 5,231 cells
    assert MODEL.n_head[0] // MODEL.n_head_kv[0] == 4 and attention.bytes == 4 * kv
    assert attention.seconds == pytest.approx(4 * kv / (51.2e9 * efficiency.EFFICIENCY["cpu"].bandwidth))
    assert handoffs.name == "hand-offs to the CPU (40 layers)" and handoffs.seconds == pytest.approx(
        40 * speed.HANDOFF_S
    )
    assert pytest.approx(276e-6, abs=1e-6) == speed.HANDOFF_S  # PR 4812's RTX 3090 Ti: another GPU and model
    assert estimate.inputs["host_bandwidth_source"].startswith("dual-channel DDR4-3200")


@pytest.mark.parametrize("run", ["orig-single", "c2-single", "c3p-single"])
def test_one_request_is_within_30_percent_of_the_investigations_measurements(run: str) -> None:
    """The issue's goal: one request with the KV in RAM within ±30 % of 5.84-7.93 tok/s, one q8_0 slot on
    the GPU within ±30 % of 25.7 — from first principles, nothing calibrated."""
    estimate, measured = estimate_for(run)
    low, high = (5.84, 7.93) if run != "c3p-single" else (25.7, 25.7)
    assert 0.7 * low <= (estimate.tok_s or 0) <= 1.3 * high, (estimate.tok_s, measured)


@pytest.mark.xfail(strict=True, reason="three at once with per-slot caches in RAM: 3.17 estimated vs 2.15 measured")
def test_three_at_once_with_the_kv_in_ram_is_within_30_percent_of_the_measurement() -> None:
    estimate, measured = estimate_for("c2-x3")
    assert measured == [2.15, 2.15, 2.15]
    assert 0.7 * 2.15 <= (estimate.tok_s or 0) <= 1.3 * 2.15


def test_calibration_by_the_runs_with_kv_in_ram_brings_the_ram_runs_within_a_third() -> None:
    single, measured = estimate_for("orig-single")
    _, measured_c2 = estimate_for("c2-single")
    ratio = speed.calibrate(single.tok_s or 0, measured + measured_c2)
    assert ratio == pytest.approx(0.960, abs=0.005)
    calibrated = single.calibrated(ratio or 0, runs=2)
    assert calibrated.tok_s == pytest.approx(6.885, abs=0.01)  # the median of 5.84 and 7.93: in sample
    assert "calibrated ×0.96 by 2 measured runs" in calibrated.label
    # out of sample: three decoding at once, calibrated by the single runs, is 1.4x the measured 2.15
    three, measured_x3 = estimate_for("c2-x3")
    assert measured_x3 == [2.15, 2.15, 2.15]
    predicted = (three.tok_s or 0) * (ratio or 0)
    assert predicted == pytest.approx(3.04, abs=0.01) and 1.4 < predicted / 2.15 < 1.5


def test_calibration_from_the_gpu_run_does_not_carry_over_to_kv_in_ram() -> None:
    gpu, measured = estimate_for("c3p-single")
    ratio = speed.calibrate(gpu.tok_s or 0, measured) or 0
    ram, _ = estimate_for("orig-single")
    assert (ram.tok_s or 0) * ratio == pytest.approx(7.69, abs=0.01)  # vs 5.84-7.93 measured: calibrate per placement


def test_concurrent_sequences_share_the_weight_read() -> None:
    one, _ = estimate_for("c2-single")
    three, _ = estimate_for("c2-x3")
    assert three.sequences == 3 and one.sequences == 1
    assert three.parts[0].seconds == one.parts[0].seconds  # the weights are read once per step
    assert three.parts[1].seconds == one.parts[1].seconds  # and its kernels run once
    assert three.parts[2].seconds == pytest.approx(3 * one.parts[2].seconds)  # each sequence reads its own KV
    assert (three.tok_s or 0) < (one.tok_s or 0) < (three.aggregate_tok_s or 0)


def test_a_queued_request_does_not_decode_at_once() -> None:
    estimate, measured = estimate_for("c3p-queue2")  # 2 requests, 1 slot: the second waits
    assert estimate.sequences == 1 and measured == [26.3, 26.3]


def test_an_unknown_bandwidth_gives_no_figure_and_says_why() -> None:
    flags = ServerFlags(ctx_size=12288, parallel=1, type_k="q8_0", type_v="q8_0", flash_attn="on")
    unknown = Device("CUDA0", "RTX 3090", 24 * 2**30, 0, None)
    estimate = speed.estimate(
        MODEL, kv_layout(MODEL, flags), flags, devices=[unknown], prompt_tokens=1000, output_tokens=100, tensors=TENSORS
    )
    assert estimate.tok_s is None and estimate.unknown == ["CUDA0"]
    assert estimate.label == "no estimate: the memory bandwidth of CUDA0 is unknown"


def test_partial_offload_reads_the_cpu_layers_from_ram() -> None:
    flags = ServerFlags(ctx_size=8192, parallel=1, n_gpu_layers=36)
    estimate = speed.estimate(
        MODEL,
        kv_layout(MODEL, flags),
        flags,
        devices=[CUDA0],
        prompt_tokens=1000,
        output_tokens=0,
        tensors=TENSORS,
        host=Host(64 * 2**30, 60 * 2**30, 89.6e9),
    )
    names = [p.name for p in estimate.parts]
    assert names == [
        "weights on CUDA0", "KV on CUDA0", "kernels on CUDA0 (665 graph nodes)",
        "weights on system RAM", "attention on the CPU (KV in RAM)", "kernels on system RAM (95 graph nodes)",
    ]  # fmt: skip
    ram = estimate.parts[3]
    # layers 0-4 of 40 (-ngl 36 keeps the last 35 layers and the output layer on the GPU)
    layer = sum(b for n, b in TENSORS if n.startswith("blk.0."))
    assert ram.bytes == 5 * layer and estimate.inputs["host_bandwidth"] == 89.6e9


def test_moe_reads_only_the_routed_share_of_the_experts() -> None:
    entry = catalogue.models()["qwen3-coder-30b-a3b"]
    model = model_params(entry.metadata)
    tensors = speed.catalogue_tensors(entry.metadata, "Q4_K_M", **entry.tensor_layout)
    flags = ServerFlags(ctx_size=8192, parallel=1)
    big = Device("CUDA0", "H100", 80 * 2**30, 0, 3.35e12)
    estimate = speed.estimate(
        model, kv_layout(model, flags), flags, devices=[big], prompt_tokens=100, output_tokens=0, tensors=tensors
    )
    experts = sum(b for n, b in tensors if "_exps." in n)
    rest = sum(b for n, b in tensors if "_exps." not in n and not n.startswith("token_embd."))
    assert model.n_expert == 128 and model.n_expert_used == 8
    assert estimate.parts[0].bytes == rest + sum(b * 8 // 128 for n, b in tensors if "_exps." in n)
    assert estimate.parts[0].bytes < (experts + rest) / 4
    # --cpu-moe: the experts are read from RAM by the CPU
    cpu_moe = ServerFlags(ctx_size=8192, parallel=1, overrides=((r"\.ffn_(up|down|gate)_exps", "CPU"),))
    offloaded = speed.estimate(
        model, kv_layout(model, cpu_moe), cpu_moe, devices=[big], prompt_tokens=100, output_tokens=0, tensors=tensors
    )
    names = [p.name for p in offloaded.parts]
    assert names == ["weights on CUDA0", "KV on CUDA0", "kernels on CUDA0 (1632 graph nodes)", "weights on system RAM"]
    assert offloaded.parts[3].bytes == sum(b * 8 // 128 for n, b in tensors if "_exps." in n)


def test_two_gpus_split_the_layers_and_add_their_times() -> None:
    flags = ServerFlags(ctx_size=8192, parallel=1, tensor_split=(1.0, 1.0))
    slow = Device("CUDA1", "slow", 16 * 2**30, 0, 224e9)
    estimate = speed.estimate(
        MODEL,
        kv_layout(MODEL, flags),
        flags,
        devices=[CUDA0, slow],
        prompt_tokens=1000,
        output_tokens=0,
        tensors=TENSORS,
    )
    weights = {p.where: p for p in estimate.parts if p.name.startswith("weights")}
    assert set(weights) == {"CUDA0", "CUDA1"}
    assert weights["CUDA1"].seconds > weights["CUDA0"].seconds  # same layers, half the bandwidth, plus the output
    assert estimate.seconds_per_step == pytest.approx(sum(p.seconds for p in estimate.parts))


def test_without_the_tensor_layout_the_total_is_spread_and_said_so() -> None:
    flags = ServerFlags(ctx_size=12288, parallel=1, type_k="q8_0", type_v="q8_0", flash_attn="on")
    estimate = speed.estimate(
        MODEL,
        kv_layout(MODEL, flags),
        flags,
        devices=[CUDA0],
        prompt_tokens=4362,
        output_tokens=1738,
        weights_bytes=14_326_026_240,
    )
    assert estimate.inputs["weights"] == "total spread over the layers (approximation)"
    assert estimate.tok_s == pytest.approx(23.39, abs=0.01)  # token_embd is not told apart: a little slower


def test_calibrate_needs_runs_and_an_estimate() -> None:
    assert speed.calibrate(20.0, []) is None
    assert speed.calibrate(0.0, [5.0]) is None
    assert speed.calibrate(20.0, [5.0, 10.0, 30.0]) == 0.5


def test_rankings_rest_on_the_speed_estimate() -> None:
    from sizing.recommend import RANKING, recommend
    from sizing.workload import Workload

    ranked = recommend(
        MODEL,
        Workload(4362, 1738, 3),
        base=ServerFlags(),
        weights_bytes=14_326_026_240,
        weights_source="computed",
        gpu_mib=16311,
        gpu_bandwidth=GPU.bandwidth,
        limit=100,
    )
    best = ranked[0]
    assert best.command[3:] == ["-c", "18432", "-np", "3", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"]
    fastest = max(ranked, key=lambda r: r.speed.aggregate_tok_s if r.speed and r.speed.aggregate_tok_s else 0)
    assert fastest.flags.type_v == "q4_0" and fastest.score == pytest.approx(0.9 * 0.9, abs=1e-4)
    assert best.speed is not None and best.speed.aggregate_tok_s == pytest.approx(66.30, abs=0.01)
    # q8_0 ranks first: 66.30 of q4_0's 68.99 tok/s, times its quality 0.97 × 0.97
    assert best.score == pytest.approx(0.9409 * 66.30 / 68.99, abs=1e-3)
    # f16 KV in RAM, 3 slots: 3 / (39.3 ms of weights + 2.2 ms of kernels + 3 × 88.0 ms of CPU attention
    # + 11.0 ms of hand-offs) = 9.48 of 68.99 tok/s (36.5 when the CPU was taken to read the KV once, with no
    # hand-off, at peak bandwidth)
    in_ram = [r for r in ranked if not r.flags.kv_offload and r.flags.type_k == "f16" and r.flags.type_v == "f16"]
    assert in_ram and all(r.score == pytest.approx(9.48 / 68.99, abs=1e-3) for r in in_ram if r.flags.parallel == 3)
    assert "×0.25" not in RANKING and "sizing.placement.speed" in RANKING
