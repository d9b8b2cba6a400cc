"""kvlab's memory plan against llama.cpp's own estimate, `llama-fit-params` (the second oracle).

llama-fit-params loads the model with no_alloc (no weight read, no buffer allocated), builds
the context and reserves the worst-case graph exactly as llama-server does, and reports what
it would need (sizing/fit_params.py says what it prints and at which granularity). Compared,
at the finest granularity it gives:
* weights: whole MiB, rounded down (the model column; the `load_tensors` line says 0.00 under no_alloc);
* KV: every `llama_kv_cache: size = …` line to 0.01 MiB (cells, layers, streams, K and V), the
  recurrent state line to 0.01 MiB, and the context column in whole MiB;
* the CPU compute buffer: within memory.COMPUTE_BOUND_* of `sched_reserve`'s 0.01 MiB figure,
  and equal to it where the tests below say so.
Run: pytest sizing/tests/placement/test_oracle_fit_params.py -m llama_server
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sizing.cmdline import parse_command
from sizing.fit_params import FitParamsReport, mib2, parse_fit_log, parse_fit_print, whole_mib
from sizing.gguf import read_gguf_head
from sizing.hparams import ModelParams, model_params
from sizing.kv import KVLayout, ServerFlags, kv_layout
from sizing.memory import COMPUTE_BOUND_MIB, COMPUTE_BOUND_SHARE, MiB, compute_buffer
from sizing.placement import breakdown
from sizing.placement.server import params_of
from sizing.placement.tensors import WeightTensor, from_gguf
from sizing.placement.types import Host
from sizing.server_log import mib
from sizing.tests.support import FORCED_FLAGS, REPACK

from .sparse_llamas import SHAPES, write_sparse_llama

pytestmark = pytest.mark.llama_server

# Every comparison runs twice: as llama.cpp chooses on this machine's CPU (its extra buffer types:
# AMX, CPU_REPACK) and with -nr (every weight in plain CPU memory); kvlab predicts each for the CPU
# the build reports (the `llama_cpu` fixture: its system_info line).

# llama-fit-params takes llama-server's memory flags except the server's own: no -kvu/--no-kv-unified
# (its sequences are never unified) and no automatic 4 slots (without -np it sizes 1 sequence). So
# every set names -np, and kvlab sizes it as llama-server with that -np (per-slot streams).
FLAG_SETS = [
    "-c 2048 -np 3",
    "-c 1024 -np 4",
    "-c 4096 -np 2 -fa on",
    "-c 4096 -np 2 -fa off",
    "-c 2048 -np 1 -ctk q8_0 -ctv q8_0 -fa on",
    "-c 3000 -np 3 -fa off",  # n_ctx padded to 3072, 1024 cells per slot
    "-c 4096 -np 1 -ub 128 -b 256",
    "-c 8192 -np 4 -ub 64 -fa off",
    "-c 4096 -np 1 --swa-full",
    "-c 512 -np 1 -ub 1024 -b 1024",  # the micro-batch is cut to the context
    "-c 256 -np 3",  # 256 cells per slot, fewer tokens than -ub in the reserved batch
]


def run_fit_params(binary: Path, model: Path, flags: str) -> subprocess.CompletedProcess[str]:
    args = [str(binary), "-m", str(model), "-v", *flags.split(), *FORCED_FLAGS]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def flags_of(command: str) -> ServerFlags:
    parsed = parse_command(f"llama-server -m MODEL.gguf {command}")
    assert not parsed.errors and not parsed.ignored, parsed
    return parsed.flags


def read_model(path: Path) -> tuple[ModelParams, list[WeightTensor]]:
    with path.open("rb") as f:
        head = read_gguf_head(f)
    return model_params(head.metadata), from_gguf(head.tensors)


def weight_rows(model: ModelParams, tensors: list[WeightTensor], flags: ServerFlags, cpu: Any) -> dict[str, int]:
    """kvlab's model column of each breakdown row llama-fit-params prints on the CPU build: Host, then
    the CPU's extra buffer types (AMX, CPU_REPACK) that hold weights, in whole MiB."""
    params = params_of(flags, kv_layout(model, flags), 0)
    measured = breakdown.measure(model, tensors, [], Host(0, 0, cpu=cpu), params)
    return {"Host": whole_mib(measured[-1].model), **{k: whole_mib(v) for k, v in measured.extra.items()}}


def compute_error_mib(kvlab_bytes: int, reported: str) -> float:
    return abs(kvlab_bytes / MiB - float(reported))


def within_bound(kvlab_bytes: int, reported: str) -> bool:
    return compute_error_mib(kvlab_bytes, reported) <= COMPUTE_BOUND_MIB + COMPUTE_BOUND_SHARE * float(reported)


def mismatches(
    model: ModelParams,
    tensors: list[WeightTensor],
    layout: KVLayout,
    flags: ServerFlags,
    r: FitParamsReport,
    cpu: Any,
) -> list[str]:
    """Every figure where kvlab and llama-fit-params disagree, in words."""
    found = []
    predicted_rows = weight_rows(model, tensors, flags, cpu)
    reported_rows = {name: row.model for name, row in r.devices.items()}
    if predicted_rows != reported_rows:
        found.append(f"weights per buffer type (MiB): kvlab {predicted_rows}, llama.cpp {reported_rows} on {cpu.label}")
    predicted = sorted(
        (c.cells, c.layers, c.streams, mib(c.bytes), mib(c.k_bytes), mib(c.v_bytes)) for c in layout.caches if c.layers
    )
    reported = sorted((k.cells, k.layers, k.n_stream, k.size_mib, k.k_mib, k.v_mib) for k in r.kv)
    if predicted != reported:
        found.append(f"KV caches (cells, layers, streams, MiB, K, V): kvlab {predicted}, llama.cpp {reported}")
    recurrent = mib(layout.recurrent.bytes) if layout.recurrent else None
    if recurrent != r.recurrent_mib:
        found.append(f"recurrent state: kvlab {recurrent} MiB, llama.cpp {r.recurrent_mib} MiB")
    if whole_mib(layout.kv_bytes) != r.host.context:
        found.append(f"context {layout.kv_bytes} B = {whole_mib(layout.kv_bytes)} MiB, llama.cpp {r.host.context} MiB")
    computed = compute_buffer(model, layout, flags)
    if not within_bound(computed, r.compute_mib["CPU"]):
        found.append(
            f"CPU compute buffer: kvlab {mib2(computed)} MiB, llama.cpp {r.compute_mib['CPU']} MiB, "
            f"beyond the bound of {COMPUTE_BOUND_MIB} MiB + {COMPUTE_BOUND_SHARE:.0%}"
        )
    return found


@pytest.mark.parametrize("repack", REPACK)
@pytest.mark.parametrize("flag_set", FLAG_SETS)
def test_every_tiny_family_matches_llama_fit_params(
    llama_fit_params_binary: Path, tiny_models: dict[str, Path], llama_cpu: Any, flag_set: str, repack: str
) -> None:
    """Weights, every KV cache, the recurrent state and the CPU compute buffer, for each tiny model."""
    flags = flag_set + REPACK[repack]
    server_flags = flags_of(flags)
    problems = []
    for family, path in tiny_models.items():
        model, tensors = read_model(path)
        layout = kv_layout(model, server_flags)
        proc = run_fit_params(llama_fit_params_binary, path, flags)
        if layout.errors:
            if proc.returncode == 0:
                problems.append(f"{family}: kvlab predicts a refusal ({layout.errors}), llama-fit-params ran")
            continue
        if proc.returncode != 0:
            problems.append(f"{family}: llama-fit-params failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
            continue
        report = parse_fit_log(proc.stderr)
        problems += [
            f"{family} {flags}: {m}" for m in mismatches(model, tensors, layout, server_flags, report, llama_cpu)
        ]
    assert tiny_models and not problems, "\n".join(problems)


def test_fit_print_agrees_with_its_own_log(llama_fit_params_binary: Path, tiny_models: dict[str, Path]) -> None:
    """`--fit-print on` prints the same whole-MiB figures as the -v log's table (the parser reads both)."""
    path = tiny_models["llama"]
    printed = subprocess.run(
        [str(llama_fit_params_binary), "-m", str(path), "-c", "2048", "-np", "3", "--fit-print", "on", *FORCED_FLAGS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    logged = parse_fit_log(run_fit_params(llama_fit_params_binary, path, "-c 2048 -np 3").stderr)
    assert parse_fit_print(printed.stdout)["Host"] == logged.host


# Where the compute buffer is exact to llama.cpp's 0.01 MiB: the standard GQA graph without flash
# attention (the f32 attention scores dominate) and the tiny llama with it.
EXACT_TINY = ["-c 1024 -np 1 -fa off", "-c 4096 -np 4 -fa off", "-c 4096 -np 3 -fa off", "-c 1024 -np 3 -fa off"]


@pytest.mark.parametrize("flags", EXACT_TINY)
def test_the_tiny_llama_compute_buffer_is_exact(
    llama_fit_params_binary: Path, tiny_models: dict[str, Path], flags: str
) -> None:
    model, _ = read_model(tiny_models["llama"])
    server_flags = flags_of(flags)
    report = parse_fit_log(run_fit_params(llama_fit_params_binary, tiny_models["llama"], flags).stderr)
    assert (
        compute_error_mib(
            compute_buffer(model, kv_layout(model, server_flags), server_flags), report.compute_mib["CPU"]
        )
        <= 0.011
    )


# Real shapes (SHAPES), weights absent: a GGUF head whose data region is a sparse hole loads in llama-fit-params.
REAL_FLAGS = [
    "-c 4096 -np 1 -fa on",
    "-c 4096 -np 1 -fa off",
    "-c 16384 -np 1 -fa off",
    "-c 16384 -np 1 -fa on -ub 1024 -b 2048",
    "-c 512 -np 1 -fa off",
    "-c 8192 -np 3 -ub 256",
]
EXACT_REAL = {
    ("llama-3.1-8b", "-c 4096 -np 1 -fa on"),
    ("llama-3.1-8b", "-c 4096 -np 1 -fa off"),
    ("llama-2-70b", "-c 4096 -np 1 -fa on"),
    ("llama-2-70b", "-c 8192 -np 3 -ub 256"),
}


@pytest.fixture(scope="module")
def sparse_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("sparse-gguf")
    return {name: write_sparse_llama(directory / f"{name}.gguf", **shape) for name, shape in SHAPES.items()}


@pytest.mark.parametrize("repack", REPACK)
@pytest.mark.parametrize("flag_set", REAL_FLAGS)
@pytest.mark.parametrize("shape", SHAPES)
def test_real_shapes_match_llama_fit_params(
    llama_fit_params_binary: Path,
    sparse_models: dict[str, Path],
    llama_cpu: Any,
    shape: str,
    flag_set: str,
    repack: str,
) -> None:
    path = sparse_models[shape]
    model, tensors = read_model(path)
    flags = flag_set + REPACK[repack]
    server_flags = flags_of(flags)
    layout = kv_layout(model, server_flags)
    proc = run_fit_params(llama_fit_params_binary, path, flags)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = parse_fit_log(proc.stderr)
    assert mismatches(model, tensors, layout, server_flags, report, llama_cpu) == []
    if (shape, flag_set) in EXACT_REAL:
        assert compute_error_mib(compute_buffer(model, layout, server_flags), report.compute_mib["CPU"]) <= 0.011


# Mixtures of experts: the FFN peak is the routed experts' rows (n_expert_used × expert_feed_forward_length).
MOE_SPECS = ["qwen2moe", "qwen3moe", "granitemoe", "gpt-oss", "llama4"]


@pytest.mark.parametrize("repack", REPACK)
@pytest.mark.parametrize("name", MOE_SPECS)
def test_mixtures_of_experts_match_llama_fit_params(
    llama_fit_params_binary: Path, spec_models: Callable[[str], Path], llama_cpu: Any, name: str, repack: str
) -> None:
    path = spec_models(name)
    model, tensors = read_model(path)
    problems = []
    for flag_set in FLAG_SETS:
        flags = flag_set + REPACK[repack]
        server_flags = flags_of(flags)
        layout = kv_layout(model, server_flags)
        proc = run_fit_params(llama_fit_params_binary, path, flags)
        assert proc.returncode == 0, proc.stderr[-2000:]
        problems += [
            f"{flags}: {m}"
            for m in mismatches(model, tensors, layout, server_flags, parse_fit_log(proc.stderr), llama_cpu)
        ]
    assert problems == []


def test_the_bound_fails_a_wrong_figure() -> None:
    """The comparison can fail: a figure 2 MiB + 20 % off is outside the bound."""
    assert within_bound(int(10.5 * MiB), "10.00")
    assert not within_bound(int(14.1 * MiB), "10.00")


# Quantized weights, where the CPU's extra types differ: on x86 with AVX2, q4_0 matmuls and experts go
# to CPU_REPACK (with AMX the matmuls to AMX first), q8_0 ones to AMX or nowhere; on ARM both repack.
QUANTIZED = [("dense", "q4_0"), ("moe", "q4_0"), ("dense", "q8_0"), ("moe", "q8_0")]


@pytest.fixture(scope="module")
def quantized_models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    from sizing.sparse_gguf import write_sparse
    from sizing.tests.fit_cases import MODELS

    directory = tmp_path_factory.mktemp("quantized")
    return {
        (name, t): write_sparse(directory / f"{name}-{t}.gguf", MODELS[name][0], weight_type=t) for name, t in QUANTIZED
    }


@pytest.mark.parametrize("repack", REPACK)
@pytest.mark.parametrize(("name", "weight_type"), QUANTIZED)
def test_quantized_weights_go_to_the_buffer_types_llama_cpp_chooses(
    llama_fit_params_binary: Path,
    quantized_models: dict[tuple[str, str], Path],
    llama_cpu: Any,
    name: str,
    weight_type: str,
    repack: str,
) -> None:
    path = quantized_models[(name, weight_type)]
    model, tensors = read_model(path)
    flags = "-c 4096 -np 1" + REPACK[repack]
    proc = run_fit_params(llama_fit_params_binary, path, flags)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = parse_fit_log(proc.stderr)
    assert mismatches(model, tensors, kv_layout(model, flags_of(flags)), flags_of(flags), report, llama_cpu) == []
    # the rows in the order llama.cpp prints them
    assert list(weight_rows(model, tensors, flags_of(flags), llama_cpu)) == list(report.devices)
