"""SGLang's bench_serving results, written by sglang_results.py as SGLang writes them, read as kvlab reads them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks.records.formats import SCHEMA_V2, Declared, FormatError, Sample, Source, sglang, vllm

from .sglang_results import bench_result, older_result, with_details, write


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
