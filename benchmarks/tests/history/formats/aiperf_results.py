"""AIPerf's exports and GenAI-Perf's profile_export.json, written here as the tools write them.

AIPerf (ai-dynamo/aiperf):

* ``src/aiperf/exporters/metrics_json_exporter.py`` at 047d59dd4bca43ff272f46c6b4af0ebb62cb8ad0
  and ``src/aiperf/common/models/export_models.py`` at 26240f9e48bd11b1890ec0bfab778fd82481869f:
  profile_export_aiperf.json, every metric ``{"unit", "avg", "p1"…"p99", "min", "max", "std"}``
  under its tag beside ``schema_version``, ``aiperf_version``, ``benchmark_id``,
  ``input_config``, ``was_cancelled``, ``error_summary``, ``start_time`` (local, no offset);
* ``src/aiperf/common/enums/metric_enums.py`` at 03240ef5986b4b14e920aacef1884210f68b0197: the
  units (ns, us, ms, sec; requests/sec, tokens/sec, tokens/sec/user);
* ``src/aiperf/metrics/types/request_error_rate_metric.py`` at
  08732248459340f84a7718791398d6c60d02bab7: request_count counts successes,
  error_request_count failures;
* ``src/aiperf/exporters/metrics_csv_exporter.py`` at 309c4e8c41e937124c05de3e5a08a7954f9440fd:
  the CSV's "Metric,avg,min,max,sum,p1…,std" table, a blank line, the "Metric,Value" table,
  then the GPU telemetry table; names carry their unit unless it is a count;
* ``src/aiperf/common/models/record_export_models.py`` at
  745695dd14c122a737a25b2747ba666538f79078 and ``error_models.py`` at
  028de33757d6e5d8e3d145a850a695edbdfc967b: profile_export.jsonl, one
  ``{"metadata", "metrics": {tag: {"value", "unit"}}, "error": {"code", "type", "message"}}``
  per request.

GenAI-Perf: triton-inference-server/perf_analyzer ``src/profile_data_exporter.cc`` at
30ba311c5ad9fa078c83db8ae8c0865575306a5a writes profile_export.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

START_NS = 1_790_787_219_902_853_000  # 2026-09-30T16:53:39.902853Z


def stat(unit: str, avg: float, **stats: float) -> dict[str, Any]:
    return {"unit": unit, "avg": avg, **stats}


def aiperf_json(**overrides: Any) -> dict[str, Any]:
    """profile_export_aiperf.json for 100 requests (2 failed) at concurrency 16."""
    data: dict[str, Any] = {
        "schema_version": "1.3",
        "aiperf_version": "0.11.0",
        "benchmark_id": "c8313bcd8f804e79a90adb28c8c733d6",
        "request_throughput": stat("requests/sec", 6.5),
        "request_latency": stat(
            "ms", 2300.0, p50=2200.0, p90=4200.0, p95=5300.0, p99=7000.0, min=44.0, max=10145.0, std=1500.0
        ),
        "request_count": stat("requests", 98.0),
        "error_request_count": stat("requests", 2.0),
        "time_to_first_token": stat("ms", 28.7, p50=26.8, p90=33.0, p95=40.5, p99=66.8, min=22.1, max=85.4, std=7.2),
        "inter_token_latency": stat("ms", 8.78, p50=8.73, p90=9.15, p95=9.33, p99=9.84, min=8.02, max=11.86, std=0.32),
        "output_token_throughput": stat("tokens/sec", 1792.2),
        "output_token_throughput_per_user": stat("tokens/sec/user", 114.0, p50=114.5),
        "total_osl": stat("tokens", 26300.0),
        "total_isl": stat("tokens", 55000.0),
        "benchmark_duration": stat("sec", 15.0),
        "http_req_waiting": stat("ms", 28.5, p50=26.6),
        "input_config": {
            "models": {"strategy": "round_robin", "items": [{"name": "qwen3-4b"}]},
            "endpoint": {"urls": ["http://vllm:8000"], "type": "chat", "streaming": True},
            "phases": [{"name": "profiling", "type": "concurrency", "duration": 15.0, "concurrency": 16}],
        },
        "run_info": {"benchmark_id": "c8313bcd8f804e79a90adb28c8c733d6", "cli_command": "aiperf profile " + "x" * 5000},
        "was_cancelled": False,
        "error_summary": [
            {
                "error_details": {"code": 500, "type": "ServerError", "message": "Context size has been exceeded"},
                "count": 2,
            }
        ],
        "telemetry_data": {
            "summary": {"start_time": "2026-09-30T16:53:39", "end_time": "2026-09-30T16:53:55"},
            "endpoints": {
                "localhost:9400": {
                    "gpus": {
                        "gpu_0": {
                            "gpu_index": 0,
                            "gpu_name": "NVIDIA H100 80GB HBM3",
                            "gpu_uuid": "GPU-0",
                            "hostname": "node",
                            "metrics": {},
                        },
                        "gpu_1": {
                            "gpu_index": 1,
                            "gpu_name": "NVIDIA H100 80GB HBM3",
                            "gpu_uuid": "GPU-1",
                            "hostname": "node",
                            "metrics": {},
                        },
                    }
                }
            },
        },
        "start_time": "2026-09-30T16:53:39.902853",
        "end_time": "2026-09-30T16:53:54.902853",
    }
    data.update(overrides)
    return data


AIPERF_CSV = """\
Metric,avg,min,max,sum,p1,p5,p10,p25,p50,p75,p90,p95,p99,std
Inter Token Latency (ms),8.78,8.02,11.86,17944.84,8.25,8.39,8.45,8.57,8.73,8.91,9.15,9.33,9.84,0.32
Request Latency (ms),2334.77,44.09,10145.21,4772270.93,128.33,306.38,537.38,1125.12,2191.48,3176.79,4260.87,5308.40,6997.26,1521.04
Time to First Token (ms),28.74,22.09,85.41,58736.71,23.35,24.31,24.77,25.60,26.77,28.47,33.01,40.51,66.76,7.24

Metric,Value
Benchmark Duration (sec),299.94
Error Request Count,4.00
Output Token Throughput (tokens/sec),1792.23
Request Count,2044.00
Request Throughput (requests/sec),6.81
Total Output Sequence Length (tokens),537554.00


Endpoint,GPU_Index,GPU_Name,GPU_UUID,Metric,avg,min,max,sum,p1,p5,p10,p25,p50,p75,p90,p95,p99,std
localhost:9400,0,NVIDIA L40S,GPU-0,GPU Power Usage (W),300.00,290.00,310.00,,,,,,,,,,,
"""  # noqa: E501 - the exporter's own rows


def jsonl_line(index: int, *, error: dict[str, Any] | None = None, phase: str = "profiling") -> dict[str, Any]:
    start = START_NS + index * 1_000_000_000
    metrics: dict[str, Any] = {
        "input_sequence_length": {"value": 550, "unit": "tokens"},
        "request_latency": {"value": 1500.0, "unit": "ms"},
        "http_req_waiting": {"value": 25.0, "unit": "ms"},
    }
    if error is None:
        metrics.update(
            time_to_first_token={"value": 250_000_000, "unit": "ns"},  # 0.25 s, stated in ns
            output_sequence_length={"value": 100, "unit": "tokens"},
            output_token_throughput_per_user={"value": 80.0, "unit": "tokens/sec/user"},
            inter_chunk_latency={"value": [12.0, 13.0], "unit": "ms"},
        )
    line: dict[str, Any] = {
        "metadata": {
            "session_num": index,
            "x_request_id": f"req-{index}",
            "request_start_ns": start,
            "request_end_ns": start + 1_500_000_000,
            "worker_id": "worker_1",
            "record_processor_id": "record_processor_1",
            "benchmark_phase": phase,
            "was_cancelled": False,
        },
        "metrics": metrics,
    }
    if error is not None:
        line["error"] = error
    return line


def write(tmp_path: Path, name: str, content: str | dict[str, Any] | list[dict[str, Any]]) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, list):
        path.write_text("".join(json.dumps(line) + "\n" for line in content))
    else:
        path.write_text(json.dumps(content, indent=2))
    return path


# -- GenAI-Perf profile_export.json ---------------------------------------------------------


def genai_request(start: int, *, gaps_ms: tuple[float, ...] = (100.0, 10.0, 12.0), error: str = "") -> dict[str, Any]:
    stamps, moment = [], start
    for gap in gaps_ms:
        moment += int(gap * 1_000_000)
        stamps.append(moment)
    chunk = '{"choices":[{"delta":{"content":"hi"}}]}'
    outputs = [{"response": f"data: {chunk}\n\n"} for _ in stamps[:-1]]
    outputs.append({"response": 'data: {"choices":[],"usage":{"prompt_tokens":200,"completion_tokens":3}}\n\n'})
    if error:
        outputs = [{"response": json.dumps({"error": {"message": error, "code": 400}})}]
        stamps = stamps[:1]
    payload = json.dumps(
        {"model": "llama-3-8b", "messages": [{"role": "user", "content": "q" * 3000}], "max_tokens": 64, "stream": True}
    )
    return {
        "timestamp": start,
        "request_inputs": {"payload": payload},
        "response_timestamps": stamps,
        "response_outputs": outputs,
    }


def genai_export() -> dict[str, Any]:
    return {
        "experiments": [
            {
                "experiment": {"mode": "concurrency", "value": 2},
                "requests": [genai_request(START_NS), genai_request(START_NS + 5_000_000, error="prompt too long")],
                "window_boundaries": [START_NS, START_NS + 1_000_000_000],
            },
            {
                "experiment": {"mode": "request_rate", "value": 4.0},
                "requests": [genai_request(START_NS + 10_000_000_000)],
                "window_boundaries": [START_NS + 10_000_000_000, START_NS + 11_000_000_000],
            },
        ],
        "version": "",
        "service_kind": "openai",
        "endpoint": "v1/chat/completions",
    }
