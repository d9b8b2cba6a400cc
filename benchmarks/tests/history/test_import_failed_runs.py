"""A run where every request failed imports as a failed run, whatever tool measured it.

Each fixture is what the tool's source writes when every request fails:

* AIPerf (ai-dynamo/aiperf): ``src/aiperf/post_processors/record_export_results_processor.py``
  at 017c63d230ace93f323d5e423e95a6bb9aad1335 exports an error record even when it has no
  displayable metric (``if not display_metrics and not record_data.error: return``), as
  ``MetricRecordInfo`` of ``src/aiperf/common/models/record_models.py`` (same commit):
  ``{"metadata", "metrics", "error": {"code", "type", "message"}}``; an error record's only
  metric is ``error_isl`` (``aiperf/metrics/types/input_sequence_length_metric.py`` at
  db4f6397d11ee2d4cfbb41f70b2327315163dcf0). The model is in no record: the dataset manager
  writes it into ``inputs.json`` (``src/aiperf/dataset/dataset_manager.py``,
  ``_generate_inputs_json_file``: ``{"data": [{"session_id", "payloads": [{"model", ...}]}]}``;
  the chat payload's ``"model"`` from ``aiperf/clients/openai/openai_chat.py`` at db4f6397).
  ``profile_export_aiperf.json`` is written only when the records manager hands back results
  (``aiperf/controller/system_controller.py`` at db4f6397, ``_on_process_records_result_message``):
  a run that ends on an error or is cancelled leaves the JSONL and inputs.json alone.
* vLLM: ``vllm/benchmarks/serve.py`` at 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1,
  ``calculate_metrics``: ``completed`` 0, ``failed`` the count, every statistic numpy over
  ``x or 0`` (0.0); ``--save-detailed`` keeps the per-request arrays with each error's text.
* SGLang: ``python/sglang/benchmark/serving.py`` at 00f9ec472ffef82714c0407b842ccb5bd254d130 and
  ``python/sglang/bench_serving.py`` at 0033168f0f58b2bc05aa0273bd475d9c01bafb1c: "All requests
  failed" is a warning, the line is still appended with ``completed`` 0, the E2E statistics NaN
  (``np.mean([])``, no ``or 0``) and no count of the requests that ran.
* GuideLLM (vllm-project/guidellm ``src/guidellm/schemas/info.py`` at
  ee7a77457ba668b4b5ccb40f110518829893b36a): an errored request keeps ``info.status`` "errored"
  and ``info.error``; its first-token times are None, so its TTFT and output tokens are too.
* llmperf: ``src/llmperf/ray_clients/openai_chat_completions_client.py`` at 0451d33b sets
  ``error_code`` (the HTTP status, or -1) and ``error_msg`` and leaves every time 0;
  ``metrics_summary`` (token_benchmark_ray.py) gives NaN statistics over no successful request.
* GenAI-Perf: perf_analyzer ``src/profile_data_exporter.cc`` at
  263c5f6e0c7a6c15472a54409174981f67930cfe records a request with its response timestamps and
  outputs; ``src/infer_context.cc`` records only requests whose HTTP status was not an error, so
  the failed requests in ``profile_export.json`` are those whose stream carried an error object.
"""

from __future__ import annotations

import json
import math
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from benchmarks.history.importer import import_path
from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.models.outcomes import OUTCOME_Q
from benchmarks.records import outcomes
from benchmarks.records.formats import Declared

from .failed_run_files import CONTEXT_EXCEEDED, START_NS, aiperf_artifacts, aiperf_error_record
from .formats import guidellm_results as guidellm_files
from .formats import llmperf_results as llmperf_files
from .formats import sglang_results as sglang_files
from .formats import vllm_results as vllm_files

pytestmark = pytest.mark.django_db


def the_failed_run() -> Run:
    """The one stored run, which must be failed by kvlab's one rule (outcomes) in Python and in SQL."""
    run = Run.objects.get()
    assert run.outcome == outcomes.FAILED
    assert Run.objects.filter(OUTCOME_Q[outcomes.FAILED]).get() == run
    return run


def failed_requests(run: Run) -> list[RequestResult]:
    requests = list(run.requests.order_by("seq"))
    assert requests and all(not request.ok for request in requests)
    return requests


# -- AIPerf ---------------------------------------------------------------------------------


def test_an_aiperf_run_whose_every_request_failed_is_a_failed_run_with_its_errors(tmp_path: Path) -> None:
    result = import_path(
        aiperf_artifacts(tmp_path / "artifacts" / "qwen3-4b-openai-chat-concurrency4"), origin="command"
    )

    assert (result.status, result.format, result.n_imported, result.n_rejected) == ("imported", "aiperf", 3, 0)
    run = the_failed_run()
    assert (run.model, run.provenance["model"], run.n_requests, run.n_ok) == ("qwen3-4b", "file", 3, 0)
    requests = failed_requests(run)
    assert [r.http_status for r in requests] == [500, 500, 500]
    assert all("Context size has been exceeded" in r.error for r in requests)
    assert {r.error_type for r in requests} == {"context_exceeded"}
    assert [r.prompt_tokens for r in requests] == [550, None, 550]  # error_isl: the failed request's prompt


def test_aiperf_error_records_without_their_model_are_refused_once_saying_where_it_is_found(tmp_path: Path) -> None:
    jsonl = aiperf_artifacts(tmp_path / "run", inputs=False) / "profile_export.jsonl"

    result = import_path(jsonl, origin="command")

    assert (result.status, result.n_rejected) == ("rejected", 1)
    (reason,) = result.rejected_lines.values_list("reason", flat=True)
    assert "inputs.json" in reason and "profile_export_aiperf.json" in reason and "--model" in reason
    assert not Run.objects.exists()


def test_aiperf_error_records_import_with_a_declared_model(tmp_path: Path) -> None:
    jsonl = aiperf_artifacts(tmp_path / "run", inputs=False) / "profile_export.jsonl"

    result = import_path(jsonl, origin="command", declared=Declared(model="qwen3-4b"))

    assert result.status == "imported"
    run = the_failed_run()
    assert (run.model, run.provenance["model"]) == ("qwen3-4b", "declared")


def test_aiperf_records_and_their_inputs_given_as_files_are_the_run_of_their_directory(tmp_path: Path) -> None:
    directory = aiperf_artifacts(tmp_path / "run")
    out, err = StringIO(), StringIO()

    call_command(
        "import_bench",
        "--json",
        str(directory / "profile_export.jsonl"),
        str(directory / "inputs.json"),
        stdout=out,
        stderr=err,
    )

    (line,) = [json.loads(text) for text in out.getvalue().splitlines()]
    assert (line["format"], line["status"], line["runs"], line["requests"]) == ("aiperf", "imported", 1, 3)
    assert the_failed_run().model == "qwen3-4b"


def test_an_aiperf_export_of_a_failed_run_joins_its_error_records(tmp_path: Path) -> None:
    """profile_export_aiperf.json of an all-failed run: error_request_count and error_summary, no request_count."""
    directory = aiperf_artifacts(tmp_path / "run", inputs=False)
    export = {
        "schema_version": "1.3",
        "aiperf_version": "0.11.0",
        "benchmark_id": "b1",
        "error_request_count": {"unit": "requests", "avg": 3.0},
        "benchmark_duration": {"unit": "sec", "avg": 2.1},
        "input_config": {"endpoint": {"model_names": ["qwen3-4b"], "type": "chat", "streaming": True}},
        "was_cancelled": False,
        "error_summary": [
            {"error_details": {"code": 500, "type": "Internal Server Error", "message": CONTEXT_EXCEEDED}, "count": 3}
        ],
        "start_time": "2026-09-30T16:53:39.902853",
        "end_time": "2026-09-30T16:53:42.002853",
    }
    (directory / "profile_export_aiperf.json").write_text(json.dumps(export, indent=2))

    result = import_path(directory, origin="command")

    assert (result.status, result.n_summaries, result.n_imported) == ("imported", 1, 3)
    run = the_failed_run()
    assert (run.summary["n_requests"], run.summary["n_failed"]) == (3, 3)
    assert run.ttft_p50 is None and run.throughput_tok_s is None
    assert len(failed_requests(run)) == 3


# -- vLLM -----------------------------------------------------------------------------------


def vllm_all_failed(**overrides: Any) -> dict[str, Any]:
    zeros = {key: 0.0 for key in vllm_files.serve_result() if key.endswith("_ms")}
    return vllm_files.serve_result(
        completed=0,
        failed=4,
        total_input_tokens=0,
        total_output_tokens=0,
        request_throughput=0.0,
        output_throughput=0.0,
        total_token_throughput=0.0,
        max_output_tokens_per_s=0.0,
        max_concurrent_requests=0,
        **{**zeros, **overrides},
    )


def test_a_vllm_result_whose_every_request_failed_is_a_failed_run_with_its_errors(tmp_path: Path) -> None:
    arrays = {
        "input_lens": [100] * 4,
        "output_lens": [0] * 4,
        "ttfts": [0.0] * 4,
        "itls": [[]] * 4,
        "latencies": [0.0] * 4,
        "start_times": [1000.0, 1000.1, 1000.2, 1000.3],
        "generated_texts": [""] * 4,
        "errors": ["Bad Request"] * 3 + ["Traceback ...\naiohttp.ClientConnectorError: Cannot connect to host"],
    }
    path = vllm_files.write(tmp_path / "result.json", vllm_all_failed(**arrays))

    result = import_path(path, origin="command")

    assert (result.status, result.format, result.n_imported) == ("imported", "vllm", 4)
    run = the_failed_run()
    assert (run.n_requests, run.n_ok, run.ttft_p50, run.e2e_p95) == (4, 0, None, None)  # no 0.0 "measurements"
    assert [r.error for r in failed_requests(run)][-1].endswith("Cannot connect to host")


def test_a_vllm_summary_whose_every_request_failed_is_a_failed_run(tmp_path: Path) -> None:
    path = vllm_files.write(tmp_path / "result.json", vllm_all_failed())

    assert import_path(path, origin="command").status == "imported"
    run = the_failed_run()
    assert (run.n_requests, run.n_ok, run.throughput_tok_s) == (4, 0, None)


# -- SGLang ---------------------------------------------------------------------------------


def sglang_all_failed(**overrides: Any) -> dict[str, Any]:
    stats = {key: (math.nan if "e2e" in key else 0.0) for key in sglang_files.bench_result() if key.endswith("_ms")}
    zeros = dict.fromkeys(
        ("total_input_tokens", "total_input_text_tokens", "total_output_tokens", "total_output_tokens_retokenized",
         "max_concurrent_requests"),
        0,
    )  # fmt: skip
    rates = dict.fromkeys(
        ("request_throughput", "input_throughput", "output_throughput", "total_throughput", "concurrency",
         "max_output_tokens_per_s"),
        0.0,
    )  # fmt: skip
    return sglang_files.bench_result(**{"completed": 0, **zeros, **rates, **stats, **overrides})


def test_an_sglang_line_with_its_failed_requests_is_a_failed_run_with_their_errors(tmp_path: Path) -> None:
    line = sglang_all_failed(
        input_lens=[1024] * 3,
        output_lens=[0] * 3,
        ttfts=[0.0] * 3,
        itls=[[]] * 3,
        generated_texts=[""] * 3,
        errors=['Bad Request: {"error": "context length exceeded"}'] * 3,
    )
    result = import_path(sglang_files.write(tmp_path / "out.jsonl", line), origin="command")

    assert (result.status, result.n_imported) == ("imported", 3)
    run = the_failed_run()
    assert (run.n_requests, run.n_ok) == (3, 0)
    assert {r.error for r in failed_requests(run)} == {'Bad Request: {"error": "context length exceeded"}'}


def test_an_sglang_line_with_no_completed_request_is_a_failed_run_of_unknown_size(tmp_path: Path) -> None:
    """Without --output-details SGLang writes no request count: completed 0 still means every request failed."""
    result = import_path(sglang_files.write(tmp_path / "out.jsonl", sglang_all_failed()), origin="command")

    assert result.status == "imported"
    run = the_failed_run()
    assert run.n_ok == 0 and run.ttft_p50 is None
    assert run.provenance["summary.n_requests"] == "derived"
    assert "at least" in run.summary_extra["n_requests_lower_bound"]


def test_an_older_sglang_line_names_where_the_model_would_be_and_how_to_declare_it(tmp_path: Path) -> None:
    older = sglang_all_failed(tag=..., server_info=..., total_input_text_tokens=..., total_input_vision_tokens=...)
    path = sglang_files.write(tmp_path / "out.jsonl", older)

    rejected = import_path(path, origin="command")
    (reason,) = rejected.rejected_lines.values_list("reason", flat=True)
    assert "server_info" in reason and "--model" in reason

    assert import_path(path, origin="command", declared=Declared(model="llama-3-8b")).status == "imported"
    assert the_failed_run().model == "llama-3-8b"


# -- GuideLLM -------------------------------------------------------------------------------


def guidellm_errored_request(index: int) -> dict[str, Any]:
    request = guidellm_files.request_v1(index, error="HTTPStatusError: Server error '503 Service Unavailable'")
    request["info"]["status"] = "errored"
    request["info"]["timings"]["first_token_iteration"] = None
    for key in ("time_to_first_token_ms", "output_tokens", "tokens_per_second", "output_tokens_per_second",
                "time_per_output_token_ms", "inter_token_latency_ms"):  # fmt: skip
        request[key] = None
    request["output"] = ""
    return request


def test_a_guidellm_benchmark_of_errored_requests_only_is_a_failed_run_with_their_errors(tmp_path: Path) -> None:
    benchmark = guidellm_files.benchmark_v1({"type_": "concurrent", "streams": 2}, successful=0, errored=3)
    benchmark["requests"]["errored"] = [guidellm_errored_request(100 + i) for i in range(3)]
    empty = guidellm_files.status_summary([], errored=[2.0, 2.0, 2.0])
    benchmark["metrics"] = {
        "request_totals": {"successful": 0, "errored": 3, "incomplete": 0, "total": 3},
        **{
            name: empty
            for name in ("requests_per_second", "request_latency", "time_to_first_token_ms", "inter_token_latency_ms",
                         "output_tokens_per_second", "tokens_per_second", "prompt_token_count", "output_token_count")
        },
    }  # fmt: skip
    result = import_path(guidellm_files.write(tmp_path, guidellm_files.report_v1(benchmark)), origin="command")

    assert (result.status, result.format, result.n_imported) == ("imported", "guidellm", 3)
    run = the_failed_run()
    assert (run.n_requests, run.n_ok, run.ttft_p50, run.throughput_tok_s) == (3, 0, None, None)
    assert {r.error for r in failed_requests(run)} == {"HTTPStatusError: Server error '503 Service Unavailable'"}


# -- llmperf --------------------------------------------------------------------------------


def llmperf_all_failed(directory: Path) -> tuple[Path, Path]:
    failed = [llmperf_files.response(error=500, message=CONTEXT_EXCEEDED) for _ in range(3)]
    failed.append(llmperf_files.response(error=-1, message=""))  # the request raised before any response
    directory.mkdir(parents=True, exist_ok=True)
    summary = directory / f"{llmperf_files.PREFIX}_summary.json"
    summary.write_text(json.dumps(llmperf_files.summary_file(failed), indent=4, default=str))
    responses = directory / f"{llmperf_files.PREFIX}_individual_responses.json"
    responses.write_text(json.dumps(failed, indent=4))
    return summary, responses


def test_an_llmperf_run_whose_every_request_failed_given_as_its_two_files_is_a_failed_run(tmp_path: Path) -> None:
    summary, responses = llmperf_all_failed(tmp_path / "results")
    assert "NaN" in summary.read_text()  # metrics_summary over no successful request
    out, err = StringIO(), StringIO()

    call_command("import_bench", str(summary), str(responses), stdout=out, stderr=err)

    assert "read 5, imported 4" in out.getvalue() and "rejected 0" in out.getvalue()
    run = the_failed_run()
    requests = failed_requests(run)
    assert [r.http_status for r in requests] == [500, 500, 500, None]
    assert requests[-1].error == "llmperf error_code -1"


# -- GenAI-Perf -----------------------------------------------------------------------------


def genai_failed_request(start: int) -> dict[str, Any]:
    """A request whose 200 stream carried an error object: the one kind of failure perf_analyzer records."""
    payload = {"model": "llama-3-8b", "messages": [{"role": "user", "content": "q" * 300}], "max_tokens": 64}
    error = {"error": {"object": "error", "message": "This model's maximum context length is 4096", "code": 400}}
    return {
        "timestamp": start,
        "request_inputs": {"payload": json.dumps(payload)},
        "response_timestamps": [start + 3_000_000],
        "response_outputs": [{"response": f"data: {json.dumps(error)}\n\n"}],
    }


def test_a_genai_perf_experiment_whose_every_request_failed_is_a_failed_run(tmp_path: Path) -> None:
    export = {
        "experiments": [
            {
                "experiment": {"mode": "concurrency", "value": 2},
                "requests": [genai_failed_request(START_NS + i * 10_000_000) for i in range(3)],
                "window_boundaries": [START_NS, START_NS + 1_000_000_000],
            }
        ],
        "version": "0.0.16",
        "service_kind": "openai",
        "endpoint": "v1/chat/completions",
    }
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(export))

    result = import_path(path, origin="command")

    assert (result.status, result.format, result.n_imported) == ("imported", "genai-perf", 3)
    run = the_failed_run()
    requests = failed_requests(run)
    assert [r.http_status for r in requests] == [400, 400, 400]
    assert requests[0].error == "This model's maximum context length is 4096"


# -- wherever runs are shown ----------------------------------------------------------------


def test_failed_runs_of_every_tool_are_listed_as_failed(tmp_path: Path, client: Any) -> None:
    for tool, given in failed_run_inputs(tmp_path).items():
        assert import_path(given, origin="command").status == "imported", tool
    lower_bound = sglang_files.write(tmp_path / "bare.jsonl", sglang_all_failed())  # no per-request arrays
    assert import_path(lower_bound, origin="command").status == "imported"

    page = client.get("/runs/", {"outcome": outcomes.FAILED})

    assert page.status_code == 200
    listed = [run.tool for run in page.context["page"].object_list]
    assert sorted(listed) == sorted([*TOOLS, "sglang"])
    assert page.content.decode().count('class="outcome-failed"') == 7
    assert not Run.objects.exclude(OUTCOME_Q[outcomes.FAILED]).exists()
    bare = Run.objects.get(summary_extra__has_key="n_requests_lower_bound")
    detail = client.get(f"/runs/{bare.pk}/").content.decode()
    assert "at least one request ran and none succeeded" in detail


def test_a_rejected_failed_run_stores_nothing(tmp_path: Path) -> None:
    directory = aiperf_artifacts(tmp_path / "run", inputs=False)
    with pytest.raises(CommandError, match="1 of 1"):
        call_command("import_bench", str(directory), stdout=StringIO(), stderr=StringIO())
    assert not Run.objects.exists() and not RequestResult.objects.exists()


# -- extremes: a failed run's file damaged is rejected whole with its reason, or imported whole --------

HUGE = 10**30  # past the 64-bit integers a database column or orjson holds


def failed_run_inputs(tmp_path: Path, huge: bool = False) -> dict[str, Path]:
    """Each tool's failed run as an input; huge puts HUGE into a count or time the tool writes as an integer."""
    big = HUGE if huge else None
    aiperf = aiperf_artifacts(tmp_path / "aiperf")
    if huge:
        line = aiperf_error_record(0)
        line["metrics"]["error_isl"]["value"] = HUGE
        (aiperf / "profile_export.jsonl").write_text(json.dumps(line) + "\n")
    arrays = {"errors": ["Bad Request"] * 4, "input_lens": [big or 100] * 4, "output_lens": [0] * 4}
    vllm = vllm_files.write(tmp_path / "vllm.json", vllm_all_failed(**arrays))
    details = {"input_lens": [big or 1024] * 2, "output_lens": [0] * 2, "ttfts": [0.0] * 2, "itls": [[]] * 2,
               "generated_texts": [""] * 2, "errors": ["Bad Request"] * 2}  # fmt: skip
    sglang = sglang_files.write(tmp_path / "sglang.jsonl", sglang_all_failed(**details))
    summary, responses = llmperf_all_failed(tmp_path / "llmperf")
    if huge:
        answers = json.loads(responses.read_text())
        answers[0]["number_input_tokens"] = HUGE
        responses.write_text(json.dumps(answers))
    benchmark = guidellm_files.benchmark_v1({"type_": "concurrent", "streams": 2}, successful=0, errored=2)
    benchmark["requests"]["errored"] = [guidellm_errored_request(100 + i) for i in range(2)]
    if huge:
        benchmark["requests"]["errored"][0]["prompt_tokens"] = HUGE
    guidellm = guidellm_files.write(tmp_path, guidellm_files.report_v1(benchmark))
    request = genai_failed_request(START_NS)
    if huge:
        request["timestamp"] = HUGE
    genai = tmp_path / "profile_export.json"
    experiment = {"experiment": {"mode": "concurrency", "value": 1}, "requests": [request]}
    genai.write_text(json.dumps({"experiments": [experiment], "service_kind": "openai"}))
    return {"aiperf": aiperf, "vllm": vllm, "sglang": sglang, "llmperf": tmp_path / "llmperf", "guidellm": guidellm,
            "genai-perf": genai}  # fmt: skip


def the_file(path: Path) -> Path:
    """The file to damage: the input itself, or the records of a directory."""
    if path.is_file():
        return path
    return next(p for p in sorted(path.iterdir()) if p.name in ("profile_export.jsonl", RESPONSES_NAME))


RESPONSES_NAME = f"{llmperf_files.PREFIX}_individual_responses.json"
TOOLS = ("aiperf", "vllm", "sglang", "llmperf", "guidellm", "genai-perf")


def reasons_of(result: FileImport) -> list[str]:
    assert result.status == "rejected", result.status
    assert not Run.objects.exists() and not RequestResult.objects.exists()  # nothing half-imported
    found = list(result.rejected_lines.values_list("reason", flat=True))
    assert found and not any("converter failed" in reason for reason in found), found  # a reason, not a crash
    return found


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda data: data[: len(data) // 2] + b"\x00" + data[len(data) // 2 :], "JSON"),  # a raw NUL byte
        (lambda data: data[: len(data) * 2 // 3], "JSON"),  # cut short, as by a full disk
    ],
    ids=["nul-byte", "truncated"],
)
def test_a_damaged_failed_run_is_rejected_whole_with_its_reason(tmp_path: Path, tool: str, damage: Any,
                                                                expected: str) -> None:  # fmt: skip
    given = failed_run_inputs(tmp_path)[tool]
    file = the_file(given)
    file.write_bytes(damage(file.read_bytes()))

    (reason, *_) = reasons_of(import_path(given, origin="command"))
    assert expected in reason and file.name in reason


@pytest.mark.parametrize("tool", TOOLS)
def test_an_integer_past_64_bits_is_rejected_naming_its_place(tmp_path: Path, tool: str) -> None:
    given = failed_run_inputs(tmp_path, huge=True)[tool]

    reasons = reasons_of(import_path(given, origin="command"))
    assert len(reasons) == 1, reasons  # once, not once per record
    assert any(word in reasons[0] for word in ("64 bits", "64-bit", "JSON", "not a time")), reasons


@pytest.mark.parametrize("tool", TOOLS)
def test_a_failed_run_saved_with_a_byte_order_mark_imports_as_without(tmp_path: Path, tool: str) -> None:
    given = failed_run_inputs(tmp_path)[tool]
    file = the_file(given)
    file.write_bytes(b"\xef\xbb\xbf" + file.read_bytes())

    result = import_path(given, origin="command")

    assert (result.status, result.format) == ("imported", tool)
    assert the_failed_run().tool == tool


@pytest.mark.parametrize("tool", TOOLS)
def test_a_nul_character_in_an_error_message_rejects_the_run_saying_so(tmp_path: Path, tool: str) -> None:
    given = failed_run_inputs(tmp_path)[tool]
    file = the_file(given)
    text = file.read_text()
    # GenAI-Perf's error is JSON inside a JSON string: its escape is escaped once more
    nul = "\\\\u0000" if tool == "genai-perf" else "\\u0000"
    for message in ("Context size has been exceeded", "Bad Request", "Service Unavailable", "maximum context"):
        text = text.replace(message, message + nul, 1)
    file.write_text(text)

    reasons = reasons_of(import_path(given, origin="command"))
    assert any("NUL" in reason for reason in reasons), reasons


def test_an_aiperf_run_whose_records_file_is_empty_is_refused_saying_so(tmp_path: Path) -> None:
    given = failed_run_inputs(tmp_path)["aiperf"]
    (given / "profile_export.jsonl").write_bytes(b"")

    (reason,) = reasons_of(import_path(given, origin="command"))
    assert "no profiling records" in reason


@pytest.mark.parametrize("place", ["response", "summary metadata"])
def test_an_llmperf_integer_past_the_float_range_is_a_reason_not_a_crash(tmp_path: Path, place: str) -> None:
    """json.dump writes any Python int; 10**400 overflows a float and orjson alike."""
    summary, responses = llmperf_all_failed(tmp_path / "llmperf")
    changed = json.loads((responses if place == "response" else summary).read_text())
    if place == "response":
        changed[0]["number_input_tokens"] = 10**400
    else:
        changed["user_tokens"] = 10**400  # a --metadata pair llmperf keeps as given
    (responses if place == "response" else summary).write_text(json.dumps(changed))

    (reason,) = reasons_of(import_path(tmp_path / "llmperf", origin="command"))
    assert "64" in reason
