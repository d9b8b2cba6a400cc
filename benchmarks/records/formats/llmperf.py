"""ray-project/llmperf results (token_benchmark_ray.py) as kvlab.bench/2 records.

What llmperf writes, read from its source (ray-project/llmperf: token_benchmark_ray.py at
004d3afb, src/llmperf/utils.py at 0f255058, src/llmperf/common_metrics.py at 1eac866f,
src/llmperf/ray_clients/openai_chat_completions_client.py at 0451d33b): per run, into one
results directory,

* ``{model}_{mean_input}_{mean_output}_summary.json``: ``LLMPerfResults.to_dict()`` —
  ``version`` ("2023-08-31"), ``name``, the run's settings (``model``, ``mean_input_tokens``,
  ``num_concurrent_requests``, …), the user's ``--metadata``, ``timestamp`` (when the file was
  written, after the run) and ``metrics_summary()`` flattened under ``results_``: for each of
  inter_token_latency_s, ttft_s, end_to_end_latency_s, request_output_throughput_token_per_s,
  number_input_tokens and number_output_tokens its ``quantiles_p25``…``p99``, ``mean``,
  ``min``, ``max``, ``stddev`` over the requests *without* an error; the counts; and
  ``error_code_frequency`` as ``str(dict)`` — Python syntax (``"{429.0: 2}"``), read here with
  ``ast.literal_eval``, never ``eval``. ``json.dump(..., default=str)`` writes what JSON cannot
  hold as a string: pandas' integer ``min``/``max`` become ``"550"``; an empty series gives NaN.
* ``…_individual_responses.json``: every request's metrics (``error_code`` None when it
  succeeded, ``error_msg``, ``ttft_s``, ``end_to_end_latency_s``, ``inter_token_latency_s`` —
  the request's streaming time over its output tokens, TTFT included — the token counts and
  ``request_output_throughput_token_per_s``).

A summary with its responses file (a directory, or the two files given together: ``joins``) is one run:
llmperf's own aggregates as its summary, its requests as request records. A summary alone is a
summary-only run with the same id. A responses file alone lacks the model and the load, so it
is refused, saying which summary it needs.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from kvlab import bounded_parse

from . import SCHEMA_V2, Declared, FormatError, Sample, Source

NAME = "llmperf"
TOOL_FORMAT = "llmperf token_benchmark_ray"
SUMMARY_SUFFIX = "_summary.json"
RESPONSES_SUFFIX = "_individual_responses.json"
MAX_INT = 2**63 - 1  # the largest integer kvlab stores (JSON columns and counts are 64-bit)
MAX_FREQUENCY_CHARS = 100_000  # of error_code_frequency: a Python literal is parsed only this long

# kvlab's statistics <- llmperf's keys under results_<metric>_ (seconds, made milliseconds here).
STATISTICS = {"ttft_ms": "ttft_s", "tpot_ms": "inter_token_latency_s", "e2e_ms": "end_to_end_latency_s"}
STAT_KEYS = {
    "mean": "mean", "std": "stddev", "min": "min", "max": "max", "median": "quantiles_p50",
    "p50": "quantiles_p50", "p90": "quantiles_p90", "p95": "quantiles_p95", "p99": "quantiles_p99",
}  # fmt: skip
SUMMARY_COUNTS = {
    "n_requests": "results_num_requests_started",
    "n_ok": "results_num_completed_requests",
    "n_failed": "results_number_errors",
}
MAPPED = frozenset(
    {"model", "num_concurrent_requests", "version", *SUMMARY_COUNTS.values(), "results_error_code_frequency",
     "results_mean_output_throughput_token_per_s"}
    | {f"results_{metric}_{key}" for metric in STATISTICS.values() for key in STAT_KEYS.values()}
)  # fmt: skip
RESPONSE_KEYS = ("error_code", "ttft_s", "end_to_end_latency_s", "number_input_tokens", "number_output_tokens")
RESPONSE_MAPPED = frozenset(
    {"error_code", "error_msg", "ttft_s", "end_to_end_latency_s", "number_input_tokens", "number_output_tokens",
     "request_output_throughput_token_per_s"}
)  # fmt: skip


def sniff(sample: Sample) -> bool:
    if sample.is_dir:
        names = [name.rsplit("/", 1)[-1] for name in sample.names]
        summaries = {n[: -len(SUMMARY_SUFFIX)] for n in names if n.endswith(SUMMARY_SUFFIX) and n != SUMMARY_SUFFIX}
        responses = {n[: -len(RESPONSES_SUFFIX)] for n in names if n.endswith(RESPONSES_SUFFIX)}
        others = [n for n in names if n.endswith(".json") and not n.endswith((SUMMARY_SUFFIX, RESPONSES_SUFFIX))]
        return bool(summaries & responses) or (bool(summaries) and not others)
    head = sample.head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{"):
        return all(key in head for key in (b'"num_concurrent_requests":', b'"results_', b'"mean_input_tokens":'))
    if head.startswith(b"["):
        return all(key in head for key in (b'"end_to_end_latency_s":', b'"request_output_throughput_token_per_s":'))
    return False


def joins(names: Mapping[str, str | None]) -> list[list[str]]:
    """Each summary given with its responses file (one folder's files, by name: their detected format):
    one run, as their directory is read."""
    pairs = []
    for name, detected in names.items():
        partner = name.removesuffix(SUMMARY_SUFFIX) + RESPONSES_SUFFIX
        if detected == NAME and name.endswith(SUMMARY_SUFFIX) and names.get(partner) == NAME:
            pairs.append([name, partner])
    return pairs


def convert(source: Source, declared: Declared) -> Iterator[dict[str, object]]:
    """One run per summary file, joined with its responses file where it was given."""
    files = list(source.files) or [source.path]
    summaries = {p.name[: -len(SUMMARY_SUFFIX)]: p for p in files if p.name.endswith(SUMMARY_SUFFIX)}
    responses = {p.name[: -len(RESPONSES_SUFFIX)]: p for p in files if p.name.endswith(RESPONSES_SUFFIX)}
    unnamed = [p for p in files if not p.name.endswith((SUMMARY_SUFFIX, RESPONSES_SUFFIX))]
    if len(files) == 1 and unnamed:  # a renamed file: what it holds decides
        data = _load(unnamed[0])
        if isinstance(data, list):
            responses[""] = unnamed[0]
        else:
            summaries[""] = unnamed[0]
    for prefix, path in sorted(responses.items()):
        if prefix not in summaries:
            raise FormatError(
                f"llmperf's individual responses need their summary ({prefix or '…'}{SUMMARY_SUFFIX}): it holds "
                "the model, the concurrency and the run's time; give both files together, or their directory",
                path.name,
            )
    if not summaries:
        raise FormatError(f"no llmperf *{SUMMARY_SUFFIX} here", source.path.name)
    records: list[dict[str, object]] = []
    for prefix, path in sorted(summaries.items()):
        summary = _load(path)
        answers = _load(responses[prefix]) if prefix in responses else None
        records.extend(run_records(summary, answers, declared, path.name, responses.get(prefix)))
    return iter(records)


def _load(path: Path) -> Any:
    def no_number(word: str) -> None:  # pandas' NaN of an empty series: no value
        return None

    try:
        with path.open("rb") as handle:
            data = bounded_parse.read_capped(handle)
        return bounded_parse.python_loads(data, parse_constant=no_number)
    except bounded_parse.Refused as exc:
        raise FormatError(str(exc), path.name) from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"not UTF-8 text (byte {exc.start})", path.name) from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", path.name) from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise FormatError(f"invalid JSON: {exc}", path.name) from None


# --- values as llmperf writes them ---------------------------------------------------------------


def number(value: Any, key: str, where: str) -> float | int | None:
    """A number, or the string json.dump(default=str) made of a numpy one ("550", "1.5"); None stays None."""
    if value is None:
        return None
    if type(value) is int or (isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value)):
        digits = str(value).strip().lstrip("+-")  # measured before int(): a string of any length is refused cheaply
        if len(digits) > 19 or not -MAX_INT <= int(value) <= MAX_INT:
            raise FormatError(f"{key!r} is {digits[:20]}…, beyond the 64-bit integers kvlab stores", where)
        return int(value)
    if type(value) is float:
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = float(text)
        except ValueError:
            pass
        else:
            return parsed if math.isfinite(parsed) else None
    raise FormatError(f"{key!r} must be a number, got {value!r}", where)


def count(value: Any, key: str, where: str) -> int | None:
    parsed = number(value, key, where)
    if parsed is None:
        return None
    if parsed < 0 or parsed != int(parsed):
        raise FormatError(f"{key!r} must be a whole number of 0 or more, got {value!r}", where)
    return int(parsed)


def error_frequency(value: Any, where: str) -> dict[str, int]:
    """results_error_code_frequency: str() of a dict of error code -> count, e.g. "{429.0: 2}".

    Read as a Python literal (ast.literal_eval evaluates no names, calls or operators), never eval.
    """
    key = "results_error_code_frequency"
    if isinstance(value, dict):
        parsed: Any = value
    elif isinstance(value, str) and len(value) <= MAX_FREQUENCY_CHARS:
        try:
            parsed = ast.literal_eval(value.strip() or "{}")
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            message = f"{key!r} must be a Python dict literal of error code -> count, got {value!r:.80}"
            raise FormatError(message, where) from None
    else:
        raise FormatError(f"{key!r} must be a string of at most {MAX_FREQUENCY_CHARS} characters", where)
    if not isinstance(parsed, dict):
        raise FormatError(f"{key!r} must be a dict of error code -> count, got {value!r:.80}", where)
    frequency: dict[str, int] = {}
    for code, n in parsed.items():
        if type(n) is not int or n < 0 or type(code) not in (int, float, str):
            raise FormatError(f"{key!r}: {code!r}: {n!r} is not an error code and its count", where)
        name = str(int(code)) if type(code) is float and code.is_integer() else str(code)
        frequency[name] = frequency.get(name, 0) + n
    return frequency


# --- records ---------------------------------------------------------------------------------------


def run_records(
    summary: Any, answers: Any, declared: Declared, where: str, responses_path: Path | None = None
) -> list[dict[str, object]]:
    if not isinstance(summary, dict):
        raise FormatError("an llmperf summary must be a JSON object", where)
    for key in ("model", "num_concurrent_requests", "results_num_requests_started"):
        if key not in summary:
            raise FormatError(f"missing key {key!r}: not an llmperf token_benchmark_ray summary", where)
    run, stats = run_fields(summary, declared, where)
    records: list[dict[str, object]] = [{"schema": SCHEMA_V2, "run": run, "summary": stats, "extra": _extra(summary)}]
    if answers is None:
        return records
    rwhere = responses_path.name if responses_path else where
    if not isinstance(answers, list):
        raise FormatError("llmperf's individual responses must be a JSON list", rwhere)
    if stats.get("n_requests") is not None and len(answers) != stats["n_requests"]:
        raise FormatError(
            f"{len(answers)} responses for the summary's {stats['n_requests']} requests: not this summary's responses",
            rwhere,
        )
    for i, answer in enumerate(answers):
        request, extra = request_fields(answer, f"{rwhere} [{i}]")
        records.append({"schema": SCHEMA_V2, "run": run, "request": request, "extra": extra})
    return records


def run_fields(summary: dict[str, Any], declared: Declared, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    model = summary["model"]
    if not isinstance(model, str) or not model:
        raise FormatError(f"'model' must be a non-empty string, got {model!r}", where)
    concurrency = count(summary["num_concurrent_requests"], "num_concurrent_requests", where)
    stats = summary_fields(summary, where)
    provenance = {"model": "file", "concurrency": "file", "tool_version": "file"}
    run: dict[str, Any] = {
        "id": run_id(summary),
        "source": "imported",
        "model": model,
        "workload": {"concurrency": concurrency or None},
        "tool": {"name": NAME, "version": str(summary.get("version") or "")[:40], "format": TOOL_FORMAT},
    }
    name = summary.get("name")
    if declared.label:
        run["label"], provenance["label"] = declared.label, "declared"
    elif isinstance(name, str) and name:
        run["label"], provenance["label"] = name.removesuffix("_summary"), "file"
    for key, value in (("gpu", declared.gpu), ("engine", declared.engine)):
        if value:
            run[key], provenance[key] = value, "declared"
    if declared.server_flags:
        run["server"], provenance["server_flags"] = {"flags": declared.server_flags}, "declared"
    timestamp = number(summary.get("timestamp"), "timestamp", where)
    if timestamp is not None and "duration_s" in stats:  # the file is written when the run ends
        started = datetime.fromtimestamp(timestamp - stats["duration_s"], UTC)
        run["started_at"], provenance["started_at"] = started.isoformat(timespec="seconds"), "derived"
        provenance["duration_s"] = "derived"
    run["provenance"] = dict(sorted(provenance.items()))
    return run, stats


def run_id(summary: dict[str, Any]) -> str:
    """From the summary alone (its name, model, time and every figure): a joined or summary-only import agree."""
    try:
        content = orjson.dumps(summary, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:  # an integer past 64 bits among the keys kvlab keeps as they are
        raise FormatError(f"the summary cannot be stored: {exc}") from None
    digest = hashlib.blake2b(content, digest_size=8).hexdigest()
    name = str(summary.get("name") or summary["model"]).removesuffix("_summary")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:120]
    return f"llmperf-{slug}-{digest}"


def summary_fields(summary: dict[str, Any], where: str) -> dict[str, Any]:
    stats: dict[str, Any] = {"requests_sampled": False}
    for field, key in SUMMARY_COUNTS.items():
        counted = count(summary.get(key), key, where)
        if counted is not None:
            stats[field] = counted
    output_rate = number(summary.get("results_mean_output_throughput_token_per_s"), "output throughput", where)
    if output_rate is not None:
        stats["output_tok_s"] = output_rate
    per_min = number(summary.get("results_num_completed_requests_per_min"), "completed per minute", where)
    if per_min and stats.get("n_ok"):
        stats["duration_s"] = stats["n_ok"] * 60 / per_min  # llmperf: completed / (end - start) * 60
    for field, metric in STATISTICS.items():
        values = {}
        for name, suffix in STAT_KEYS.items():
            key = f"results_{metric}_{suffix}"
            value = number(summary.get(key), key, where)
            if value is not None:
                values[name] = value * 1000.0
        if values:
            stats[field] = values
    if stats.get("n_ok") == 0:  # every request failed: no statistic is a measurement
        for field in (*STATISTICS, "output_tok_s"):
            stats.pop(field, None)
    frequency = summary.get("results_error_code_frequency")
    if frequency is not None:
        error_frequency(frequency, where)  # checked here; kept in extra
    return stats


def _extra(summary: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    for key, value in summary.items():
        if key in MAPPED:
            continue
        if key.startswith("results_") and isinstance(value, str) and key != "results_error_code_frequency":
            with contextlib.suppress(FormatError):
                value = number(value, key, "")
        extra[key] = value
    if "results_error_code_frequency" in summary:
        extra["error_code_frequency"] = error_frequency(summary["results_error_code_frequency"], "")
    return extra


def request_fields(answer: Any, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(answer, dict):
        raise FormatError(f"a response must be an object, got {type(answer).__name__}", where)
    for key in RESPONSE_KEYS:
        if key not in answer:
            raise FormatError(f"missing key {key!r}: not an llmperf response", where)
    code = answer["error_code"]
    ok = code is None  # llmperf's own rule: metrics_summary() keeps the rows whose error_code is NaN
    request: dict[str, Any] = {"ok": ok}
    if not ok:
        status = number(code, "error_code", where) if not isinstance(code, str) or code.strip().isdigit() else None
        if status is not None and status == int(status) and 100 <= status <= 599:
            request["http_status"] = int(status)
        message = answer.get("error_msg")
        request["error"] = message if isinstance(message, str) and message else f"llmperf error_code {code!r}"
    for field, key in (("prompt_tokens", "number_input_tokens"), ("output_tokens", "number_output_tokens")):
        tokens = count(answer[key], key, where)
        if tokens is not None:
            request[field] = tokens
    for field, key in (("elapsed_s", "end_to_end_latency_s"), ("ttft_s", "ttft_s")):
        value = number(answer[key], key, where)
        if value is not None and value < 0:
            raise FormatError(f"{key!r} must be 0 or more, got {value!r}", where)
        if value is not None and (ok or value > 0):  # a failed request's 0 is a placeholder, not a time
            request[field] = float(value)
    rate = number(answer.get("request_output_throughput_token_per_s"), "throughput", where)
    if rate is not None and (ok or rate > 0):
        request["tok_s"] = float(rate)
    gaps = answer.get("inter_token_latency_s")
    if isinstance(gaps, list):  # early llmperf kept the gaps themselves, the TTFT first
        request["itl_s"] = [float(number(g, "inter_token_latency_s", where) or 0.0) for g in gaps[1:]]
    extra = {
        key: value for key, value in answer.items() if key not in RESPONSE_MAPPED and key != "inter_token_latency_s"
    }
    if not isinstance(gaps, list) and gaps is not None:
        extra["inter_token_latency_s"] = number(gaps, "inter_token_latency_s", where)
    if not ok:
        extra["error_code"] = code
    return request, extra
