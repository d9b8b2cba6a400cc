"""Other tools' files built to cost more than they weigh are refused whole, with the reason recorded,
cheaply: a YAML alias bomb, nesting past 64 levels, a flood of short values, a file
past the most kvlab reads of one document, for every format that parses JSON or YAML."""

from __future__ import annotations

import resource
import time
import tracemalloc
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks.history.importer import import_path
from benchmarks.models import FileImport, RequestResult, Run
from kvlab import bounded_parse

pytestmark = pytest.mark.django_db

BUDGET_CPU_S = 1.0
BUDGET_PEAK_MIB = 256


def alias_bomb(levels: int = 8) -> bytes:
    """The reported GuideLLM YAML bomb: anchors, each a list of ten aliases of the last; 10**8 nodes expanded."""
    lines = [b"benchmarks:", b"- type_: generative_benchmark", b"  guidellm_version: '0.3'", b"  lol:"]
    lines.append(b"  - &a0 [" + b", ".join([b"lol"] * 10) + b"]")
    for level in range(1, levels):
        lines.append(b"  - &a%d [" % level + b", ".join([b"*a%d" % (level - 1)] * 10) + b"]")
    return b"\n".join(lines) + b"\n"


DEEP = b"[" * 200_000 + b"]" * 200_000
AIPERF_LINE = b'{"metadata": {"session_num": 0, "request_start_ns": 1}, "metrics": {}, "x": '

# (format, file name, content): each format's file with a value nested 200,000 deep where it reads JSON.
DEEP_FILES = [
    ("guidellm", "benchmarks.json", b'{"benchmarks": [], "x": ' + DEEP + b"}"),
    ("guidellm", "benchmarks.yaml", b"benchmarks: []\nx: " + b"[" * 100 + b"]" * 100 + b"\n" + b"# more\n" * 200),
    ("aiperf", "profile_export_aiperf.json", b'{"x": ' + DEEP + b"}"),
    ("aiperf", "profile_export.jsonl", AIPERF_LINE + DEEP + b"}\n"),
    ("genai-perf", "profile_export.json", b'{"experiments": ' + DEEP + b"}"),
    ("llmperf", "run_summary.json", b'{"x": ' + DEEP + b"}"),
    ("llama-bench", "bench.json", DEEP),
    ("llama-bench", "bench.jsonl", b'{"x": ' + DEEP + b"}\n"),
    ("vllm", "result.json", b'{"x": ' + DEEP + b"}"),
    ("sglang", "result.jsonl", b'{"x": ' + DEEP + b"}\n"),
]


def reasons(result: FileImport) -> list[str]:
    assert result.status == FileImport.Status.REJECTED
    assert not Run.objects.exists() and not RequestResult.objects.exists()
    return list(result.rejected_lines.values_list("reason", flat=True))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_a_guidellm_yaml_alias_bomb_is_refused_naming_the_alias_at_a_bounded_cost(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.yaml"
    path.write_bytes(alias_bomb())
    assert len(path.read_bytes()) < 600

    start = cpu_seconds()
    result = import_path(path, origin="command")
    spent = cpu_seconds() - start
    tracemalloc.start()
    try:
        import_path(path, origin="command")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert result.format == "guidellm"
    [reason] = reasons(result)
    assert "benchmarks.yaml: a YAML alias (*a0) at line 6: kvlab reads YAML without aliases" in reason
    assert spent < BUDGET_CPU_S and peak < 64 * 2**20, (spent, peak)


@pytest.mark.parametrize(("format", "name", "content"), DEEP_FILES, ids=[f"{f}-{n}" for f, n, _ in DEEP_FILES])
def test_a_value_nested_past_64_levels_is_refused_in_every_format(
    tmp_path: Path, format: str, name: str, content: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    start = time.process_time()
    result = import_path(path, origin="command", format=format)
    spent = time.process_time() - start
    [reason] = reasons(result)
    assert "nested more than 64 levels deep (kvlab reads 64 at most)" in reason, reason
    assert name in reason
    assert spent < BUDGET_CPU_S


def test_a_flood_of_short_values_is_refused_before_it_is_built(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.json"
    path.write_bytes(b'{"benchmarks": [], "x": [' + b"{}," * 2_000_000 + b"{}]}")  # 6 MB, 2 M objects
    tracemalloc.start()
    try:
        result = import_path(path, origin="command", format="guidellm")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    [reason] = reasons(result)
    assert "values (its commas and opening brackets), more than the 4,000,000 kvlab parses" in reason
    assert peak < 32 * 2**20  # the file's bytes and their count; never the 170 MiB its objects take


@pytest.mark.parametrize(("format", "name", "content"), DEEP_FILES, ids=[f"{f}-{n}" for f, n, _ in DEEP_FILES])
def test_a_file_past_the_document_cap_is_refused_in_every_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, format: str, name: str, content: bytes
) -> None:
    monkeypatch.setattr(bounded_parse, "MAX_DOCUMENT_BYTES", 1024)
    path = tmp_path / name
    path.write_bytes(content)
    [reason] = reasons(import_path(path, origin="command", format=format))
    assert "larger than 1 KiB, the most kvlab reads of one document" in reason and name in reason


def test_the_upload_page_shows_why_the_alias_bomb_was_refused(user_client) -> None:  # type: ignore[no-untyped-def]
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("benchmarks.yaml", alias_bomb(), content_type="application/yaml")
    response = user_client.post(reverse("import-upload"), {"file": upload})
    assert response.status_code == 422
    assert "a YAML alias (*a0) at line 6" in response.content.decode()
    assert FileImport.objects.get().status == FileImport.Status.REJECTED and not Run.objects.exists()


# -- the job form's prompt files are outside JSON too ------------------------------------------

DEEP_PROMPT_LINE = b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"


@pytest.mark.parametrize(
    ("source", "field", "message"),
    [
        ("file", "prompt_file", "Line 2 of the prompt file is refused: nested more than 64 levels deep"),
        ("dataset", "dataset_file", "line 2: nested more than 64 levels deep"),
    ],
)
def test_a_prompt_file_line_nested_too_deep_is_refused_naming_it(user_client, source, field, message) -> None:  # type: ignore[no-untyped-def]
    from django.core.files.uploadedfile import SimpleUploadedFile

    from benchmarks.models import Job, Server

    server = Server.objects.create(name="local", base_url="http://127.0.0.1:9")
    upload = SimpleUploadedFile("prompts.jsonl", b'{"prompt": "hello"}\n' + DEEP_PROMPT_LINE)
    form = {"server": server.pk, "prompt_source": source, field: upload, "n_predict": 4, "concurrency": 1}
    form |= {"requests": 1, "repeats": 1, "timeout_s": 5}
    response = user_client.post(reverse("job-new"), form)
    assert response.status_code == 400 and message in response.content.decode()
    assert not Job.objects.exists()
