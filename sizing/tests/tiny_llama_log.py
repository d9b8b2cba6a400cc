# ruff: noqa: E501, W291  (real log lines are long; print_info ends one with a space)
"""The startup log of llama-server on the tiny llama model, as it printed it, and the bytes of that
model's weights."""

from __future__ import annotations

# What llama-server b11434 printed at -lv 4 for the tiny llama model (sizing.tiny_gguf) with -c 2048 -np 3
# (the lines kvlab reads; the server's default --log-prefix and --log-timestamps).
TINY_LLAMA = """\
0.00.003.651 I cmn  common_param: common_params_print_info: build 0 (unknown) with GNU 12.2.0 for Linux x86_64
0.00.003.658 I cmn  common_param: device_info:
0.00.003.667 I cmn  common_param:   - CPU     : AMD EPYC (24105 MiB, 24105 MiB free)
0.00.005.588 I srv    load_model: loading model '/tmp/tiny-llama.gguf'
0.00.005.655 I cmn  common_init_: fitting params to device memory ...
0.00.009.152 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |
0.00.009.189 I common_memory_breakdown_print: |   - Host               |                   12 =     6 +       2 +       3                |
0.00.009.430 I common_params_fit_impl: will leave 24093 >= 1024 MiB of system memory, no changes needed
0.00.009.796 I llama_model_loader: loaded meta data with 18 key-value pairs and 39 tensors from /tmp/tiny-llama.gguf (version GGUF V3 (latest))
0.00.009.842 I llama_model_loader: - kv   0:                       general.architecture str              = llama
0.00.009.860 I llama_model_loader: - kv   1:                               general.name str              = kvlab tiny llama
0.00.009.960 I llama_model_loader: - kv   4:                      tokenizer.ggml.tokens arr[str,275]     = ["<unk>", "<s>", "</s>", "<0x00>", "<...
0.00.010.205 I llama_model_loader: - kv  10:                       llama.context_length u32              = 8192
0.00.010.222 I llama_model_loader: - kv  11:     llama.attention.layer_norm_rms_epsilon f32              = 0.000001
0.00.010.238 I llama_model_loader: - kv  12:                     llama.embedding_length u32              = 256
0.00.010.327 I llama_model_loader: - kv  13:                          llama.block_count u32              = 4
0.00.010.357 I llama_model_loader: - kv  14:                  llama.feed_forward_length u32              = 256
0.00.010.375 I llama_model_loader: - kv  15:                 llama.attention.head_count u32              = 8
0.00.010.391 I llama_model_loader: - kv  16:              llama.attention.head_count_kv u32              = 2
0.00.010.409 I llama_model_loader: - kv  17:                 llama.rope.dimension_count u32              = 32
0.00.010.461 I print_info: file type   = all F32
0.00.010.479 I print_info: file size   = 6.05 MiB (32.00 BPW) 
0.00.011.010 I print_info: arch                  = llama
0.00.011.970 I print_info: n_vocab               = 275
0.00.013.171 I load_tensors:   CPU_Mapped model buffer size =     6.05 MiB
0.00.013.438 W llama_context: n_ctx is not divisible by n_seq_max - rounding down to 2304
0.00.013.438 I llama_context: n_seq_max             = 3
0.00.013.439 I llama_context: n_ctx                 = 2304
0.00.013.439 I llama_context: n_ctx_seq             = 768
0.00.013.440 I llama_context: n_batch               = 2048
0.00.013.440 I llama_context: n_ubatch              = 512
0.00.013.441 I llama_context: flash_attn            = auto
0.00.013.442 I llama_context: kv_unified            = false
0.00.013.454 I llama_context:        CPU  output buffer size =     0.00 MiB
0.00.013.515 I llama_kv_cache:        CPU KV buffer size =     2.25 MiB
0.00.015.917 I llama_kv_cache: size =    2.25 MiB (   768 cells,   4 layers,  3/3 seqs), K (f16):    1.12 MiB, V (f16):    1.12 MiB
0.00.016.920 I resolve_fused_ops: Flash Attention enabled
0.00.017.679 I sched_reserve:        CPU compute buffer size =     3.78 MiB
0.00.021.052 I srv    load_model: initializing, n_slots = 3, n_ctx_slot = 768, kv_unified = 'false'
0.00.021.146 I slot   load_model: id  0 | task -1 | new slot, n_ctx = 768
0.00.021.165 I slot   load_model: id  1 | task -1 | new slot, n_ctx = 768
0.00.021.181 I slot   load_model: id  2 | task -1 | new slot, n_ctx = 768
"""
TINY_WEIGHTS = 6_344_704  # bytes of the tiny llama's tensors: "6.05 MiB"
