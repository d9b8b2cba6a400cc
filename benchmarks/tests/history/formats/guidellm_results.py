"""GuideLLM's benchmarks.json, written here as GuideLLM writes it.

The reports below follow vllm-project/guidellm:

* before ``metadata.version`` — ``src/guidellm/benchmark/benchmark.py`` at
  47ce29248e510dd6852133a7e833efed30a96a16: GenerativeBenchmark with ``id_``, ``run_id``,
  ``args`` (``strategy`` with ``type_``/``streams``/``rate``), ``run_stats``, ``worker``
  (``backend_model``), ``metrics`` (StatusDistributionSummary per metric: successful /
  errored / incomplete / total, each with mean, median, std_dev, min, max, count, total_sum,
  percentiles), ``request_totals``, ``request_samples`` and ``requests`` whose entries carry
  ``start_time``/``end_time``/``request_latency``/``time_to_first_token_ms`` and, errored,
  ``error``;
* version 1 — ``src/guidellm/benchmark/schemas/generative/report.py`` at
  5a63252c6211e43016ad5d61e01795d9fee8dd1a (``metadata``, ``args``, ``benchmarks``),
  ``src/guidellm/benchmark/schemas/base.py`` at 14ffe9c6f1a2a3ab0f2bfccb306f916bde6ffde6
  (BenchmarkConfig: ``id_``, ``run_id``, ``run_index``, ``strategy``, ``sample_requests``,
  ``backend``…) and ``src/guidellm/schemas/request_stats.py`` at
  06cef2910dc1517f863ce09ff118af07d463d055 (``info.timings``, ``info.error``, computed
  ``request_start_time``, ``request_latency``, ``time_to_first_token_ms``, ``prompt_tokens``…);
* version 2 — ``src/guidellm/benchmark/schemas/report.py`` at
  55054f1c859f2eddc7bc3c589199b2af1683a7a8: the report's arguments under ``config``
  (``spec.backend``), the benchmarks as in version 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

START = 1772470696.5


def distribution(values: list[float]) -> dict[str, Any]:
    """A StatusDistributionSummary's DistributionSummary for these values."""
    ordered = sorted(values)
    if not ordered:
        zero = dict.fromkeys(("mean", "median", "mode", "variance", "std_dev", "min", "max", "total_sum"), 0.0)
        return {**zero, "count": 0, "percentiles": dict.fromkeys(("p50", "p90", "p95", "p99"), 0.0), "pdf": None}
    mean = sum(ordered) / len(ordered)
    return {
        "mean": mean,
        "median": ordered[len(ordered) // 2],
        "mode": ordered[0],
        "variance": 0.25,
        "std_dev": 0.5,
        "min": ordered[0],
        "max": ordered[-1],
        "count": len(ordered),
        "total_sum": sum(ordered),
        "percentiles": {
            "p001": ordered[0],
            "p50": ordered[len(ordered) // 2],
            "p90": ordered[-1],
            "p95": ordered[-1],
            "p99": ordered[-1],
            "p999": ordered[-1],
        },
        "pdf": [[value, 1.0] for value in ordered],  # a curve: not kept
    }


def status_summary(successful: list[float], errored: list[float] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "successful": distribution(successful),
        "errored": distribution(list(errored)),
        "incomplete": distribution([]),
        "total": distribution([*successful, *errored]),
    }


def metrics_v1(totals: dict[str, int]) -> dict[str, Any]:
    return {
        "request_totals": {**totals, "total": sum(totals.values())},
        "requests_per_second": status_summary([2.0]),
        "request_concurrency": status_summary([4.0]),
        "request_latency": status_summary([1.5, 2.5]),  # seconds
        "prompt_token_count": status_summary([100.0, 120.0]),
        "output_token_count": status_summary([50.0, 70.0]),
        "time_to_first_token_ms": status_summary([80.0, 120.0]),
        "time_per_output_token_ms": status_summary([20.0, 30.0]),
        "inter_token_latency_ms": status_summary([19.0, 29.0]),
        "output_tokens_per_second": status_summary([60.0]),
        "tokens_per_second": status_summary([160.0]),
        "text": {"tokens": {"input": status_summary([100.0])}},  # modality breakdown: no status at the top
    }


def request_v1(index: int, *, error: str | None = None, status: str = "completed") -> dict[str, Any]:
    start = START + index
    return {
        "type_": "generative_request_stats",
        "request_id": f"req-{index}",
        "response_id": f"cmpl-{index}",
        "request_args": json.dumps({"body": {"model": "Qwen/Qwen3-8B", "max_tokens": 128, "prompt": "x" * 5000}}),
        "output": "y" * 3000,
        "info": {
            "request_id": f"req-{index}",
            "status": status,
            "timings": {"request_start": start, "first_token_iteration": start + 0.1, "request_end": start + 2.0},
            "error": error,
        },
        "input_metrics": {"text_tokens": 100, "total_tokens": 100},
        "output_metrics": {"text_tokens": 60, "total_tokens": 60},
        "request_start_time": start,
        "request_end_time": start + 2.0,
        "request_latency": 2.0,
        "prompt_tokens": 100,
        "output_tokens": 60 if error is None else 7,
        "total_tokens": 160,
        "time_to_first_token_ms": 100.0,
        "time_per_output_token_ms": 33.0,
        "inter_token_latency_ms": 32.0,
        "tokens_per_second": 80.0,
        "output_tokens_per_second": 30.0,
    }


def benchmark_v1(
    strategy: dict[str, Any], *, successful: int = 2, errored: int = 0, incomplete: int = 0, listed: int | None = None
) -> dict[str, Any]:
    """One benchmark as GenerativeBenchmark.compile dumps it; ``listed`` samples the lists."""
    lists = {
        "successful": [request_v1(i) for i in range(successful)],
        "errored": [request_v1(100 + i, error="HTTPStatusError: 500 Internal Server Error") for i in range(errored)],
        "incomplete": [request_v1(200 + i, error=None, status="cancelled") for i in range(incomplete)],
    }
    if listed is not None:
        lists = {status: requests[:listed] for status, requests in lists.items()}
    totals = {"successful": successful, "errored": errored, "incomplete": incomplete}
    return {
        "type_": "generative_benchmark",
        "config": {
            "id_": f"bench-{strategy['type_']}-{strategy.get('streams', strategy.get('rate', 0))}",
            "run_id": "run-1",
            "run_index": 0,
            "strategy": strategy,
            "constraints": {"max_requests": {"type_": "max_number", "max_num": 4}},
            "sample_requests": listed,
            "profile": {"type_": strategy["type_"]},
            "requests": {"data": "['prompt_tokens=100,output_tokens=60']"},
            "backend": {"target": "http://localhost:8000", "model": "Qwen/Qwen3-8B"},
            "environment": {},
        },
        "scheduler_state": {"created_requests": sum(totals.values())},
        "scheduler_metrics": {"requests_made": {**totals, "total": sum(totals.values())}, "request_time_avg": 2.0},
        "metrics": metrics_v1(totals),
        "requests": {**lists, "total": None},
        "start_time": START,
        "end_time": START + 10.0,
        "duration": 10.0,
        "warmup_duration": 0.0,
        "cooldown_duration": 0.0,
    }


def report_v1(*benchmarks: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"version": 1, "guidellm_version": "0.5.0", "python_version": "3.12.3", "platform": "Linux"},
        "args": {"target": "http://localhost:8000", "profile": "concurrent", "model": "Qwen/Qwen3-8B"},
        "benchmarks": list(benchmarks),
    }


def report_v2(*benchmarks: dict[str, Any]) -> dict[str, Any]:
    for benchmark in benchmarks:
        del benchmark["config"]["backend"]["model"]  # only the scenario names it
    return {
        "metadata": {"version": 2, "guidellm_version": "0.6.0", "python_version": "3.12.3", "platform": "Linux"},
        "config": {
            "metadata": {"labels": {}},
            "spec": {"backend": {"kind": "openai_http", "target": "http://localhost:8000", "model": "Qwen/Qwen3-8B"}},
            "benchmarks": [None],
        },
        "benchmarks": list(benchmarks),
    }


def report_before_version() -> dict[str, Any]:
    """guidellm ≤ 0.3: no metadata; args/request_totals/worker at the benchmark's top level."""

    def request(index: int, error: str | None = None) -> dict[str, Any]:
        start = START + index
        stats: dict[str, Any] = {
            "type_": "generative_text_response" if error is None else "generative_text_error",
            "request_id": f"old-{index}",
            "request_type": "text_completions",
            "scheduler_info": {"requested": True},
            "prompt": "p" * 400,
            "output": "o" * 400,
            "prompt_tokens": 32,
            "output_tokens": 16,
            "start_time": start,
            "end_time": start + 1.0,
            "first_token_time": start + 0.05,
            "last_token_time": start + 1.0,
            "request_latency": 1.0,
            "time_to_first_token_ms": 50.0,
            "time_per_output_token_ms": 62.5,
            "inter_token_latency_ms": 63.3,
            "tokens_per_second": 48.0,
            "output_tokens_per_second": 16.0,
        }
        if error is not None:
            stats["error"] = error
        return stats

    metrics = metrics_v1({"successful": 1, "errored": 1, "incomplete": 0})
    del metrics["request_totals"]
    return {
        "benchmarks": [
            {
                "type_": "generative_benchmark",
                "id_": "old-bench",
                "run_id": "old-run",
                "args": {
                    "profile": {"type_": "synchronous"},
                    "strategy_index": 0,
                    "strategy": {"type_": "synchronous"},
                    "max_number": 2,
                    "max_duration": None,
                    "warmup_number": None,
                    "warmup_duration": None,
                    "cooldown_number": None,
                    "cooldown_duration": None,
                },
                "run_stats": {"start_time": START, "end_time": START + 5, "requests_made": {"total": 2}},
                "worker": {"type_": "generative_requests_worker", "backend_model": "meta-llama/Llama-3.1-8B"},
                "request_loader": {"type_": "generative_request_loader"},
                "extras": {},
                "metrics": metrics,
                "request_totals": {"successful": 1, "incomplete": 0, "errored": 1, "total": 2},
                "request_samples": None,
                "requests": {
                    "successful": [request(0)],
                    "incomplete": [],
                    "errored": [request(1, error="TimeoutError: request timed out")],
                },
                "start_time": START,
                "end_time": START + 5.0,
                "duration": 5.0,
            }
        ]
    }


def write(tmp_path: Path, report: dict[str, Any], name: str = "benchmarks.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return path
