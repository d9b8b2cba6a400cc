"""GuideLLM's benchmarks.json, written by guidellm_results.py as GuideLLM writes it, read as kvlab reads it.

The real report in ../shared/data/peer-results/guidellm (guidellm 0.5.0.dev0, version 1) was
checked by hand against this converter; it is not copied here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.records.formats import SCHEMA_V2, Declared, FormatError, Sample, Source, guidellm
from benchmarks.records.storable import check_json

from .guidellm_results import benchmark_v1, report_before_version, report_v1, report_v2, write


def convert(path: Path, declared: Declared | None = None) -> list[dict[str, Any]]:
    return list(guidellm.convert(Source(path=path), declared or Declared()))


def summaries(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [record for record in records if "summary" in record]


def requests_of(records: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    return [record["request"] for record in records if "request" in record and record["run"]["id"] == run_id]


# -- what each benchmark becomes ------------------------------------------------------------


def test_each_benchmark_is_a_run_with_guidellms_own_summary_and_its_requests(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        report_v1(
            benchmark_v1({"type_": "synchronous"}),
            benchmark_v1({"type_": "concurrent", "streams": 4}),
            benchmark_v1({"type_": "constant", "rate": 2.5}),
            benchmark_v1({"type_": "poisson", "rate": 1.5, "max_concurrency": 8}),
            benchmark_v1({"type_": "throughput", "max_concurrency": 64}),
        ),
    )
    records = convert(path)
    runs = summaries(records)
    assert [run["run"]["workload"] for run in runs] == [
        {"concurrency": 1},
        {"concurrency": 4},
        {"request_rate": 2.5},
        {"concurrency": 8, "request_rate": 1.5},
        {"concurrency": 64},
    ]
    assert runs[0]["run"]["provenance"]["concurrency"] == "derived"  # synchronous: one at a time
    assert runs[1]["run"]["provenance"]["concurrency"] == "file"
    assert len({run["run"]["id"] for run in runs}) == 5
    for record in records:
        assert record["schema"] == SCHEMA_V2
        check_json(record["extra"], "extra")
    first = runs[0]
    assert first["run"]["model"] == "Qwen/Qwen3-8B"
    assert first["run"]["provenance"]["model"] == "file"
    assert first["run"]["tool"] == {"name": "guidellm", "version": "0.5.0", "format": "benchmarks.json v1"}
    assert first["run"]["started_at"] == "2026-03-02T16:58:16.500000+00:00"
    assert first["run"]["wall_s"] == 10.0
    assert len(requests_of(records, first["run"]["id"])) == 2


def test_the_summary_carries_guidellms_counts_and_metrics_in_kvlab_units(tmp_path: Path) -> None:
    benchmark = benchmark_v1({"type_": "concurrent", "streams": 2}, successful=2, errored=1, incomplete=1)
    (summary_record,) = summaries(convert(write(tmp_path, report_v1(benchmark))))
    summary = summary_record["summary"]
    assert summary["n_requests"] == 4
    assert (summary["n_ok"], summary["n_failed"], summary["n_incomplete"]) == (2, 1, 1)
    assert summary["requests_sampled"] is False
    assert summary["duration_s"] == 10.0
    assert summary["request_rate"] == 2.0
    assert summary["output_tok_s"] == 60.0
    assert summary["total_tok_s"] == 160.0
    assert (summary["input_tokens"], summary["output_tokens"]) == (220, 120)  # the successful requests' sums
    assert summary["ttft_ms"] == {
        "mean": 100.0, "median": 120.0, "std": 0.5, "min": 80.0, "max": 120.0,
        "p50": 120.0, "p90": 120.0, "p95": 120.0, "p99": 120.0,
    }  # fmt: skip
    # GuideLLM's inter_token_latency_ms is (last - first token) / (output - 1) per request: TPOT;
    # its TTFT-inclusive time_per_output_token_ms stays in extra; GuideLLM has no per-gap ITL.
    assert summary["tpot_ms"]["mean"] == 24.0
    assert "itl_ms" not in summary
    assert summary_record["extra"]["metrics"]["time_per_output_token_ms"]["successful"]["mean"] == 25.0
    # GuideLLM's request_latency is in seconds: kvlab's e2e statistics are milliseconds
    assert summary["e2e_ms"]["mean"] == 2000.0
    assert summary["e2e_ms"]["max"] == 2500.0
    extra = summary_record["extra"]
    assert extra["strategy"] == {"type_": "concurrent", "streams": 2}
    assert "pdf" not in extra["metrics"]["time_to_first_token_ms"]["successful"]
    assert "text" not in extra["metrics"]


def test_errored_and_incomplete_requests_are_failed_requests_with_their_error_text(tmp_path: Path) -> None:
    benchmark = benchmark_v1({"type_": "concurrent", "streams": 2}, successful=1, errored=1, incomplete=1)
    records = convert(write(tmp_path, report_v1(benchmark)))
    ok, errored, incomplete = (record for record in records if "request" in record)
    assert ok["request"]["ok"] is True and "error" not in ok["request"]
    assert ok["request"] == {
        "ts": "2026-03-02T16:58:16.500000+00:00",
        "ok": True,
        "prompt_tokens": 100,
        "output_tokens": 60,
        "n_predict": 128,
        "tok_s": 30.0,
        "elapsed_s": 2.0,
        "ttft_s": 0.1,
    }
    assert errored["request"]["ok"] is False
    assert errored["request"]["error"] == "HTTPStatusError: 500 Internal Server Error"
    assert errored["extra"]["guidellm_status"] == "errored"
    assert incomplete["request"]["ok"] is False
    assert incomplete["request"]["error"].startswith("incomplete: ")
    assert incomplete["extra"]["info_status"] == "cancelled"


def test_generated_text_and_prompts_are_not_kept_only_their_lengths(tmp_path: Path) -> None:
    records = convert(write(tmp_path, report_v1(benchmark_v1({"type_": "synchronous"}))))
    request = next(record for record in records if "request" in record)
    assert request["extra"]["output_chars"] == 3000
    assert request["extra"]["request_args_chars"] > 5000
    assert "y" * 100 not in json.dumps(records)
    assert "x" * 100 not in json.dumps(records)


def test_a_sampled_benchmark_keeps_guidellms_totals_and_says_it_is_sampled(tmp_path: Path) -> None:
    benchmark = benchmark_v1({"type_": "constant", "rate": 4.0}, successful=50, errored=5, listed=3)
    records = convert(write(tmp_path, report_v1(benchmark)))
    (summary_record,) = summaries(records)
    summary = summary_record["summary"]
    assert summary["requests_sampled"] is True
    assert (summary["n_requests"], summary["n_ok"], summary["n_failed"]) == (55, 50, 5)
    assert summary["ttft_ms"]["mean"] == 100.0  # GuideLLM's aggregate, not one from the 6 listed requests
    listed = requests_of(records, summary_record["run"]["id"])
    assert len(listed) == 6
    assert sum(1 for request in listed if not request["ok"]) == 3


def test_a_list_longer_than_guidellms_total_is_rejected_naming_it(tmp_path: Path) -> None:
    benchmark = benchmark_v1({"type_": "synchronous"}, successful=2)
    benchmark["metrics"]["request_totals"]["successful"] = 1
    with pytest.raises(FormatError, match=r"benchmarks\[0\]\.requests\.successful"):
        convert(write(tmp_path, report_v1(benchmark)))


# -- versions -------------------------------------------------------------------------------


def test_a_report_from_before_version_reads_args_request_totals_and_the_worker_model(tmp_path: Path) -> None:
    records = convert(write(tmp_path, report_before_version()))
    (summary_record,) = summaries(records)
    run = summary_record["run"]
    assert run["model"] == "meta-llama/Llama-3.1-8B"
    assert run["workload"] == {"concurrency": 1}
    assert run["tool"] == {"name": "guidellm", "version": None, "format": "benchmarks.json (before version)"}
    assert (summary_record["summary"]["n_ok"], summary_record["summary"]["n_failed"]) == (1, 1)
    ok, failed = requests_of(records, run["id"])
    assert (ok["ok"], ok["elapsed_s"], ok["ttft_s"], ok["output_tokens"]) == (True, 1.0, 0.05, 16)
    assert failed == {**failed, "ok": False, "error": "TimeoutError: request timed out"}
    assert summary_record["extra"]["id_"] == "old-bench"


def test_a_version_2_report_takes_the_model_from_its_scenario(tmp_path: Path) -> None:
    records = convert(write(tmp_path, report_v2(benchmark_v1({"type_": "concurrent", "streams": 8}))))
    (summary_record,) = summaries(records)
    assert summary_record["run"]["model"] == "Qwen/Qwen3-8B"
    assert summary_record["run"]["tool"]["format"] == "benchmarks.json v2"
    assert summary_record["run"]["workload"] == {"concurrency": 8}


def test_an_unknown_report_version_is_rejected_naming_it(tmp_path: Path) -> None:
    report = report_v1(benchmark_v1({"type_": "synchronous"}))
    report["metadata"]["version"] = 3
    with pytest.raises(FormatError, match=r"metadata\.version"):
        convert(write(tmp_path, report))


def test_the_same_report_as_yaml_is_the_same_runs(tmp_path: Path) -> None:
    report = report_v1(benchmark_v1({"type_": "concurrent", "streams": 2}))
    from_json = convert(write(tmp_path, report))
    yaml_path = tmp_path / "benchmarks.yaml"
    yaml_path.write_text(yaml.dump(report))  # what GenerativeBenchmarksReport.save_file writes for .yaml
    assert guidellm.sniff(Sample(head=yaml_path.read_bytes()[:65536]))
    assert convert(yaml_path) == from_json


def test_run_ids_are_stable_and_follow_the_content_not_the_file_name(tmp_path: Path) -> None:
    report = report_v1(benchmark_v1({"type_": "concurrent", "streams": 2}))
    first = summaries(convert(write(tmp_path, report, "a.json")))[0]["run"]["id"]
    again = summaries(convert(write(tmp_path, report, "b.json")))[0]["run"]["id"]
    assert first == again
    assert first.startswith("guidellm-20260302T165816-concurrent2-")
    report["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["mean"] = 101.0
    assert summaries(convert(write(tmp_path, report, "c.json")))[0]["run"]["id"] != first


def test_declared_values_fill_what_the_file_lacks_but_never_override_it(tmp_path: Path) -> None:
    declared = Declared(gpu="RTX 4090", model="other-model", engine="vllm", label="lab", server_flags="--tp 1")
    (summary_record,) = summaries(convert(write(tmp_path, report_v1(benchmark_v1({"type_": "synchronous"}))), declared))
    run = summary_record["run"]
    assert (run["model"], run["provenance"]["model"]) == ("Qwen/Qwen3-8B", "file")
    assert (run["gpu"], run["provenance"]["gpu"]) == ("RTX 4090", "declared")
    assert (run["engine"], run["label"], run["server"]) == ("vllm", "lab", {"flags": "--tp 1"})
    assert run["provenance"]["engine"] == run["provenance"]["label"] == run["provenance"]["server_flags"] == "declared"


def test_non_finite_numbers_pythons_json_writes_are_read_as_absent(tmp_path: Path) -> None:
    report = report_v1(benchmark_v1({"type_": "synchronous"}))
    text = json.dumps(report).replace('"request_time_avg": 2.0', '"request_time_avg": NaN')
    path = tmp_path / "benchmarks.json"
    path.write_text(text)
    (summary_record,) = summaries(convert(path))
    assert summary_record["extra"]["scheduler_metrics"]["request_time_avg"] is None


# -- malformed input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "key"),
    [
        (lambda r: r.pop("benchmarks"), r"^benchmarks: "),
        (lambda r: r["benchmarks"][0].pop("metrics"), r"benchmarks\[0\]\.metrics"),
        (lambda r: r["benchmarks"][0]["config"].pop("strategy"), r"benchmarks\[0\]\.config\.strategy"),
        (lambda r: r["benchmarks"][0]["metrics"].pop("request_totals"), r"benchmarks\[0\]\.request_totals"),
        (
            lambda r: r["benchmarks"][0]["metrics"]["request_totals"].update(successful="two"),
            r"request_totals\.successful",
        ),
        (
            lambda r: r["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"].update(mean="fast"),
            r"metrics\.time_to_first_token_ms\.successful\.mean",
        ),
        (
            lambda r: r["benchmarks"][0]["requests"]["successful"][0].update(request_latency=-1.0),
            r"requests\.successful\[0\]\.request_latency",
        ),
        (lambda r: r["benchmarks"][0]["requests"].update(errored="none"), r"requests\.errored"),
    ],
)
def test_a_malformed_report_is_rejected_naming_the_key(tmp_path: Path, damage: Any, key: str) -> None:
    report = report_v1(benchmark_v1({"type_": "concurrent", "streams": 2}))
    damage(report)
    with pytest.raises(FormatError, match=key):
        convert(write(tmp_path, report))


def test_a_file_that_is_not_json_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.json"
    path.write_text('{"benchmarks": [')
    with pytest.raises(FormatError, match="not valid JSON"):
        convert(path)


# -- sniffing -------------------------------------------------------------------------------


def test_sniff_knows_guidellm_reports_of_every_version(tmp_path: Path) -> None:
    for report in (report_v1(benchmark_v1({"type_": "synchronous"})), report_before_version()):
        assert guidellm.sniff(Sample(head=json.dumps(report, indent=2).encode()[:65536]))
    assert guidellm.sniff(Sample(head=json.dumps(report_v2(benchmark_v1({"type_": "synchronous"}))).encode()))


@pytest.mark.parametrize(
    "head",
    [
        # vllm bench serve --save-result
        b'{"date": "20260301-120010", "backend": "vllm", "model_id": "Qwen/Qwen3-8B", "mean_ttft_ms": 1.0}',
        # GenAI-Perf / perf_analyzer profile_export.json
        b'{"experiments":[{"experiment":{"mode":"concurrency","value":1},"requests":[]}],"version":""}',
        # AIPerf profile_export_aiperf.json
        b'{"schema_version": "1.3", "aiperf_version": "0.11.0", "request_latency": {"unit": "ms", "avg": 1.0}}',
        # kvlab's own JSONL
        b'{"schema": "kvlab.bench/1", "run": {"id": "r"}, "request": {"ok": true}}\n',
        b"",
    ],
)
def test_sniff_refuses_other_tools_files(head: bytes) -> None:
    assert not guidellm.sniff(Sample(head=head))
    assert not guidellm.sniff(Sample(names=("benchmarks.json",), is_dir=True))
