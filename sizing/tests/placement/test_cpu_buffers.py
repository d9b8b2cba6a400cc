"""The CPU's extra buffer types (sizing.placement.cpu): which weights kept in RAM each takes, and how
the plan reports them (llama.cpp b11434's ggml-cpu: amx/amx.cpp, repack.cpp; llama-model.cpp)."""

from __future__ import annotations

import pytest

from sizing.cmdline import parse_command, to_command
from sizing.hparams import model_params
from sizing.placement import breakdown
from sizing.placement.cpu import (
    AMX,
    REPACK,
    CpuSpecError,
    amx_alloc_size,
    extra_buffer_type,
    from_cpuinfo,
    from_system_info,
    parse_cpu,
)
from sizing.placement.server import plan_server
from sizing.placement.tensors import WeightTensor
from sizing.placement.types import Device, Host, MiB, Params
from sizing.tests.fit_cases import DENSE

# The line this project's llama-server printed on a Xeon with AMX (common_params_print_info).
AMX_SYSTEM_INFO = (
    "system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | "
    "AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | "
    "AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
"""

AMX_CPU = parse_cpu("avx512+amx")
AVX2_CPU = parse_cpu("avx2")
ARM_CPU = parse_cpu("arm")


def test_llama_cpps_system_info_line_is_read_as_it_reports_the_features() -> None:
    cpu = from_system_info(AMX_SYSTEM_INFO)
    assert cpu.amx and cpu.repack and cpu.has("AVX2", "AVX512", "AVX512_VNNI", "AMX_INT8")
    assert "n_threads" not in cpu.features and "REPACK" not in cpu.features
    without = from_system_info(AMX_SYSTEM_INFO.replace("REPACK = 1 | ", ""))
    assert not without.repack


def test_presets_and_feature_names_are_read_and_anything_else_refused() -> None:
    assert AMX_CPU.amx and not AVX2_CPU.amx and AVX2_CPU.has("AVX2") and not AVX2_CPU.has("AVX512")
    assert parse_cpu("AVX2+AVX512").features == parse_cpu("avx512").features
    assert parse_cpu("arm+i8mm").has("NEON", "DOTPROD", "MATMUL_INT8")
    assert parse_cpu("arm+i8mm+sve256").sve_bits == 256
    assert parse_cpu("none").features == frozenset()
    for bad in ("pentium", "", "avx2\x00", "x" * 5000):
        with pytest.raises(CpuSpecError):
            parse_cpu(bad)


def test_an_arm_cpuinfo_reads_as_neon_with_dotprod() -> None:
    cpu = from_cpuinfo(ARM_CPUINFO)
    assert cpu.has("NEON", "DOTPROD", "FP16_VA") and not cpu.has("MATMUL_INT8") and not cpu.amx


def test_amx_takes_matmul_weights_of_its_types_and_sizes_them_repacked() -> None:
    assert extra_buffer_type("blk.0.attn_q.weight", "f16", (4096, 4096), AMX_CPU) == AMX
    assert extra_buffer_type("blk.0.attn_q.weight", "q8_0", (4096, 1024), AMX_CPU) == AMX
    # GET_ROWS, norms and biases stay in plain CPU memory; so does a row count not a multiple of 32
    assert extra_buffer_type("token_embd.weight", "f16", (4096, 32000), AMX_CPU) is None
    assert extra_buffer_type("blk.0.attn_norm.weight", "f32", (4096,), AMX_CPU) is None
    assert extra_buffer_type("blk.0.attn_q.bias", "f16", (4096, 32), AMX_CPU) is None
    assert extra_buffer_type("blk.0.attn_q.weight", "f16", (4096, 4100), AMX_CPU) is None
    # q8_0 adds an int32 compensation per block: 38 bytes per 32 weights, not 34
    assert amx_alloc_size("q8_0", (4096, 1024)) == 1024 * (4096 // 32) * 38
    assert amx_alloc_size("f16", (4096, 1024)) == 4096 * 1024 * 2


def test_repack_takes_what_the_cpu_has_kernels_for() -> None:
    # AVX2: q4_0 / q4_K matmuls and experts, not q8_0 (ARM only), nor an odd row count
    assert extra_buffer_type("blk.0.ffn_up.weight", "q4_0", (4096, 14336), AVX2_CPU) == REPACK
    assert extra_buffer_type("blk.0.ffn_up_exps.weight", "q4_K", (2048, 768, 32), AVX2_CPU) == REPACK
    assert extra_buffer_type("blk.0.ffn_up.weight", "q8_0", (4096, 14336), AVX2_CPU) is None
    assert extra_buffer_type("blk.0.ffn_up.weight", "q4_0", (4096, 14337), AVX2_CPU) is None
    assert extra_buffer_type("blk.0.ffn_up_exps.weight", "q8_0", (2048, 768, 32), ARM_CPU) == REPACK
    # AMX comes first for a matmul; experts (MUL_MAT_ID) fall through to CPU_REPACK
    assert extra_buffer_type("blk.0.ffn_up.weight", "q4_0", (4096, 14336), AMX_CPU) == AMX
    assert extra_buffer_type("blk.0.ffn_up_exps.weight", "q4_0", (2048, 768, 32), AMX_CPU) == REPACK
    assert extra_buffer_type("blk.0.ffn_up.weight", "q4_0", (4096, 14336), parse_cpu("avx2+norepack")) is None
    assert extra_buffer_type("blk.0.ffn_up.weight", "q4_0", (4096, 14336), None) is None


MODEL = model_params(DENSE)


def dense(weight_type: str = "f16", *, tied: bool = False) -> list[WeightTensor]:
    n_embd, n_ff, n_vocab, kv = 4096, 11008, 32000, 1024
    tensors = [WeightTensor("token_embd.weight", weight_type, (n_embd, n_vocab))]
    if not tied:
        tensors.append(WeightTensor("output.weight", weight_type, (n_embd, n_vocab)))
    tensors.append(WeightTensor("output_norm.weight", "f32", (n_embd,)))
    for i in range(24):
        for name, shape in [
            ("attn_norm", (n_embd,)),
            ("attn_q", (n_embd, n_embd)),
            ("attn_k", (n_embd, kv)),
            ("attn_v", (n_embd, kv)),
            ("attn_output", (n_embd, n_embd)),
            ("ffn_norm", (n_embd,)),
            ("ffn_gate", (n_embd, n_ff)),
            ("ffn_up", (n_embd, n_ff)),
            ("ffn_down", (n_ff, n_embd)),
        ]:
            tensors.append(WeightTensor(f"blk.{i}.{name}.weight", "f32" if len(shape) == 1 else weight_type, shape))
    return tensors


PARAMS = Params(n_ctx=4096, flash_attn=False)
HOST = Host(64 * 1024 * MiB, 64 * 1024 * MiB, cpu=AMX_CPU)
GPU = Device("CUDA0", "a GPU", 80 * 1024 * MiB)


def test_on_the_cpu_alone_amx_takes_the_matmuls_and_the_fit_does_not_count_them() -> None:
    measured = breakdown.measure(MODEL, dense(), [], HOST, PARAMS)
    total = sum(t.nbytes for t in dense())
    assert measured.extra[AMX] + measured[-1].model == total
    assert measured[-1].model == 2 * 4096 * 32000 + 4096 * 4 * 49  # token_embd and the norms
    assert breakdown.measure(MODEL, dense(), [], HOST, PARAMS.__class__(n_ctx=4096, use_extra_bufts=False)).extra == {}


def test_a_tied_embedding_is_held_twice_once_per_buffer_type() -> None:
    measured = breakdown.measure(MODEL, dense(tied=True), [], HOST, PARAMS)
    embd = 2 * 4096 * 32000
    # the input copy (GET_ROWS) in plain CPU memory, the output copy (MUL_MAT) in AMX
    assert measured[-1].model == embd + 4096 * 4 * 49
    assert measured.extra[AMX] == embd + 24 * 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 11008)


def test_a_gpus_pinned_host_buffer_comes_first_unless_no_host() -> None:
    params = Params(n_ctx=4096, n_gpu_layers=10, flash_attn=False)
    assert breakdown.measure(MODEL, dense(), [GPU], HOST, params).extra == {}
    no_host = breakdown.measure(MODEL, dense(), [GPU], HOST, Params(n_ctx=4096, n_gpu_layers=10, no_host=True))
    assert no_host.extra[AMX] > 0


def test_the_plan_says_what_the_host_really_needs_and_that_the_fit_leaves_it_out() -> None:
    flags = parse_command("llama-server -c 4096 -np 1 -fa off").flags
    plan = plan_server(MODEL, flags, devices=[], host=HOST, tensors=dense())
    assert plan.host_memory is not None
    extra = plan.host_memory.extra[AMX]
    assert plan.host_memory.needs == plan.rows[-1].usage.total + extra
    assert any("--fit does not count" in n and f"{extra // MiB:,} MiB" in n for n in plan.host_notes)
    assert any("AMX" in line for _, line in plan.fit.log if "breakdown" in line)


def test_an_unknown_cpu_is_said_to_matter_when_it_does() -> None:
    flags = parse_command("llama-server -c 4096 -np 1 -fa off").flags
    host = Host(64 * 1024 * MiB, 64 * 1024 * MiB)
    plan = plan_server(MODEL, flags, devices=[], host=host, tensors=dense())
    assert plan.host_memory is not None and plan.host_memory.extra == {}
    assert any("depends on the host's CPU" in n and "AMX" in n for n in plan.host_notes)
    # with a GPU's pinned host buffer first, the CPU does not matter: nothing said
    gpu_plan = plan_server(MODEL, flags, devices=[GPU], host=host, tensors=dense())
    assert not any("depends on the host's CPU" in n for n in gpu_plan.host_notes)


def test_the_flags_that_move_weights_in_ram_are_read_and_written_back() -> None:
    parsed = parse_command("llama-server -nr --no-host -lm none")
    assert parsed.errors == [] and parsed.ignored == []
    flags = parsed.flags
    assert (flags.repack, flags.no_host, flags.load_mode) == (False, True, "none")
    assert to_command(flags)[-4:] == ["-nr", "--no-host", "-lm", "none"]
    assert "--repack" in parse_command("llama-server -nr --repack").given
    assert parse_command("llama-server --repack -nr").flags.repack is False
    assert parse_command("llama-server -lm bogus").errors


def test_older_builds_mmap_flags_are_refused_with_what_b11434_takes_instead() -> None:
    note = parse_command("llama-server --no-mmap").notes[0]
    assert note.refused and "error: invalid argument: --no-mmap" in note.says and "-lm none" in note.says
    assert "-lm mlock" in parse_command("llama-server --mlock").notes[0].says


@pytest.mark.parametrize("spec", ["avx512+amx", "avx2", "arm", "arm+i8mm", "none"])
@pytest.mark.parametrize(("weight_type", "tied"), [("f16", False), ("q4_0", True), ("q8_0", False), ("q4_K", True)])
def test_what_another_cpu_would_take_is_what_placing_for_it_gives(spec: str, weight_type: str, tied: bool) -> None:
    """The 'depends on the CPU' note re-tries the plain weights of one placement instead of placing again:
    the same bytes as a placement made for that CPU."""
    tensors = dense(weight_type, tied=tied)
    plain = breakdown.host_placement(MODEL, tensors, [], Host(0, 0), PARAMS)
    cpu = parse_cpu(spec)
    placed = breakdown.host_placement(MODEL, tensors, [], Host(0, 0, cpu=cpu), PARAMS)
    assert breakdown.extra_on(plain, tensors, cpu) == placed.extra_bytes()


def test_a_long_cpu_description_is_read_whole_but_named_short() -> None:
    spec = "+".join(["avx2"] * 800)
    cpu = parse_cpu(spec)
    assert cpu.features == parse_cpu("avx2").features
    assert len(cpu.source) <= len("--cpu ") + 78 and cpu.source.endswith("…")
