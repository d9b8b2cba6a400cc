"""AIPerf's exports and GenAI-Perf's profile_export.json, written by aiperf_results.py as the tools write them, read as
kvlab reads them.

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

from .aiperf_results import AIPERF_CSV, aiperf_json, genai_export, jsonl_line, stat, write


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
