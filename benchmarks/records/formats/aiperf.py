"""AIPerf's exports read into kvlab.bench/2 records. Pure.

AIPerf (ai-dynamo/aiperf) writes, per profiling run, into its artifact directory:

* ``profile_export_aiperf.json``: every metric as ``{"unit", "avg", "p50", …, "std"}`` keyed
  by its tag, with ``schema_version``, ``aiperf_version``, ``benchmark_id``, ``input_config``,
  ``start_time``/``end_time`` and ``error_summary`` (the pre-release layout of mid-2025 keeps
  the metrics under ``records``, keyed by their display names);
* ``profile_export_aiperf.csv``: the same aggregates, a table of metrics with statistics, a
  table of single values and an optional GPU telemetry table, each name carrying its unit
  ("Request Latency (ms)"), values rounded to two decimals;
* ``profile_export.jsonl``: one record per request, ``{"metadata", "metrics", "error"}``, each
  metric ``{"value", "unit"}``.

Each file is one run (the JSON/CSV as a summary, the JSONL as request records); a directory
holding the JSON and the JSONL of the same run is one run with both (and so are those files given
together: ``joins``). The records name no model: the JSON names it in ``input_config``, and
``inputs.json`` — the payloads AIPerf sent, written beside the exports before the run starts — in
each payload's ``"model"``. A run whose every request failed may leave no JSON (AIPerf writes it
only when its records manager hands back results): its JSONL holds error records
(``{"metadata", "metrics": {"error_isl"?}, "error": {"code", "type", "message"}}``) and takes its
model from inputs.json. Every metric is converted
by the unit it states (``ns``/``us``/``ms``/``sec``, ``…/sec``), never by its name, and a unit
kvlab cannot convert rejects the file naming the metric. AIPerf's ``request_count`` counts the
successful requests and ``error_request_count`` the failed ones. Warm-up records of the JSONL
(``benchmark_phase`` "warmup") are not imported: AIPerf leaves them out of its aggregates too.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from kvlab import bounded_parse

from ..jsonl import UTF8_BOM
from . import SCHEMA_V2, Declared, FormatError, Sample, Source, declare, no_model

NAME = "aiperf"

JSON_FILE = "profile_export_aiperf.json"
JSONL_FILE = "profile_export.jsonl"
CSV_FILE = "profile_export_aiperf.csv"
INPUTS_FILE = "inputs.json"  # the payloads AIPerf sends: read for the model only
MAX_INPUTS_BYTES = 256 << 20  # an inputs.json holds every prompt; kvlab reads one this large at most
MAX_MODELS = 20  # distinct models named from inputs.json (AIPerf sends to several round-robin)
NO_MODEL = (
    f'AIPerf names the model in {JSON_FILE} (input_config) and in {INPUTS_FILE} (each payload\'s "model"), '
    "written beside its other exports: give one of them with this file"
)

PER_SECOND = {"ns": 1e9, "us": 1e6, "µs": 1e6, "ms": 1e3, "sec": 1.0, "s": 1.0}
# AIPerf's metric tag -> kvlab summary statistic (latencies, converted to ms).
LATENCY_TAGS = {
    "time_to_first_token": "ttft_ms",
    "inter_token_latency": "itl_ms",
    "request_latency": "e2e_ms",
}
RATE_TAGS = {  # -> per second
    "request_throughput": "request_rate",
    "output_token_throughput": "output_tok_s",
    "total_token_throughput": "total_tok_s",
}
STATS = (("mean", "avg"), ("median", "p50"), ("std", "std"), ("min", "min"), ("max", "max"))
PERCENTILES = ("p50", "p90", "p95", "p99")
MAX_TEXT_CHARS = 2000  # longer strings in extra (generated text, long error bodies) are cut


def _metric_header(cell: str) -> tuple[str, str] | None:
    """'Name (unit)' as (name, unit), else None: the last '(' opens the unit, found without a regex
    (a lazy name before optional spaces retried every split: quadratic on a long cell)."""
    cell = cell.removesuffix("\n")  # as '$' ends a line before its last newline
    start = cell.rfind("(")
    name = cell[:start].rstrip()
    if not cell.endswith(")") or start < 0 or ")" in cell[start + 1 : -1] or "\n" in name:
        return None
    return name, cell[start + 1 : -1]


# -- sniffing -------------------------------------------------------------------------------


def sniff(sample: Sample) -> bool:
    if sample.is_dir:
        return any(Path(name).name in (JSON_FILE, JSONL_FILE) for name in sample.names)
    head = sample.head.removeprefix(UTF8_BOM).lstrip()
    return _is_summary_json(head) or _is_csv(head) or _is_jsonl(head)


def _is_summary_json(head: bytes) -> bool:
    if not head.startswith(b"{") or b'"unit"' not in head:
        return False
    if b'"aiperf_version"' in head:
        return True
    # the pre-release layout: {"input_config": {...}, "records": {"Time to First Token": {...}}}
    return b'"input_config"' in head and b'"records"' in head and b'"streaming_only"' in head


def _is_csv(head: bytes) -> bool:
    # GenAI-Perf's CSV starts alike but has no "sum" column
    return (
        head.startswith(b"Metric,avg,min,max,sum,")
        or head.startswith(b"Metric,Value\r\n")
        or (head.startswith(b"Metric,Value\n") and b"(requests/sec)" in head)
    )


def _is_jsonl(head: bytes) -> bool:
    first = head.split(b"\n", 1)[0]
    return (
        first.startswith(b"{")
        and b'"metadata"' in first
        and b'"metrics"' in first
        and b'"request_start_ns"' in first
        and b'"session_num"' in first
    )


def joins(names: Mapping[str, str | None]) -> list[list[str]]:
    """AIPerf's exports of one run given together (one folder's files, by name: their detected format), with
    the inputs.json beside them: one run, as their directory is read."""
    exports = [name for name in (JSON_FILE, JSONL_FILE, CSV_FILE) if names.get(name) == NAME]
    inputs = [INPUTS_FILE] if INPUTS_FILE in names and names[INPUTS_FILE] in (None, NAME) else []
    return [exports + inputs] if exports else []


# -- converting -----------------------------------------------------------------------------


def convert(source: Source, declared: Declared) -> Iterator[dict[str, Any]]:
    if source.files:
        yield from _directory(source, declared)
        return
    data = _read(source.path, source.path.name)
    head = data[:4096].lstrip()
    if _is_jsonl(head):
        yield from _jsonl_records(data, source.path.name, None, declared, _no_inputs)
    elif head.startswith(b"{"):
        run, record = _summary_from_json(_json(data, source.path.name), declared, _no_inputs)
        yield record
    elif _is_csv(head) or head.startswith(b"Metric,"):
        yield _summary_from_csv(data, source.path.name, declared, _no_inputs)
    else:
        raise FormatError("not an AIPerf export (profile_export_aiperf.json/.csv or profile_export.jsonl)", "")


def _directory(source: Source, declared: Declared) -> Iterator[dict[str, Any]]:
    """One run per folder that holds AIPerf's exports (a sweep keeps one folder per load point)."""
    folders: dict[Path, dict[str, Path]] = {}
    for path in source.files:
        if path.name in (JSON_FILE, JSONL_FILE, CSV_FILE, INPUTS_FILE):
            folders.setdefault(path.parent, {})[path.name] = path
    folders = {folder: files for folder, files in folders.items() if files.keys() - {INPUTS_FILE}}
    if not folders:
        raise FormatError(f"no {JSON_FILE} or {JSONL_FILE} in the directory", source.path.name)
    for folder in sorted(folders):
        files = folders[folder]
        where = str(folder.relative_to(source.path)) if folder != source.path else source.path.name

        def inputs_model(files: dict[str, Path] = files, where: str = where) -> str:
            return _inputs_model(files[INPUTS_FILE], f"{where}/{INPUTS_FILE}") if INPUTS_FILE in files else ""

        run = None
        if JSON_FILE in files:
            data = _json(_read(files[JSON_FILE], f"{where}/{JSON_FILE}"), f"{where}/{JSON_FILE}")
            run, summary = _summary_from_json(data, declared, inputs_model)
            yield summary
        elif CSV_FILE in files:  # the CSV only when the JSON is missing: it repeats it, rounded
            at = f"{where}/{CSV_FILE}"
            summary = _summary_from_csv(_read(files[CSV_FILE], at), at, declared, inputs_model)
            run = summary["run"]
            yield summary
        if JSONL_FILE in files:
            data = _read(files[JSONL_FILE], f"{where}/{JSONL_FILE}")
            yield from _jsonl_records(data, f"{where}/{JSONL_FILE}", run, declared, inputs_model)


def _inputs_model(path: Path, where: str) -> str:
    """The model(s) AIPerf's inputs.json sends to: {"data": [{"session_id", "payloads": [{"model", …}]}]}."""
    size = path.stat().st_size
    if size > MAX_INPUTS_BYTES:
        raise FormatError(
            f"{size >> 20} MiB, more than the {MAX_INPUTS_BYTES >> 20} MiB kvlab reads for the model", where
        )
    value = _json(_read(path, where), where)
    sessions = value.get("data")
    if not isinstance(sessions, list):
        raise FormatError('not AIPerf\'s inputs file (no "data" list of sessions)', where)
    names: list[str] = []
    for session in sessions:
        payloads = session.get("payloads") if isinstance(session, dict) else None
        for payload in payloads if isinstance(payloads, list) else ():
            name = payload.get("model") if isinstance(payload, dict) else None
            if isinstance(name, str) and name and name not in names:
                names.append(name)
                if len(names) == MAX_MODELS:
                    return ", ".join(names)
    return ", ".join(names)


def _no_inputs() -> str:
    return ""


def _read(path: Path, where: str) -> bytes:
    with path.open("rb") as handle:
        try:
            data = bounded_parse.read_capped(handle)
        except bounded_parse.Refused as exc:
            raise FormatError(str(exc), where) from None
    return data.removeprefix(UTF8_BOM)  # an editor's byte-order mark is not content


def _json(data: bytes, where: str) -> dict[str, Any]:
    try:
        value = bounded_parse.loads(data)
    except bounded_parse.Refused as exc:
        raise FormatError(str(exc), where) from None
    except orjson.JSONDecodeError as exc:
        raise FormatError(f"not valid JSON: {exc}", where) from None
    if not isinstance(value, dict):
        raise FormatError("not a JSON object", where)
    return value


# -- units ----------------------------------------------------------------------------------


def to_ms(value: float, unit: str, where: str) -> float:
    """A duration in the unit AIPerf states, in milliseconds."""
    if unit not in PER_SECOND:
        raise FormatError(f"unit {unit!r} is not a time unit kvlab converts", where)
    return value if unit == "ms" else value * (1000.0 / PER_SECOND[unit])


def to_s(value: float, unit: str, where: str) -> float:
    """A duration in the unit AIPerf states, in seconds."""
    if unit not in PER_SECOND:
        raise FormatError(f"unit {unit!r} is not a time unit kvlab converts", where)
    return value if PER_SECOND[unit] == 1.0 else value / PER_SECOND[unit]


def to_per_s(value: float, unit: str, where: str) -> float:
    """A rate in the unit AIPerf states ("requests/sec", "tokens/ms"), per second."""
    parts = unit.split("/")
    if len(parts) != 2 or parts[1] not in PER_SECOND:
        raise FormatError(f"unit {unit!r} is not a rate per time kvlab converts", where)
    return value * PER_SECOND[parts[1]]


def _number(value: Any, where: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise FormatError(f"not a number: {value!r}", where) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FormatError(f"not a number: {value!r}", where)
    return float(value) if math.isfinite(value) else None


# -- the aggregates (JSON and CSV) ----------------------------------------------------------


def _summary(
    metrics: dict[str, dict[str, Any]], where: str, errors: int = 0, counted_ok: float | None = None
) -> dict[str, Any]:
    """kvlab's summary from AIPerf's metrics ({tag: {"unit", "avg", "p50", …}}), units converted.

    ``errors`` is the error summary's total, for a file without error_request_count;
    ``counted_ok`` the requests a latency metric counted, for one without request_count."""
    summary: dict[str, Any] = {}

    def scalar(tag: str) -> tuple[float, str] | None:
        metric = metrics.get(tag)
        if metric is None:
            return None
        value = _number(metric.get("avg"), f"{where}.{tag}.avg")
        return None if value is None else (value, str(metric.get("unit") or ""))

    ok, failed = scalar("request_count"), scalar("error_request_count")
    if ok is None and failed is None:
        if counted_ok is None:
            raise FormatError("neither request_count nor error_request_count: no outcome to import", where)
        ok = (counted_ok, "requests")  # the pre-release layout: the requests its metrics counted
    n_ok = round(ok[0]) if ok else 0
    n_failed = round(failed[0]) if failed else errors
    summary.update(n_requests=n_ok + n_failed, n_ok=n_ok, n_failed=n_failed, n_incomplete=0, requests_sampled=False)
    if (duration := scalar("benchmark_duration")) is not None:
        summary["duration_s"] = to_s(*duration, f"{where}.benchmark_duration.unit")
    for tag, key in RATE_TAGS.items():
        if (rate := scalar(tag)) is not None:
            summary[key] = to_per_s(*rate, f"{where}.{tag}.unit")
    for key, tags in (("input_tokens", ("total_isl",)), ("output_tokens", ("total_osl", "total_output_tokens"))):
        for tag in tags:
            if (tokens := scalar(tag)) is not None:
                summary[key] = round(tokens[0])
                break
    for tag, key in LATENCY_TAGS.items():
        metric = metrics.get(tag)
        if metric is None:
            continue
        unit = str(metric.get("unit") or "")
        stats: dict[str, float] = {}
        for name, source_key in (*STATS, *((p, p) for p in PERCENTILES)):
            value = _number(metric.get(source_key), f"{where}.{tag}.{source_key}")
            if value is not None:
                stats[name] = to_ms(value, unit, f"{where}.{tag}.unit")
        if stats:
            summary[key] = stats
    return summary


def _summary_from_json(
    data: dict[str, Any], declared: Declared, inputs_model: Callable[[], str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    where = JSON_FILE
    if isinstance(data.get("records"), dict):  # the pre-release layout, keyed by display name
        metrics = {_tag(name): value for name, value in data["records"].items() if isinstance(value, dict)}
    else:
        metrics = {key: value for key, value in data.items() if isinstance(value, dict) and "unit" in value}
    for tag, metric in metrics.items():
        if not isinstance(metric.get("unit"), str):
            raise FormatError("a metric without its unit", f"{where}.{tag}.unit")
    latency = metrics.get("request_latency") or metrics.get("time_to_last_token") or {}
    counted = _number(latency.get("count"), f"{where}.request_latency.count")
    summary = _summary(metrics, where, errors=_error_total(data, where), counted_ok=counted)
    config = _dict(data.get("input_config"))
    run_info = _dict(data.get("run_info"))
    start = _parse_time(data.get("start_time"), f"{where}.start_time")
    identity = str(data.get("benchmark_id") or run_info.get("benchmark_id") or "")
    digest = hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))
    digest.update(identity.encode())
    version = data.get("schema_version")
    run = _run(
        declared,
        model=_model(config) or _model_unless_declared(declared, inputs_model),
        gpu=_gpu_from_telemetry(data.get("telemetry_data")),
        workload=_workload(config, run_info),
        started_at=start,
        wall_s=summary.get("duration_s"),
        tool_version=data.get("aiperf_version"),
        tool_format=f"{JSON_FILE} schema {version}" if version else f"{JSON_FILE} (pre-release layout)",
        digest=digest.hexdigest(),
    )
    unmapped = {
        key: value
        for key, value in data.items()
        if key not in ("records", "telemetry_data") and key not in LATENCY_TAGS and key not in RATE_TAGS
    }
    if isinstance(data.get("records"), dict):
        unmapped["metrics"] = metrics
    if isinstance(data.get("telemetry_data"), dict):
        unmapped["telemetry_data"] = data["telemetry_data"]
    if start:
        unmapped["started_at_note"] = "AIPerf writes start_time in the benchmark machine's local time, no offset"
    return run, {"schema": SCHEMA_V2, "run": run, "summary": summary, "extra": _bounded(unmapped)}


def _summary_from_csv(data: bytes, where: str, declared: Declared, inputs_model: Callable[[], str]) -> dict[str, Any]:
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise FormatError(f"not a readable CSV: {exc}", where) from None
    metrics: dict[str, dict[str, Any]] = {}
    gpus: list[str] = []
    header: list[str] = []
    for number, row in enumerate(rows, start=1):
        if not row or not any(cell.strip() for cell in row):
            header = []
            continue
        if not header:
            header = row
            if header[0] not in ("Metric", "Endpoint"):
                raise FormatError(f"expected a header starting 'Metric', found {row[0]!r}", f"{where}: line {number}")
            continue
        if header[0] == "Endpoint":  # GPU telemetry: one row per GPU and metric
            record = dict(zip(header, row, strict=False))
            gpu = f"{record.get('GPU_Index')}:{record.get('GPU_Name')}"
            if record.get("GPU_Name") and gpu not in gpus:
                gpus.append(gpu)
            continue
        name, unit = _metric_header(row[0]) or (row[0], "requests")
        metric: dict[str, Any] = {"unit": unit}
        if header[1:] == ["Value"]:
            metric["avg"] = _number(row[1] if len(row) > 1 else None, f"{where}: line {number} ({row[0]})")
        else:
            for key, cell in zip(header[1:], row[1:], strict=False):
                metric[key] = _number(cell, f"{where}: line {number} ({row[0]}, {key})")
        metrics[_tag(name)] = metric
    if not metrics:
        raise FormatError("no metric rows", where)
    summary = _summary(metrics, where)
    digest = hashlib.sha256(data).hexdigest()
    has_sum = b",sum," in data.split(b"\n", 1)[0]
    run = _run(
        declared,
        model=_model_unless_declared(declared, inputs_model),
        gpu=_gpu_label([gpu.split(":", 1)[1] for gpu in gpus]),
        workload={},
        started_at=None,
        wall_s=summary.get("duration_s"),
        tool_version=None,
        tool_format=CSV_FILE if has_sum else "profile_export CSV (no sum column: GenAI-Perf's layout)",
        digest=digest,
    )
    extra = {"metrics": {tag: metric for tag, metric in metrics.items()}, "values_rounded_to": 0.01}
    return {"schema": SCHEMA_V2, "run": run, "summary": summary, "extra": extra}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _error_total(data: dict[str, Any], where: str) -> int:
    """The failed requests AIPerf's error summary counts (error_summary; errors_by_type before 0.1)."""
    key = "error_summary" if "error_summary" in data else "errors_by_type"
    entries = data.get(key) or []
    if not isinstance(entries, list):
        raise FormatError("not a list", f"{where}.{key}")
    total = 0
    for index, entry in enumerate(entries):
        count = entry.get("count") if isinstance(entry, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise FormatError(f"not a count: {count!r}", f"{where}.{key}[{index}].count")
        total += count
    return total


def _tag(display_name: str) -> str:
    """AIPerf's metric tag from its display name ("Time to First Token" -> time_to_first_token)."""
    tag = re.sub(r"[^a-z0-9]+", "_", display_name.strip().lower()).strip("_")
    return {
        "total_output_sequence_length": "total_osl",
        "total_input_sequence_length": "total_isl",
    }.get(tag, tag)


# -- the run --------------------------------------------------------------------------------


def _run(
    declared: Declared,
    *,
    model: str,
    gpu: str,
    workload: dict[str, Any],
    started_at: str | None,
    wall_s: float | None,
    tool_version: Any,
    tool_format: str,
    digest: str,
) -> dict[str, Any]:
    provenance: dict[str, str] = {"id": "derived"}
    run: dict[str, Any] = {"source": "imported"}
    declare(run, provenance, declared, model=model, gpu=gpu)
    if "model" not in run:
        raise no_model(NO_MODEL)
    run["workload"] = workload
    for key in workload:
        provenance[key] = "file"
    if started_at:
        run["started_at"], provenance["started_at"] = started_at, "file"
    if wall_s is not None:
        run["wall_s"], provenance["wall_s"] = wall_s, "file"
    run["tool"] = {"name": "aiperf", "version": tool_version if isinstance(tool_version, str) else None}
    run["tool"]["format"] = tool_format
    run["provenance"] = provenance
    day = started_at[:19].replace("-", "").replace(":", "") if started_at else "undated"
    point = "".join(
        f"-c{workload['concurrency']}" if key == "concurrency" else f"-r{workload['request_rate']:g}"
        for key in workload
    )
    run["id"] = f"aiperf-{day}{point}-{digest[:12]}"
    return run


def _model_unless_declared(declared: Declared, inputs_model: Callable[[], str]) -> str:
    """The model inputs.json names, read only when the user declared none (the file is every prompt)."""
    return "" if declared.model else inputs_model()


def _model(config: dict[str, Any]) -> str:
    models = config.get("models")
    names: list[Any] = []
    if isinstance(models, dict) and isinstance(models.get("items"), list):
        names = [item.get("name") for item in models["items"] if isinstance(item, dict)]
    for key in ("model_names", "model"):
        if not names and isinstance(config.get(key), list | str):
            names = config[key] if isinstance(config[key], list) else [config[key]]
    endpoint = config.get("endpoint")
    if not names and isinstance(endpoint, dict) and isinstance(endpoint.get("model_names"), list):
        names = endpoint["model_names"]
    return ", ".join(name for name in names if isinstance(name, str) and name)


def _workload(config: dict[str, Any], run_info: dict[str, Any]) -> dict[str, Any]:
    """The load point: the profiling phase's concurrency or request rate (AIPerf ≥ 0.10 keeps
    them in phases, earlier releases in loadgen)."""
    sources: list[dict[str, Any]] = []
    phases = config.get("phases")
    if isinstance(phases, list):
        sources += [p for p in phases if isinstance(p, dict) and p.get("name", "profiling") == "profiling"]
    if isinstance(config.get("loadgen"), dict):
        sources.append(config["loadgen"])
    workload: dict[str, Any] = {}
    for source in sources:
        concurrency, rate = source.get("concurrency"), source.get("request_rate")
        if isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency > 0:
            workload.setdefault("concurrency", concurrency)
        if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
            workload.setdefault("request_rate", float(rate))
    return workload


def _gpu_from_telemetry(telemetry: Any) -> str:
    names: list[str] = []
    if isinstance(telemetry, dict) and isinstance(telemetry.get("endpoints"), dict):
        for endpoint in telemetry["endpoints"].values():
            gpus = endpoint.get("gpus") if isinstance(endpoint, dict) else None
            if isinstance(gpus, dict):
                names += [g["gpu_name"] for g in gpus.values() if isinstance(g, dict) and g.get("gpu_name")]
    return _gpu_label(names)


def _gpu_label(names: list[str]) -> str:
    if not names:
        return ""
    distinct = sorted(set(names))
    return " + ".join(f"{names.count(name)}x {name}" if names.count(name) > 1 else name for name in distinct)


def _parse_time(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise FormatError(f"not an ISO 8601 time: {value!r}", where)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise FormatError(f"not an ISO 8601 time: {value!r}", where) from None
    if moment.tzinfo is None:  # local time of the machine that ran AIPerf: stored as given
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


def _bounded(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
        return value[:MAX_TEXT_CHARS] + f"… <{len(value) - MAX_TEXT_CHARS} more characters not kept>"
    if depth > 10:
        return "<nested too deep, not kept>"
    if isinstance(value, dict):
        return {str(key): _bounded(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        kept = [_bounded(item, depth + 1) for item in value[:100]]
        return kept + ([f"<{len(value) - 100} more not kept>"] if len(value) > 100 else [])
    return value


# -- the requests (JSONL) -------------------------------------------------------------------


def _jsonl_records(
    data: bytes, where: str, run: dict[str, Any] | None, declared: Declared, inputs_model: Callable[[], str]
) -> Iterator[dict[str, Any]]:
    try:
        bounded_parse.check_values(data)  # every line's values are held at once
    except bounded_parse.Refused as exc:
        raise FormatError(str(exc), where) from None
    lines: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            value = bounded_parse.loads(line)
        except bounded_parse.Refused as exc:
            raise FormatError(str(exc), f"{where}: line {number}") from None
        except orjson.JSONDecodeError as exc:
            raise FormatError(f"not valid JSON: {exc}", f"{where}: line {number}") from None
        if not isinstance(value, dict) or not isinstance(value.get("metadata"), dict):
            raise FormatError("not an AIPerf record (no metadata object)", f"{where}: line {number}")
        if value["metadata"].get("benchmark_phase", "profiling") == "profiling":
            lines.append((number, value))
    if not lines:
        raise FormatError("no profiling records", where)
    if run is None:
        first_ns = min(_ns(v["metadata"].get("request_start_ns"), f"{where}: line {n}") for n, v in lines)
        run = _run(
            declared,
            model=_model_unless_declared(declared, inputs_model),
            gpu="",
            workload={},
            started_at=datetime.fromtimestamp(first_ns / 1e9, tz=UTC).isoformat(),
            wall_s=None,
            tool_version=None,
            tool_format=JSONL_FILE,
            digest=hashlib.sha256(data).hexdigest(),
        )
    for number, value in lines:
        yield _request_record(run, value, f"{where}: line {number}")


def _ns(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FormatError(f"not a time in nanoseconds: {value!r}", f"{where}: metadata.request_start_ns")
    return value


def _request_record(run: dict[str, Any], value: dict[str, Any], where: str) -> dict[str, Any]:
    metadata = value["metadata"]
    metrics = value.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise FormatError("not an object", f"{where}: metrics")
    start_ns = _ns(metadata.get("request_start_ns"), where)

    def metric(tag: str) -> tuple[Any, str] | None:
        entry = metrics.get(tag)
        if entry is None:
            return None
        if not isinstance(entry, dict) or "value" not in entry or not isinstance(entry.get("unit"), str):
            raise FormatError("not a {value, unit} object", f"{where}: metrics.{tag}")
        return entry["value"], entry["unit"]

    request: dict[str, Any] = {"ts": datetime.fromtimestamp(start_ns / 1e9, tz=UTC).isoformat()}
    if (latency := metric("request_latency")) is not None:
        request["elapsed_s"] = to_s(_required(latency[0], where, "request_latency"), latency[1], where)
    elif isinstance(metadata.get("request_end_ns"), int):
        request["elapsed_s"] = max(0, metadata["request_end_ns"] - start_ns) / 1e9
    if (ttft := metric("time_to_first_token")) is not None:
        request["ttft_s"] = to_s(_required(ttft[0], where, "time_to_first_token"), ttft[1], where)
    for key, tags in (
        ("prompt_tokens", ("input_sequence_length", "error_isl")),  # error_isl: a failed request's prompt
        ("output_tokens", ("output_sequence_length", "output_token_count")),
    ):
        for tag in tags:
            if (tokens := metric(tag)) is not None:
                request[key] = round(_required(tokens[0], where, tag))
                break
    if (rate := metric("output_token_throughput_per_user")) is not None:
        unit = "/".join(rate[1].split("/")[:2])  # tokens/sec/user: one user's rate, per second
        request["tok_s"] = to_per_s(_required(rate[0], where, "output_token_throughput_per_user"), unit, where)
    if (chunks := metric("inter_chunk_latency")) is not None and isinstance(chunks[0], list):
        request["itl_s"] = [to_s(_required(item, where, "inter_chunk_latency"), chunks[1], where) for item in chunks[0]]
    error = value.get("error")
    if error:
        request["ok"] = False
        if isinstance(error, dict):
            code = error.get("code")
            if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
                request["http_status"] = code
            kind, message = error.get("type"), error.get("message")
            request["error"] = ": ".join(str(part) for part in (kind, message) if part) or "error"
        else:
            request["error"] = str(error)
    elif metadata.get("was_cancelled"):
        request["ok"], request["error"] = False, "cancelled by AIPerf before it completed"
    else:
        request["ok"] = True
    if isinstance(request.get("error"), str):
        request["error"] = request["error"][:MAX_TEXT_CHARS]
    extra: dict[str, Any] = {
        "metadata": {key: item for key, item in metadata.items() if key != "request_start_ns"},
        "metrics": {
            tag: entry
            for tag, entry in metrics.items()
            if tag not in ("request_latency", "time_to_first_token", "inter_chunk_latency")
            and not isinstance(entry.get("value") if isinstance(entry, dict) else None, list)
        },
    }
    return {"schema": SCHEMA_V2, "run": run, "request": request, "extra": _bounded(extra)}


def _required(value: Any, where: str, tag: str) -> float:
    number = _number(value, f"{where}: metrics.{tag}.value")
    if number is None:
        raise FormatError("no value", f"{where}: metrics.{tag}.value")
    return number
