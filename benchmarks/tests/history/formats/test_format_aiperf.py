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

The real AIPerf files in ../shared/data/peer-results/aiperf (0.11.0 JSON and CSV, the 2025-06
pre-release JSON) were checked by hand against these converters; they are not copied here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.records.formats import SCHEMA_V2, Declared, FormatError, Sample, Source, aiperf, genai_perf, guidellm
from benchmarks.records.storable import check_json

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


def convert(path: Path, declared: Declared | None = None) -> list[dict[str, Any]]:
    return list(aiperf.convert(Source(path=path), declared or Declared()))


def sniffs(path: Path) -> bool:
    return aiperf.sniff(Sample(head=path.read_bytes()[:65536]))


# -- profile_export_aiperf.json -------------------------------------------------------------


def test_the_json_export_is_one_run_summary_with_aiperfs_counts_and_units(tmp_path: Path) -> None:
    path = write(tmp_path, "profile_export_aiperf.json", aiperf_json())
    assert sniffs(path)
    (record,) = convert(path)
    assert record["schema"] == SCHEMA_V2
    summary = record["summary"]
    assert (summary["n_requests"], summary["n_ok"], summary["n_failed"], summary["n_incomplete"]) == (100, 98, 2, 0)
    assert summary["requests_sampled"] is False
    assert summary["duration_s"] == 15.0
    assert summary["request_rate"] == 6.5
    assert summary["output_tok_s"] == 1792.2
    assert (summary["input_tokens"], summary["output_tokens"]) == (55000, 26300)
    assert summary["ttft_ms"] == {
        "mean": 28.7, "median": 26.8, "std": 7.2, "min": 22.1, "max": 85.4, "p50": 26.8, "p90": 33.0, "p95": 40.5,
        "p99": 66.8,
    }  # fmt: skip
    assert summary["e2e_ms"]["p99"] == 7000.0
    assert summary["itl_ms"]["mean"] == 8.78
    run = record["run"]
    assert run["model"] == "qwen3-4b"
    assert run["gpu"] == "2x NVIDIA H100 80GB HBM3"  # from AIPerf's GPU telemetry
    assert run["workload"] == {"concurrency": 16}
    assert run["wall_s"] == 15.0
    assert run["tool"] == {"name": "aiperf", "version": "0.11.0", "format": "profile_export_aiperf.json schema 1.3"}
    assert run["provenance"] == {
        "id": "derived", "model": "file", "gpu": "file", "concurrency": "file", "started_at": "file", "wall_s": "file",
    }  # fmt: skip
    assert run["id"].startswith("aiperf-20260930T165339-c16-")
    extra = record["extra"]
    check_json(extra, "extra")
    assert extra["http_req_waiting"] == {"unit": "ms", "avg": 28.5, "p50": 26.6}
    assert extra["error_summary"][0]["count"] == 2
    assert len(extra["run_info"]["cli_command"]) < 2100  # long text cut, said so
    assert "started_at_note" in extra


@pytest.mark.parametrize(
    ("unit", "value", "ms"),
    [("ns", 28_700_000.0, 28.7), ("us", 28_700.0, 28.7), ("ms", 28.7, 28.7), ("sec", 0.0287, 28.7)],
)
def test_latencies_are_converted_to_ms_by_the_unit_each_metric_states(unit: str, value: float, ms: float) -> None:
    metrics = {"request_count": stat("requests", 1.0), "time_to_first_token": stat(unit, value, p99=value)}
    summary = aiperf._summary(metrics, "profile_export_aiperf.json")
    assert summary["ttft_ms"]["mean"] == pytest.approx(ms)
    assert summary["ttft_ms"]["p99"] == pytest.approx(ms)


@pytest.mark.parametrize(
    ("tag", "unit", "value", "key", "expected"),
    [
        ("benchmark_duration", "sec", 15.0, "duration_s", 15.0),
        ("benchmark_duration", "ms", 15000.0, "duration_s", 15.0),
        ("benchmark_duration", "ns", 15e9, "duration_s", 15.0),
        ("request_throughput", "requests/sec", 6.5, "request_rate", 6.5),
        ("request_throughput", "requests/ms", 0.0065, "request_rate", 6.5),
        ("output_token_throughput", "tokens/sec", 1792.2, "output_tok_s", 1792.2),
        ("total_token_throughput", "tokens/sec", 3000.0, "total_tok_s", 3000.0),
    ],
)
def test_durations_and_rates_are_converted_by_their_unit(
    tag: str, unit: str, value: float, key: str, expected: float
) -> None:
    summary = aiperf._summary({"request_count": stat("requests", 1.0), tag: stat(unit, value)}, "f")
    assert summary[key] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("tag", "unit"),
    [("time_to_first_token", "tokens"), ("request_throughput", "requests"), ("benchmark_duration", "minutes")],
)
def test_a_unit_kvlab_cannot_convert_is_rejected_naming_the_metric(tmp_path: Path, tag: str, unit: str) -> None:
    data = aiperf_json()
    data[tag] = stat(unit, 1.0)
    with pytest.raises(FormatError, match=rf"{tag}\.unit"):
        convert(write(tmp_path, "profile_export_aiperf.json", data))


def test_a_run_where_every_request_failed_has_no_request_count_and_is_a_failed_run(tmp_path: Path) -> None:
    data = aiperf_json(error_request_count=stat("requests", 20.0))
    for tag in ("request_count", "request_latency", "time_to_first_token", "inter_token_latency"):
        del data[tag]
    (record,) = convert(write(tmp_path, "profile_export_aiperf.json", data))
    assert (record["summary"]["n_requests"], record["summary"]["n_ok"], record["summary"]["n_failed"]) == (20, 0, 20)
    assert "ttft_ms" not in record["summary"]


@pytest.mark.parametrize(
    ("damage", "key"),
    [
        (lambda d: d.pop("request_count") and d.pop("error_request_count"), "request_count"),
        (lambda d: d["time_to_first_token"].update(p99="slow"), r"time_to_first_token\.p99"),
        (lambda d: d["request_latency"].update(unit=None), r"request_latency\.unit"),
        (lambda d: d.update(start_time="yesterday"), r"start_time"),
        (lambda d: d.update(error_summary=[{"error_details": {}, "count": -1}]), r"error_summary\[0\]\.count"),
    ],
)
def test_a_malformed_json_export_is_rejected_naming_the_key(tmp_path: Path, damage: Any, key: str) -> None:
    data = aiperf_json()
    damage(data)
    with pytest.raises(FormatError, match=key):
        convert(write(tmp_path, "profile_export_aiperf.json", data))


def test_the_pre_release_layout_reads_its_records_by_display_name(tmp_path: Path) -> None:
    data = {
        "input_config": {"model_names": ["llama"], "endpoint": {"type": "openai", "streaming": True}},
        "records": {
            "Time to First Token": {
                "name": "Time to First Token",
                "unit": "ms",
                "avg": 30.4,
                "p99": 94.7,
                "count": 10,
                "streaming_only": True,
            },
            "Request Latency": {
                "name": "Request Latency",
                "unit": "ms",
                "avg": 522.2,
                "count": 10,
                "streaming_only": False,
            },
        },
        "was_cancelled": False,
        "errors_by_type": [{"error_details": {"message": "boom"}, "count": 3}],
        "start_time": "2025-06-26T20:43:27.296047",
        "end_time": "2025-06-26T20:43:33.964405",
    }
    path = write(tmp_path, "profile_export_aiperf.json", data)
    assert sniffs(path)
    (record,) = convert(path)
    assert (record["summary"]["n_ok"], record["summary"]["n_failed"]) == (10, 3)
    assert record["summary"]["ttft_ms"] == {"mean": 30.4, "p99": 94.7}
    assert record["summary"]["e2e_ms"] == {"mean": 522.2}
    assert record["run"]["model"] == "llama"
    assert record["run"]["tool"]["format"] == "profile_export_aiperf.json (pre-release layout)"


def test_json_run_ids_are_stable_and_follow_the_content(tmp_path: Path) -> None:
    first = convert(write(tmp_path, "a/profile_export_aiperf.json", aiperf_json()))[0]["run"]["id"]
    assert convert(write(tmp_path, "b/renamed.json", aiperf_json()))[0]["run"]["id"] == first
    other = aiperf_json(benchmark_id="another-run")
    assert convert(write(tmp_path, "c/profile_export_aiperf.json", other))[0]["run"]["id"] != first


# -- profile_export_aiperf.csv --------------------------------------------------------------


def test_the_csv_export_is_a_summary_with_units_from_its_names(tmp_path: Path) -> None:
    path = write(tmp_path, "profile_export_aiperf.csv", AIPERF_CSV)
    assert sniffs(path)
    (record,) = convert(path, Declared(model="qwen3-4b"))
    summary = record["summary"]
    assert (summary["n_requests"], summary["n_ok"], summary["n_failed"]) == (2048, 2044, 4)
    assert summary["duration_s"] == 299.94
    assert summary["request_rate"] == 6.81
    assert summary["output_tokens"] == 537554
    assert summary["e2e_ms"]["p99"] == 6997.26
    assert summary["ttft_ms"]["median"] == 26.77
    run = record["run"]
    assert (run["model"], run["provenance"]["model"]) == ("qwen3-4b", "declared")
    assert (run["gpu"], run["provenance"]["gpu"]) == ("NVIDIA L40S", "file")
    assert run["tool"]["format"] == "profile_export_aiperf.csv"
    assert record["extra"]["values_rounded_to"] == 0.01


def test_a_csv_row_with_an_unconvertible_unit_is_rejected_naming_it(tmp_path: Path) -> None:
    text = AIPERF_CSV.replace("Time to First Token (ms)", "Time to First Token (tokens)")
    with pytest.raises(FormatError, match="time_to_first_token"):
        convert(write(tmp_path, "profile_export_aiperf.csv", text))


def test_a_csv_value_that_is_not_a_number_is_rejected_naming_its_line(tmp_path: Path) -> None:
    text = AIPERF_CSV.replace("Request Count,2044.00", "Request Count,many")
    with pytest.raises(FormatError, match=r"line 10 \(Request Count\)"):
        convert(write(tmp_path, "profile_export_aiperf.csv", text))


# -- profile_export.jsonl -------------------------------------------------------------------


def test_the_jsonl_export_is_one_run_of_requests_in_kvlab_units(tmp_path: Path) -> None:
    lines = [
        jsonl_line(0, phase="warmup"),
        jsonl_line(1),
        jsonl_line(2, error={"code": 500, "type": "ServerError", "message": "Context size has been exceeded"}),
    ]
    path = write(tmp_path, "profile_export.jsonl", lines)
    assert sniffs(path)
    records = convert(path, Declared(model="qwen3-4b"))  # the records name no model (inputs.json does)
    assert len(records) == 2  # the warm-up request is not imported
    assert len({record["run"]["id"] for record in records}) == 1
    ok, failed = (record["request"] for record in records)
    assert ok == {
        "ts": "2026-09-30T16:53:40.902853+00:00",
        "elapsed_s": 1.5,
        "ttft_s": 0.25,
        "prompt_tokens": 550,
        "output_tokens": 100,
        "tok_s": 80.0,
        "itl_s": [0.012, 0.013],
        "ok": True,
    }
    assert failed["ok"] is False
    assert failed["http_status"] == 500
    assert failed["error"] == "ServerError: Context size has been exceeded"
    assert records[0]["run"]["started_at"] == "2026-09-30T16:53:40.902853+00:00"
    assert records[0]["extra"]["metrics"] == {
        "input_sequence_length": {"value": 550, "unit": "tokens"},
        "output_sequence_length": {"value": 100, "unit": "tokens"},
        "output_token_throughput_per_user": {"value": 80.0, "unit": "tokens/sec/user"},
        "http_req_waiting": {"value": 25.0, "unit": "ms"},
    }


@pytest.mark.parametrize(
    ("damage", "key"),
    [
        (lambda line: line["metadata"].update(request_start_ns="soon"), r"line 1: metadata\.request_start_ns"),
        (lambda line: line["metrics"].update(request_latency=12.0), r"line 1: metrics\.request_latency"),
        (lambda line: line["metrics"]["request_latency"].update(unit="parsecs"), r"line 1"),
    ],
)
def test_a_malformed_jsonl_record_is_rejected_naming_its_line(tmp_path: Path, damage: Any, key: str) -> None:
    line = jsonl_line(1)
    damage(line)
    with pytest.raises(FormatError, match=key):
        convert(write(tmp_path, "profile_export.jsonl", [line]), Declared(model="qwen3-4b"))


def test_a_directory_joins_a_runs_json_and_jsonl_one_run_per_folder(tmp_path: Path) -> None:
    for concurrency in (16, 32):
        folder = f"sweep/concurrency_{concurrency}"
        data = aiperf_json(benchmark_id=f"bench-{concurrency}")
        data["input_config"]["phases"][0]["concurrency"] = concurrency
        write(tmp_path, f"{folder}/profile_export_aiperf.json", data)
        write(tmp_path, f"{folder}/profile_export_aiperf.csv", AIPERF_CSV)  # repeats the JSON: not read
        write(tmp_path, f"{folder}/profile_export.jsonl", [jsonl_line(1), jsonl_line(2)])
    root = tmp_path / "sweep"
    files = tuple(sorted(path for path in root.rglob("*") if path.is_file()))
    assert aiperf.sniff(Sample(names=tuple(str(p.relative_to(root)) for p in files), is_dir=True))
    records = list(aiperf.convert(Source(path=root, files=files), Declared()))
    runs = [record for record in records if "summary" in record]
    assert [run["run"]["workload"] for run in runs] == [{"concurrency": 16}, {"concurrency": 32}]
    for run in runs:
        requests = [r for r in records if "request" in r and r["run"]["id"] == run["run"]["id"]]
        assert len(requests) == 2
        assert requests[0]["run"] == run["run"]


# -- sniffing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        b'{"date": "20260301-120010", "backend": "vllm", "model_id": "m", "mean_ttft_ms": 1.0, "median_ttft_ms": 1}',
        b'{"metadata": {"version": 1, "guidellm_version": "0.5.0"}, "benchmarks": [{"type_": "generative_benchmark"',
        b'{"experiments":[{"experiment":{"mode":"concurrency","value":1},"requests":[]}]}',
        b'{"schema": "kvlab.bench/1", "run": {"id": "r"}, "request": {"ok": true}}\n',
        b"Metric,avg,min,max,p99,p95,p90,p75,p50,p25\nRequest Latency (ms),1,1,1,1,1,1,1,1,1\n",  # GenAI-Perf's CSV
        b"build_commit,build_number,cpu_info\n",
    ],
)
def test_aiperf_sniff_refuses_other_tools_files(head: bytes) -> None:
    assert not aiperf.sniff(Sample(head=head))


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


def test_genai_perf_export_is_one_run_per_experiment_with_ns_times_in_seconds(tmp_path: Path) -> None:
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(genai_export(), separators=(",", ":")))  # rapidjson's compact writer
    assert genai_perf.sniff(Sample(head=path.read_bytes()[:65536]))
    records = list(genai_perf.convert(Source(path=path), Declared(gpu="A100")))
    assert len(records) == 3
    first, failed, rated = records
    assert first["run"]["id"] == failed["run"]["id"] != rated["run"]["id"]
    assert first["run"]["workload"] == {"concurrency": 2}
    assert rated["run"]["workload"] == {"request_rate": 4.0}
    assert first["run"]["model"] == "llama-3-8b"
    assert (first["run"]["gpu"], first["run"]["provenance"]["gpu"]) == ("A100", "declared")
    assert first["run"]["started_at"] == "2026-09-30T16:53:39.902853+00:00"
    assert first["run"]["tool"] == {
        "name": "genai-perf",
        "version": None,
        "format": "profile_export.json (perf_analyzer)",
    }
    request = first["request"]
    assert request["ok"] is True
    assert request["ttft_s"] == pytest.approx(0.1)
    assert request["elapsed_s"] == pytest.approx(0.122)
    assert request["itl_s"] == pytest.approx([0.010, 0.012])
    assert (request["prompt_tokens"], request["output_tokens"], request["n_predict"]) == (200, 3, 64)
    assert failed["request"]["ok"] is False
    assert failed["request"]["error"] == "prompt too long"
    assert failed["request"]["http_status"] == 400
    assert first["extra"]["request_inputs_chars"]["payload"] > 3000
    assert "q" * 100 not in json.dumps(records)
    for record in records:
        check_json(record["extra"], "extra")


@pytest.mark.parametrize(
    ("damage", "key"),
    [
        (lambda d: d.pop("experiments"), "experiments"),
        (lambda d: d["experiments"][0]["experiment"].update(mode="sweep"), r"experiments\[0\]\.experiment"),
        (lambda d: d["experiments"][0]["requests"][0].update(timestamp=-5), r"experiments\[0\]\.requests\[0\]"),
        (
            lambda d: d["experiments"][1]["requests"][0]["response_timestamps"].insert(0, 1),
            r"experiments\[1\]\.requests\[0\]\.response_timestamps",
        ),
    ],
)
def test_a_malformed_genai_perf_export_is_rejected_naming_the_key(tmp_path: Path, damage: Any, key: str) -> None:
    data = genai_export()
    damage(data)
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FormatError, match=key):
        list(genai_perf.convert(Source(path=path), Declared()))


def test_each_tool_sniffs_only_its_own_files(tmp_path: Path) -> None:
    genai = json.dumps(genai_export()).encode()
    ai = json.dumps(aiperf_json()).encode()
    assert genai_perf.sniff(Sample(head=genai)) and not aiperf.sniff(Sample(head=genai))
    assert aiperf.sniff(Sample(head=ai)) and not genai_perf.sniff(Sample(head=ai))
    assert not guidellm.sniff(Sample(head=genai)) and not guidellm.sniff(Sample(head=ai))
    vllm_result = b'{"date": "20260301-120010", "backend": "vllm", "completed": 3, "mean_ttft_ms": 1.0}'
    assert not genai_perf.sniff(Sample(head=vllm_result))
