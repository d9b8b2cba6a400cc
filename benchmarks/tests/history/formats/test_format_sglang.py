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
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks.records.formats import SCHEMA_V2, Declared, FormatError, Sample, Source, sglang, vllm


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


def convert(path: Path, declared: Declared | None = None) -> list[dict[str, Any]]:
    return list(sglang.convert(Source(path), declared or Declared()))


def test_each_line_is_a_run_with_its_units_and_provenance(tmp_path: Path) -> None:
    path = write(tmp_path / "sglang_0301_1000_1024_128.jsonl", bench_result(), bench_result(request_rate=16.0))
    records = convert(path)

    assert len(records) == 2
    record = records[0]
    assert record["schema"] == SCHEMA_V2
    run, summary = record["run"], record["summary"]
    assert run["model"] == "meta-llama/Llama-3.1-8B-Instruct"  # from the server's /server_info
    assert run["server"] == {"ctx_size": 8192}
    assert run["wall_s"] == 20.0
    assert run["workload"] == {"concurrency": 16, "request_rate": 8.0}  # max_concurrency: the limit
    assert run["tool"] == {"name": "sglang", "format": "sglang.bench_serving"}
    assert run["engine"] == "sglang"
    assert "started_at" not in run  # SGLang records no date
    assert (summary["n_ok"], summary["n_requests"]) == (3, 3)
    assert "n_failed" not in summary  # not recorded: SGLang counts only what completed
    assert (summary["duration_s"], summary["request_rate"], summary["output_tok_s"], summary["total_tok_s"]) == (
        20.0,
        0.15,
        19.2,
        172.8,
    )
    assert (summary["input_tokens"], summary["output_tokens"]) == (3072, 384)
    assert summary["e2e_ms"] == {
        "mean": 2000.0,
        "median": 1900.0,
        "std": 100.0,
        "p90": 2100.0,
        "p95": 2150.0,
        "p99": 2190.0,
    }
    assert summary["ttft_ms"]["p95"] == 88.0
    assert summary["itl_ms"]["mean"] == 15.1
    assert summary["tpot_ms"]["p99"] == 17.0
    assert run["provenance"] == {
        "model": "file",
        "wall_s": "file",
        "workload.concurrency": "file",
        "workload.request_rate": "file",
        "engine": "file",
        "server.ctx_size": "file",
        "summary.n_requests": "derived",
    }
    assert records[1]["run"]["workload"]["request_rate"] == 16.0
    assert records[0]["run"]["id"] != records[1]["run"]["id"]


def test_concurrency_is_the_measured_mean_kept_apart_from_the_limit(tmp_path: Path) -> None:
    [record] = convert(write(tmp_path / "out.jsonl", bench_result(max_concurrency=None, concurrency=11.7)))

    assert "concurrency" not in record["run"]["workload"]  # no limit was configured
    assert record["extra"]["measured_concurrency"] == 11.7
    assert "concurrency" not in record["extra"]


def test_bare_infinity_and_nan_decode_and_non_finite_statistics_become_absent(tmp_path: Path) -> None:
    line = bench_result(request_rate=math.inf, p99_itl_ms=math.nan, mean_itl_ms=math.nan)
    path = write(tmp_path / "out.jsonl", line)
    assert b"Infinity" in path.read_bytes() and b"NaN" in path.read_bytes()

    [record] = convert(path)

    assert record["run"]["workload"]["request_rate"] is None  # unpaced
    assert record["summary"]["itl_ms"] == {"median": 14.9, "std": 2.0, "p90": 17.0, "p95": 18.0}
    assert record["extra"]["non_finite_statistics"] == ["mean_itl_ms", "p99_itl_ms"]
    json.dumps(record, allow_nan=False)


def test_a_run_where_every_request_failed_keeps_no_statistics(tmp_path: Path) -> None:
    # numpy over no successful request: 0.0 where SGLang wrote `x or 0`, NaN where it did not.
    stats = {key: (math.nan if "e2e" in key else 0.0) for key in bench_result() if key.endswith("_ms")}
    line = with_details(
        completed=0,
        output_lens=[0, 0, 0, 0],
        ttfts=[0.0] * 4,
        itls=[[], [], [], []],
        errors=["Traceback: ClientConnectorError"] * 4,
        **stats,
    )
    [summary, *requests] = convert(write(tmp_path / "out.jsonl", line))

    assert (summary["summary"]["n_requests"], summary["summary"]["n_ok"], summary["summary"]["n_failed"]) == (4, 0, 4)
    assert not {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"} & set(summary["summary"])
    assert "every request failed" in summary["extra"]["statistics_absent"]
    assert [record["request"]["ok"] for record in requests] == [False] * 4


def test_output_details_arrays_become_requests_in_seconds(tmp_path: Path) -> None:
    [summary, *requests] = convert(write(tmp_path / "out.jsonl", with_details()))

    assert (summary["summary"]["n_requests"], summary["summary"]["n_ok"], summary["summary"]["n_failed"]) == (4, 3, 1)
    first = requests[0]["request"]
    assert first["ok"] is True
    assert (first["prompt_tokens"], first["output_tokens"], first["ttft_s"]) == (1024, 128, 0.08)
    assert first["elapsed_s"] == pytest.approx(0.08 + 127 * 0.015)  # the last token's arrival
    assert first["itl_s"] == [0.015] * 127
    assert requests[0]["extra"] == {"generated_text": "x"}
    assert requests[3]["request"] == {
        "ok": False,
        "error": 'Bad Request: {"error": "context length exceeded"}',
        "prompt_tokens": 1024,
    }
    assert summary["run"]["provenance"]["request.elapsed_s"] == "derived"
    assert not {"ttfts", "itls", "errors"} & set(summary["extra"])


def test_an_older_line_needs_the_model_declared(tmp_path: Path) -> None:
    path = write(tmp_path / "out.jsonl", older_result())

    with pytest.raises(FormatError, match="no model: SGLang writes it in server_info"):
        convert(path)
    [record] = convert(path, Declared(model="Llama-3.3-70B", gpu="H200", label="online"))
    run = record["run"]
    assert (run["model"], run["gpu"], run["label"]) == ("Llama-3.3-70B", "H200", "online")
    assert {k: run["provenance"][k] for k in ("model", "gpu", "label")} == {
        "model": "declared",
        "gpu": "declared",
        "label": "declared",
    }
    assert "n_failed_unknown" in record["extra"]


@pytest.mark.parametrize(
    ("backend", "declared", "engine", "provenance"),
    [
        ("sglang-oai-chat", Declared(engine="vllm"), "sglang", "file"),
        ("vllm", Declared(), "vllm", "file"),
        ("trt", Declared(), "tensorrt-llm", "file"),
        ("truss", Declared(engine="tgi"), "tgi", "declared"),
        ("gserver", Declared(), "sglang", "derived"),
    ],
)
def test_the_engine_is_what_served_the_run(
    tmp_path: Path, backend: str, declared: Declared, engine: str, provenance: str
) -> None:
    [record] = convert(write(tmp_path / "out.jsonl", bench_result(backend=backend)), declared)

    assert (record["run"]["engine"], record["run"]["provenance"]["engine"]) == (engine, provenance)


def test_run_ids_come_from_each_line_not_the_file(tmp_path: Path) -> None:
    first = convert(write(tmp_path / "a.jsonl", bench_result()))
    both = convert(write(tmp_path / "b.jsonl", bench_result(), bench_result(duration=21.0)))
    tagged = convert(write(tmp_path / "c.jsonl", bench_result(tag="nightly")))

    assert both[0] == first[0]  # appending a run leaves the earlier runs duplicates
    assert both[1]["run"]["id"] != first[0]["run"]["id"]
    assert first[0]["run"]["id"].startswith("sglang-")
    assert tagged[0]["run"]["label"] == "nightly"


def test_sniff_knows_sglang_lines_and_nothing_else() -> None:
    def head(*objs: Any) -> Sample:
        return Sample(head="".join(json.dumps(obj) + "\n" for obj in objs).encode())

    assert sglang.sniff(head(bench_result(), bench_result()))
    assert sglang.sniff(head(older_result(request_rate=math.inf)))
    assert not vllm.sniff(head(bench_result()))  # nor does vLLM's sniff take SGLang's lines
    vllm_result = {"date": "20260301-120010", "model_id": "m", "num_prompts": 4, "completed": 4, "duration": 1.0}
    assert not sglang.sniff(head(vllm_result | {"backend": "vllm"}))
    assert not sglang.sniff(head({"schema": "kvlab.bench/1", "run": {"id": "r"}, "request": {"ok": True}}))
    assert not sglang.sniff(Sample(names=("out.jsonl",), is_dir=True))
    assert not sglang.sniff(Sample(head=b"garbage"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "no SGLang result line"),
        (json.dumps(bench_result()).encode() + b'\n{"backend": "sglang", "compl', "invalid JSON at line 2"),
        (b"[1, 2]\n", "line 1: an SGLang result line is a JSON object, got list"),
        (json.dumps(bench_result(completed=...)).encode(), "missing 'completed'"),
        (json.dumps(bench_result(completed=2.5)).encode(), "'completed' must be an integer"),
        (json.dumps(bench_result(duration="20s")).encode(), "'duration' must be a non-negative number"),
        (json.dumps(bench_result(server_info="up")).encode(), "'server_info' must be an object"),
        (json.dumps(bench_result(max_concurrency="16")).encode(), "'max_concurrency' must be an integer"),
        (json.dumps(with_details(itls=[[0.1], [0.1], "x", []])).encode(), "'itls'[2] must be a list of seconds"),
        (json.dumps(with_details(errors=["", "", ""])).encode(), "'input_lens' must be a list of 3 values"),
        (json.dumps(with_details(completed=4)).encode(), "hold 3 successful requests but 'completed' is 4"),
    ],
)
def test_malformed_files_are_rejected_naming_the_key(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(content)

    with pytest.raises(FormatError) as excinfo:
        convert(path)
    assert message in str(excinfo.value)
    assert str(excinfo.value).startswith("out.jsonl")
