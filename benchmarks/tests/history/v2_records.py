"""kvlab.bench/2 records built in code: a run, a summary, a request, and lines drawn well formed or
changed in a few places; a reading's outcome as its Record's repr or its RecordError's message."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import strategies as st

from benchmarks.records.jsonl import RecordError
from benchmarks.records.schema import SCHEMA_V2


def v2_run(**overrides: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "id": "r1",
        "source": "imported",
        "label": "base",
        "model": "tiny.gguf",
        "gpu": "RTX 4090",
        "vram_total_mib": 24564,
        "vram_used_mib": None,
        "wall_s": 12.5,
        "server": {"ctx_size": 8192, "parallel": 2, "kv_unified": True, "cache_type_k": "f16", "flash_attn": "on"},
        "workload": {"concurrency": 2},
        "tool": {"name": "vllm", "version": "0.10.1", "format": "vllm-bench-serve"},
        "engine": "llama.cpp",
        "provenance": {"model": "file", "n_ok": "file"},
    }
    run.update(overrides)
    return {k: v for k, v in run.items() if v is not ...}


SUMMARY = {
    "n_requests": 2,
    "n_ok": 2,
    "n_failed": 0,
    "requests_sampled": False,
    "input_tokens": 2000,
    "output_tokens": 400,
    "duration_s": 12.5,
    "output_tok_s": 32.0,
    "ttft_ms": {"mean": 210.5, "median": 200.0, "p99": 400.25},
    "e2e_ms": {"p50": 6000.0, "max": 6400.0},
}
REQUEST = {"ts": "2026-10-01T12:00:00Z", "ok": True, "http_status": 200, "prompt_tokens": 1000, "output_tokens": 200}


def outcome(read: Any) -> str:
    """A reading's Record (as its repr: 1, 1.0 and True told apart), or its RecordError's message."""
    try:
        return repr(read())
    except RecordError as exc:
        return f"RecordError: {exc}"


# Values a JSON line may hold where a field is expected: right, wrong in type, out of range.
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0, 1, 200, 404, 2**31, 2**63 - 1, -(2**63)]),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, -1.5, 1e308, 5e-324]),
    st.sampled_from(["", "x", "f16", "on", "file", "2026-10-01T12:00:00Z", "nope\x00"]),
    st.just([]),
    st.just({}),
    st.just({"mean": 1.0}),
)
KEYS = st.sampled_from(
    ["id", "model", "gpu", "wall_s", "server", "workload", "tool", "engine", "provenance", "started_at", "stray"]
)
INNER_KEYS = st.sampled_from(["ctx_size", "parallel", "flags", "concurrency", "request_rate", "name", "version", "x"])
SUMMARY_KEYS = st.sampled_from(
    ["n_requests", "n_ok", "n_failed", "input_tokens", "duration_s", "requests_sampled", "ttft_ms", "e2e_ms", "typo"]
)
STAT_KEYS = st.sampled_from(["mean", "median", "p50", "p99", "max", "p42"])


@st.composite
def v2_lines(draw: st.DrawFn) -> dict[str, Any]:
    """A kvlab.bench/2 record, well formed or changed in a few places (a field's value, a stray key,
    an object's place taken by another value), at any level."""
    run = v2_run()
    line: dict[str, Any] = {"schema": SCHEMA_V2, "run": run}
    if draw(st.booleans()):
        line["summary"] = orjson.loads(orjson.dumps(SUMMARY))
    else:
        line["request"] = dict(REQUEST)
    if draw(st.booleans()):
        line["extra"] = draw(st.sampled_from([{}, {"note": "x"}, {"bad": "nul\x00"}, [], None, "x"]))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["run", "inner", "request", "summary", "stat", "top", "provenance"]))
        value = draw(ANY_VALUE)
        if where == "run":
            run[draw(KEYS)] = value
        elif where == "inner":
            inner = run.get(draw(st.sampled_from(["server", "workload", "tool"])))
            if isinstance(inner, dict):
                inner[draw(INNER_KEYS)] = value
        elif where == "request" and isinstance(line.get("request"), dict):
            line["request"][draw(st.sampled_from([*REQUEST, "elapsed_s", "itl_s", "tok_s", "typo"]))] = value
        elif where == "summary" and isinstance(line.get("summary"), dict):
            line["summary"][draw(SUMMARY_KEYS)] = value
        elif where == "stat" and isinstance(line.get("summary"), dict):
            stats = line["summary"].get("ttft_ms")
            if isinstance(stats, dict):
                stats[draw(STAT_KEYS)] = value
        elif where == "top":
            line[draw(st.sampled_from(["request", "summary", "extra", "stray", "run"]))] = value
        elif isinstance(run.get("provenance"), dict):
            run["provenance"][draw(st.sampled_from(["model", "server.flags", "gpu", "x" * 70]))] = value
    return line
