"""llmperf results, written by llmperf_results.py as ray-project/llmperf's token_benchmark_ray.py writes
them, read as kvlab reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.records.formats import Declared, FormatError, Sample, Source, llama_bench, llmperf

from .llmperf_results import PREFIX, RESPONSES, response, summary_file, write_run


def as_dir(directory: Path) -> Source:
    return Source(directory, files=tuple(sorted(p for p in directory.iterdir() if p.is_file())))


def convert(source: Source, declared: Declared | None = None) -> list[dict[str, Any]]:
    return list(llmperf.convert(source, declared or Declared()))


# --- the writer is llmperf's --------------------------------------------------------------------


def test_the_fixture_writes_what_llmperf_writes(tmp_path: Path) -> None:
    text = (write_run(tmp_path) / f"{PREFIX}_summary.json").read_text()
    assert '"results_number_input_tokens_min": "550"' in text  # numbers stored as strings
    assert '"results_error_code_frequency": "{429.0: 1}"' in text  # Python syntax, not JSON
    assert '"results_ttft_s_quantiles_p25": ' in text


# --- joined, and summary-only -------------------------------------------------------------------


def test_a_summary_with_its_responses_is_one_run(tmp_path: Path) -> None:
    summary_record, *requests = convert(as_dir(write_run(tmp_path)))
    run = summary_record["run"]
    assert {r["run"]["id"] for r in requests} == {run["id"]}
    assert run["id"].startswith(f"llmperf-{PREFIX}-")
    assert run["model"] == "meta-llama/Llama-2-7b-chat-hf"
    assert run["workload"] == {"concurrency": 2}
    assert run["tool"] == {"name": "llmperf", "version": "2023-08-31", "format": "llmperf token_benchmark_ray"}
    assert run["label"] == PREFIX
    assert run["started_at"] == "2024-01-10T01:54:04+00:00"  # the file's timestamp less the run's 60 s
    assert run["provenance"] == {"concurrency": "file", "duration_s": "derived", "label": "file", "model": "file",
                                 "started_at": "derived", "tool_version": "file"}  # fmt: skip
    assert len(requests) == 4
    assert [r["request"]["ok"] for r in requests] == [True, True, True, False]


def test_the_two_files_given_together(tmp_path: Path) -> None:
    directory = write_run(tmp_path)
    files = (directory / f"{PREFIX}_individual_responses.json", directory / f"{PREFIX}_summary.json")
    assert convert(Source(files[0], files=files)) == convert(as_dir(directory))


def test_a_summary_alone_is_a_summary_only_run_with_the_same_id(tmp_path: Path) -> None:
    joined = convert(as_dir(write_run(tmp_path / "joined")))
    alone = convert(as_dir(write_run(tmp_path / "alone", responses=None)))
    single_file = convert(Source(tmp_path / "alone" / f"{PREFIX}_summary.json"))
    assert alone == single_file == joined[:1]
    assert alone[0]["run"]["id"] == joined[0]["run"]["id"]


def test_responses_without_their_summary_are_refused(tmp_path: Path) -> None:
    write_run(tmp_path)
    (tmp_path / f"{PREFIX}_summary.json").unlink()
    with pytest.raises(FormatError, match=rf"need their summary \({PREFIX}_summary.json\)"):
        convert(as_dir(tmp_path))


def test_responses_of_another_run_are_refused(tmp_path: Path) -> None:
    write_run(tmp_path, responses=RESPONSES[:2])
    with pytest.raises(FormatError, match="2 responses for the summary's 4 requests"):
        convert(as_dir(tmp_path))


def test_a_directory_of_several_runs(tmp_path: Path) -> None:
    write_run(tmp_path)
    other = summary_file(RESPONSES[:1], concurrency=8, timestamp=1704851999)
    (tmp_path / "c8_summary.json").write_text(json.dumps(other, default=str))
    (tmp_path / "c8_individual_responses.json").write_text(json.dumps(RESPONSES[:1]))
    records = convert(as_dir(tmp_path))
    runs = {r["run"]["id"]: r["run"]["workload"]["concurrency"] for r in records}
    assert sorted(runs.values()) == [2, 8]
    assert len([r for r in records if "request" in r]) == 5


def test_run_ids_are_stable_and_follow_the_content(tmp_path: Path) -> None:
    first = convert(as_dir(write_run(tmp_path / "a")))[0]["run"]["id"]
    again = convert(as_dir(write_run(tmp_path / "b")))[0]["run"]["id"]
    later = convert(as_dir(write_run(tmp_path / "c", timestamp=1704900000)))[0]["run"]["id"]
    assert first == again != later


# --- values, units and errors ------------------------------------------------------------------------


def test_the_summary_in_kvlab_units(tmp_path: Path) -> None:
    summary = convert(as_dir(write_run(tmp_path)))[0]["summary"]
    assert (summary["n_requests"], summary["n_ok"], summary["n_failed"]) == (4, 3, 1)
    assert summary["requests_sampled"] is False
    assert summary["output_tok_s"] == pytest.approx(310 / 60)
    assert summary["duration_s"] == pytest.approx(60.0)
    assert summary["e2e_ms"]["mean"] == pytest.approx(1500.0)
    assert summary["e2e_ms"]["min"] == pytest.approx(1000.0)
    assert summary["e2e_ms"]["median"] == summary["e2e_ms"]["p50"] == pytest.approx(1500.0)
    assert summary["e2e_ms"]["p90"] == pytest.approx(1900.0)
    assert summary["e2e_ms"]["std"] == pytest.approx(500.0)
    assert summary["ttft_ms"]["max"] == pytest.approx(300.0)
    # llmperf's inter-token latency: a request's streaming time over its output tokens (TTFT included)
    assert summary["tpot_ms"]["mean"] == pytest.approx((10 + 2000 / 120 + 1500 / 90) / 3)
    assert "itl_ms" not in summary


def test_string_numbers_are_numbers(tmp_path: Path) -> None:
    extra = convert(as_dir(write_run(tmp_path)))[0]["extra"]
    assert extra["results_number_input_tokens_min"] == 550
    assert extra["results_number_output_tokens_max"] == 120
    assert extra["results_ttft_s_quantiles_p25"] == pytest.approx(0.225)
    assert extra["mean_input_tokens"] == 550


def test_the_python_syntax_error_counts(tmp_path: Path) -> None:
    extra = convert(as_dir(write_run(tmp_path)))[0]["extra"]
    assert extra["error_code_frequency"] == {"429": 1}
    assert "results_error_code_frequency" not in extra  # kept read, not as the Python text


@pytest.mark.parametrize(
    ("frequency", "expected"),
    [("{}", {}), ("{429.0: 2, 500.0: 1}", {"429": 2, "500": 1}), ("{-1.0: 3}", {"-1": 3}),
     ("{'timeout': 2}", {"timeout": 2})],
)  # fmt: skip
def test_error_counts_as_llmperf_prints_them(frequency: str, expected: dict[str, int]) -> None:
    assert llmperf.error_frequency(frequency, "x") == expected


@pytest.mark.parametrize(
    "hostile", ["__import__('os').system('true')", "{429: open('/etc/passwd')}", "[1, 2]", "{1: 'two'}", "{" * 5000]
)
def test_error_counts_are_never_evaluated(hostile: str) -> None:
    with pytest.raises(FormatError, match="results_error_code_frequency"):
        llmperf.error_frequency(hostile, "x")


def test_a_failed_request(tmp_path: Path) -> None:
    failed = convert(as_dir(write_run(tmp_path)))[-1]
    assert failed["request"] == {
        "ok": False,
        "http_status": 429,
        "error": '{"error":{"message":"Token rate limit exceeded","code":429}}',
        "prompt_tokens": 550,
        "output_tokens": 1,
    }  # the zeros llmperf leaves for a failed request's times are not times
    assert failed["extra"]["error_code"] == 429


def test_a_request_in_seconds(tmp_path: Path) -> None:
    second = convert(as_dir(write_run(tmp_path)))[2]
    assert second["request"] == {"ok": True, "prompt_tokens": 550, "output_tokens": 120, "elapsed_s": 2.0,
                                 "ttft_s": 0.3, "tok_s": 60.0}  # fmt: skip
    assert second["extra"] == {"number_total_tokens": 670, "inter_token_latency_s": 2.0 / 120}


def test_a_client_error_without_an_http_status(tmp_path: Path) -> None:
    responses = [*RESPONSES[:3], response(error=-1, message="")]  # an exception before any response
    failed = convert(as_dir(write_run(tmp_path, responses=responses)))[-1]
    assert failed["request"]["ok"] is False
    assert "http_status" not in failed["request"]
    assert failed["request"]["error"] == "llmperf error_code -1"


def test_every_request_failed(tmp_path: Path) -> None:
    failed = [response(error=503, message="busy"), response(error=503, message="busy")]
    (tmp_path / f"{PREFIX}_summary.json").write_text(json.dumps(summary_file(failed), default=str))
    assert "NaN" in (tmp_path / f"{PREFIX}_summary.json").read_text()
    (tmp_path / f"{PREFIX}_individual_responses.json").write_text(json.dumps(failed))
    summary_record, *requests = convert(as_dir(tmp_path))
    summary = summary_record["summary"]
    assert (summary["n_requests"], summary["n_ok"], summary["n_failed"]) == (2, 0, 2)
    assert not {"ttft_ms", "e2e_ms", "tpot_ms", "output_tok_s"} & set(summary)  # never the fastest run ever
    assert [r["request"]["http_status"] for r in requests] == [503, 503]


def test_declared_fields_fill_what_llmperf_lacks(tmp_path: Path) -> None:
    declared = Declared(gpu="H100", engine="vllm", label="prod", server_flags="--max-num-seqs 64")
    run = convert(as_dir(write_run(tmp_path)), declared)[0]["run"]
    assert (run["gpu"], run["engine"], run["label"]) == ("H100", "vllm", "prod")
    assert run["server"] == {"flags": "--max-num-seqs 64"}
    assert {k: run["provenance"][k] for k in ("gpu", "engine", "label", "server_flags")} == dict.fromkeys(
        ("gpu", "engine", "label", "server_flags"), "declared"
    )


def test_user_metadata_is_kept(tmp_path: Path) -> None:
    extra = convert(as_dir(write_run(tmp_path, framework="groq", api="https://api.example")))[0]["extra"]
    assert (extra["framework"], extra["api"], extra["timestamp"]) == ("groq", "https://api.example", 1704851704)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"results_num_requests_started": "many"}, "'results_num_requests_started' must be a number"),
        ({"results_number_errors": -1}, "'results_number_errors' must be a whole number of 0 or more"),
        ({"results_error_code_frequency": "{429.0: 'x'}"}, "not an error code and its count"),
        ({"model": ""}, "'model' must be a non-empty string"),
    ],
)
def test_a_bad_summary_names_its_key(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    path = tmp_path / f"{PREFIX}_summary.json"
    path.write_text(json.dumps({**summary_file(RESPONSES), **change}, default=str))
    with pytest.raises(FormatError, match=message) as exc:
        convert(Source(path))
    assert exc.value.where == path.name


def test_a_summary_missing_its_counts(tmp_path: Path) -> None:
    data = summary_file(RESPONSES)
    del data["results_num_requests_started"]
    (tmp_path / "x_summary.json").write_text(json.dumps(data, default=str))
    with pytest.raises(FormatError, match="missing key 'results_num_requests_started'"):
        convert(Source(tmp_path / "x_summary.json"))


def test_a_bad_response_names_its_index(tmp_path: Path) -> None:
    bad = [*RESPONSES[:3], {**RESPONSES[0], "ttft_s": "soon"}]
    write_run(tmp_path, responses=bad)
    with pytest.raises(FormatError, match=r"individual_responses.json \[3\]: 'ttft_s' must be a number"):
        convert(as_dir(tmp_path))


def test_invalid_json_is_rejected(tmp_path: Path) -> None:
    (tmp_path / f"{PREFIX}_summary.json").write_text('{"model": ')
    with pytest.raises(FormatError, match="invalid JSON"):
        convert(as_dir(tmp_path))


# --- sniffing ---------------------------------------------------------------------------------


def test_both_files_and_their_directory_are_sniffed(tmp_path: Path) -> None:
    directory = write_run(tmp_path)
    for path in directory.iterdir():
        head = path.read_bytes()[:65536]
        assert llmperf.sniff(Sample(head=head))
        assert not llama_bench.sniff(Sample(head=head))
    assert llmperf.sniff(Sample(names=tuple(p.name for p in directory.iterdir()), is_dir=True))


def test_what_is_not_llmperf() -> None:
    assert not llmperf.sniff(Sample(names=("summary.json", "run=0.json"), is_dir=True))  # a vllm bench sweep
    assert not llmperf.sniff(Sample(names=("x_summary.json", "benchmarks.json"), is_dir=True))
    assert not llmperf.sniff(Sample(head=b'{"run": "r1", "model": "m", "ok": true, "tok_s": 40.0}\n'))
    assert not llmperf.sniff(Sample(head=b'[{"build_commit": "8cf427ff", "model_filename": "m.gguf"}]'))
    assert not llmperf.sniff(Sample(head=b'{"date": "20240101", "backend": "vllm", "completed": 10}'))


# --- through the import pipeline ----------------------------------------------------------------


@pytest.mark.django_db
def test_a_run_imported_joined_then_summary_only_is_a_duplicate(tmp_path: Path) -> None:
    from benchmarks.history.importer import import_path
    from benchmarks.models import RequestResult, Run

    joined = import_path(write_run(tmp_path / "joined"), origin="command")
    assert (joined.status, joined.format, joined.n_new_runs, joined.n_imported) == ("imported", "llmperf", 1, 4)
    run = Run.objects.get()
    assert (run.n_requests, run.n_ok, run.tool, run.concurrency) == (4, 3, "llmperf", 2)
    alone = write_run(tmp_path / "alone", responses=None) / f"{PREFIX}_summary.json"
    again = import_path(alone, origin="command")
    assert (again.status, again.n_new_runs, again.n_imported) == ("imported", 0, 0)
    assert (Run.objects.count(), RequestResult.objects.count()) == (1, 4)
