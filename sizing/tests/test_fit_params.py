"""sizing/fit_params.py reads llama-fit-params' output: lines captured from the b11434 build."""

# ruff: noqa: E501 (the captured lines are kept whole)

from __future__ import annotations

import pytest

from sizing.fit_params import FitParamsOutputError, mib2, parse_fit_log, parse_fit_print, whole_mib

# llama-fit-params -m tiny-gemma3.gguf -c 4096 -np 1 -v (stderr, abridged), then the fitting attempt's table
GEMMA3_LOG = """\
0.00.003.993 I common_params_fit_impl: getting device memory data for initial parameters:
0.00.007.872 I llama_context: n_seq_max             = 1
0.00.007.872 I llama_context: n_ctx                 = 4096
0.00.007.873 I llama_context: n_ctx_seq             = 4096
0.00.007.875 I llama_context: kv_unified            = false
0.00.008.070 I llama_kv_cache: size =    2.00 MiB (  4096 cells,   1 layers,  1/1 seqs), K (f16):    1.00 MiB, V (f16):    1.00 MiB
0.00.008.121 I llama_kv_cache: size =    1.88 MiB (   768 cells,   5 layers,  1/1 seqs), K (f16):    0.94 MiB, V (f16):    0.94 MiB
0.00.008.943 I resolve_fused_ops: Flash Attention enabled
0.00.010.257 I sched_reserve:        CPU compute buffer size =     7.53 MiB
0.00.010.298 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |
0.00.010.299 I common_memory_breakdown_print: |   - Host               |                   16 =     4 +       3 +       7                |
0.00.010.301 I common_params_fit_impl: projected to use 16 MiB of host memory vs. 24105 MiB of total host memory
0.00.010.402 I llama_kv_cache: size =    1.00 MiB (  2048 cells,   1 layers,  1/1 seqs), K (f16):    0.50 MiB, V (f16):    0.50 MiB
0.00.010.500 I sched_reserve:        CPU compute buffer size =     5.01 MiB
0.00.010.599 I common_memory_breakdown_print: |   - Host               |                   13 =     4 +       2 +       5                |
"""
MAMBA_LOG = """\
0.00.005.864 I llama_memory_recurrent: size =    0.21 MiB (     3 cells,   2 layers,  3 seqs  0 rs_seq), R (f32):    0.02 MiB, S (f32):    0.19 MiB, P (f32):    0.00 MiB
0.00.007.167 I sched_reserve:        CPU compute buffer size =     3.87 MiB
0.00.007.203 I common_memory_breakdown_print: |   - Host               |                    5 =     1 +       0 +       3                |
"""


def test_it_reads_the_first_breakdown_and_every_cache_of_the_flags_as_given() -> None:
    report = parse_fit_log(GEMMA3_LOG)
    assert (report.host.model, report.host.context, report.host.compute) == (4, 3, 7)
    assert [(k.cells, k.layers, k.size_mib, k.k_mib, k.v_mib) for k in report.kv] == [
        (4096, 1, "2.00", "1.00", "1.00"),
        (768, 5, "1.88", "0.94", "0.94"),
    ]
    assert report.compute_mib == {"CPU": "7.53"}
    assert report.context["n_ctx_seq"] == "4096"
    assert report.flash_attn is True
    assert report.recurrent_mib is None


def test_it_reads_the_recurrent_state() -> None:
    report = parse_fit_log(MAMBA_LOG)
    assert report.recurrent_mib == "0.21"
    assert report.kv == []
    assert report.host.compute == 3


def test_it_reads_the_fit_print_table() -> None:
    assert parse_fit_print("Host 6 2 3 \n")["Host"].compute == 3
    devices = parse_fit_print("CUDA0 14000 2560 300 \nHost 300 0 20 \n")
    assert (devices["CUDA0"].model, devices["CUDA0"].context) == (14000, 2560)


@pytest.mark.parametrize(
    "text",
    [
        "",  # nothing at all
        GEMMA3_LOG.replace("common_memory_breakdown_print", "other"),  # run without -v
        GEMMA3_LOG.replace("sched_reserve:", "other:"),
        GEMMA3_LOG.replace("16 =     4", "99 =     4"),  # a table that does not add up
    ],
)
def test_it_refuses_output_that_is_not_llama_fit_params(text: str) -> None:
    with pytest.raises(FitParamsOutputError):
        parse_fit_log(text)
    with pytest.raises(FitParamsOutputError):
        parse_fit_print(text)


def test_figures_are_formatted_the_way_llama_cpp_prints_them() -> None:
    assert whole_mib(3 * 1024 * 1024 - 1) == 2  # size_t division: rounded down
    assert mib2(7_896_000) == "7.53"
