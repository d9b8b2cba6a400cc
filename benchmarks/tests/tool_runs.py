"""Runs as the peer tools' files describe them (a vLLM result of aggregates only, a GuideLLM load point
with a sample of its requests) and as kvlab measures them, each stored through the real import pipeline
from kvlab.bench/2 records written here; and how the pages that show them are read."""

from __future__ import annotations

import io
import re
from typing import Any

from django.test import Client
from django.urls import reverse

from benchmarks.history.importer import import_bench_file
from benchmarks.models import Run
from benchmarks.records.formats import Declared
from benchmarks.records.schema import SCHEMA_V2
from benchmarks.tests.builders import flat, jsonl

MODEL = "Qwen/Qwen3-8B"
STATS = {"mean": 120.0, "median": 110.0, "p50": 110.0, "p90": 200.0, "p95": 250.0, "p99": 400.0}


def v2_run(run_id: str, **changes: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "id": run_id,
        "model": MODEL,
        "server": {"flags": "--max-num-seqs 64"},
        "workload": {"concurrency": 16},
        "started_at": "2026-11-01T10:00:00Z",
        "tool": {"name": "vllm", "version": "0.9.1", "format": "vllm bench serve"},
        "engine": "vllm",
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
        "total_tok_s": 3500.0,
        "output_tokens": 75000,
        "input_tokens": 100000,
        "ttft_ms": STATS,
        "itl_ms": {"mean": 19.0, "median": 18.0, "p99": 60.0},
        "tpot_ms": {"mean": 20.0},
        "e2e_ms": {"p95": 9000.0},
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not ...}


def summary_record(run: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {"schema": SCHEMA_V2, "run": run, "summary": summary(**changes)}


def request_record(run: dict[str, Any], **request: Any) -> dict[str, Any]:
    return {"schema": SCHEMA_V2, "run": run, "request": {"ok": True, **request}}


def load(data: bytes, declared: Declared | None = None) -> None:
    result = import_bench_file(io.BytesIO(data), filename="t.jsonl", origin="command", declared=declared)
    assert result.status == "imported", [line.reason for line in result.rejected_lines.all()]


def vllm_run(run_id: str = "vllm-c16", **changes: Any) -> Run:
    """A vllm bench serve result: the tool's aggregates only, GPU declared on import."""
    load(jsonl(summary_record(v2_run(run_id), **changes)), Declared(gpu="H100"))
    return Run.objects.get(key=run_id)


def guidellm_point(run_id: str = "guidellm-rate-4", rate: float = 4.0, n_rows: int = 3, **changes: Any) -> Run:
    """A GuideLLM load point: its own totals and percentiles, and a sample of its requests."""
    run = v2_run(
        run_id,
        workload={"request_rate": rate},
        tool={"name": "guidellm", "version": "0.3.0", "format": "guidellm benchmarks.json"},
        gpu="H100",
    )
    rows = [request_record(run, ttft_s=9.0, elapsed_s=30.0, tok_s=1.0, output_tokens=10) for _ in range(n_rows)]
    values = {"n_requests": 200, "n_ok": 200, "n_failed": 0, "requests_sampled": True, **changes}
    load(jsonl(summary_record(run, **values), *rows))
    return Run.objects.get(key=run_id)


def kvlab_job(run_id: str = "kvlab-job-1", **changes: Any) -> Run:
    """A run kvlab measured itself: every request stored, its figures computed from them."""
    fields = {"label": "qwen-c16", "model": MODEL, "gpu": "H100", "concurrency": 16, "source": "executed", **changes}
    records = [
        flat(run=run_id, ttft_s=0.1 * (i + 1), elapsed_s=2.0 + i, output_tokens=100, tok_s=40.0 + i, **fields)
        for i in range(4)
    ]
    load(jsonl(*records))
    return Run.objects.get(key=run_id)


def page(client: Client, name: str, *args: Any, **params: Any) -> str:
    response = client.get(reverse(name, args=args), params)
    assert response.status_code == 200, response.content[:2000]
    return response.content.decode()


def no_placeholders(html: str) -> None:
    """No Python None, NaN or JavaScript undefined reaches the reader."""
    text = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    for word in ("None", "nan", "NaN", "undefined", "inf"):
        assert not re.search(rf"\b{word}\b", text), f"{word!r} shown: " + text[text.find(word) - 200 :][:400]


def row_of(html: str, key: str) -> str:
    """The run list's row of a run."""
    start = html.index(f"<small>{key}</small>")
    return html[html.rindex("<tr", 0, start) : html.index("</tr>", start)]
