"""vLLM's serving benchmark results, written by vllm_results.py as vLLM writes them, read as kvlab reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.records.formats import SCHEMA_V2, Declared, FormatError, Sample, Source, vllm
from benchmarks.records.storable import check_json

from .vllm_results import detailed, old_benchmark_serving, serve_result, write


def convert(path: Path, declared: Declared | None = None) -> list[dict[str, Any]]:
    if path.is_dir():
        files = tuple(sorted(p for p in path.rglob("*") if p.is_file()))
        return list(vllm.convert(Source(path, files), declared or Declared()))
    return list(vllm.convert(Source(path), declared or Declared()))


def summaries(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [record for record in records if "summary" in record]


def requests(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [record for record in records if "request" in record]


def test_it_reads_one_run_with_its_units_counts_and_provenance(tmp_path: Path) -> None:
    records = convert(write(tmp_path / "vllm-infqps-concurrency2-Qwen3-8B-20260301-120010.json", serve_result()))

    [record] = records
    assert record["schema"] == SCHEMA_V2
    run, summary = record["run"], record["summary"]
    assert run["model"] == "Qwen/Qwen3-8B"
    assert run["wall_s"] == 10.0
    assert run["started_at"] == "2026-03-01T12:00:00Z"  # the date is taken when the run ended
    assert run["workload"] == {"concurrency": 2, "request_rate": None}  # "inf": unpaced
    assert run["tool"] == {"name": "vllm", "format": "vllm bench serve"}
    assert run["engine"] == "vllm"
    assert (summary["n_requests"], summary["n_ok"], summary["n_failed"]) == (4, 3, 1)
    assert summary["requests_sampled"] is False
    assert (summary["duration_s"], summary["request_rate"], summary["output_tok_s"], summary["total_tok_s"]) == (
        10.0,
        0.3,
        6.0,
        36.0,
    )
    assert (summary["input_tokens"], summary["output_tokens"]) == (300, 60)
    assert summary["ttft_ms"] == {"mean": 120.0, "median": 110.0, "std": 15.0, "p99": 150.0}  # ms stay ms
    assert summary["tpot_ms"]["p99"] == 25.0
    assert summary["itl_ms"]["mean"] == 20.5
    assert summary["e2e_ms"] == {"mean": 500.0, "median": 480.0, "std": 40.0, "p99": 560.0}
    assert run["provenance"] == {
        "model": "file",
        "wall_s": "file",
        "started_at": "derived",
        "workload.concurrency": "file",
        "workload.request_rate": "file",
        "engine": "file",
    }
    # What kvlab has no field for is kept, as the file wrote it.
    assert record["extra"] == {
        "date": "20260301-120010",
        "endpoint_type": "openai",
        "backend": "vllm",
        "tokenizer_id": "Qwen/Qwen3-8B",
        "burstiness": 1.0,
        "request_goodput": None,
        "max_output_tokens_per_s": 9.0,
        "max_concurrent_requests": 2,
        "rtfx": 0.0,
    }
    check_json(record["extra"], "extra")


def test_append_result_gives_one_run_per_object(tmp_path: Path) -> None:
    first = serve_result(request_rate=1.0, date="20260301-120010")
    second = serve_result(request_rate=4.0, date="20260301-120530", duration=5.0)
    records = convert(write(tmp_path / "results.json", first, second, append=True))

    runs = [record["run"] for record in summaries(records)]
    assert [run["workload"]["request_rate"] for run in runs] == [1.0, 4.0]
    assert [run["started_at"] for run in runs] == ["2026-03-01T12:00:00Z", "2026-03-01T12:05:25Z"]
    assert len({run["id"] for run in runs}) == 2


def test_save_detailed_arrays_become_requests_in_seconds(tmp_path: Path) -> None:
    records = convert(write(tmp_path / "detailed.json", detailed()))

    [summary] = summaries(records)
    reqs = requests(records)
    assert len(reqs) == 4
    assert all(record["run"] is summary["run"] for record in reqs)
    first = reqs[0]["request"]
    assert first == {
        "ok": True,
        "prompt_tokens": 100,
        "output_tokens": 20,
        "ttft_s": 0.1,  # seconds, as the arrays hold them
        "elapsed_s": 0.5,
        "itl_s": [0.02] * 19,
    }
    assert reqs[0]["extra"] == {"generated_text": "a", "start_time_s": 1000.0, "queue_time_s": 0.0}
    failed = reqs[3]["request"]
    assert failed["ok"] is False
    assert failed["error"].endswith("Cannot connect to host")
    assert "ttft_s" not in failed and "output_tokens" not in failed  # the tool's zeros are no measurement
    assert summary["run"]["provenance"]["request.elapsed_s"] == "file"
    # The arrays are requests, not extra; the summary keeps the tool's own aggregates.
    assert not {"ttfts", "itls", "errors", "generated_texts"} & set(summary["extra"])
    assert summary["summary"]["ttft_ms"]["mean"] == 120.0


def test_old_benchmark_serving_derives_failed_and_reads_the_goodput_typo(tmp_path: Path) -> None:
    records = convert(write(tmp_path / "old.json", old_benchmark_serving()))

    [summary] = summaries(records)
    assert (summary["summary"]["n_requests"], summary["summary"]["n_failed"]) == (4, 1)
    provenance = summary["run"]["provenance"]
    assert provenance["summary.n_failed"] == "derived"  # num_prompts − completed
    assert "request_goodput" in summary["extra"] and "request_goodput:" not in summary["extra"]
    # No latencies array then: a request's elapsed time is its last token's arrival.
    first = requests(records)[0]["request"]
    assert first["elapsed_s"] == pytest.approx(0.1 + 19 * 0.02)
    assert provenance["request.elapsed_s"] == "derived"


def test_a_run_where_every_request_failed_is_a_failed_run_without_statistics(tmp_path: Path) -> None:
    zeros = {key: 0.0 for key in serve_result() if key.endswith("_ms")}
    all_failed = serve_result(
        completed=0, failed=4, total_input_tokens=0, total_output_tokens=0, request_throughput=0.0, **zeros
    )
    [record] = convert(write(tmp_path / "failed.json", all_failed))

    summary = record["summary"]
    assert (summary["n_requests"], summary["n_ok"], summary["n_failed"]) == (4, 0, 4)
    assert not {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"} & set(summary)  # never "the fastest run ever"
    assert "every request failed" in record["extra"]["statistics_absent"]
    assert not any(key.endswith("_ms") for key in record["extra"])


def test_a_sweep_directory_imports_each_run_once(tmp_path: Path) -> None:
    combination = tmp_path / "20260301_120000" / "SERVE--max_num_seqs=4-BENCH--max_concurrency=2"
    combination.mkdir(parents=True)
    runs = [serve_result(date=f"20260301-12001{n}", backend="openai", run_number=n, max_num_seqs=4) for n in range(3)]
    write(combination / "run=0.json", runs[0], indent=4)
    write(combination / "run=1.json", runs[1], indent=4)
    # run=2.json is gone; summary.json still has it, and repeats the other two.
    (combination / "summary.json").write_text(json.dumps(runs, indent=4))
    write(combination / "warmup.json", serve_result(run_number=-1, num_prompts=1, completed=1, failed=0))
    (combination / "run=3.failure.json").write_text(json.dumps({"run_number": 3, "error": "boom"}))
    (tmp_path / "20260301_120000" / "summary.csv").write_text(",date\n")

    records = convert(tmp_path)

    got = summaries(records)
    assert sorted(record["extra"]["run_number"] for record in got) == [0, 1, 2]
    assert {record["run"]["tool"]["format"] for record in got} == {"vllm bench sweep"}
    assert {record["extra"]["sweep_combination"] for record in got} == {combination.name}
    # backend "openai" cannot say what served; a sweep launches vllm serve.
    assert {record["run"]["engine"] for record in got} == {"vllm"}
    assert {record["run"]["provenance"]["engine"] for record in got} == {"derived"}
    # The same runs read from the summary alone get the same ids.
    alone = convert(_summary_copy(combination, tmp_path))
    assert {record["run"]["id"] for record in alone} == {record["run"]["id"] for record in got}


def _summary_copy(combination: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "summary-copy.json"
    copy.write_bytes((combination / "summary.json").read_bytes())
    return copy


def test_run_ids_come_from_the_content_not_the_file_name(tmp_path: Path) -> None:
    a = convert(write(tmp_path / "a.json", detailed()))
    b = convert(write(tmp_path / "b.json", detailed()))
    other = convert(write(tmp_path / "c.json", detailed(duration=10.5)))

    assert a == b  # a re-import is a duplicate, whatever the file is called
    run_id = a[0]["run"]["id"]
    assert run_id.startswith("vllm-20260301-120010-")
    assert other[0]["run"]["id"] != run_id


@pytest.mark.parametrize(
    ("overrides", "declared", "engine", "provenance"),
    [
        ({"backend": "vllm"}, Declared(engine="llama.cpp"), "vllm", "file"),  # declared never overrides
        ({"backend": "llama.cpp"}, Declared(), "llama.cpp", "file"),
        ({"backend": "openai-chat"}, Declared(engine="llama.cpp"), "llama.cpp", "declared"),
        ({"backend": "openai"}, Declared(), "vllm", "derived"),
        ({"backend": "openai", "framework": "sgl"}, Declared(), "sglang", "file"),  # --metadata framework=sgl
    ],
)
def test_the_engine_is_what_served_the_run(
    tmp_path: Path, overrides: dict[str, Any], declared: Declared, engine: str, provenance: str
) -> None:
    [record] = convert(write(tmp_path / "r.json", serve_result(**overrides)), declared)

    assert record["run"]["engine"] == engine
    assert record["run"]["provenance"]["engine"] == provenance
    assert record["run"]["tool"]["name"] == "vllm"


def test_declared_values_fill_what_the_file_lacks(tmp_path: Path) -> None:
    declared = Declared(gpu="H100 80GB", label="mine", server_flags="--max-num-seqs 64", model="other")
    [unlabelled] = convert(write(tmp_path / "a.json", serve_result()), declared)
    [labelled] = convert(write(tmp_path / "b.json", serve_result(label="nightly")), declared)

    run = unlabelled["run"]
    assert (run["gpu"], run["label"], run["server"]["flags"], run["model"]) == (
        "H100 80GB",
        "mine",
        "--max-num-seqs 64",
        "Qwen/Qwen3-8B",
    )
    assert {k: run["provenance"][k] for k in ("gpu", "label", "server.flags", "model")} == {
        "gpu": "declared",
        "label": "declared",
        "server.flags": "declared",
        "model": "file",
    }
    assert labelled["run"]["label"] == "nightly"
    assert labelled["run"]["provenance"]["label"] == "file"


def test_unusual_percentiles_and_unknown_keys_are_kept_in_extra(tmp_path: Path) -> None:
    # --metric-percentiles 25,50,99.9 --metadata gpu_driver=570
    result = serve_result(p25_ttft_ms=100.0, p50_ttft_ms=110.0, **{"p99.9_ttft_ms": 170.0}, gpu_driver="570")
    [record] = convert(write(tmp_path / "r.json", result))

    assert record["summary"]["ttft_ms"]["p50"] == 110.0
    assert record["extra"]["p25_ttft_ms"] == 100.0
    assert record["extra"]["p99.9_ttft_ms"] == 170.0
    assert record["extra"]["gpu_driver"] == "570"


def test_sniff_knows_vllm_results_and_nothing_else(tmp_path: Path) -> None:
    def head(obj: Any) -> Sample:
        return Sample(head=json.dumps(obj).encode())

    assert vllm.sniff(head(serve_result()))
    assert vllm.sniff(head(old_benchmark_serving()))
    assert vllm.sniff(Sample(head=json.dumps([serve_result()], indent=4).encode()))  # a summary.json
    assert vllm.sniff(Sample(names=("SERVE--a=1-BENCH--b=2/run=0.json",), is_dir=True))
    assert not vllm.sniff(Sample(names=("bench_results.jsonl", "notes.json"), is_dir=True))
    # SGLang's line, GuideLLM's report, llama-bench's JSON, kvlab's own records: not vLLM's.
    sglang_line = {"backend": "sglang", "completed": 3, "duration": 1.0, "total_output_tokens_retokenized": 9}
    assert not vllm.sniff(head(sglang_line))
    assert not vllm.sniff(head({"metadata": {"version": 1}, "benchmarks": [{"run_id": "x", "duration": 1}]}))
    assert not vllm.sniff(head([{"build_commit": "5a32f10", "model_filename": "m.gguf", "n_prompt": 512}]))
    assert not vllm.sniff(head({"schema": "kvlab.bench/1", "run": {"id": "r"}, "request": {"ok": True}}))
    assert not vllm.sniff(Sample(head=b"not json at all"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"date": "20260301-120010", "completed": 3', "invalid JSON at line 1"),
        (b"", "no vLLM result object"),
        (b"42", "a vLLM result is a JSON object, got int"),
        (json.dumps(serve_result(completed=...)).encode(), "missing 'completed'"),
        (json.dumps(serve_result(completed="3")).encode(), "'completed' must be an integer"),
        (json.dumps(serve_result(failed=..., num_prompts=...)).encode(), "neither 'failed' nor 'num_prompts'"),
        (json.dumps(serve_result(failed=..., num_prompts=2)).encode(), "'completed' (3) exceeds 'num_prompts' (2)"),
        (json.dumps(serve_result(date="yesterday")).encode(), "'date' must read YYYYMMDD-HHMMSS"),
        (json.dumps(serve_result(mean_ttft_ms="fast")).encode(), "'mean_ttft_ms' must be a number"),
        (json.dumps(serve_result(max_concurrency=0)).encode(), "'max_concurrency' must be an integer ≥ 1"),
        (json.dumps(serve_result(model_id=..., tokenizer_id=...)).encode(), "no model: vLLM writes it as 'model_id'"),
        (json.dumps(detailed(ttfts=[0.1, 0.1])).encode(), "'ttfts' must be a list of 4 values"),
        (json.dumps(detailed(ttfts=[0.1, -1, 0.1, 0.0])).encode(), "'ttfts'[1] must be a non-negative number"),
        (
            json.dumps(detailed(errors=[""] * 4, output_lens=[20, 20, 20, 5], latencies=[0.5, 0.5, 0.5, 0.2])).encode(),
            "hold 4 successful requests but 'completed' is 3",
        ),
        (json.dumps(detailed(completed=4, failed=0)).encode(), "hold 3 successful requests but 'completed' is 4"),
    ],
)
def test_malformed_files_are_rejected_naming_the_key(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)

    with pytest.raises(FormatError) as excinfo:
        convert(path)
    assert message in str(excinfo.value)
    assert str(excinfo.value).startswith("bad.json")


def test_a_second_bad_object_rejects_the_whole_file(tmp_path: Path) -> None:
    path = write(tmp_path / "r.json", serve_result(), serve_result(completed=-1), append=True)

    with pytest.raises(FormatError, match="line 2: 'completed' must be an integer"):
        convert(path)


def test_every_record_is_storable_json(tmp_path: Path) -> None:
    records = convert(write(tmp_path / "r.json", detailed(burstiness=float("inf"))))

    json.dumps(records, allow_nan=False)  # no NaN/Infinity reaches the database
    assert summaries(records)[0]["extra"]["burstiness"] == "inf"


@pytest.mark.django_db
def test_a_sweep_directory_imports_through_import_bench_from_a_relative_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline end to end: import_bench finds the format, the registry hands the converter the
    directory's files as typed (relative to where kvlab runs), each run is stored once, and a
    second import is a duplicate."""
    from io import StringIO

    from django.core.management import call_command

    from benchmarks.models import Run

    combination = tmp_path / "sweep" / "SERVE--max_num_seqs=4-BENCH--max_concurrency=2"
    combination.mkdir(parents=True)
    runs = [serve_result(date=f"20260301-12001{n}", backend="openai", run_number=n) for n in range(2)]
    write(combination / "run=0.json", runs[0])
    write(combination / "run=1.json", runs[1])
    (combination / "summary.json").write_text(json.dumps(runs))
    monkeypatch.chdir(tmp_path)
    lines = []
    for _ in range(2):
        out = StringIO()
        call_command("import_bench", "--json", "sweep", stdout=out)
        lines.append(json.loads(out.getvalue().splitlines()[-1]))
    first, second = lines
    assert (first["format"], first["status"], first["runs"], first["errors"]) == ("vllm", "imported", 2, [])
    assert (second["status"], second["runs"], second["duplicates"]) == ("duplicate", 0, 2)
    assert set(Run.objects.values_list("tool", "tool_format")) == {("vllm", "vllm bench sweep")}
