"""vLLM's serving benchmark results read into kvlab.bench/2 records. Pure.

What vLLM writes (vllm-project/vllm; ``vllm/benchmarks/serve.py`` at 009e6d4a1cd6, main_async and
benchmark(); the older ``benchmarks/benchmark_serving.py`` at 0049e29c41fd; ``vllm/benchmarks/
sweep/serve.py`` at 0031557f20f5):

* ``vllm bench serve --save-result``: one JSON object per run. The set-up first (``date``
  "%Y%m%d-%H%M%S", local time taken when the run *ended*; ``backend``, ``label``, ``model_id``,
  ``tokenizer_id``, ``num_prompts``, any ``--metadata KEY=VALUE``, ``request_rate`` — "inf" when
  unpaced —, ``burstiness``, ``max_concurrency``), then the results: ``duration`` (s),
  ``completed``, ``failed``, token totals, throughputs per second, and
  ``mean|median|std|pNN_<ttft|tpot|itl|e2el>_ms`` in milliseconds.
* ``--save-detailed``: per-request arrays, times in seconds — ``ttfts``, ``itls`` (a list per
  request), ``latencies``, ``start_times`` (perf_counter, not wall time), ``queue_times`` — and
  ``input_lens``, ``output_lens``, ``generated_texts``, ``errors`` ("" when it succeeded).
* ``--append-result``: the next run's object after a newline, so several objects in one file.
* Old releases: no ``failed`` (it is num_prompts − completed), the ``"request_goodput:"`` key
  typo, the per-request arrays always written (--save-detailed deleted them too early).
* A run where every request failed reports 0.0 for every statistic (numpy over ``x or 0``).
* ``vllm bench sweep serve``: ``<experiment>/<combination>/run=N.json`` (the run's object,
  indented, plus ``run_number`` and the combination's parameters) and ``summary.json`` beside
  them (a list repeating those objects); ``warmup.json`` is a warm-up and ``*.failure.json`` a
  run that raised — neither holds a measurement.

SGLang's bench_serving is adapted from vLLM's, so the shared helpers here serve sglang.py too.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kvlab import bounded_parse

from . import SCHEMA_V2, Declared, FormatError, Sample, Source, no_model

NAME = "vllm"
FORMAT_SERVE = "vllm bench serve"
FORMAT_SWEEP = "vllm bench sweep"

# The request function a run used, when it names the engine that served it. "openai",
# "openai-chat" and the like talk to any OpenAI-compatible server: the file cannot tell.
ENGINE_BY_BACKEND = {
    "vllm": "vllm",
    "vllm-chat": "vllm",
    "sglang": "sglang",
    "sglang-native": "sglang",
    "sglang-oai": "sglang",
    "sglang-oai-chat": "sglang",
    "llama.cpp": "llama.cpp",
    "tgi": "tgi",
    "lmdeploy": "lmdeploy",
    "lmdeploy-chat": "lmdeploy",
    "tensorrt-llm": "tensorrt-llm",
    "trt": "tensorrt-llm",
    "deepspeed-mii": "deepspeed-mii",
    "scalellm": "scalellm",
}
ENGINE_METADATA_KEYS = ("engine", "framework")  # --metadata engine=... says what served
ENGINE_ALIASES = {"sgl": "sglang", "llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "trtllm": "tensorrt-llm"}

_STAT = re.compile(r"^(mean|median|std|min|max|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el|e2e_latency|latency)_ms$")
_METRIC = {
    "ttft": "ttft_ms",
    "tpot": "tpot_ms",
    "itl": "itl_ms",
    "e2el": "e2e_ms",
    "e2e_latency": "e2e_ms",  # SGLang's name
    "latency": "e2e_ms",  # early forks (mean_latency_ms): only when no e2el key is present
}
_SUMMARY_PERCENTILES = {"50", "90", "95", "99"}

# Per-request arrays: the request field each fills, and those kept in the request's extra.
PER_REQUEST_EXTRA = {
    "generated_texts": "generated_text",
    "start_times": "start_time_s",  # time.perf_counter(): only differences mean something
    "queue_times": "queue_time_s",
    "cached_tokens": "cached_tokens",
    "cached_tokens_details": "cached_tokens_details",
}
PER_REQUEST_KEYS = ("errors", "input_lens", "output_lens", "ttfts", "itls", "latencies", *PER_REQUEST_EXTRA)

_RUN_FILE = re.compile(r"(^|/)run=\d+\.json$")
_SWEEP_SUMMARY = re.compile(r"(^|/)(SERVE-|BENCH-)[^/]*/summary\.json$")
_SKIPPED_IN_SWEEP = re.compile(r"(^|/)(warmup\.json|[^/]*\.failure\.json)$")


# --- sniffing ----------------------------------------------------------------------


def sniff(sample: Sample) -> bool:
    if sample.is_dir:
        return any(_RUN_FILE.search(name) or _SWEEP_SUMMARY.search(name) for name in sample.names)
    head = sample.head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] == b"[":  # a sweep's summary.json given alone
        head = head[1:].lstrip()
    return (
        head[:1] == b"{"
        and all(key in head for key in (b'"model_id"', b'"num_prompts"', b'"completed"', b'"duration"'))
        and b'"total_output_tokens_retokenized"' not in head  # SGLang's
    )


def joins(names: Mapping[str, str | None]) -> list[list[str]]:
    """A sweep combination's files given together (one folder's files, by name: their detected format):
    its run=N.json and summary.json, with the warm-up and failure files its directory read skips."""
    results = [name for name, detected in names.items() if detected == NAME and _RUN_FILE.search(name)]
    if names.get("summary.json") == NAME:
        results.append("summary.json")
    if not results:
        return []
    skipped = [
        name
        for name, detected in names.items()
        if _SKIPPED_IN_SWEEP.search(name) and detected in (None, NAME) and name not in results
    ]
    return [results + skipped]


# --- converting --------------------------------------------------------------------


def convert(source: Source, declared: Declared) -> Iterator[dict[str, Any]]:
    if source.files or source.path.is_dir():
        return _convert_sweep(source, declared)
    return _convert_file(source, declared)


def _convert_file(source: Source, declared: Declared) -> Iterator[dict[str, Any]]:
    where = source.path.name
    objects = list(_objects(read_json_values(read_source(source, source.path, where), where), where))
    if not objects:
        raise FormatError("no vLLM result object in the file", where)
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for obj, at in objects:
        records.extend(_run_records(obj, at, declared, FORMAT_SERVE, seen))
    return iter(records)


def _convert_sweep(source: Source, declared: Declared) -> Iterator[dict[str, Any]]:
    # the registry gives paths under source.path (relative to where kvlab runs, as typed); a caller
    # may also give names relative to the directory
    files = [
        path if path.is_absolute() or path.is_relative_to(source.path) else source.path / path for path in source.files
    ]
    relative = {path: _relative(path, source.path) for path in files}
    run_files = [path for path in files if _RUN_FILE.search(relative[path])]
    summaries = [path for path in files if path.name == "summary.json" and not _SKIPPED_IN_SWEEP.search(relative[path])]
    if not run_files and not summaries:
        raise FormatError("no vLLM sweep results (run=N.json or summary.json) in the directory", source.path.name)
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    # Run files first; summary.json repeats them (same content, same run id), so its entries
    # only add the runs whose own file is gone.
    for path in [*run_files, *summaries]:
        where = relative[path]
        for obj, at in _objects(read_json_values(read_source(source, path, where), where), where):
            extra = {"sweep_combination": path.parent.name}
            records.extend(_run_records(obj, at, declared, FORMAT_SWEEP, seen, extra))
    return iter(records)


def read_source(source: Source, path: Path, where: str) -> bytes:
    """A file's bytes, up to the most kvlab reads of one document (kvlab.bounded_parse)."""
    handle = source.open(path)
    with handle:  # type: ignore[attr-defined]
        try:
            return bounded_parse.read_capped(handle)  # type: ignore[arg-type]
        except bounded_parse.Refused as exc:
            raise FormatError(str(exc), where) from None


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _objects(values: list[tuple[int, Any]], where: str) -> Iterator[tuple[dict[str, Any], str]]:
    for line, value in values:
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            at = f"{where} line {line}" + (f", item {i + 1}" if isinstance(value, list) else "")
            if not isinstance(item, dict):
                raise FormatError(f"a vLLM result is a JSON object, got {type(item).__name__}", at)
            yield item, at


def _run_records(
    obj: dict[str, Any],
    at: str,
    declared: Declared,
    tool_format: str,
    seen: set[str],
    context: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    run_id = f"vllm-{_text(obj, 'date', at) or 'undated'}-{digest(obj)}"
    if run_id in seen:  # the same run twice (a summary.json entry, a pasted-twice object)
        return []
    seen.add(run_id)
    for key in ("completed", "duration"):
        if key not in obj:
            raise FormatError(f"missing {key!r}: not a vLLM bench serve result", at)
    provenance: dict[str, str] = {}
    consumed = {"model_id", "label", "max_concurrency", "request_rate", "duration"}
    run: dict[str, Any] = {"id": run_id, "source": "imported"}
    run["model"] = _model(obj, ("model_id", "tokenizer_id"), declared, provenance, at)
    fill_declared(run, obj.get("label"), declared, provenance, at, "label")
    run["wall_s"] = number(obj, "duration", at)
    provenance["wall_s"] = "file"
    started = started_at(_text(obj, "date", at), run["wall_s"], at)
    if started:
        run["started_at"] = started
        provenance["started_at"] = "derived"  # date (local time, no zone: read as UTC) − duration
    run["workload"] = workload(obj, at, provenance)
    run["tool"] = {"name": "vllm", "format": tool_format}
    run["engine"] = engine(obj, declared, provenance, default="vllm", at=at)
    consumed.update(k for k in ENGINE_METADATA_KEYS if isinstance(obj.get(k), str) and obj[k])
    fill_server_flags(run, declared, provenance)
    run["provenance"] = provenance

    completed = count(obj, "completed", at)
    summary: dict[str, Any] = {"n_ok": completed, "requests_sampled": False}
    num_prompts = count(obj, "num_prompts", at) if obj.get("num_prompts") is not None else None
    failed = count(obj, "failed", at) if obj.get("failed") is not None else None
    consumed.update(("completed", "num_prompts", "failed"))
    if failed is None:
        if num_prompts is None:
            raise FormatError("neither 'failed' nor 'num_prompts': the run's request count is unknown", at)
        if num_prompts < completed:
            raise FormatError(f"'completed' ({completed}) exceeds 'num_prompts' ({num_prompts})", at)
        failed = num_prompts - completed
        provenance["summary.n_failed"] = "derived"  # old releases: num_prompts − completed
    summary["n_failed"] = failed
    summary["n_requests"] = completed + failed
    summary.update(aggregates(obj, at, consumed, request_rate_key="request_throughput"))
    extra: dict[str, Any] = {}
    if "request_goodput:" in obj:  # the old key typo: kept under its intended name
        extra["request_goodput"] = obj["request_goodput:"]
        consumed.add("request_goodput:")
    stats, stat_notes = statistics(obj, at, consumed, every_request_failed=completed == 0)
    summary.update(stats)
    extra.update(stat_notes)
    requests = request_records(obj, run, at, completed, consumed)
    extra.update((key, value) for key, value in obj.items() if key not in consumed)
    extra.update(context or {})
    records = [{"schema": SCHEMA_V2, "run": run, "summary": summary, "extra": storable(extra)}]
    records.extend(requests)
    return records


# --- shared with sglang.py ---------------------------------------------------------


def read_json_values(data: bytes, where: str) -> list[tuple[int, Any]]:
    """Every JSON value in data, with the line it starts on: one, or several appended after one
    another (vLLM's --append-result, SGLang's JSONL). Bare NaN/Infinity decode (Python wrote them).
    All of them within kvlab's bounds (kvlab.bounded_parse), their values counted together: all are held."""
    try:
        text = data.decode("utf-8").lstrip("\ufeff")
        bounded_parse.check_values(text)
    except UnicodeDecodeError as exc:
        raise FormatError(f"not UTF-8 text (byte {exc.start})", where) from None
    except bounded_parse.Refused as exc:
        raise FormatError(str(exc), where) from None
    decoder = json.JSONDecoder()
    values: list[tuple[int, Any]] = []
    pos, line, end = 0, 1, len(text)
    while True:
        start = pos
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        line += text.count("\n", start, pos)
        if pos >= end:
            return values
        try:
            value, after = bounded_parse.raw_decode(decoder, text, pos)
        except bounded_parse.Refused as exc:
            raise FormatError(str(exc), f"{where} line {line}") from None
        except json.JSONDecodeError as exc:
            raise FormatError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", where) from None
        except ValueError as exc:  # an integer of more digits than Python converts
            raise FormatError(f"invalid JSON: {exc}", where) from None
        values.append((line, value))
        line += text.count("\n", pos, after)
        pos = after


def digest(obj: Any) -> str:
    """A stable digest of a run's whole object: the same run read twice gets the same id."""
    payload = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def started_at(date: str | None, duration: float | None, at: str) -> str | None:
    """vLLM's date is taken when the run ended, in the machine's local time without a zone."""
    if not date:
        return None
    try:
        ended = datetime.strptime(date, "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        raise FormatError(f"'date' must read YYYYMMDD-HHMMSS, got {date!r}", at) from None
    start = ended - timedelta(seconds=duration or 0.0)
    return start.isoformat(timespec="seconds").replace("+00:00", "Z")


def workload(obj: dict[str, Any], at: str, provenance: dict[str, str]) -> dict[str, Any]:
    """max_concurrency is the configured limit; request_rate "inf"/Infinity/"trace" is unpaced (null)."""
    result: dict[str, Any] = {}
    limit = obj.get("max_concurrency")
    if limit is not None:
        result["concurrency"] = count(obj, "max_concurrency", at, minimum=1)
        provenance["workload.concurrency"] = "file"
    rate = obj.get("request_rate")
    if rate is not None:
        # "inf"/Infinity: every request sent at once; "trace": a trace's own times. Unpaced: null.
        unpaced = rate in ("inf", "trace", math.inf)
        result["request_rate"] = None if unpaced else number(obj, "request_rate", at)
        provenance["workload.request_rate"] = "file"
    return result


def engine(obj: dict[str, Any], declared: Declared, provenance: dict[str, str], *, default: str, at: str) -> str:
    """What served the run: the file's word (--metadata engine=…, a backend that names one), else
    the declared engine, else the tool's own (vllm bench sweep launches vllm serve)."""
    for key in ENGINE_METADATA_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value.strip():
            provenance["engine"] = "file"
            name = value.strip().lower()
            return ENGINE_ALIASES.get(name, name)[:40]
    backend = _text(obj, "backend", at)
    if backend in ENGINE_BY_BACKEND:
        provenance["engine"] = "file"
        return ENGINE_BY_BACKEND[backend]
    if declared.engine:
        provenance["engine"] = "declared"
        return declared.engine
    provenance["engine"] = "derived"
    return default


def fill_declared(
    run: dict[str, Any], value: Any, declared: Declared, provenance: dict[str, str], at: str, field: str
) -> None:
    """A text field the file may hold (label): the file's value, else the declared one."""
    if value is not None and not isinstance(value, str):
        raise FormatError(f"{field!r} must be text, got {type(value).__name__}", at)
    if value:
        run[field] = value
        provenance[field] = "file"
    elif getattr(declared, field):
        run[field] = getattr(declared, field)
        provenance[field] = "declared"


def fill_server_flags(run: dict[str, Any], declared: Declared, provenance: dict[str, str]) -> None:
    if declared.gpu:
        run["gpu"] = declared.gpu
        provenance["gpu"] = "declared"
    if declared.server_flags:
        run.setdefault("server", {})["flags"] = declared.server_flags
        provenance["server.flags"] = "declared"


def _model(obj: dict[str, Any], keys: tuple[str, ...], declared: Declared, provenance: dict[str, str], at: str) -> str:
    for key in keys:
        value = _text(obj, key, at)
        if value:
            provenance["model"] = "file"
            return value
    if declared.model:
        provenance["model"] = "declared"
        return declared.model
    raise no_model(f"vLLM writes it as {' and '.join(map(repr, keys))}, both missing or empty here", at)


def aggregates(obj: dict[str, Any], at: str, consumed: set[str], *, request_rate_key: str) -> dict[str, Any]:
    """Durations, token totals and throughputs (per second), the tool's own."""
    fields = {
        "duration": "duration_s",
        request_rate_key: "request_rate",
        "output_throughput": "output_tok_s",
        "total_token_throughput": "total_tok_s",
        "total_throughput": "total_tok_s",  # SGLang's name
        "total_input_tokens": "input_tokens",
        "total_output_tokens": "output_tokens",
    }
    summary: dict[str, Any] = {}
    for key, field in fields.items():
        if obj.get(key) is None:
            continue
        consumed.add(key)
        if field.endswith("_tokens"):
            summary[field] = count(obj, key, at)
            continue
        value = obj[key]
        if isinstance(value, float) and not math.isfinite(value):
            continue  # kept in extra as text by storable()
        summary[field] = number(obj, key, at)
    return summary


def statistics(
    obj: dict[str, Any], at: str, consumed: set[str], *, every_request_failed: bool
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """The latency statistics in ms, {"ttft_ms": {"mean", "median", "std", "p50", …}, …}, and notes
    for extra. Statistics that are no measurement are absent: every one when every request failed
    (the tools then report 0.0), and any non-finite one (NaN from numpy over nothing)."""
    stats: dict[str, dict[str, float]] = {}
    non_finite: list[str] = []
    dropped: list[str] = []
    has_e2el = any(key.endswith("_e2el_ms") for key in obj)
    for key, value in obj.items():
        match = _STAT.match(key)
        if match is None or (match.group(3) == "latency" and has_e2el):
            continue
        stat = match.group(1) if match.group(2) is None else f"p{match.group(2)}"
        if match.group(2) is not None and match.group(2) not in _SUMMARY_PERCENTILES:
            continue  # p25, p99.9: kept in extra under the tool's key
        consumed.add(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FormatError(f"{key!r} must be a number, got {type(value).__name__}", at)
        if not math.isfinite(value):
            non_finite.append(key)
            continue
        if value < 0:
            raise FormatError(f"{key!r} must not be negative, got {value}", at)
        if every_request_failed:
            dropped.append(key)
            continue
        stats.setdefault(_METRIC[match.group(3)], {})[stat] = float(value)
    notes: dict[str, Any] = {}
    if dropped:
        notes["statistics_absent"] = (
            "every request failed: the tool's 0.0 statistics are no measurement, so none was kept"
        )
    if non_finite:
        notes["non_finite_statistics"] = sorted(non_finite)
    return stats, notes


def request_records(
    obj: dict[str, Any], run: dict[str, Any], at: str, completed: int, consumed: set[str]
) -> list[dict[str, Any]]:
    """The per-request arrays (vLLM --save-detailed, SGLang --output-details) as request records;
    none without ``errors`` (the one array that tells a failed request from a successful one)."""
    errors = obj.get("errors")
    if errors is None:
        return []
    if not isinstance(errors, list):
        raise FormatError(f"'errors' must be a list, got {type(errors).__name__}", at)
    n = len(errors)
    arrays: dict[str, list[Any]] = {}
    for key in PER_REQUEST_KEYS:
        values = obj.get(key)
        if values is None:
            continue
        if not isinstance(values, list) or len(values) != n:
            raise FormatError(f"{key!r} must be a list of {n} values, one per request (as 'errors')", at)
        arrays[key] = values
        consumed.add(key)
    records: list[dict[str, Any]] = []
    derived_elapsed = False
    for i in range(n):
        request, extra, derived = _request(arrays, i, at)
        derived_elapsed |= derived
        records.append({"schema": SCHEMA_V2, "run": run, "request": request, "extra": storable(extra)})
    n_ok = sum(record["request"]["ok"] for record in records)
    if n_ok != completed:
        raise FormatError(f"the per-request arrays hold {n_ok} successful requests but 'completed' is {completed}", at)
    if records:
        run["provenance"]["request.elapsed_s"] = "derived" if derived_elapsed else "file"
    return records


def _request(arrays: dict[str, list[Any]], i: int, at: str) -> tuple[dict[str, Any], dict[str, Any], bool]:
    def value(key: str, kind: str) -> Any:
        if key not in arrays:
            return None
        item = arrays[key][i]
        if item is None:
            return None
        if kind == "count" and (isinstance(item, bool) or not isinstance(item, int) or item < 0):
            raise FormatError(f"'{key}'[{i}] must be a non-negative integer, got {item!r}", at)
        if kind == "seconds" and (
            isinstance(item, bool) or not isinstance(item, (int, float)) or not 0 <= item < math.inf
        ):
            raise FormatError(f"'{key}'[{i}] must be a non-negative number of seconds, got {item!r}", at)
        if kind == "text" and not isinstance(item, str):
            raise FormatError(f"'{key}'[{i}] must be text, got {type(item).__name__}", at)
        return item

    error = value("errors", "text") or ""
    prompt_tokens = value("input_lens", "count")
    output_tokens = value("output_lens", "count")
    ttft = value("ttfts", "seconds")
    latency = value("latencies", "seconds")
    itl = value("itls", "list")
    if itl is not None:
        if not isinstance(itl, list):
            raise FormatError(f"'itls'[{i}] must be a list of seconds, got {type(itl).__name__}", at)
        for j, gap in enumerate(itl):
            if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 0 <= gap < math.inf:
                raise FormatError(f"'itls'[{i}][{j}] must be a non-negative number of seconds, got {gap!r}", at)
    # A failed request has error text; one whose server gave no reason has "" but nothing else
    # either (0 tokens, 0.0 s): the tools record zeros for failures.
    signals = [s for s in (output_tokens, ttft, latency) if s is not None]
    ok = not error and (not signals or any(s > 0 for s in signals))
    request: dict[str, Any] = {"ok": ok}
    if not ok:
        request["error"] = error or None
    if prompt_tokens is not None:
        request["prompt_tokens"] = prompt_tokens
    derived = False
    if ok:
        if output_tokens is not None:
            request["output_tokens"] = output_tokens
        if ttft:
            request["ttft_s"] = float(ttft)
        if latency:
            request["elapsed_s"] = float(latency)
        elif ttft:
            request["elapsed_s"] = float(ttft) + float(sum(itl or ()))  # the last token's arrival
            derived = True
        if itl is not None:
            request["itl_s"] = [float(gap) for gap in itl]
    extra = {name: arrays[key][i] for key, name in PER_REQUEST_EXTRA.items() if key in arrays}
    return request, extra, derived


def storable(value: Any) -> Any:
    """value with non-finite floats as text ("inf", "nan"): a JSON column holds finite numbers only."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {key: storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    return value


def count(obj: dict[str, Any], key: str, at: str, minimum: int = 0) -> int:
    value = obj.get(key)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FormatError(f"{key!r} must be an integer ≥ {minimum}, got {value!r}", at)
    return value


def number(obj: dict[str, Any], key: str, at: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise FormatError(f"{key!r} must be a non-negative number, got {value!r}", at)
    return float(value)


def _text(obj: dict[str, Any], key: str, at: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise FormatError(f"{key!r} must be text, got {type(value).__name__}", at)
    return value
