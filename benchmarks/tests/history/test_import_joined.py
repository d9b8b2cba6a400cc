"""Files of one tool's run given together — on one command line or in one upload — are joined as the
run's directory would be read; every other file stays an input of its own.

The tools' files are the fixtures of their format tests (each written as the tool's source writes
it, cited there).
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.records.formats import registry
from benchmarks.tests.builders import flat, jsonl

from .formats import aiperf_results as aiperf_files
from .formats import llmperf_results as llmperf_files
from .formats import vllm_results as vllm_files

pytestmark = pytest.mark.django_db

SUMMARY = f"{llmperf_files.PREFIX}_summary.json"
RESPONSES = f"{llmperf_files.PREFIX}_individual_responses.json"


def import_bench(*args: str) -> list[dict[str, Any]]:
    out = StringIO()
    call_command("import_bench", "--json", *args, stdout=out, stderr=StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def aiperf_run(directory: Path) -> Path:
    """An AIPerf artifact directory: the aggregates, 2 request records, and inputs.json."""
    aiperf_files.write(directory, "profile_export_aiperf.json", aiperf_files.aiperf_json())
    aiperf_files.write(directory, "profile_export.jsonl", [aiperf_files.jsonl_line(1), aiperf_files.jsonl_line(2)])
    aiperf_files.write(directory, "inputs.json", {"data": [{"session_id": "s", "payloads": [{"model": "qwen3-4b"}]}]})
    return directory


# -- the command line -----------------------------------------------------------------------


def test_an_llmperf_summary_and_its_responses_given_as_files_are_one_run_with_its_requests(tmp_path: Path) -> None:
    results = llmperf_files.write_run(tmp_path / "raw_data")

    (line,) = import_bench(str(results / SUMMARY), str(results / RESPONSES))

    assert line["file"] == f"{results / SUMMARY}, {results / RESPONSES}"
    assert (line["format"], line["status"], line["runs"], line["requests"]) == ("llmperf", "imported", 1, 4)
    run = Run.objects.get()
    assert (run.n_requests, run.n_ok, run.summary["n_requests"]) == (4, 3, 4)
    assert FileImport.objects.get().filename == line["file"][:255]  # the column's width


def test_the_files_given_together_are_the_run_their_directory_is(tmp_path: Path) -> None:
    """Joined from the files or read from the directory: the same run, so the second import adds nothing."""
    results = llmperf_files.write_run(tmp_path / "raw_data")
    import_bench(str(results / RESPONSES), str(results / SUMMARY))  # in any order

    (again,) = import_bench(str(results))

    assert (again["status"], again["runs"], again["requests"]) == ("duplicate", 0, 0)
    assert (Run.objects.count(), RequestResult.objects.count()) == (1, 4)


def test_a_file_of_another_run_given_alongside_stays_an_input_of_its_own(tmp_path: Path) -> None:
    results = llmperf_files.write_run(tmp_path / "raw_data")
    lab = results / "lab.jsonl"
    lab.write_bytes(jsonl(flat(run="lab-1")))
    other = llmperf_files.write_run(tmp_path / "elsewhere") / RESPONSES  # the same name, another folder

    lines = import_bench(str(results / SUMMARY), str(lab), str(results / RESPONSES))
    assert [(line["format"], line["status"]) for line in lines] == [("llmperf", "imported"), ("kvlab", "imported")]
    assert Run.objects.filter(key="lab-1").exists()

    out, err = StringIO(), StringIO()
    with pytest.raises(Exception, match="1 of 1 input"):
        call_command("import_bench", str(other), stdout=out, stderr=err)
    assert "need their summary" in err.getvalue()


def test_aiperf_exports_and_inputs_given_as_files_are_one_run_with_its_summary_and_requests(tmp_path: Path) -> None:
    run_dir = aiperf_run(tmp_path / "concurrency_16")
    names = ("profile_export_aiperf.json", "profile_export.jsonl", "inputs.json")

    (line,) = import_bench(*(str(run_dir / name) for name in names))

    assert (line["format"], line["status"], line["runs"], line["requests"]) == ("aiperf", "imported", 1, 2)
    run = Run.objects.get()
    assert run.summary["n_requests"] == 100 and run.requests.count() == 2
    assert (run.model, run.concurrency) == ("qwen3-4b", 16)


def test_a_vllm_sweeps_files_given_together_are_read_as_the_sweep(tmp_path: Path) -> None:
    combination = tmp_path / "SERVE--max_num_seqs=4-BENCH--max_concurrency=2"
    combination.mkdir()
    runs = [vllm_files.serve_result(date=f"20260301-12001{n}", run_number=n) for n in range(2)]
    vllm_files.write(combination / "run=0.json", runs[0])
    vllm_files.write(combination / "run=1.json", runs[1])
    (combination / "summary.json").write_text(json.dumps(runs))

    (line,) = import_bench(*(str(combination / name) for name in ("run=0.json", "run=1.json", "summary.json")))

    assert (line["format"], line["runs"]) == ("vllm", 2)
    assert set(Run.objects.values_list("tool_format", flat=True)) == {"vllm bench sweep"}
    assert set(Run.objects.values_list("summary_extra__sweep_combination", flat=True)) == {combination.name}


def test_if_new_skips_files_given_together_that_were_imported_together(tmp_path: Path) -> None:
    results = llmperf_files.write_run(tmp_path / "raw_data")
    given = (str(results / SUMMARY), str(results / RESPONSES))
    import_bench("--if-new", *given)

    (line,) = import_bench("--if-new", *given)

    assert line["status"] == "skipped" and line["file"] == ", ".join(given)
    assert FileImport.objects.count() == 1


def test_a_genai_perf_artifact_directory_reads_its_profile_export_and_leaves_its_aggregates(tmp_path: Path) -> None:
    artifacts = tmp_path / "llama-3-8b-openai-chat-concurrency2"
    aiperf_files.write(artifacts, "profile_export.json", aiperf_files.genai_export())
    aiperf_files.write(artifacts, "profile_export_genai_perf.json", {"request_throughput": {"unit": "requests/sec"}})
    aiperf_files.write(artifacts, "profile_export_genai_perf.csv", "Metric,avg,min,max,p99,p95,p90,p75,p50,p25\n")
    aiperf_files.write(artifacts, "inputs.json", {"data": [{"payload": [{"model": "llama-3-8b"}]}]})

    (directory,) = import_bench(str(artifacts))
    (files,) = import_bench(*(str(path) for path in sorted(artifacts.iterdir())))

    assert (directory["format"], directory["status"], directory["runs"], directory["requests"]) == (
        "genai-perf",
        "imported",
        2,
        3,
    )
    assert (files["format"], files["status"], files["duplicates"]) == ("genai-perf", "duplicate", 3)


def test_join_given_keeps_the_order_given_and_never_joins_across_folders(tmp_path: Path) -> None:
    one, two = llmperf_files.write_run(tmp_path / "one"), llmperf_files.write_run(tmp_path / "two")
    given = [one / SUMMARY, two / SUMMARY, two / RESPONSES, one / RESPONSES]

    inputs = registry.join_given(given)

    assert [tuple(i.given) for i in inputs if isinstance(i, registry.Joined)] == [
        (one / SUMMARY, one / RESPONSES),
        (two / SUMMARY, two / RESPONSES),
    ]
    assert registry.join_given([one / SUMMARY, one / SUMMARY]) == [one / SUMMARY, one / SUMMARY]  # given twice
    assert registry.join_given([one / SUMMARY, two / RESPONSES]) == [one / SUMMARY, two / RESPONSES]


# -- the upload form ------------------------------------------------------------------------


@pytest.fixture
def logged_in(client: Any, django_user_model: Any) -> Any:
    client.force_login(django_user_model.objects.create_user("u", password="p"))
    return client


def uploads(directory: Path, *names: str) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(name, (directory / name).read_bytes()) for name in names]


def test_an_upload_of_aiperf_exports_is_one_run_with_its_summary_and_requests(logged_in: Any, tmp_path: Path) -> None:
    run_dir = aiperf_run(tmp_path / "run")

    response = logged_in.post(
        "/imports/new/", {"file": uploads(run_dir, "profile_export_aiperf.json", "profile_export.jsonl", "inputs.json")}
    )

    assert response.status_code == 302
    file_import = FileImport.objects.get()
    assert (file_import.format, file_import.n_runs, file_import.n_summaries, file_import.n_imported) == (
        "aiperf",
        1,
        1,
        2,
    )
    assert file_import.filename == "profile_export_aiperf.json, profile_export.jsonl, inputs.json"
    assert Run.objects.get().requests.count() == 2


def test_an_upload_joins_a_runs_files_and_imports_every_other_file_on_its_own(logged_in: Any, tmp_path: Path) -> None:
    results = llmperf_files.write_run(tmp_path / "raw_data")
    (results / "lab.jsonl").write_bytes(jsonl(flat(run="lab-1")))

    response = logged_in.post("/imports/new/", {"file": uploads(results, SUMMARY, "lab.jsonl", RESPONSES)})

    assert response.status_code == 200
    assert [(r.format, r.status, r.n_imported) for r in response.context["results"]] == [
        ("llmperf", "imported", 4),
        ("kvlab", "imported", 1),
    ]
    assert Run.objects.filter(key="lab-1").exists()  # not lost inside the llmperf run's directory


def test_an_upload_of_one_name_twice_imports_each_on_its_own(logged_in: Any, tmp_path: Path) -> None:
    one = tmp_path / "a.jsonl"
    one.write_bytes(jsonl(flat(run="a-1")))
    two = tmp_path / "b.jsonl"
    two.write_bytes(jsonl(flat(run="a-2")))

    response = logged_in.post(
        "/imports/new/",
        {"file": [SimpleUploadedFile("r.jsonl", one.read_bytes()), SimpleUploadedFile("r.jsonl", two.read_bytes())]},
    )

    assert response.status_code == 200
    assert [r.status for r in response.context["results"]] == ["imported", "imported"]
    assert set(Run.objects.values_list("key", flat=True)) == {"a-1", "a-2"}
