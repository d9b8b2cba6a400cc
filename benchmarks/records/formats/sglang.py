"""SGLang's serving benchmark results (``python -m sglang.bench_serving --output-file``) read into
kvlab.bench/2 records. Pure.

What SGLang writes (sgl-project/sglang: ``python/sglang/bench_serving.py`` at 0033168f0f58 and
``python/sglang/benchmark/serving.py`` at 00f9ec472ffe, benchmark()):

* JSONL: each run appends one line, ``json.dumps(result)`` — so bare ``Infinity`` (an unpaced
  ``request_rate``) and ``NaN`` (numpy statistics over no successful request) appear.
* The arguments (``backend``, ``dataset_name``, ``request_rate`` — a number, Infinity or "trace"
  —, ``max_concurrency``: the configured limit, the dataset's lengths; newer: ``tag``,
  ``server_info`` from the server's /server_info), then the results: ``duration`` (s),
  ``completed``, token totals, throughputs per second, ``mean|median|std|pNN_<ttft|tpot|itl|
  e2e_latency>_ms`` in milliseconds, and ``concurrency`` — the *measured* mean number of requests
  in flight (Σ latencies / duration), not a setting.
* No model, date or request count in older releases: only successful requests are counted. A run
  whose every request failed is still written ("All requests failed" is a warning), with
  ``completed`` 0 and NaN E2E statistics: a failed run of at least one request.
* ``--output-details``: per-request arrays as vLLM's (``input_lens``, ``output_lens``, ``ttfts``,
  ``itls``, ``generated_texts``, ``errors``), times in seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import SCHEMA_V2, Declared, FormatError, Sample, Source, no_model
from .vllm import (
    aggregates,
    count,
    digest,
    engine,
    fill_declared,
    fill_server_flags,
    number,
    read_json_values,
    read_source,
    request_records,
    statistics,
    storable,
    workload,
)

NAME = "sglang"
FORMAT = "sglang.bench_serving"


def sniff(sample: Sample) -> bool:
    if sample.is_dir:
        return False
    head = sample.head.lstrip(b"\xef\xbb\xbf \t\r\n")
    first_line = head.split(b"\n", 1)[0]
    # total_output_tokens_retokenized: SGLang's own (it re-tokenizes the output); vLLM never writes it.
    return first_line[:1] == b"{" and all(
        key in first_line for key in (b'"backend"', b'"completed"', b'"total_output_tokens_retokenized"')
    )


def convert(source: Source, declared: Declared) -> Iterator[dict[str, Any]]:
    where = source.path.name
    values = read_json_values(read_source(source, source.path, where), where)
    if not values:
        raise FormatError("no SGLang result line in the file", where)
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line, obj in values:
        at = f"{where} line {line}"
        if not isinstance(obj, dict):
            raise FormatError(f"an SGLang result line is a JSON object, got {type(obj).__name__}", at)
        run_id = f"sglang-{digest(obj)}"
        if run_id not in seen:
            seen.add(run_id)
            records.extend(_run_records(obj, run_id, at, declared))
    return iter(records)


def _run_records(obj: dict[str, Any], run_id: str, at: str, declared: Declared) -> list[dict[str, Any]]:
    for key in ("completed", "duration"):
        if key not in obj:
            raise FormatError(f"missing {key!r}: not an SGLang bench_serving result", at)
    provenance: dict[str, str] = {}
    consumed = {"tag", "max_concurrency", "request_rate", "duration", "completed", "concurrency"}
    server_info = obj.get("server_info")
    if server_info is not None and not isinstance(server_info, dict):
        raise FormatError(f"'server_info' must be an object, got {type(server_info).__name__}", at)
    server_info = server_info or {}

    run: dict[str, Any] = {"id": run_id, "source": "imported"}
    run["model"] = _model(server_info, declared, provenance, at)
    fill_declared(run, obj.get("tag"), declared, provenance, at, "label")
    run["wall_s"] = number(obj, "duration", at)
    provenance["wall_s"] = "file"
    run["workload"] = workload(obj, at, provenance)  # max_concurrency: the configured limit
    run["tool"] = {"name": "sglang", "format": FORMAT}
    run["engine"] = engine(obj, declared, provenance, default="sglang", at=at)
    context_length = server_info.get("context_length")
    if isinstance(context_length, int) and not isinstance(context_length, bool) and context_length > 0:
        run["server"] = {"ctx_size": context_length}
        provenance["server.ctx_size"] = "file"
    fill_server_flags(run, declared, provenance)
    run["provenance"] = provenance

    completed = count(obj, "completed", at)
    summary: dict[str, Any] = {"n_ok": completed, "requests_sampled": False}
    summary.update(aggregates(obj, at, consumed, request_rate_key="request_throughput"))
    extra: dict[str, Any] = {}
    measured = obj.get("concurrency")
    if measured is not None:
        # The mean number of requests in flight, measured — not the configured limit.
        extra["measured_concurrency"] = measured
    stats, notes = statistics(obj, at, consumed, every_request_failed=completed == 0)
    summary.update(stats)
    extra.update(notes)
    requests = request_records(obj, run, at, completed, consumed)
    if requests:
        summary["n_requests"] = len(requests)
        summary["n_failed"] = len(requests) - completed
        provenance["summary.n_requests"] = "derived"  # counted from the per-request arrays
    elif completed == 0:
        # Every request failed ("All requests failed" is only a warning; the line is still written), but
        # SGLang writes no count of them. A line is written only after at least one request ran
        # (benchmark() warms up with the dataset's first), so 1 failed is the count's lower bound.
        summary["n_requests"] = summary["n_failed"] = 1
        provenance["summary.n_requests"] = provenance["summary.n_failed"] = "derived"
        extra["n_requests_lower_bound"] = (
            "SGLang records no request count and completed is 0: at least one request ran and none succeeded "
            "(1 is that lower bound; --output-details records every request)"
        )
    else:
        # SGLang counts only the requests that succeeded; how many failed is not recorded.
        summary["n_requests"] = completed
        provenance["summary.n_requests"] = "derived"
        extra["n_failed_unknown"] = "SGLang records only completed requests: failures, if any, are not counted"
    extra.update((key, value) for key, value in obj.items() if key not in consumed)
    records = [{"schema": SCHEMA_V2, "run": run, "summary": summary, "extra": storable(extra)}]
    records.extend(requests)
    return records


def _model(server_info: dict[str, Any], declared: Declared, provenance: dict[str, str], at: str) -> str:
    for key in ("served_model_name", "model_path"):
        value = server_info.get(key)
        if isinstance(value, str) and value:
            provenance["model"] = "file"
            return value
    if declared.model:
        provenance["model"] = "declared"
        return declared.model
    raise no_model(
        "SGLang writes it in server_info (served_model_name, model_path), which older releases leave out and "
        "is null when the server did not answer /server_info",
        at,
    )
