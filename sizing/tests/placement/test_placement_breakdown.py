"""sizing.placement.breakdown: where llama.cpp b11434 puts each weight, KV and compute byte, per device.

Pure tests first (layer assignment, -ts, -sm none/-mg, overrides, CUDA padding, KV per device),
then public CUDA logs (each cited), then one oracle test against the CPU build of llama-fit-params.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sizing.fit_params import parse_fit_log, whole_mib
from sizing.gguf import read_gguf_head
from sizing.hparams import ModelParams, model_params
from sizing.kv import kv_layout
from sizing.memory import compute_buffer
from sizing.placement import overrides as ot
from sizing.placement.breakdown import (
    COMPUTE_BOUND_MIB,
    COMPUTE_BOUND_SHARE,
    HOST,
    PlacementError,
    SplitModeRowError,
    UnsupportedPlacement,
    cuda_alloc_size,
    flags_for,
    host_alloc_size,
    kv_tensors,
    layer_devices,
    make_measure,
    measure,
    place,
)
from sizing.placement.tensors import WeightTensor, computed, from_gguf, layer_of, uses_of
from sizing.placement.types import Device, Host, Params
from sizing.tests.support import FORCED_FLAGS

MiB = 1024 * 1024
GiB = 1024 * MiB
HOST_RAM = Host(total=64 * GiB, free=60 * GiB)


def mistral(block_count: int = 32, vocab: int = 32000) -> dict[str, Any]:
    """Mistral 7B v0.2's metadata (32 layers, 4096 wide, GQA 32/8, FFN 14336, vocab 32000)."""
    return {
        "general.architecture": "llama",
        "general.name": "mistral",
        "llama.block_count": block_count,
        "llama.embedding_length": 4096,
        "llama.context_length": 32768,
        "llama.attention.head_count": 32,
        "llama.attention.head_count_kv": 8,
        "llama.feed_forward_length": 14336,
        "llama.vocab_size": vocab,
        "llama.rope.dimension_count": 128,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
    }


def gpus(*gib: int) -> list[Device]:
    return [Device(f"CUDA{i}", "GPU", g * GiB) for i, g in enumerate(gib)]


@pytest.fixture(scope="module")
def small() -> tuple[ModelParams, list[WeightTensor]]:
    md = mistral(block_count=4)
    return model_params(md), computed(md, "Q4_K_M", tied_embeddings=False)


def within_bound(kvlab: int, reported_mib: float) -> bool:
    return abs(kvlab / MiB - reported_mib) <= COMPUTE_BOUND_MIB + COMPUTE_BOUND_SHARE * reported_mib


# --- tensors -------------------------------------------------------------------------------------


def test_layer_of_follows_the_loaders_layers() -> None:
    assert layer_of("blk.7.attn_q.weight", 32) == 7
    assert layer_of("token_embd.weight", 32) is None  # the input layer: always the CPU
    assert layer_of("output.weight", 32) == 32
    assert layer_of("output_norm.weight", 32) == 32
    assert layer_of("token_embd_norm.weight", 32) == 0  # a repeating tensor made with layer 0
    rope = WeightTensor("rope_freqs.weight", "f32", (64,))
    assert uses_of(rope, 4, tied_output=False) == (0, 1, 2, 3)  # TENSOR_DUPLICATED on every layer
    embd = WeightTensor("token_embd.weight", "q4_K", (4096, 32000))
    assert uses_of(embd, 4, tied_output=True) == (None, 4)


def test_weight_tensor_bytes_are_ggml_nbytes() -> None:
    t = WeightTensor("blk.0.ffn_down.weight", "q4_K", (14336, 4096))
    assert t.nbytes == 14336 * 4096 // 256 * 144 and t.quantized
    assert WeightTensor("x", "f32", (4096,)).nbytes == 16384


# --- overrides -----------------------------------------------------------------------------------


def test_cpu_moe_and_n_cpu_moe_use_common_h_patterns() -> None:
    assert ot.cpu_moe() == [(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU")]
    assert ot.n_cpu_moe(2) == [
        (r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),
        (r"blk\.1\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),
    ]
    assert ot.n_cpu_ffn(1) == [(r"blk\.0\.ffn_(up|down|gate)\.", "CPU")]
    rules = ot.n_cpu_moe(2)
    assert ot.match("blk.1.ffn_gate_exps.weight", rules) == "CPU"
    assert ot.match("blk.10.ffn_gate_exps.weight", rules) is None  # blk\.1\. needs the dot after 1
    assert ot.match("blk.1.ffn_gate_inp.weight", rules) is None  # the router stays


def test_the_first_matching_override_wins_and_it_is_a_substring_search() -> None:
    rules = ot.parse_ot("ffn_up=CUDA1,ffn=CPU", ["CUDA0", "CUDA1"])
    assert ot.match("blk.3.ffn_up.weight", rules) == "CUDA1"
    assert ot.match("blk.3.ffn_down.weight", rules) == "CPU"
    assert ot.match("blk.3.attn_q.weight", rules) is None


def test_it_rejects_bad_overrides_clearly() -> None:
    with pytest.raises(ot.OverrideError, match="unknown buffer type 'CUDA2'"):
        ot.parse_ot("exps=CUDA2", ["CUDA0", "CUDA1"])
    with pytest.raises(ot.OverrideError, match="PATTERN=BUFFER_TYPE"):
        ot.parse_ot("exps", ["CUDA0"])
    with pytest.raises(ot.OverrideError, match="not a valid regular expression"):
        ot.parse_ot("blk.(3=CPU", ["CUDA0"])
    with pytest.raises(ot.OverrideError, match="std::regex"):
        ot.parse_ot("(?P<n>x)=CPU", ["CUDA0"])
    with pytest.raises(ot.OverrideError, match="at most 4095"):
        ot.validate(ot.n_cpu_moe(4096), ["CUDA0"])
    ot.validate(ot.n_cpu_moe(4095), ["CUDA0"])


# --- layers to devices ---------------------------------------------------------------------------


def test_ngl_puts_the_last_layers_and_the_output_on_the_gpu() -> None:
    layers = layer_devices(4, gpus(16), HOST_RAM, Params(n_gpu_layers=3))
    assert layers == [HOST, HOST, 0, 0, 0]  # -ngl 3: repeating layers 2 and 3, and the output
    assert layer_devices(4, gpus(16), HOST_RAM, Params(n_gpu_layers=0)) == [HOST] * 5
    assert layer_devices(4, gpus(16), HOST_RAM, Params(n_gpu_layers=-1)) == [0] * 5
    assert layer_devices(4, [], HOST_RAM, Params()) == [HOST] * 5


def test_tensor_split_and_free_memory_split_the_layers() -> None:
    assert layer_devices(4, gpus(16, 16), HOST_RAM, Params(tensor_split=(1, 1))) == [0, 0, 0, 1, 1]
    assert layer_devices(4, gpus(16, 16), HOST_RAM, Params(tensor_split=(3, 1))) == [0, 0, 0, 0, 1]
    # no -ts: in proportion to free memory; 8 GiB used on the first GPU halves its share
    busy = [Device("CUDA0", "GPU", 16 * GiB, used=8 * GiB), Device("CUDA1", "GPU", 16 * GiB)]
    assert layer_devices(5, busy, HOST_RAM, Params()) == [0, 0, 1, 1, 1, 1]


def test_sm_none_keeps_only_the_main_gpu(small: tuple[ModelParams, list[WeightTensor]]) -> None:
    model, tensors = small
    usage = measure(model, tensors, gpus(16, 24), HOST_RAM, Params(n_ctx=4096, split_mode="none", main_gpu=1))
    assert len(usage) == 2  # one model device, then the host
    both = measure(model, tensors, gpus(16, 24), HOST_RAM, Params(n_ctx=4096, tensor_split=(0, 1)))
    assert usage[0].model == both[1].model and usage[0].context == both[1].context
    with pytest.raises(PlacementError, match="invalid value for main_gpu: 2"):
        measure(model, tensors, gpus(16, 24), HOST_RAM, Params(split_mode="none", main_gpu=2))
    assert len(measure(model, tensors, gpus(16), HOST_RAM, Params(n_ctx=4096, split_mode="none", main_gpu=-1))) == 1


def test_sm_row_cannot_load_on_cuda_and_sm_tensor_is_not_modelled(
    small: tuple[ModelParams, list[WeightTensor]],
) -> None:
    model, tensors = small
    with pytest.raises(SplitModeRowError, match="does not support split buffers"):
        measure(model, tensors, gpus(16), HOST_RAM, Params(split_mode="row"))
    with pytest.raises(UnsupportedPlacement, match="-sm tensor"):
        measure(model, tensors, gpus(16, 16), HOST_RAM, Params(split_mode="tensor"))


# --- bytes ---------------------------------------------------------------------------------------


def test_cuda_pads_quantized_rows_to_512_and_aligns_to_128() -> None:
    # ne0 = 2816 = 5 * 512 + 256: ggml-cuda adds one q4_K row of 256 (144 bytes) to the tensor
    nbytes = 2816 * 10 // 256 * 144
    assert cuda_alloc_size("q4_K", (2816, 10)) == (nbytes + 144 + 127) // 128 * 128
    assert cuda_alloc_size("q4_K", (4096, 10)) == 4096 * 10 // 256 * 144  # a multiple of 512: nothing added
    assert cuda_alloc_size("f16", (2816, 10)) == 2816 * 10 * 2  # not quantized: nothing added
    assert cuda_alloc_size("f32", (100,)) == 512  # 400 bytes aligned to 128
    assert host_alloc_size("f32", (100,)) == 416  # aligned to 32
    assert host_alloc_size("q4_K", (2816, 10)) == nbytes


def test_every_weight_is_counted_exactly_once(small: tuple[ModelParams, list[WeightTensor]]) -> None:
    model, tensors = small
    params = Params(n_ctx=4096, n_gpu_layers=3, tensor_split=(1, 1), overrides=tuple(ot.parse_ot("ffn_up=CPU", [])))
    flags = flags_for(params)
    placement = place(model, tensors, gpus(16, 16), HOST_RAM, params, kv_layout(model, flags))
    names = [name for _, name, _ in placement.weights]
    assert sorted(names) == sorted(t.name for t in tensors)
    by_name = {t.name: t for t in tensors}
    for bucket, name, size in placement.weights:
        t = by_name[name]
        expected = host_alloc_size(t.type_name, t.shape) if bucket == HOST else cuda_alloc_size(t.type_name, t.shape)
        assert size == expected
    where = {name: bucket for bucket, name, _ in placement.weights}
    assert where["token_embd.weight"] == HOST
    assert where["blk.0.attn_q.weight"] == HOST and where["blk.1.attn_q.weight"] == HOST  # -ngl 3
    # 3 offloaded layers over -ts 1,1: upper_bound([0.5, 1], 0/3, 1/3, 2/3) = 0, 0, 1
    assert where["blk.2.attn_q.weight"] == 0 and where["blk.3.attn_q.weight"] == 0
    assert where["output.weight"] == 1
    assert (
        where["blk.3.ffn_up.weight"] == HOST and where["blk.3.ffn_down.weight"] == 0
    )  # the override wins over the layer's device


def test_a_tied_output_is_a_second_copy_on_the_gpu() -> None:
    md = mistral(block_count=2)
    model = model_params(md)
    tensors = computed(md, "Q8_0", tied_embeddings=True)
    embd = next(t for t in tensors if t.name == "token_embd.weight")
    gpu, host = measure(model, tensors, gpus(16), HOST_RAM, Params(n_ctx=1024))
    assert host.model == host_alloc_size(embd.type_name, embd.shape) + 0  # only the input copy
    on_gpu = sum(cuda_alloc_size(t.type_name, t.shape) for t in tensors if t.name != "token_embd.weight")
    assert gpu.model == on_gpu + cuda_alloc_size(embd.type_name, embd.shape)
    cpu_only = measure(model, tensors, gpus(16), HOST_RAM, Params(n_ctx=1024, n_gpu_layers=0))
    assert cpu_only[1].model == sum(host_alloc_size(t.type_name, t.shape) for t in tensors)  # one copy


def test_kv_lives_with_its_layer_and_adds_up_to_sizing_kv(small: tuple[ModelParams, list[WeightTensor]]) -> None:
    model, tensors = small
    params = Params(n_ctx=5000, n_seq_max=3, n_gpu_layers=3, tensor_split=(1, 1), type_k="q8_0", type_v="q8_0")
    layout = kv_layout(model, flags_for(params))
    unaligned = sum(host_alloc_size(tp, shape) for _, _, tp, shape in kv_tensors(model, layout))
    assert unaligned == layout.kv_bytes  # every KV tensor is a multiple of 32 bytes here
    gpu0, gpu1, host = measure(model, tensors, gpus(16, 16), HOST_RAM, params)
    per_layer = layout.kv_bytes // 4  # four identical layers
    # layers 0-1 on the CPU, 2-3 on CUDA0, the output (no KV) on CUDA1
    assert (host.context, gpu0.context, gpu1.context) == (2 * per_layer, 2 * per_layer, 0)
    nkvo = measure(model, tensors, gpus(16, 16), HOST_RAM, replace(params, kv_offload=False))
    assert [u.context for u in nkvo] == [0, 0, layout.kv_bytes]
    ngl0 = measure(model, tensors, gpus(16, 16), HOST_RAM, Params(n_ctx=4096, n_gpu_layers=0))
    assert [u.model for u in ngl0[:2]] == [0, 0] and ngl0[2].model == sum(
        host_alloc_size(t.type_name, t.shape) for t in tensors
    )


def test_a_cpu_only_host_has_the_cpu_compute_buffer(small: tuple[ModelParams, list[WeightTensor]]) -> None:
    model, tensors = small
    params = Params(n_ctx=4096)
    (host,) = measure(model, tensors, [], HOST_RAM, params)
    flags = flags_for(params)
    assert host.compute == compute_buffer(model, kv_layout(model, flags), flags)
    fit = make_measure(model, tensors, [], HOST_RAM)
    assert list(fit(params)) == [host]


# --- public CUDA logs ----------------------------------------------------------------------------


def test_weights_on_eight_gpus_match_a_public_log() -> None:
    """https://github.com/ggml-org/llama.cpp/issues/5619: mistral-7b-instruct-v0.2.Q5_K_M on 8 GPUs,
    -ngl 33: CPU 85.94, CUDA0 747.03, CUDA1 580.09, CUDA2 588.06, CUDA3 580.09, CUDA4 580.09,
    CUDA5 588.06 MiB (the log's later lines are cut off; eight equal GPUs split by free memory)."""
    md = mistral()
    usage = measure(
        model_params(md), computed(md, "Q5_K_M", tied_embeddings=False), gpus(*[24] * 8), HOST_RAM, Params()
    )
    shown = [f"{u.model / MiB:.2f}" for u in usage]
    assert shown[:6] == ["747.03", "580.09", "588.06", "580.09", "580.09", "588.06"]
    assert shown[-1] == "85.94"


# (model metadata, quant, -c, -b, -ub, CUDA0 compute MiB, CUDA_Host compute MiB, source)
CUDA_COMPUTE_LOGS = [
    # https://github.com/fedora-copr/logdetective/pull/106 (llama.cpp of January 2025, flash attention off):
    # its KV (128 KiB per cell, 32768 cells -> 4096 MiB) and rope base 1e6 are Mistral 7B v0.2's
    (mistral(), "Q4_K_M", 2048, 512, 512, 164.00, 12.01),
    (mistral(), "Q4_K_M", 32768, 512, 512, 2144.00, 72.01),
    # https://github.com/ggml-org/llama.cpp/issues/7450: Mistral 7B (vocab 32000), -c 32000 -b 1024, fa off
    (mistral(), "Q4_K_M", 32000, 1024, 512, 2094.50, 70.51),
]


@pytest.mark.parametrize(("md", "quant", "n_ctx", "n_batch", "n_ubatch", "gpu_mib", "host_mib"), CUDA_COMPUTE_LOGS)
def test_compute_buffers_of_a_full_offload_are_within_the_bound(
    md: dict[str, Any], quant: str, n_ctx: int, n_batch: int, n_ubatch: int, gpu_mib: float, host_mib: float
) -> None:
    model = model_params(md)
    params = Params(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, flash_attn=False)
    gpu, host = measure(model, computed(md, quant, tied_embeddings=False), gpus(24), HOST_RAM, params)
    assert within_bound(gpu.compute, gpu_mib), gpu.compute / MiB
    assert abs(host.compute / MiB - host_mib) <= 0.01  # the embeddings and the f32 KQ mask, exactly


# --- the CPU oracle ------------------------------------------------------------------------------


@pytest.mark.llama_server
def test_host_matches_llama_fit_params_with_overrides_and_ngl(
    llama_fit_params_binary: Path, tiny_models: dict[str, Path]
) -> None:
    """On a CPU-only build every byte is Host: -ngl and -ot change nothing, and kvlab agrees."""
    path = tiny_models["llama"]
    with path.open("rb") as f:
        head = read_gguf_head(f)
    model, tensors = model_params(head.metadata), from_gguf(head.tensors)
    problems = []
    for extra, params in [
        ("-ngl 2", Params(n_ctx=2048, n_gpu_layers=2)),
        ("-ot ffn_(up|down)=CPU", Params(n_ctx=2048, overrides=(("ffn_(up|down)", "CPU"),))),
    ]:
        args = [str(llama_fit_params_binary), "-m", str(path), "-v", "-c", "2048", "-np", "1", *extra.split(" ", 1)]
        args += FORCED_FLAGS
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        report = parse_fit_log(proc.stderr)
        (host,) = measure(model, tensors, [], HOST_RAM, params)
        if (whole_mib(host.model), whole_mib(host.context)) != (report.host.model, report.host.context):
            problems.append(f"{extra}: kvlab {host}, llama.cpp {report.host}")
        if not within_bound(host.compute, float(report.compute_mib["CPU"])):
            problems.append(f"{extra}: compute {host.compute / MiB:.2f} vs {report.compute_mib['CPU']}")
    assert problems == []
