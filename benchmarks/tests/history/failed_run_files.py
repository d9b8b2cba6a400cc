"""Files of runs where every request failed, as AIPerf writes them (its artifact directory: error
records, inputs.json naming the model, no profile_export_aiperf.json), and the start and error text that
the other tools' failed runs share. The sources they follow are cited in test_import_failed_runs.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

START_NS = 1_790_787_219_902_853_000  # 2026-09-30T16:53:39.902853Z
CONTEXT_EXCEEDED = '{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}'


def aiperf_error_record(index: int, *, with_isl: bool = True) -> dict[str, Any]:
    start = START_NS + index * 1_000_000_000
    return {
        "metadata": {
            "session_num": index,
            "x_request_id": f"req-{index}",
            "x_correlation_id": f"corr-{index}",
            "conversation_id": f"session-{index}",
            "turn_index": 0,
            "credit_issued_ns": start - 1000,
            "request_start_ns": start,
            "request_ack_ns": None,
            "request_end_ns": start + 4_000_000,
            "worker_id": "worker_0",
            "record_processor_id": "record_processor_0",
            "benchmark_phase": "profiling",
            "was_cancelled": False,
            "cancellation_time_ns": None,
            "agent_depth": 0,
            "parent_correlation_id": None,
        },
        "metrics": {"error_isl": {"value": 550, "unit": "tokens"}} if with_isl else {},
        "trace_data": None,
        "error": {"code": 500, "type": "Internal Server Error", "message": CONTEXT_EXCEEDED},
    }


def aiperf_inputs(model: str = "qwen3-4b", sessions: int = 3) -> dict[str, Any]:
    return {
        "data": [
            {
                "session_id": f"session-{i}",
                "payloads": [
                    {
                        "messages": [{"role": "user", "name": "text", "content": "lorem " * 500}],
                        "model": model,
                        "stream": True,
                        "max_completion_tokens": 100,
                    }
                ],
            }
            for i in range(sessions)
        ]
    }


def aiperf_artifacts(directory: Path, *, inputs: bool = True, records: int = 3) -> Path:
    """An AIPerf artifact directory of a run where every request failed: no profile_export_aiperf.json."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [aiperf_error_record(i, with_isl=i != 1) for i in range(records)]
    (directory / "profile_export.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if inputs:
        (directory / "inputs.json").write_text(json.dumps(aiperf_inputs(sessions=records), indent=2))
    (directory / "logs").mkdir()
    (directory / "logs" / "aiperf.log").write_text("ERROR  Received process records result message with errors\n")
    return directory
