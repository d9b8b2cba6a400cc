"""GuideLLM's `benchmarks.json` (and `benchmarks.yaml`) read into kvlab.bench/2 records. Pure.

GuideLLM (vllm-project/guidellm) saves one report per `guidellm benchmark` invocation: a list
of benchmarks, one per load point of its profile (synchronous, concurrent N streams, a
constant or Poisson rate, throughput, or the points a sweep chose). Each benchmark becomes
one kvlab run: a summary record with GuideLLM's own aggregates and counts, then one request
record per request the file lists.

Three layouts are read, told apart by the report's ``metadata.version``:

* before ``version`` (guidellm ≤ 0.3): ``{"benchmarks": [...]}``; each benchmark has
  ``args.strategy``, ``request_totals``, ``worker.backend_model`` and requests with
  ``start_time``/``end_time``/``error`` at their top level;
* version 1: ``{"metadata", "args", "benchmarks"}``; each benchmark has ``config.strategy``,
  ``metrics.request_totals`` and requests with their timings and error under ``info``;
* version 2: as 1, the report's arguments under ``config`` (a scenario: ``spec.backend``).

The request lists may be a *sample* (``--sample-requests``): the summary keeps GuideLLM's
counts and metrics and says ``requests_sampled``; nothing is recomputed from the sample.
Generated text and prompts are not kept (their lengths are, in ``extra``).

GuideLLM's CSV output is not read: it repeats the JSON's aggregates under multi-row headers
that changed between releases, without the requests.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson

from kvlab import bounded_parse

from ..jsonl import UTF8_BOM
from . import SCHEMA_V2, Declared, FormatError, Sample, Source, declare, no_model

NAME = "guidellm"

STATUSES = ("successful", "errored", "incomplete")
STAT_KEYS = ("mean", "median", "std", "min", "max", "p50", "p90", "p95", "p99")
# GuideLLM's metric name -> (kvlab summary key, factor to milliseconds). GuideLLM's names do
# not mean what vLLM's (and kvlab's) do (guidellm src/guidellm/schemas/request_stats.py):
# its inter_token_latency_ms is per request (last token - first token) / (output - 1), which is
# TPOT; its time_per_output_token_ms is (last token - request start) / output, TTFT included,
# which no other tool reports: it stays in the summary's extra, under its own name. GuideLLM
# has no per-gap ITL, so its runs have no itl_ms.
LATENCY_METRICS = {
    "time_to_first_token_ms": ("ttft_ms", 1.0),
    "inter_token_latency_ms": ("tpot_ms", 1.0),
    "request_latency": ("e2e_ms", 1000.0),  # GuideLLM keeps request latency in seconds
}
CURVES = ("pdf", "cumulative_distribution_function")  # a distribution's curve: long, not kept
MAX_TEXT_CHARS = 200  # longer strings in extra are replaced by their length

_YAML_TOP = re.compile(rb"^benchmarks:", re.MULTILINE)


def sniff(sample: Sample) -> bool:
    if sample.is_dir:
        return False
    head = sample.head.removeprefix(UTF8_BOM).lstrip()
    if head.startswith(b"{"):
        return b'"benchmarks"' in head and (b'"generative_benchmark"' in head or b'"guidellm_version"' in head)
    # yaml.dump sorts keys, so a benchmark's type_ may lie past the sample: look for GuideLLM's own names.
    return bool(_YAML_TOP.search(head)) and any(
        marker in head for marker in (b"generative_benchmark", b"time_to_first_token_ms:", b"guidellm_version:")
    )


def convert(source: Source, declared: Declared) -> Iterator[dict[str, Any]]:
    report = _load(source)
    if not isinstance(report, dict):
        raise FormatError("a GuideLLM report is a JSON object", "(top level)")
    benchmarks = report.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise FormatError("missing or not a list", "benchmarks")
    metadata = _dict(report.get("metadata"))
    version = metadata.get("version")
    if version not in (None, 1, 2):
        raise FormatError(f"unknown GuideLLM report version {version!r} (kvlab reads 1 and 2)", "metadata.version")
    report_args = report.get("args") if version != 2 else report.get("config")
    for index, benchmark in enumerate(benchmarks):
        yield from _benchmark_records(benchmark, f"benchmarks[{index}]", metadata, report_args, declared)


# -- reading -------------------------------------------------------------------------------


def _load(source: Source) -> Any:
    """The report, parsed within kvlab's bounds (kvlab.bounded_parse): a refusal names the bound passed."""
    name = source.path.name
    try:
        with source.open() as handle:  # type: ignore[attr-defined]
            data = bounded_parse.read_capped(handle).removeprefix(UTF8_BOM)  # a byte-order mark is not content
        if data.lstrip().startswith(b"{"):
            try:
                return bounded_parse.loads(data)
            except orjson.JSONDecodeError:
                pass
            try:  # Python's json.dumps writes NaN and Infinity, which orjson refuses
                return _finite(bounded_parse.python_loads(data))
            except bounded_parse.Refused:
                raise
            except ValueError as exc:
                raise FormatError(f"not valid JSON: {exc}", name) from None
        try:
            import yaml  # PyYAML comes with gguf, a runtime requirement
        except ImportError:  # pragma: no cover - gguf always brings it
            raise FormatError("reading GuideLLM's YAML needs PyYAML", name) from None
        try:
            return _finite(bounded_parse.load_yaml(data))
        except bounded_parse.Refused:
            raise
        except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer past Python's 4,300 digits
            raise FormatError(f"not valid YAML: {exc}", name) from None
    except bounded_parse.Refused as exc:
        raise FormatError(str(exc), name) from None


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _obj(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise FormatError("missing or not an object", f"{where}.{key}")
    return value


def _number(value: Any, where: str, *, required: bool = False) -> float | None:
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FormatError(f"not a number: {value!r}", where)
    if value < 0:
        raise FormatError(f"negative: {value!r}", where)
    return float(value)


def _count(value: Any, where: str) -> int:
    number = _number(value, where, required=True)
    if number is None or number != int(number):
        raise FormatError(f"not a whole count: {value!r}", where)
    return int(number)


def _iso(epoch_s: float | None) -> str | None:
    if epoch_s is None or epoch_s <= 0:
        return None
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat()


# -- one benchmark --------------------------------------------------------------------------


def _benchmark_records(
    benchmark: Any, where: str, metadata: dict[str, Any], report_args: Any, declared: Declared
) -> Iterator[dict[str, Any]]:
    if not isinstance(benchmark, dict):
        raise FormatError("not an object", where)
    metrics = _obj(benchmark, "metrics", where)
    requests = _obj(benchmark, "requests", where)
    config = _dict(benchmark.get("config")) or None
    args = _dict(benchmark.get("args")) or None
    if config is None and args is None:
        raise FormatError("neither config (GuideLLM ≥ 0.4) nor args (older) found", where)
    strategy = (config or args or {}).get("strategy")
    if not isinstance(strategy, dict) or not isinstance(strategy.get("type_"), str):
        raise FormatError("missing or without type_", f"{where}.{'config' if config else 'args'}.strategy")

    totals_where = f"{where}.metrics.request_totals" if "request_totals" in metrics else f"{where}.request_totals"
    totals = metrics.get("request_totals") or benchmark.get("request_totals")
    if not isinstance(totals, dict):
        raise FormatError("missing or not an object", totals_where)
    counts = {status: _count(totals.get(status), f"{totals_where}.{status}") for status in STATUSES}
    total = _count(totals.get("total", sum(counts.values())), f"{totals_where}.total")

    lists: dict[str, list[Any]] = {}
    for status in STATUSES:
        listed = requests.get(status) or []
        if not isinstance(listed, list):
            raise FormatError("not a list", f"{where}.requests.{status}")
        if len(listed) > counts[status]:
            raise FormatError(
                f"lists {len(listed)} requests but request_totals says {counts[status]}", f"{where}.requests.{status}"
            )
        lists[status] = listed
    sampled = any(len(lists[status]) < counts[status] for status in STATUSES)

    start = _number(benchmark.get("start_time"), f"{where}.start_time")
    end = _number(benchmark.get("end_time"), f"{where}.end_time")
    duration = _number(benchmark.get("duration"), f"{where}.duration")
    if duration is None and start is not None and end is not None:
        duration = end - start

    run = _run(benchmark, where, strategy, metadata, report_args, start, duration, declared)
    summary: dict[str, Any] = {
        "n_requests": total,
        "n_ok": counts["successful"],
        "n_failed": counts["errored"],
        "n_incomplete": counts["incomplete"],
        "requests_sampled": sampled,
        "duration_s": duration,
        "request_rate": _mean(metrics, "requests_per_second", where),
        "output_tok_s": _mean(metrics, "output_tokens_per_second", where),
        "total_tok_s": _mean(metrics, "tokens_per_second", where),
        "input_tokens": _sum(metrics, "prompt_token_count", where),
        "output_tokens": _sum(metrics, "output_token_count", where),
    }
    for name, (key, factor) in LATENCY_METRICS.items():
        stats = _stats(metrics, name, factor, where)
        if stats:
            summary[key] = stats
    summary = {key: value for key, value in summary.items() if value is not None}
    yield {"schema": SCHEMA_V2, "run": run, "summary": summary, "extra": _summary_extra(benchmark, metrics)}

    for status in STATUSES:
        for index, request in enumerate(lists[status]):
            yield _request_record(run, request, status, f"{where}.requests.{status}[{index}]")


def _run(
    benchmark: dict[str, Any],
    where: str,
    strategy: dict[str, Any],
    metadata: dict[str, Any],
    report_args: Any,
    start: float | None,
    duration: float | None,
    declared: Declared,
) -> dict[str, Any]:
    provenance: dict[str, str] = {"id": "derived"}
    kind = strategy["type_"]
    workload: dict[str, Any] = {}
    if kind == "synchronous":
        workload["concurrency"] = 1
        provenance["concurrency"] = "derived"
    elif kind == "concurrent":
        streams = strategy.get("streams", strategy.get("max_concurrency", strategy.get("worker_count")))
        workload["concurrency"] = _count(streams, f"{where}.strategy.streams")
        provenance["concurrency"] = "file"
    else:  # throughput, constant, poisson: an open load with an optional concurrency cap
        if strategy.get("max_concurrency") is not None:
            workload["concurrency"] = _count(strategy["max_concurrency"], f"{where}.strategy.max_concurrency")
            provenance["concurrency"] = "file"
        if strategy.get("rate") is not None:
            workload["request_rate"] = _number(strategy["rate"], f"{where}.strategy.rate")
            provenance["request_rate"] = "file"

    run: dict[str, Any] = {"source": "imported", "workload": workload}
    model = _model(benchmark, report_args)
    declare(run, provenance, declared, model=model)
    if "model" not in run:
        raise no_model(
            "GuideLLM writes it in each benchmark's config.backend.model (worker.backend_model before 0.4) and the "
            "report's args.model (config.spec.backend.model in version 2)",
            where,
        )
    if (started := _iso(start)) is not None:
        run["started_at"], provenance["started_at"] = started, "file"
    if duration is not None:
        run["wall_s"], provenance["wall_s"] = duration, "file"
    version = metadata.get("version")
    run["tool"] = {
        "name": "guidellm",
        "version": metadata.get("guidellm_version"),
        "format": f"benchmarks.json v{version}" if version else "benchmarks.json (before version)",
    }
    run["provenance"] = provenance
    run["id"] = _run_id(benchmark, kind, workload, start)
    return run


def _model(benchmark: dict[str, Any], report_args: Any) -> str:
    candidates: list[Any] = []
    config = benchmark.get("config")
    if isinstance(config, dict) and isinstance(config.get("backend"), dict):
        candidates.append(config["backend"].get("model"))
    worker = benchmark.get("worker")
    if isinstance(worker, dict):
        candidates.append(worker.get("backend_model"))
    if isinstance(report_args, dict):
        candidates.append(report_args.get("model"))
        spec = report_args.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("backend"), dict):
            candidates.append(spec["backend"].get("model"))
    return next((value for value in candidates if isinstance(value, str) and value), "")


def _run_id(benchmark: dict[str, Any], kind: str, workload: dict[str, Any], start: float | None) -> str:
    """GuideLLM's benchmark id and start, the load point, and a digest of the benchmark's content.

    The digest is over the parsed content with sorted keys, so the same report saved as JSON
    and as YAML imports once."""
    config = _dict(benchmark.get("config")) or benchmark
    identity = str(config.get("id_") or benchmark.get("id_") or "")
    digest = hashlib.sha256(orjson.dumps(benchmark, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))
    digest.update(identity.encode())
    day = datetime.fromtimestamp(start, tz=UTC).strftime("%Y%m%dT%H%M%S") if start else "undated"
    point = kind
    if "concurrency" in workload and kind != "synchronous":
        point += f"{workload['concurrency']}"
    if "request_rate" in workload:
        point += f"@{workload['request_rate']:g}"
    return f"guidellm-{day}-{point}-{digest.hexdigest()[:12]}"


# -- aggregates -----------------------------------------------------------------------------


def _successful(metrics: dict[str, Any], name: str, where: str) -> dict[str, Any] | None:
    metric = metrics.get(name)
    if metric is None:
        return None
    if not isinstance(metric, dict):
        raise FormatError("not an object", f"{where}.metrics.{name}")
    successful = metric.get("successful")
    if successful is None:
        return None
    if not isinstance(successful, dict):
        raise FormatError("not an object", f"{where}.metrics.{name}.successful")
    return successful


def _mean(metrics: dict[str, Any], name: str, where: str) -> float | None:
    successful = _successful(metrics, name, where)
    return None if successful is None else _number(successful.get("mean"), f"{where}.metrics.{name}.successful.mean")


def _sum(metrics: dict[str, Any], name: str, where: str) -> int | None:
    successful = _successful(metrics, name, where)
    if successful is None:
        return None
    value = _number(successful.get("total_sum"), f"{where}.metrics.{name}.successful.total_sum")
    return None if value is None else round(value)


def _stats(metrics: dict[str, Any], name: str, factor: float, where: str) -> dict[str, float]:
    successful = _successful(metrics, name, where)
    if successful is None or not successful.get("count"):
        return {}  # GuideLLM writes zeros for a status with no requests: not a measurement
    at = f"{where}.metrics.{name}.successful"
    percentiles = successful.get("percentiles") or {}
    if not isinstance(percentiles, dict):
        raise FormatError("not an object", f"{at}.percentiles")
    raw = {
        "mean": (successful.get("mean"), "mean"),
        "median": (successful.get("median"), "median"),
        "std": (successful.get("std_dev"), "std_dev"),
        "min": (successful.get("min"), "min"),
        "max": (successful.get("max"), "max"),
        **{key: (percentiles.get(key), f"percentiles.{key}") for key in ("p50", "p90", "p95", "p99")},
    }
    stats: dict[str, float] = {}
    for key in STAT_KEYS:
        value, path = raw[key]
        number = _number(value, f"{at}.{path}")
        if number is not None:
            stats[key] = number * factor
    return stats


def _summary_extra(benchmark: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """What the summary does not map: the strategy, scheduler figures and every metric's
    statistics per status (without the distributions' curves, which can be long)."""
    extra: dict[str, Any] = {}
    config = benchmark.get("config") or benchmark.get("args") or {}
    for key in ("id_", "run_id", "run_index", "strategy", "constraints", "sample_requests", "profile"):
        if key in config:
            extra[key] = config[key]
        elif key in benchmark:
            extra[key] = benchmark[key]
    for key in ("scheduler_metrics", "run_stats", "request_samples", "warmup_duration", "cooldown_duration"):
        if key in benchmark:
            extra[key] = benchmark[key]
    kept: dict[str, Any] = {}
    for name, metric in metrics.items():
        if not isinstance(metric, dict):
            continue
        statuses = {
            status: {key: value for key, value in stats.items() if key not in CURVES}
            for status, stats in metric.items()
            if isinstance(stats, dict) and status in (*STATUSES, "total")
        }
        if statuses:
            kept[name] = statuses
    extra["metrics"] = kept
    return _dict(_bounded(extra))


def _bounded(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
        return f"<{len(value)} characters not kept>"
    if depth > 8:
        return "<nested too deep, not kept>"
    if isinstance(value, dict):
        return {str(key): _bounded(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_bounded(item, depth + 1) for item in value[:50]] + (
            [f"<{len(value) - 50} more not kept>"] if len(value) > 50 else []
        )
    return value


# -- one request ----------------------------------------------------------------------------


def _request_record(run: dict[str, Any], request: Any, status: str, where: str) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise FormatError("not an object", where)
    info = _dict(request.get("info"))
    timings = _dict(info.get("timings"))
    start = request.get("request_start_time", request.get("start_time", timings.get("request_start")))
    start = _number(start, f"{where}.request_start_time")
    latency = _number(request.get("request_latency"), f"{where}.request_latency")
    end = _number(request.get("request_end_time", request.get("end_time")), f"{where}.request_end_time")
    if latency is None and start is not None and end is not None and end >= start:
        latency = end - start
    ttft_ms = _number(request.get("time_to_first_token_ms"), f"{where}.time_to_first_token_ms")

    fields: dict[str, Any] = {
        "ts": _iso(start),
        "ok": status == "successful",
        "prompt_tokens": _tokens(request.get("prompt_tokens"), f"{where}.prompt_tokens"),
        "output_tokens": _tokens(request.get("output_tokens"), f"{where}.output_tokens"),
        "n_predict": _max_tokens(request.get("request_args")),
        "tok_s": _number(request.get("output_tokens_per_second"), f"{where}.output_tokens_per_second"),
        "elapsed_s": latency,
        "ttft_s": None if ttft_ms is None else ttft_ms / 1000.0,
    }
    if status != "successful":
        error = request.get("error", info.get("error"))
        text = str(error) if error else ""
        if status == "incomplete":
            text = f"incomplete: {text or 'the request had not finished when the benchmark ended'}"
        fields["error"] = text or "errored (GuideLLM recorded no message)"
    extra: dict[str, Any] = {"guidellm_status": status}
    for key in ("request_id", "response_id", "request_type", "type_"):
        if request.get(key) is not None:
            extra[key] = request[key]
    if info.get("status") is not None:
        extra["info_status"] = info["status"]
    for key in ("output", "prompt", "request_args", "reasoning_output"):
        kept_out = request.get(key)
        if isinstance(kept_out, str) and kept_out:
            extra[f"{key}_chars"] = len(kept_out)  # the text itself is not kept
    request_record = {key: value for key, value in fields.items() if value is not None}
    return {"schema": SCHEMA_V2, "run": run, "request": request_record, "extra": extra}


def _tokens(value: Any, where: str) -> int | None:
    number = _number(value, where)
    return None if number is None else round(number)


def _max_tokens(request_args: Any) -> int | None:
    """The request's max_tokens, from the request arguments GuideLLM saved as a JSON string."""
    if isinstance(request_args, str) and request_args.startswith("{"):
        try:
            request_args = bounded_parse.loads(request_args)
        except ValueError:  # not JSON, or past kvlab's bounds: no max_tokens known
            return None
    if not isinstance(request_args, dict):
        return None
    body = _dict(request_args.get("body")) or request_args
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
