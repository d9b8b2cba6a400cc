"""kvlab.bench/2: request and summary records, declared provenance, other formats through the one pipeline,
the import_bench CLI (--json, directories, --server-log) and export → import round trips."""

from __future__ import annotations

import io
import json
import math
import os
import stat
import threading
from io import StringIO
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command

from benchmarks.history import importer
from benchmarks.history.exporter import export_lines
from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.records.formats import Declared, registry
from benchmarks.records.schema import SCHEMA_V1, SCHEMA_V2
from benchmarks.tests.builders import flat, jsonl

pytestmark = pytest.mark.django_db

STATS = {"mean": 120.0, "median": 110.0, "p50": 110.0, "p90": 200.0, "p95": 250.0, "p99": 400.0}


def v2_run(**changes: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "id": "vllm-1",
        "model": "Qwen/Qwen3-8B",
        "gpu": "H100",
        "server": {"flags": "--max-num-seqs 64"},
        "workload": {"concurrency": 16, "request_rate": 4.0},
        "started_at": "2026-11-01T10:00:00Z",
        "tool": {"name": "vllm", "version": "0.9.1", "format": "vllm bench serve"},
        "engine": "vllm",
        "provenance": {"model": "file"},
    }
    run.update(changes)
    return run


def summary(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "n_requests": 100,
        "n_ok": 98,
        "n_failed": 2,
        "duration_s": 50.0,
        "request_rate": 2.0,
        "output_tok_s": 1500.0,
        "output_tokens": 75000,
        "input_tokens": 100000,
        "ttft_ms": STATS,
        "tpot_ms": {"mean": 20.0},
        "e2e_ms": {"p95": 9000.0},
    }
    data.update(changes)
    return data


def summary_record(run: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    return {"schema": SCHEMA_V2, "run": run or v2_run(), "summary": summary(**changes)}


def request_record(run: dict[str, Any] | None = None, **request: Any) -> dict[str, Any]:
    return {"schema": SCHEMA_V2, "run": run or v2_run(), "request": {"ok": True, **request}}


def load(data: bytes, **kwargs: Any) -> FileImport:
    return importer.import_bench_file(io.BytesIO(data), filename="t.jsonl", origin="command", **kwargs)


def reasons(result: FileImport) -> list[str]:
    return [line.reason for line in result.rejected_lines.all()]


@pytest.fixture
def fake_format(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "FORMAT_MODULES", ("benchmarks.tests.fake_format", "not_a_module_yet"))


def fake_file(path: Path, *lines: Any) -> Path:
    path.write_text("FAKE\n" + "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines))
    return path


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def run_command(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


# --- records ---------------------------------------------------------------------------------


def test_a_v2_request_record_stores_its_tool_engine_flags_rate_and_inter_token_latencies() -> None:
    result = load(jsonl(request_record(ttft_s=0.2, elapsed_s=3.0, output_tokens=50, itl_s=[0.05, 0.06])))

    assert result.status == "imported" and result.n_imported == 1 and result.n_new_runs == 1
    run = Run.objects.get(key="vllm-1")
    assert (run.tool, run.tool_version, run.tool_format, run.engine) == ("vllm", "0.9.1", "vllm bench serve", "vllm")
    assert run.server_flags == "--max-num-seqs 64" and run.request_rate == 4.0 and run.concurrency == 16
    assert run.started_at.isoformat() == "2026-11-01T10:00:00+00:00"
    assert run.provenance == {"model": "file", "gpu": "file", "engine": "file", "server_flags": "file",
                              "started_at": "file"}  # fmt: skip
    assert RequestResult.objects.get().itl_s == [0.05, 0.06]
    assert run.summary is None and run.n_requests == 1


def test_a_summary_only_run_takes_the_tools_counts_and_figures_in_kvlab_units() -> None:
    result = load(jsonl(summary_record()))

    assert result.status == "imported"
    assert (result.n_imported, result.n_summaries, result.n_new_runs, result.n_duplicate) == (0, 1, 1, 0)
    run = Run.objects.get(key="vllm-1")
    assert (run.n_requests, run.n_ok, run.outcome) == (100, 98, "partial")
    assert run.ttft_p50 == pytest.approx(0.110) and run.ttft_p95 == pytest.approx(0.250)
    assert run.e2e_p95 == pytest.approx(9.0)
    assert run.throughput_tok_s == 1500.0 and run.output_tokens_total == 75000
    assert run.tok_s_mean == pytest.approx(50.0)  # 1000 / mean TPOT of 20 ms
    assert run.effective_wall_s == 50.0
    assert run.provenance["n_requests"] == "file" and run.provenance["ttft_p95"] == "file"
    assert run.provenance["tok_s_mean"] == "derived"
    assert run.summary["ttft_ms"] == STATS and run.summary["n_failed"] == 2
    assert not RequestResult.objects.exists()


def test_a_sampled_run_keeps_the_tools_counts_and_percentiles_not_the_samples() -> None:
    sampled = summary_record(requests_sampled=True)
    rows = [request_record(ttft_s=9.0, elapsed_s=30.0, tok_s=1.0, prompt_tokens=i) for i in range(3)]

    assert load(jsonl(sampled, *rows)).status == "imported"

    run = Run.objects.get(key="vllm-1")
    assert run.requests_sampled and run.requests.count() == 3
    assert (run.n_requests, run.n_ok) == (100, 98)
    assert run.ttft_p50 == pytest.approx(0.110) and run.tok_s_mean == pytest.approx(50.0)


def test_a_run_with_every_request_computes_its_figures_from_them_and_keeps_the_tools_counts() -> None:
    rows = [request_record(ttft_s=0.5, elapsed_s=2.0, tok_s=30.0) for _ in range(2)]

    load(jsonl(summary_record(n_requests=2, n_ok=2, n_failed=0), *rows))

    run = Run.objects.get(key="vllm-1")
    assert (run.n_requests, run.n_ok) == (2, 2)
    assert run.ttft_p50 == 0.5 and run.tok_s_mean == 30.0


def test_a_run_where_every_request_failed_gets_no_latency_or_throughput() -> None:
    zeros = {"mean": 0.0, "p50": 0.0, "p95": 0.0}
    load(jsonl(summary_record(n_ok=0, n_failed=100, output_tok_s=0.0, ttft_ms=zeros, e2e_ms=zeros)))

    run = Run.objects.get()
    assert run.outcome == "failed"
    assert (run.ttft_p50, run.e2e_p95, run.throughput_tok_s, run.tok_s_mean) == (None, None, None, None)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (summary(n_ok=101), "'summary.n_ok' (101) is more than 'summary.n_requests' (100)"),
        (summary(n_failed=5), "is more than 'summary.n_requests'"),
        ({**summary(), "p99_ms": 3}, "unknown field 'summary.p99_ms'"),
        (summary(ttft_ms={"p999": 1.0}), "unknown field 'summary.ttft_ms.p999'"),
        (summary(ttft_ms={"p50": -1.0}), "'summary.ttft_ms.p50' must not be negative"),
        (summary(n_requests=2**31), "'summary.n_requests' is too large"),
        (summary(requests_sampled="yes"), "'summary.requests_sampled' must be true or false"),
        ({k: v for k, v in summary().items() if k != "n_ok"}, "'summary.n_requests' without 'summary.n_ok'"),
        ({k: v for k, v in summary().items() if k != "n_requests"}, "'summary.n_ok' without 'summary.n_requests'"),
    ],
)
def test_a_bad_summary_rejects_the_whole_file(bad: dict[str, Any], reason: str) -> None:
    good = request_record(run=v2_run(id="other"))
    result = load(jsonl(good, {"schema": SCHEMA_V2, "run": v2_run(), "summary": bad}))

    assert result.status == "rejected"
    assert any(reason in r for r in reasons(result)), reasons(result)
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"schema": SCHEMA_V2, "run": v2_run()}, "exactly one of 'request' and 'summary'"),
        ({**summary_record(), "request": {"ok": True}}, "exactly one of 'request' and 'summary'"),
        (request_record(run=v2_run(tool={"name": "x" * 41})), "'run.tool.name' is longer than 40"),
        (request_record(run=v2_run(provenance={"gpu": "guessed"})), "must be one of file, declared, derived"),
        (request_record(run=v2_run(started_at="9999-12-31T23:59:59-01:00")), "'run.started_at' is out of range"),
        (request_record(run=v2_run(engine="vllm\x00")), "'run.engine' contains a NUL character"),
        (request_record(itl_s=[0.1, None]), "'request.itl_s' holds a null"),
        (request_record(itl_s=[0.1, -1]), "must not be negative"),
        (request_record(itl_s="0.1"), "'request.itl_s' must be an array of numbers"),
        (request_record(run=v2_run(workload={"request_rate": -1})), "must not be negative"),
        ({**request_record(), "extra": {"deep": _nested(40)}}, "nested more than 32 levels"),
        ({**request_record(), "note": 1}, "unknown top-level field 'note'"),
        (request_record(run=v2_run(server={"flags": "-c 1", "fa": "on"})), "unknown field 'run.server.fa'"),
        ({"schema": SCHEMA_V1, "run": v2_run(), "request": {"ok": True}}, "unknown field 'run."),
        ({"schema": "kvlab.bench/3", "run": v2_run(), "request": {"ok": True}}, "unsupported schema"),
    ],
)
def test_hostile_v2_records_are_rejected_with_the_key_that_failed(record: dict[str, Any], reason: str) -> None:
    result = load(jsonl(record))

    assert result.status == "rejected"
    assert any(reason in r for r in reasons(result)), reasons(result)


@pytest.mark.parametrize(
    ("literal", "reason"),
    [
        (b"18446744073709551616", "'summary.output_tokens' is too large"),
        (b"1e400", "'summary.output_tokens' must be an integer"),
        (b"-1", "'summary.output_tokens' must not be negative"),
    ],
)
def test_huge_numbers_in_a_summary_are_rejected(literal: bytes, reason: str) -> None:
    line = jsonl(summary_record(output_tokens=424242)).replace(b"424242", literal)

    result = load(line)

    assert result.status == "rejected" and any(reason in r for r in reasons(result)), reasons(result)


def test_bare_nan_and_infinity_in_a_kvlab_file_are_rejected() -> None:
    line = b'{"schema": "kvlab.bench/2", "run": {"id": "a", "model": "m"}, "summary": {"n_requests": 1, "n_ok": 1, "duration_s": Infinity}}'  # noqa: E501

    result = load(line + b"\n")

    assert result.status == "rejected" and "Infinity is not valid JSON" in reasons(result)[0]


def test_dates_at_the_end_of_the_calendar_are_stored() -> None:
    load(jsonl(summary_record(run=v2_run(started_at="9999-12-31T23:59:59.999999Z"))))

    assert Run.objects.get().started_at.year == 9999


def test_reimporting_a_summary_is_a_duplicate_and_a_different_one_is_refused() -> None:
    data = jsonl(summary_record(), request_record(ttft_s=0.1))
    load(data)
    again = load(data)

    assert again.status == "imported" and (again.n_imported, again.n_summaries, again.n_new_runs) == (0, 0, 0)
    assert again.n_duplicate == 2
    changed = load(jsonl(summary_record(n_ok=97, n_failed=3)))
    assert changed.status == "rejected"
    assert "already stored with another summary, which differs in 'summary.n_ok'" in reasons(changed)[0]
    assert Run.objects.get().n_ok == 98


def _without_counts(**changes: Any) -> dict[str, Any]:
    record = summary_record(**changes)
    for name in ("n_requests", "n_ok", "n_failed"):
        del record["summary"][name]
    return record


def test_a_summary_without_counts_is_stored_with_its_counts_not_reported() -> None:
    from benchmarks.models.outcomes import OUTCOME_Q, WITH_FAILURES_Q
    from benchmarks.records import outcomes

    result = load(jsonl(_without_counts()))

    assert result.status == "imported" and result.n_summaries == 1
    run = Run.objects.get()
    assert (run.n_requests, run.n_ok, run.outcome) == (0, 0, "unknown")
    assert outcomes.LABELS[run.outcome] == "counts not reported"
    assert "n_requests" not in run.provenance
    assert run.ttft_p50 == pytest.approx(0.110)  # the tool's figures are still its own
    runs = Run.objects.all()
    found = {o: list(runs.filter(q).values_list("pk", flat=True)) for o, q in OUTCOME_Q.items()}
    assert found == {"ok": [], "partial": [], "failed": [], "empty": [], "unknown": [run.pk]}
    assert not runs.filter(WITH_FAILURES_Q).exists()


def test_a_summary_with_counts_fills_in_a_stored_summary_without_them() -> None:
    load(jsonl(_without_counts()))
    again = load(jsonl(_without_counts()))
    assert again.status == "imported" and (again.n_summaries, again.n_new_runs) == (0, 0)

    filled = load(jsonl(summary_record()))

    assert filled.status == "imported" and (filled.n_summaries, filled.n_new_runs) == (1, 0)
    run = Run.objects.get()
    assert (run.n_requests, run.n_ok, run.outcome, run.summary["n_failed"]) == (100, 98, "partial", 2)
    assert run.provenance["n_requests"] == "file"
    # and the one without counts, after it: the same summary (nothing to add)
    later = load(jsonl(_without_counts()))
    assert later.status == "imported" and later.n_summaries == 0
    assert Run.objects.get().n_requests == 100


def test_a_summary_that_disagrees_on_a_field_both_hold_is_refused_naming_it() -> None:
    load(jsonl(_without_counts()))

    changed = load(jsonl(summary_record(ttft_ms={**STATS, "p95": 251.0})))

    assert changed.status == "rejected"
    assert "differs in 'summary.ttft_ms.p95'" in reasons(changed)[0], reasons(changed)
    assert Run.objects.get().outcome == "unknown"


def test_two_summaries_of_a_run_in_one_file_merge_when_they_agree() -> None:
    load(jsonl(_without_counts(), summary_record()))
    assert (Run.objects.get().n_requests, Run.objects.get().n_ok) == (100, 98)

    rejected = load(jsonl(summary_record(run=v2_run(id="b")), _without_counts(run=v2_run(id="b"), duration_s=1.0)))
    assert rejected.status == "rejected"
    assert "differs from the one on line 1 in 'summary.duration_s'" in reasons(rejected)[0], reasons(rejected)


def test_a_summary_added_to_a_stored_run_sets_its_counts() -> None:
    load(jsonl(request_record(ttft_s=0.1)))
    added = load(jsonl(summary_record()))

    assert added.status == "imported" and added.n_summaries == 1
    run = Run.objects.get()
    assert (run.n_requests, run.n_ok, run.ttft_p50) == (100, 98, pytest.approx(0.110))


def test_v1_records_import_as_before_and_keep_their_content_hash() -> None:
    record = {"schema": SCHEMA_V1, "run": {"id": "a", "model": "m"}, "request": {"ok": True, "tok_s": 2.0}}
    load(jsonl(record))
    v2 = {"schema": SCHEMA_V2, "run": {"id": "a", "model": "m"}, "request": {"ok": True, "tok_s": 2.0}}

    assert load(jsonl(v2)).n_duplicate == 1  # the same request in either schema
    assert RequestResult.objects.count() == 1


# --- declared provenance ----------------------------------------------------------------------


def test_declared_values_fill_what_the_file_lacks_and_never_override_it() -> None:
    no_model = flat(run="a", model=..., gpu=...)
    with_gpu = flat(run="b", gpu="A100")
    declared = Declared(gpu="RTX 4090", engine="llama.cpp", model="m.gguf", server_flags="-c 8192", label="x")

    result = load(jsonl(no_model, with_gpu), declared=declared)

    assert result.status == "imported"
    a, b = Run.objects.get(key="a"), Run.objects.get(key="b")
    assert (a.model, a.gpu, a.engine, a.server_flags, a.label) == ("m.gguf", "RTX 4090", "llama.cpp", "-c 8192", "base")
    assert a.provenance["model"] == "declared" and a.provenance["gpu"] == "declared"
    assert a.provenance["label"] == "file"
    assert (b.gpu, b.provenance["gpu"]) == ("A100", "file")


def test_a_run_without_a_model_is_rejected_unless_one_is_declared() -> None:
    result = load(jsonl(flat(model=...)))

    assert result.status == "rejected" and "missing required field: 'model'" in reasons(result)[0]


# --- formats, directories and the CLI ------------------------------------------------------------


def test_a_converted_file_goes_through_the_same_pipeline(tmp_path: Path, fake_format: None) -> None:
    path = fake_file(tmp_path / "results.txt", summary_record(), request_record(ttft_s=0.3))

    assert registry.detect(path) == "fake"
    result = importer.import_path(path, origin="command", declared=Declared(gpu="ignored"))

    assert result.status == "imported" and result.format == "fake"
    assert (result.n_new_runs, result.n_imported, result.n_summaries) == (1, 1, 1)
    assert Run.objects.get().gpu == "H100"  # the file's own value wins over the declared one
    assert importer.import_path(path, origin="command").n_duplicate == 2


def test_non_finite_numbers_from_a_converter_become_unknown(tmp_path: Path, fake_format: None) -> None:
    line = json.dumps(summary_record(ttft_ms={"p50": math.nan, "p95": math.inf}, duration_s=math.inf))
    path = fake_file(tmp_path / "f", line.replace('"NaN"', "NaN"))

    assert importer.import_path(path, origin="command").status == "imported"
    run = Run.objects.get()
    assert "duration_s" not in run.summary and "ttft_ms" not in run.summary
    assert run.ttft_p50 is None


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("RAISE 'completed' must be an integer", "'completed' must be an integer"),
        ("CRASH", "the converter failed at record 2: KeyError"),
    ],
)
def test_a_converter_error_rejects_the_whole_input(tmp_path: Path, fake_format: None, line: str, reason: str) -> None:
    path = fake_file(tmp_path / "f", request_record(), line)

    result = importer.import_path(path, origin="command")

    assert result.status == "rejected" and not Run.objects.exists()
    assert any(reason in r for r in reasons(result)), reasons(result)


def test_import_bench_text_names_the_record_of_a_converted_file(tmp_path: Path, fake_format: None) -> None:
    path = fake_file(tmp_path / "f", request_record(), request_record(run={"id": "x"}))

    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError):
        call_command("import_bench", str(path), stdout=out, stderr=err)

    assert f"  record 2 of {path}: missing required field: 'model'" in err.getvalue(), err.getvalue()
    assert "  line " not in err.getvalue(), err.getvalue()


def test_a_directory_a_format_claims_is_one_input(tmp_path: Path, fake_format: None) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    fake_file(sweep / "fake.summary", summary_record())
    fake_file(sweep / "run=1", request_record(ttft_s=0.1))

    out, _ = run_command("import_bench", "--json", str(sweep))

    line = json.loads(out)
    assert line == {"file": str(sweep), "format": "fake", "status": "imported", "runs": 1, "requests": 1,
                    "duplicates": 0, "errors": []}  # fmt: skip


def test_a_directory_no_format_claims_is_read_file_by_file_all_or_nothing(tmp_path: Path, fake_format: None) -> None:
    folder = tmp_path / "mixed"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.jsonl").write_bytes(jsonl(flat(run="kv-1")))
    fake_file(folder / "sub" / "b.txt", summary_record())
    (folder / ".hidden").write_text("ignored")

    assert registry.detect(folder) == registry.DIRECTORY
    assert importer.import_path(folder, origin="command").status == "imported"
    assert set(Run.objects.values_list("key", flat=True)) == {"kv-1", "vllm-1"}

    Run.objects.all().delete()
    (folder / "c.jsonl").write_bytes(jsonl(flat(run="kv-2"), b"{"))
    result = importer.import_path(folder, origin="command")
    assert result.status == "rejected" and not Run.objects.exists()
    assert reasons(result) == [f"{folder / 'c.jsonl'}, line 2: invalid JSON: Expecting property name enclosed "
                               "in double quotes at column 2"]  # fmt: skip


def test_import_bench_json_prints_one_line_per_input(tmp_path: Path, fake_format: None) -> None:
    good = tmp_path / "good.jsonl"
    good.write_bytes(jsonl(flat(run="a"), flat(run="a", tok_s=3.0)))
    bad = fake_file(tmp_path / "bad", "RAISE no 'model' key")
    out = StringIO()

    with pytest.raises(CommandError, match=r"1 of 3 input\(s\) rejected"):
        call_command("import_bench", "--json", str(good), str(bad), str(good), stdout=out, stderr=StringIO())

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0] == {"file": str(good), "format": "kvlab", "status": "imported", "runs": 1, "requests": 2,
                        "duplicates": 0, "errors": []}  # fmt: skip
    assert lines[1]["status"] == "rejected" and lines[1]["format"] == "fake"
    assert "no 'model' key" in lines[1]["errors"][0]["reason"]
    assert lines[2] == {**lines[0], "status": "duplicate", "runs": 0, "requests": 0, "duplicates": 2}


def test_import_bench_declares_provenance_and_forces_a_format(tmp_path: Path, fake_format: None) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(jsonl(flat(gpu=..., model=...)))

    run_command("import_bench", str(path), "--gpu", "L4", "--model", "m", "--engine", "llama.cpp",
                "--server-flags", "-c 4096 -np 2")  # fmt: skip

    run = Run.objects.get()
    assert (run.gpu, run.model, run.engine, run.server_flags) == ("L4", "m", "llama.cpp", "-c 4096 -np 2")
    assert run.provenance["gpu"] == "declared"
    with pytest.raises(CommandError, match="unknown format 'nope'"):
        run_command("import_bench", "--format", "nope", str(path))
    with pytest.raises(CommandError, match="--gpu"):
        run_command("import_bench", "--gpu", "x" * 201, str(path))
    forced = fake_file(tmp_path / "y.jsonl", summary_record())
    out, _ = run_command("import_bench", "--json", "--format", "fake", str(forced))
    assert json.loads(out)["format"] == "fake"


def test_import_bench_attaches_a_server_log(tmp_path: Path) -> None:
    log = tmp_path / "lab_run.log"
    log.write_text("main: build = 1234 (abc)\nllama_context: n_ctx = 16384\n\x00junk\n")
    data = tmp_path / "x.jsonl"
    data.write_bytes(jsonl(flat()))

    run_command("import_bench", str(data), "--server-log", str(log))

    run = Run.objects.get()
    assert "llama_context: n_ctx = 16384" in run.server_log and "\x00" not in run.server_log
    try:
        from benchmarks.records.formats.llama_server_log import parse_startup_log  # noqa: F401
    except ImportError:
        assert run.server_props is None
    else:
        assert run.server_props is None or "startup_log" in run.server_props


def test_a_missing_format_module_leaves_the_others_working(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "FORMAT_MODULES", ("no_such_format", "benchmarks.tests.fake_format"))

    assert registry.names() == ["kvlab", "fake"]


# --- export ---------------------------------------------------------------------------------------


def test_export_import_round_trips_v2_with_a_summary_only_run(tmp_path: Path) -> None:
    sampled_run = v2_run(id="sampled")
    load(
        jsonl(
            summary_record(),
            summary_record(run=sampled_run, requests_sampled=True),
            request_record(run=sampled_run, ttft_s=0.2, itl_s=[0.01, 0.02], output_tokens=3),
            {**request_record(run=sampled_run, ok=False, http_status=500, error="boom"), "extra": {"k": [1]}},
            flat(run="kv"),
        ),
        declared=Declared(engine="llama.cpp"),
    )
    before = _snapshot()
    exported = b"".join(export_lines(Run.objects.all()))

    assert all(orjson.loads(line)["schema"] == SCHEMA_V2 for line in exported.splitlines())
    Run.objects.all().delete()
    assert load(exported).status == "imported"
    assert _snapshot() == before
    assert b"".join(export_lines(Run.objects.all())) == exported
    assert load(exported).n_duplicate == 5


def _snapshot() -> list[tuple[Any, ...]]:
    fields = ("key", "model", "gpu", "engine", "tool", "tool_version", "tool_format", "server_flags", "request_rate",
              "started_at", "provenance", "summary", "summary_extra", "requests_sampled", "n_requests", "n_ok",
              "ttft_p50", "ttft_p95", "e2e_p95", "throughput_tok_s", "tok_s_mean")  # fmt: skip
    runs = [tuple(getattr(run, f) for f in fields) for run in Run.objects.order_by("key")]
    requests = list(
        RequestResult.objects.order_by("run__key", "seq").values_list(
            "run__key", "seq", "ok", "ttft_s", "itl_s", "extra", "content_hash", "occurrence"
        )
    )
    return [*runs, *requests]


def test_a_v1_export_leaves_out_runs_without_requests(tmp_path: Path) -> None:
    load(jsonl(summary_record(), flat(run="kv")))

    lines = [orjson.loads(line) for line in export_lines(Run.objects.all(), SCHEMA_V1)]
    assert [(line["schema"], line["run"]["id"]) for line in lines] == [(SCHEMA_V1, "kv")]
    _, err = run_command("export_bench", "--schema", SCHEMA_V1, "--out", str(tmp_path / "v1.jsonl"))
    assert "1 run(s) without requests left out" in err
    assert [orjson.loads(line)["run"]["id"] for line in (tmp_path / "v1.jsonl").read_bytes().splitlines()] == ["kv"]


def test_an_export_to_a_pipe_writes_into_it_and_leaves_it_a_pipe(tmp_path: Path) -> None:
    # `--out /dev/null` as root once replaced /dev/null with a regular file (write beside, then rename).
    load(jsonl(flat(run="kv"), flat(run="kv", tok_s=2.0)))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    _, err = run_command("export_bench", "--out", str(fifo))
    reader.join(timeout=10)

    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert [orjson.loads(line)["run"]["id"] for line in received[0].splitlines()] == ["kv", "kv"]
    assert "wrote 2 records of 1 runs" in err


# --- the upload form ------------------------------------------------------------------------------


@pytest.fixture
def logged_in(client: Any, django_user_model: Any) -> Any:
    client.force_login(django_user_model.objects.create_user("u", password="p"))
    return client


def _upload(name: str, data: bytes) -> Any:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data)


def test_the_upload_form_detects_the_format_and_takes_declared_values(logged_in: Any, fake_format: None) -> None:
    fake = b"FAKE\n" + orjson.dumps(summary_record(run=v2_run(gpu=None)))
    response = logged_in.post(
        "/imports/new/", {"file": [_upload("a.jsonl", jsonl(flat(gpu=...))), _upload("b.bin", fake)], "gpu": "L40S"}
    )

    assert response.status_code == 200
    assert [(r.filename, r.format, r.status) for r in response.context["results"]] == [
        ("a.jsonl", "kvlab", "imported"),
        ("b.bin", "fake", "imported"),
    ]
    assert set(Run.objects.values_list("gpu", flat=True)) == {"L40S"}
    assert Run.objects.get(key="vllm-1").provenance["gpu"] == "declared"
    assert b"b.bin" in response.content and b"fake" in response.content


def test_the_upload_form_shows_why_a_file_was_rejected(logged_in: Any, fake_format: None) -> None:
    bad = fake_file_bytes("RAISE 'completed' is missing")
    response = logged_in.post("/imports/new/", {"file": [_upload("ok.jsonl", jsonl(flat())), _upload("x", bad)]})

    assert response.status_code == 422
    assert "&#x27;completed&#x27; is missing" in response.content.decode()
    assert Run.objects.count() == 1  # the good file, on its own


def test_the_upload_form_keeps_the_single_file_flow(logged_in: Any) -> None:
    response = logged_in.post("/imports/new/", {"file": _upload("a.jsonl", jsonl(flat()))})

    assert response.status_code == 302
    assert FileImport.objects.get().format == "kvlab"
    bad = logged_in.post("/imports/new/", {"file": _upload("a.jsonl", b"{\n")})
    assert bad.status_code == 422 and b"invalid JSON" in bad.content


def fake_file_bytes(*lines: str) -> bytes:
    return ("FAKE\n" + "\n".join(lines)).encode()


def test_provenance_named_by_the_fields_place_in_the_record_is_stored_by_its_name() -> None:
    """A converter may mark "server.flags" or "workload.concurrency" (the field's place in the record);
    the run keeps it under the field's name, the key the pipeline's own marks and the pages read — so
    declared server flags are not shown as "from the file"."""
    provenance = {"model": "file", "server.flags": "declared", "workload.concurrency": "derived"}
    load(jsonl(summary_record(v2_run(provenance=provenance))))
    run = Run.objects.get()
    assert run.provenance["server_flags"] == "declared"
    assert run.provenance["concurrency"] == "derived"
    assert "server.flags" not in run.provenance and "workload.concurrency" not in run.provenance
