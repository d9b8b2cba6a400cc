"""vLLM's serving benchmark results, written here as vLLM writes them.

The writers below follow vllm-project/vllm:

* ``vllm/benchmarks/serve.py`` at 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1 — main_async() builds
  ``result_json`` (date, endpoint_type, backend, label, model_id, tokenizer_id, num_prompts,
  --metadata pairs, request_rate "inf"|number, burstiness, max_concurrency), merges benchmark()'s
  ``result`` (duration, completed, failed, totals, throughputs, the per-request arrays, then
  process_one_metric's mean/median/std/pNN_<metric>_ms), drops the arrays unless
  --save-detailed, and writes ``json.dump`` — after a "\\n" when --append-result finds the file
  non-empty;
* ``benchmarks/benchmark_serving.py`` at 0049e29c41fd383bda519a3f250e3227713081ef — no
  ``failed``, the ``"request_goodput:"`` key, the arrays always kept (deleted before the merge);
* ``vllm/benchmarks/sweep/serve.py`` at 0031557f20f592111a8ea7d709730fad151bdae5 —
  ``<combination>/run=N.json`` (json.dump indent=4, plus run_number and the combination's
  parameters), ``summary.json`` (the list of those), ``warmup.json``, ``run=N.failure.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def serve_result(**overrides: Any) -> dict[str, Any]:
    """What `vllm bench serve --save-result` writes for 4 requests at --max-concurrency 2."""
    result: dict[str, Any] = {
        "date": "20260301-120010",
        "endpoint_type": "openai",
        "backend": "vllm",
        "label": None,
        "model_id": "Qwen/Qwen3-8B",
        "tokenizer_id": "Qwen/Qwen3-8B",
        "num_prompts": 4,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 2,
        "duration": 10.0,
        "completed": 3,
        "failed": 1,
        "total_input_tokens": 300,
        "total_output_tokens": 60,
        "request_throughput": 0.3,
        "request_goodput": None,
        "output_throughput": 6.0,
        "total_token_throughput": 36.0,
        "max_output_tokens_per_s": 9.0,
        "max_concurrent_requests": 2,
        "rtfx": 0.0,
        "mean_ttft_ms": 120.0,
        "median_ttft_ms": 110.0,
        "std_ttft_ms": 15.0,
        "p99_ttft_ms": 150.0,
        "mean_tpot_ms": 20.0,
        "median_tpot_ms": 19.0,
        "std_tpot_ms": 2.0,
        "p99_tpot_ms": 25.0,
        "mean_itl_ms": 20.5,
        "median_itl_ms": 19.5,
        "std_itl_ms": 3.0,
        "p99_itl_ms": 30.0,
        "mean_e2el_ms": 500.0,
        "median_e2el_ms": 480.0,
        "std_e2el_ms": 40.0,
        "p99_e2el_ms": 560.0,
    }
    result.update(overrides)
    return {key: value for key, value in result.items() if value is not ...}


def detailed(**overrides: Any) -> dict[str, Any]:
    """--save-detailed: the per-request arrays, seconds; request 3 failed (zeros, error text)."""
    arrays: dict[str, Any] = {
        "input_lens": [100, 100, 100, 100],
        "output_lens": [20, 20, 20, 0],
        "ttfts": [0.1, 0.12, 0.14, 0.0],
        "itls": [[0.02] * 19, [0.02] * 19, [0.021] * 19, []],
        "latencies": [0.5, 0.52, 0.54, 0.0],
        "start_times": [1000.0, 1000.01, 1000.5, 1000.51],
        "queue_times": [0.0, 0.0, 0.4, 0.4],
        "generated_texts": ["a", "b", "c", ""],
        "errors": ["", "", "", "Traceback ...\naiohttp.ClientConnectorError: Cannot connect to host"],
    }
    return serve_result(**{**arrays, **overrides})


def old_benchmark_serving(**overrides: Any) -> dict[str, Any]:
    """benchmarks/benchmark_serving.py: no 'failed', 'request_goodput:', arrays always written."""
    result = detailed(**overrides)
    for key in ("endpoint_type", "label", "failed", "request_goodput", "latencies", "start_times", "queue_times"):
        result.pop(key)
    for key in ("max_output_tokens_per_s", "max_concurrent_requests", "rtfx"):
        result.pop(key)
    result["request_goodput:"] = None
    return result


def write(path: Path, *objects: dict[str, Any], append: bool = False, indent: int | None = None) -> Path:
    """json.dump each object; --append-result puts a newline before each one after the first."""
    text = "\n".join(json.dumps(obj, indent=indent) for obj in objects) if append else json.dumps(objects[0])
    path.write_text(text, encoding="utf-8")
    return path
