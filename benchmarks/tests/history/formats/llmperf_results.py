"""llmperf results, written here as ray-project/llmperf's token_benchmark_ray.py writes them.

The writer below follows llmperf's source: each request's metrics as
src/llmperf/ray_clients/openai_chat_completions_client.py (0451d33b) returns them and
token_benchmark_ray.py (004d3afb) finishes them (inter_token_latency_s divided by the output
tokens, request_output_throughput recomputed); metrics_summary() over the requests without an
error (pandas' linear quantiles, sample stddev, min/max of an integer column written as strings
by ``json.dump(default=str)``, NaN for an empty series, ``str()`` of the error code counts);
LLMPerfResults.to_dict() and flatten_dict() of src/llmperf/utils.py (0f255058) under "results_".
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

STATS = (
    "inter_token_latency_s",
    "ttft_s",
    "end_to_end_latency_s",
    "request_output_throughput_token_per_s",
    "number_input_tokens",
    "number_output_tokens",
)
INT_COLUMNS = ("number_input_tokens", "number_output_tokens")


def response(ttft: float = 0.2, e2e: float = 1.0, out: int = 100, prompt: int = 550, error: int | None = None,
             message: str = "") -> dict[str, Any]:  # fmt: skip
    """One request's metrics, as the OpenAI client and token_benchmark_ray leave them."""
    if error is not None:  # the client's except branch: nothing measured, the counters' zeros
        return {
            "error_code": error,
            "error_msg": message,
            "inter_token_latency_s": 0.0,
            "ttft_s": 0,
            "end_to_end_latency_s": 0,
            "request_output_throughput_token_per_s": 0,
            "number_total_tokens": prompt + 1,
            "number_output_tokens": 1,
            "number_input_tokens": prompt,
        }
    return {
        "error_code": None,
        "error_msg": "",
        "inter_token_latency_s": e2e / out,  # sum(time_to_next_token) / num_output_tokens
        "ttft_s": ttft,
        "end_to_end_latency_s": e2e,
        "request_output_throughput_token_per_s": out / e2e,
        "number_total_tokens": prompt + out,
        "number_output_tokens": out,
        "number_input_tokens": prompt,
    }


def _quantile(values: list[float], q: float) -> float:  # pandas' default: linear interpolation
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def metrics_summary(metrics: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    ok = [m for m in metrics if m["error_code"] is None]
    ret: dict[str, Any] = {}
    for key in STATS:
        series = [m[key] for m in ok]
        if series:
            stats: dict[str, Any] = {"quantiles": {f"p{int(q * 100)}": _quantile(series, q)
                                                   for q in (0.25, 0.5, 0.75, 0.9, 0.95, 0.99)}}  # fmt: skip
            mean = sum(series) / len(series)
            std = math.sqrt(sum((v - mean) ** 2 for v in series) / (len(series) - 1)) if len(series) > 1 else math.nan
            low, high = min(series), max(series)
            if key in INT_COLUMNS:  # numpy int64: json.dump(default=str) writes it as a string
                low, high = str(low), str(high)
            stats.update({"mean": mean, "min": low, "max": high, "stddev": std})
        else:  # an empty pandas series: NaN everywhere
            stats = {"quantiles": {}, "mean": math.nan, "min": math.nan, "max": math.nan, "stddev": math.nan}
        ret[key] = stats
    ret["num_requests_started"] = len(metrics)
    codes = [float(m["error_code"]) for m in metrics if m["error_code"] is not None]  # a float column with NaN
    ret["error_rate"] = len(codes) / len(metrics) if metrics else 0
    ret["number_errors"] = len(codes)
    ret["error_code_frequency"] = str(dict(Counter(codes)))
    ret["mean_output_throughput_token_per_s"] = sum(m["number_output_tokens"] for m in ok) / seconds
    ret["num_completed_requests"] = len(ok)
    ret["num_completed_requests_per_min"] = len(ok) / seconds * 60
    return ret


def flatten_dict(d: dict[str, Any], parent_key: str = "", sep: str = "_") -> dict[str, Any]:
    items: list[tuple[str, Any]] = []
    for k, v in d.items():
        new_key = f"{parent_key}{sep}{k}" if parent_key else k
        if isinstance(v, dict):
            items.extend(flatten_dict(v, new_key, sep=sep).items())
        else:
            items.append((new_key, v))
    return dict(items)


def summary_file(metrics: list[dict[str, Any]], seconds: float = 60.0, concurrency: int = 2,
                 timestamp: int = 1704851704, **user_metadata: Any) -> dict[str, Any]:  # fmt: skip
    metadata: dict[str, Any] = {
        "model": "meta-llama/Llama-2-7b-chat-hf",
        "mean_input_tokens": 550,
        "stddev_input_tokens": 150,
        "mean_output_tokens": 150,
        "stddev_output_tokens": 10,
        "num_concurrent_requests": concurrency,
        "additional_sampling_params": {},
        "results": metrics_summary(metrics, seconds),
        **user_metadata,
        "timestamp": timestamp,
    }
    return flatten_dict({"version": "2023-08-31", "name": "meta-llama-Llama-2-7b-chat-hf_550_150_summary",
                         **metadata})  # fmt: skip


PREFIX = "meta-llama-Llama-2-7b-chat-hf_550_150"
RESPONSES = [
    response(ttft=0.2, e2e=1.0),
    response(ttft=0.3, e2e=2.0, out=120),
    response(ttft=0.25, e2e=1.5, out=90),
    response(error=429, message='{"error":{"message":"Token rate limit exceeded","code":429}}'),
]


def write_run(directory: Path, responses: list[dict[str, Any]] | None = RESPONSES, **summary: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{PREFIX}_summary.json").write_text(json.dumps(summary_file(RESPONSES, **summary), indent=4,
                                                                 default=str))  # fmt: skip
    if responses is not None:
        (directory / f"{PREFIX}_individual_responses.json").write_text(json.dumps(responses, indent=4))
    return directory
