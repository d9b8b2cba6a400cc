"""Where llama-server b11434 puts each byte on the user's devices, and what `--fit` changes. Pure.

One module per concern:

* `types`     — the shared vocabulary: devices, the parameters the fit reads and writes, a measurement.
* `tensors`   — the model's weight tensors (from a GGUF or computed from its shapes), per layer.
* `overrides` — `-ot`, `--cpu-moe`, `--n-cpu-moe`: which tensor goes to which buffer type.
* `breakdown` — the measurement: per device and host, model + context + compute bytes for one set of
  parameters, as `llama_get_memory_breakdown` reports it (common/fit.cpp buckets it).
* `fit`       — `common_fit_params` (common/fit.cpp) step by step over that measurement.
* `speed`     — the decode tok/s to expect: bytes moved per token over where each part lives.
* `overhead`  — the memory a GPU shows in use that llama.cpp does not count (CUDA context, …).
"""
