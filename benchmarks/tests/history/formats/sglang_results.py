"""SGLang's bench_serving results, written here as SGLang writes them.

The writer below follows sgl-project/sglang's benchmark(): ``python/sglang/benchmark/serving.py``
at 00f9ec472ffef82714c0407b842ccb5bd254d130 (tag, server_info, p90/p95 statistics, total_throughput,
max_output_tokens_per_s) and ``python/sglang/bench_serving.py`` at
0033168f0f58b2bc05aa0273bd475d9c01bafb1c (the older set: no tag or server_info). Both append
``json.dumps(result) + "\\n"`` to the --output-file — so an unpaced ``request_rate`` is a bare
``Infinity`` and a statistic over no successful request a bare ``NaN`` — with the per-request
``result_details`` (input_lens, output_lens, ttfts, itls, generated_texts, errors) merged in
under --output-details. ``concurrency`` is Σ latencies / duration: measured, not configured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def bench_result(**overrides: Any) -> dict[str, Any]:
    """One line of `python -m sglang.bench_serving --output-file out.jsonl` (serving.py at 00f9ec4)."""
    result: dict[str, Any] = {
        "tag": None,
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": 8.0,
        "max_concurrency": 16,
        "sharegpt_output_len": None,
        "random_input_len": 1024,
        "random_output_len": 128,
        "random_range_ratio": 0.0,
        "server_info": {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "context_length": 8192, "version": "0.5.4"},
        "duration": 20.0,
        "completed": 3,
        "total_input_tokens": 3072,
        "total_input_text_tokens": 3072,
        "total_input_vision_tokens": 0,
        "total_output_tokens": 384,
        "total_output_tokens_retokenized": 380,
        "request_throughput": 0.15,
        "input_throughput": 153.6,
        "output_throughput": 19.2,
        "total_throughput": 172.8,
        "mean_e2e_latency_ms": 2000.0,
        "median_e2e_latency_ms": 1900.0,
        "std_e2e_latency_ms": 100.0,
        "p90_e2e_latency_ms": 2100.0,
        "p95_e2e_latency_ms": 2150.0,
        "p99_e2e_latency_ms": 2190.0,
        "mean_ttft_ms": 80.0,
        "median_ttft_ms": 75.0,
        "std_ttft_ms": 5.0,
        "p90_ttft_ms": 85.0,
        "p95_ttft_ms": 88.0,
        "p99_ttft_ms": 90.0,
        "mean_tpot_ms": 15.0,
        "median_tpot_ms": 15.0,
        "std_tpot_ms": 1.0,
        "p90_tpot_ms": 16.0,
        "p95_tpot_ms": 16.5,
        "p99_tpot_ms": 17.0,
        "mean_itl_ms": 15.1,
        "median_itl_ms": 14.9,
        "std_itl_ms": 2.0,
        "p90_itl_ms": 17.0,
        "p95_itl_ms": 18.0,
        "p99_itl_ms": 25.0,
        "concurrency": 0.3,
        "accept_length": None,
        "max_output_tokens_per_s": 40.0,
        "max_concurrent_requests": 3,
    }
    result.update(overrides)
    return {key: value for key, value in result.items() if value is not ...}


def older_result(**overrides: Any) -> dict[str, Any]:
    """bench_serving.py at 0033168: no tag, no server_info — no model in the line at all."""
    return bench_result(
        tag=...,
        server_info=...,
        total_input_text_tokens=...,
        total_input_vision_tokens=...,
        total_throughput=...,
        max_output_tokens_per_s=...,
        max_concurrent_requests=...,
        **overrides,
    )


def with_details(**overrides: Any) -> dict[str, Any]:
    """--output-details: 4 requests, the last failed (SGLang records 0 and "" for it), seconds."""
    details: dict[str, Any] = {
        "input_lens": [1024, 1024, 1024, 1024],
        "output_lens": [128, 128, 128, 0],
        "ttfts": [0.08, 0.075, 0.085, 0.0],
        "itls": [[0.015] * 127, [0.015] * 127, [0.016] * 127, []],
        "generated_texts": ["x", "y", "z", ""],
        "errors": ["", "", "", 'Bad Request: {"error": "context length exceeded"}'],
    }
    return bench_result(**{**details, **overrides})


def write(path: Path, *lines: dict[str, Any]) -> Path:
    """As benchmark() appends: json.dumps (NaN and Infinity bare) and a newline per run."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path
