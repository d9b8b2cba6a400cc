"""The decode speed estimate beside the investigation's measurements (sizing.placement.speed).

RTX 5060 Ti 16 GB (448 GB/s, catalogue), Devstral Small 2 24B Q4_K_M, 4,362 prompt + 1,738 output tokens,
all from the investigation's published figures (benchmarks/tests/investigation.py, as in the demo data).
What the first-principles estimate gives, and how far it is from each measurement, is pinned here and stated
in docs/sizing.md:

| run | measured tok/s | kvlab's estimate | measured / estimate |
|---|---|---|---|
| c3p-single: 1 slot, q8_0 KV on the GPU | 25.7 | 31.1 | 0.83 |
| orig-single: KV in RAM (--no-kv-offload), f16 | 5.84 | 20.9 | 0.28 |
| c2-single: KV in RAM, per-slot | 7.93 | 20.9 | 0.38 |
| c2-x3: KV in RAM, 3 decoding at once (per request) | 2.15 | 12.3 | 0.17 |

On the GPU the estimate is 21 % above the measurement (bandwidth is never fully reached). With the KV in RAM
it is 2.6-3.6 times too fast: the CPU attention path loses more than the RAM bandwidth explains (a GPU/CPU
synchronisation per layer, no flash attention). That is what `calibrate` is for; the calibrated figures
are checked below, in and out of sample.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from benchmarks.tests.investigation import investigation_lines
from sizing import catalogue
from sizing.hparams import model_params
from sizing.kv import ServerFlags, kv_layout
from sizing.placement import speed
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
        ("c3p-single", 31.10, 0.83),
        ("orig-single", 20.89, 0.28),
        ("c2-single", 20.89, 0.38),
        ("c2-x3", 12.29, 0.17),
    ],
)
def test_the_estimate_beside_the_investigations_measurement(run: str, estimate_tok_s: float, ratio: float) -> None:
    estimate, measured = estimate_for(run)
    assert estimate.tok_s == pytest.approx(estimate_tok_s, abs=0.01)
    assert speed.calibrate(estimate.tok_s or 0, measured) == pytest.approx(ratio, abs=0.005)
    assert estimate.label.startswith("estimate, not a measurement")


def test_on_the_gpu_the_estimate_is_within_25_percent_above_the_measurement() -> None:
    estimate, measured = estimate_for("c3p-single")
    assert measured == [25.7]
    assert 1.0 < (estimate.tok_s or 0) / 25.7 < 1.25
    # the weights dominate: 13.95 GB (all but token_embd) against 0.46 GB of q8_0 KV at 5,231 cells
    weights, kv = estimate.parts
    assert weights.bytes == 13_948_538_880 and kv.bytes == 5_231 * 40 * 2 * 1088
    assert estimate.inputs["context_cells"] == 4362 + 1738 // 2


def test_kv_in_ram_runs_attention_on_the_cpu_and_the_first_principles_estimate_is_far_too_fast() -> None:
    estimate, measured = estimate_for("orig-single")
    part = estimate.parts[1]
    assert part.name == "attention on the CPU (KV in RAM)" and part.bound == "bandwidth"
    assert part.bytes == 5_231 * 40 * 2 * 2048  # f16 K and V, 8 heads × 128
    assert estimate.inputs["host_bandwidth"] == 51.2e9
    assert estimate.inputs["host_bandwidth_source"].startswith("dual-channel DDR4-3200")
    # stated, not fudged: 2.6x (5.84) to 3.6x (7.93) too fast with the KV in RAM
    low, _ = estimate_for("c2-single")
    assert 2.5 < (estimate.tok_s or 0) / max(measured + [7.93]) < 2.7
    assert 3.5 < (estimate.tok_s or 0) / min(measured) < 3.7 and low.tok_s == estimate.tok_s


def test_calibration_by_the_runs_with_kv_in_ram_brings_the_ram_runs_within_a_third() -> None:
    single, measured = estimate_for("orig-single")
    _, measured_c2 = estimate_for("c2-single")
    ratio = speed.calibrate(single.tok_s or 0, measured + measured_c2)
    assert ratio == pytest.approx(0.33, abs=0.005)
    calibrated = single.calibrated(ratio or 0, runs=2)
    assert calibrated.tok_s == pytest.approx(6.885, abs=0.01)  # the median of 5.84 and 7.93: in sample
    assert "calibrated ×0.33 by 2 measured runs" in calibrated.label
    # out of sample: three decoding at once, calibrated by the single runs, is still 1.9x the measured 2.15
    three, measured_x3 = estimate_for("c2-x3")
    assert measured_x3 == [2.15, 2.15, 2.15]
    predicted = (three.tok_s or 0) * (ratio or 0)
    assert predicted == pytest.approx(4.05, abs=0.01) and 1.8 < predicted / 2.15 < 2.0


def test_calibration_from_the_gpu_run_does_not_carry_over_to_kv_in_ram() -> None:
    gpu, measured = estimate_for("c3p-single")
    ratio = speed.calibrate(gpu.tok_s or 0, measured) or 0
    ram, _ = estimate_for("orig-single")
    assert (ram.tok_s or 0) * ratio == pytest.approx(17.26, abs=0.01)  # vs 5.84-7.93 measured: calibrate per placement


def test_concurrent_sequences_share_the_weight_read() -> None:
    one, _ = estimate_for("c2-single")
    three, _ = estimate_for("c2-x3")
    assert three.sequences == 3 and one.sequences == 1
    assert three.parts[0].seconds == one.parts[0].seconds  # the weights are read once per step
    assert three.parts[1].seconds == pytest.approx(3 * one.parts[1].seconds)
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
    assert names == ["weights on CUDA0", "KV on CUDA0", "weights on system RAM", "attention on the CPU (KV in RAM)"]
    ram = estimate.parts[2]
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
    assert [p.name for p in offloaded.parts] == ["weights on CUDA0", "KV on CUDA0", "weights on system RAM"]
    assert offloaded.parts[2].bytes == sum(b * 8 // 128 for n, b in tensors if "_exps." in n)


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
    assert estimate.tok_s == pytest.approx(30.3, abs=0.1)  # token_embd is not told apart: a little slower


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
    assert best.speed is not None and best.speed.aggregate_tok_s == pytest.approx(85.6, abs=0.1)
    # q8_0 ranks first: 85.6 of q4_0's 89.3 tok/s, times its quality 0.97 × 0.97
    assert best.score == pytest.approx(0.9409 * 85.6 / 89.3, abs=1e-3)
    # f16 KV in RAM, 3 slots: 3 / (31.1 ms of weights + 3 × 16.7 ms of CPU attention) = 36.5 of 89.3 tok/s
    in_ram = [r for r in ranked if not r.flags.kv_offload and r.flags.type_k == "f16" and r.flags.type_v == "f16"]
    assert in_ram and all(r.score == pytest.approx(36.5 / 89.3, abs=1e-3) for r in in_ram if r.flags.parallel == 3)
    assert "×0.25" not in RANKING and "sizing.placement.speed" in RANKING
