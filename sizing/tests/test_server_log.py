# ruff: noqa: E501  (real log lines are long)
from sizing.server_log import mib, read_server_log

LOG = """\
0.00.012.775 I load_tensors:   CPU_Mapped model buffer size =     6.05 MiB
0.00.013.072 I llama_context: n_ctx                 = 2304
0.00.013.077 I llama_context: n_ctx_seq             = 768
0.00.013.079 I llama_context: kv_unified            = false
0.00.014.459 I llama_kv_cache: size =    2.25 MiB (   768 cells,   4 layers,  3/3 seqs), K (f16):    1.12 MiB, V (f16):    1.12 MiB
0.00.015.594 I sched_reserve:        CPU compute buffer size =     3.78 MiB
0.00.062.437 I srv    load_model: initializing, n_slots = 3, n_ctx_slot = 768, kv_unified = 'false'
"""


def test_the_memory_a_server_reports_is_read_from_its_log():
    reported = read_server_log(LOG)
    (kv,) = reported.kv
    assert (kv.cells, kv.layers, kv.n_seq_max, kv.n_stream, kv.k_mib, kv.v_mib) == (768, 4, 3, 3, "1.12", "1.12")
    assert (reported.kv_mib, reported.model_mib, reported.compute_mib) == (2.25, 6.05, 3.78)
    assert (reported.n_slots, reported.n_ctx_slot, reported.kv_unified) == (3, 768, False)
    assert reported.context == {"n_ctx": "2304", "n_ctx_seq": "768", "kv_unified": "false"}


def test_mib_rounds_like_the_server():
    assert mib(4 * 768 * 3 * 64 * 2) == "1.12" and mib(512 * 1024 * 1024) == "512.00"


def test_a_log_without_the_lines_reports_nothing():
    reported = read_server_log("llama-server: error: quantized V cache requires flash_attn\n")
    assert reported.kv == [] and reported.n_ctx_slot is None and reported.kv_mib == 0
