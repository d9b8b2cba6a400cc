"""One identity for a run and its requests, whatever stored them.

An import, a job's recorder (which a sweep's jobs use too) and a peer tool's file each store
requests; kvlab's export of them, imported into the same database, must add nothing — in
either schema, any number of times.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.history.exporter import export_lines
from benchmarks.history.importer import import_bench_file, import_path
from benchmarks.jobs.client.stream import Outcome
from benchmarks.jobs.execution import _Recorder
from benchmarks.models import FileImport, Job, RequestResult, Run, Server
from benchmarks.records.schema import SCHEMA_V1, SCHEMA_V2
from benchmarks.tests.builders import flat, jsonl

from .formats.vllm_results import serve_result

T0 = 1_764_000_000.0


def load(data: bytes, name: str = "e.jsonl") -> FileImport:
    return import_bench_file(io.BytesIO(data), filename=name, origin="command")


def snapshot() -> list[tuple[Any, ...]]:
    """Every stored value a re-import could change."""
    runs = list(
        Run.objects.order_by("key").values_list(
            "key", "source", "model", "summary", "summary_extra", "n_requests", "n_ok", "throughput_tok_s",
            "ttft_p50", "e2e_p95", "tok_s_mean", "provenance", "server_log",
        )
    )  # fmt: skip
    requests = list(
        RequestResult.objects.order_by("run__key", "seq").values_list(
            "run__key", "seq", "ts", "ok", "http_status", "error", "error_type", "prompt_tokens", "output_tokens",
            "tok_s", "elapsed_s", "ttft_s", "itl_s", "extra", "content_hash", "occurrence",
        )
    )  # fmt: skip
    return [*runs, *requests]


def executed_run(key: str, outcomes: list[Outcome], *, job: Job | None = None) -> Run:
    """A run stored the way a job (or a sweep's job) stores it: by its recorder, request by request."""
    run = Run.objects.create(
        key=key, source=Run.Source.EXECUTED, model="tiny.gguf", job=job, concurrency=3,
        started_at=datetime.fromtimestamp(T0, tz=UTC), ctx_size=1024, parallel=4, kv_unified=True,
    )  # fmt: skip
    recorder = _Recorder(run)
    for index, outcome in enumerate(outcomes):
        recorder.store(index, outcome)
    run.refresh_summary()
    return run


def ok(i: int, *, itl: list[float] | None = None, **fields: Any) -> Outcome:
    return Outcome(
        ok=True, http_status=200, prompt_tokens=343, output_tokens=4, tok_s=41.5 + i, client_tok_s=40.123456,
        ttft_s=0.25, elapsed_s=0.4 + i / 10, started_at=T0 + i * 0.1234567, itl_s=itl,
        extra={"timings": {"predicted_n": 4}}, **fields,
    )  # fmt: skip


def overflowed(i: int) -> Outcome:
    # As the client records a shared pool's 500: the error's kind left to the classifier.
    return Outcome(
        ok=False, http_status=500, error="Context size has been exceeded", prompt_tokens=343, elapsed_s=246.0,
        started_at=T0 + i, at_error={"t_s": 245.9, "prompt": 343, "decoded": 0, "cells": 343},
    )  # fmt: skip


def export(schema: str = SCHEMA_V2) -> bytes:
    return b"".join(export_lines(Run.objects.all(), schema))


def assert_round_trips_add_nothing() -> None:
    before = snapshot()
    for schema in (SCHEMA_V2, SCHEMA_V1, SCHEMA_V2):
        result = load(export(schema))
        assert result.status == "imported", list(result.rejected_lines.values_list("line_no", "reason"))
        assert (result.n_imported, result.n_new_runs, result.n_summaries) == (0, 0, 0), schema
        assert snapshot() == before, schema


@pytest.mark.django_db
def test_a_jobs_requests_are_found_again_by_the_import_of_its_export() -> None:
    # The reported reproduction: each export -> import of executed runs added their requests again.
    server = Server.objects.create(name="s", base_url="http://127.0.0.1:1")
    job = Job.objects.create(server=server, params={"n_predict": 4, "requests": 3})
    executed_run("job-1-0", [ok(0, itl=[0.01, 0.02, 0.015]), ok(1, itl=[0.01, 0.02, 0.015]), ok(2)], job=job)
    executed_run("job-2-0", [overflowed(0), overflowed(1), overflowed(2)])
    stored = {run.key: (run.n_requests, run.throughput_tok_s) for run in Run.objects.all()}

    assert_round_trips_add_nothing()

    assert {run.key: (run.n_requests, run.throughput_tok_s) for run in Run.objects.all()} == stored
    assert stored["job-1-0"][0] == 3 and stored["job-2-0"][0] == 3


@pytest.mark.django_db
def test_a_jobs_failed_requests_are_stored_as_an_import_would_store_them() -> None:
    run = executed_run("job-3-0", [overflowed(0)])
    request = run.requests.get()
    # The kind an import classifies the same 500 as, not an empty one the import would fill in.
    assert (request.http_status, request.error_type) == (500, "context_exceeded")
    line = orjson.loads(export())
    assert line["request"]["error_type"] == "context_exceeded"


@pytest.mark.django_db
def test_a_status_no_import_would_take_is_kept_aside_not_refused() -> None:
    run = executed_run("job-4-0", [Outcome(ok=False, http_status=999, error="x" * 20_000, started_at=T0)])
    request = run.requests.get()
    assert request.http_status is None and request.extra["http_status"] == 999
    assert len(request.error) == 10_000
    assert_round_trips_add_nothing()


@pytest.mark.django_db
def test_a_kvlab_bench_1_export_of_runs_with_itl_adds_nothing() -> None:
    # kvlab.bench/1 has no ITL: the request is the same request without it.
    v2 = {"schema": SCHEMA_V2, "run": {"id": "a", "model": "m"}, "request": {"ok": True, "tok_s": 2.0, "itl_s": [0.1]}}
    twin = {**v2, "request": {"ok": True, "tok_s": 2.0, "itl_s": [0.2]}}  # same fields, other ITL: a second request
    assert load(jsonl(v2, twin)).n_imported == 2

    assert_round_trips_add_nothing()
    assert sorted(RequestResult.objects.values_list("itl_s", flat=True)) == [[0.1], [0.2]]


# --- a database holding every kind of run ------------------------------------------------------


KINDS = ("flat", "v2_itl", "summary_only", "job", "job_failed", "vllm")


def store_kind(kind: str, n: int, tmp: Path) -> None:
    key = f"{kind}-{n}"
    if kind == "flat":
        load(jsonl(*(flat(run=key, tok_s=30.0 + i % 3) for i in range(n + 1))), f"{key}.jsonl")
    elif kind == "v2_itl":
        records = [
            {"schema": SCHEMA_V2, "run": {"id": key, "model": "m", "tool": "kvlab"},
             "request": {"ok": i % 4 != 3, "status": 200 if i % 4 != 3 else 503, "ttft_s": 0.1,
                         "itl_s": [0.01 * (1 + i % 2)] * 3}}
            for i in range(n + 1)
        ]  # fmt: skip
        load(jsonl(*records), f"{key}.jsonl")
    elif kind == "summary_only":
        summary = {"n_requests": n + 1, "n_ok": n, "n_failed": 1, "duration_s": 2.5, "output_tok_s": 12.5}
        load(jsonl({"schema": SCHEMA_V2, "run": {"id": key, "model": "m"}, "summary": summary}), f"{key}.jsonl")
    elif kind == "job":
        executed_run(key, [ok(i, itl=[0.02] * (i % 3 + 1) if i % 2 else None) for i in range(n + 1)])
    elif kind == "job_failed":
        executed_run(key, [overflowed(i) for i in range(n + 1)])
    elif kind == "vllm":
        path = tmp / f"{key}.json"
        path.write_text(json.dumps(serve_result(label=key, date=f"20260301-1200{n:02d}")))
        result = import_path(path, origin="command")
        assert result.status == "imported", list(result.rejected_lines.values_list("reason", flat=True))


@pytest.mark.django_db
def test_export_then_import_of_every_kind_of_run_adds_nothing_twice(tmp_path: Path) -> None:
    for n, kind in enumerate(KINDS):
        store_kind(kind, n, tmp_path)
    assert set(Run.objects.values_list("source", flat=True)) == {"imported", "executed"}
    assert Run.objects.filter(summary__isnull=False).exists() and RequestResult.objects.exclude(itl_s=None).exists()

    assert_round_trips_add_nothing()


@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mix=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 5)), min_size=1, max_size=6))
def test_export_then_import_adds_nothing_over_random_mixes(tmp_path: Path, mix: list[tuple[str, int]]) -> None:
    Run.objects.all().delete()
    for i, (kind, size) in enumerate(mix):
        store_kind(kind, i * 10 + size, tmp_path)

    assert_round_trips_add_nothing()
