"""Other benchmark tools' result files, read into kvlab's canonical records. Pure.

kvlab keeps one history for every tool. A format module reads one tool's files
and yields **kvlab.bench/2 records** — plain dicts, exactly as a kvlab.bench/2 JSONL line
decodes — so every format goes through the one validating, all-or-nothing, idempotent
import pipeline (benchmarks/history/reader.py, importer.py) that kvlab's own files use.

Each format module in this package exposes:

* ``NAME``: the format's name as `import_bench --json` prints it ("vllm", "sglang",
  "guidellm", "aiperf", "genai-perf", "llmperf", "llama-bench", "llama-server-log").
* ``sniff(sample: Sample) -> bool``: does this content look like this format? From the
  content (the first bytes, the names inside a directory), never from the file name alone.
* ``convert(source: Source, declared: Declared) -> Iterator[dict]``: the records, or
  ``FormatError`` naming the key, line or file that failed (the whole input is rejected).
* optionally ``joins(names: Mapping[str, str | None]) -> list[list[str]]``: given the names of
  files given together from one folder (each with its detected format), the groups that are one
  run, read together as their directory would be (registry.join_given).

A run whose input names no model, and none declared, is refused once with ``no_model`` (where the
tool writes the model), never left to the reader to reject record by record.

kvlab.bench/2 — what ``convert`` yields, one dict per record::

    {"schema": "kvlab.bench/2",
     "run": {"id": ..., "source": "imported", "label", "model", "gpu", "vram_total_mib",
             "vram_used_mib", "wall_s",
             "server": {"ctx_size", "parallel", "kv_unified", "cache_type_k", "cache_type_v",
                        "kv_offload", "flash_attn", "flags": "<the server's command-line flags>"},
             "workload": {"concurrency", "request_rate"},
             "started_at": "<ISO 8601, UTC>",
             "tool": {"name": "vllm", "version": "0.6.3", "format": "vllm bench serve"},
             "engine": "vllm" | "sglang" | "llama.cpp" | "tgi" | ... ,
             "provenance": {"<field>": "file" | "declared" | "derived", ...}},
     "request": {<the kvlab.bench/1 request fields: ts, ok, http_status, error, error_type,
                 prompt_tokens, n_predict, output_tokens, tok_s, elapsed_s, ttft_s>,
                 "itl_s": [<inter-token latencies, seconds>]},      # a request record, or
     "summary": {"n_requests", "n_ok", "n_failed", "n_incomplete", "requests_sampled": bool,
                 "duration_s", "request_rate", "output_tok_s", "total_tok_s",
                 "input_tokens", "output_tokens",
                 "ttft_ms": {"mean", "median", "std", "min", "max", "p50", "p90", "p95", "p99"},
                 "itl_ms": {...}, "tpot_ms": {...}, "e2e_ms": {...}},  # a run's summary
     "extra": {<every key of the tool's file kvlab does not map, kept>}}

Exactly one of ``request`` and ``summary``. A run may have request records, a summary, or
both; a summary's counts are the tool's own (a file whose requests are a *sample* says
``requests_sampled``: kvlab never recomputes a tool's aggregates from a sample). Units are
normalised here, once: latency statistics in milliseconds, per-request times in seconds,
rates per second. Run ids must be stable (the same file imported twice is a duplicate):
derive them from the tool's own identity fields (date, model, load point) and the file's
content, never from the file's name or the time of import.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

SCHEMA_V2 = "kvlab.bench/2"
SAMPLE_BYTES = 64 * 1024


class FormatError(ValueError):
    """The input is not valid for its format; the message names the key, line or file."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where


@dataclass(frozen=True)
class Declared:
    """What a file lacks but a run needs, declared by the user (`import_bench --gpu …`, the upload
    form). A declared value never overrides one the file holds; provenance records which it was."""

    gpu: str = ""
    engine: str = ""
    label: str = ""
    model: str = ""
    server_flags: str = ""  # the server's command line, e.g. "-c 16384 -np 4"


@dataclass(frozen=True)
class Sample:
    """What sniffing sees: the first SAMPLE_BYTES of a file, or a directory's file names."""

    head: bytes = b""
    names: tuple[str, ...] = ()  # for a directory: the relative paths of its files
    is_dir: bool = False


@dataclass(frozen=True)
class Source:
    """One input: a file or a directory (a vLLM sweep, an llmperf summary with its responses)."""

    path: Path
    files: tuple[Path, ...] = field(default_factory=tuple)  # for a directory: its files, sorted

    def open(self, path: Path | None = None) -> object:
        return (path or self.path).open("rb")


def declare(
    run: dict[str, Any], provenance: dict[str, str], declared: Declared, *, model: str = "", gpu: str = ""
) -> None:
    """Fill the run's model and GPU from the file (given here), else from what the user declared, and its
    label, engine and server flags from what was declared; mark each in provenance by field name."""
    for name, from_file, from_user in (("model", model, declared.model), ("gpu", gpu, declared.gpu)):
        if from_file:
            run[name], provenance[name] = from_file, "file"
        elif from_user:
            run[name], provenance[name] = from_user, "declared"
    if declared.label:
        run["label"], provenance["label"] = declared.label, "declared"
    if declared.engine:
        run["engine"], provenance["engine"] = declared.engine, "declared"
    if declared.server_flags:
        run["server"], provenance["server_flags"] = {"flags": declared.server_flags}, "declared"


def no_model(where_found: str, where: str = "") -> FormatError:
    """The error for a run whose input names no model and none was declared: raised once per input (never
    once per record), saying where the tool writes the model and how to declare it."""
    return FormatError(f"no model: {where_found}; or declare it with --model (the upload form's model field)", where)


class Format(Protocol):
    NAME: str

    def sniff(self, sample: Sample) -> bool: ...

    def convert(self, source: Source, declared: Declared) -> Iterator[dict[str, object]]: ...
