"""GenAI-Perf's `profile_export.json` read into kvlab.bench/2 records. Pure.

GenAI-Perf (triton-inference-server/perf_analyzer) has perf_analyzer record every request of
every load point into ``profile_export.json`` (src/profile_data_exporter.cc)::

    {"experiments": [{"experiment": {"mode": "concurrency" | "request_rate", "value": N},
                      "requests": [{"timestamp": <ns>, "sequence_id"?, "request_inputs": {...},
                                    "response_timestamps": [<ns>, ...],
                                    "response_outputs": [{"response": "data: {...}"}, ...]}],
                      "window_boundaries": [<ns>, ...]}],
     "version": "...", "service_kind": "openai" | "triton" | ..., "endpoint": "v1/chat/completions"}

Each experiment becomes one run of request records (the file holds no aggregates: GenAI-Perf
computes those with a tokenizer into another file). Times are nanoseconds since the epoch:
TTFT is the first response's time after the request's, the elapsed time the last one's, the
inter-token latencies the gaps between responses (one per streamed chunk). Token counts come
only from a response's ``usage`` object when the server sent one; kvlab does not tokenise.
A request with no response, or whose response is an error object, is a failed request
(perf_analyzer records no request whose HTTP status was an error: src/infer_context.cc). An
artifact directory (or the files given together) is read for its ``profile_export.json`` alone:
GenAI-Perf's own aggregates and inputs beside it are not read.
Prompts and generated text are not kept (their lengths are).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from kvlab import bounded_parse

from ..jsonl import UTF8_BOM
from . import SCHEMA_V2, Declared, FormatError, Sample, Source, declare, no_model

NAME = "genai-perf"
MAX_ERROR_CHARS = 2000
EXPORT_FILE = "profile_export.json"
# What GenAI-Perf writes beside it, not read: its own aggregates (computed with a tokenizer) and inputs.
COMPANIONS = ("profile_export_genai_perf.json", "profile_export_genai_perf.csv", "inputs.json", "llm_inputs.json")

_HEAD = re.compile(rb'^\s*\{\s*"experiments"\s*:\s*\[\s*(\]|\{\s*"experiment"\s*:\s*\{\s*"mode")')


def sniff(sample: Sample) -> bool:
    if sample.is_dir:
        return any(Path(name).name == EXPORT_FILE for name in sample.names)
    return bool(_HEAD.match(sample.head.removeprefix(UTF8_BOM)))


def joins(names: Mapping[str, str | None]) -> list[list[str]]:
    """profile_export.json given with the files GenAI-Perf writes beside it (one folder's files, by name:
    their detected format): one input, as their directory is read (only profile_export.json is read)."""
    if names.get(EXPORT_FILE) != NAME:
        return []
    return [[EXPORT_FILE, *(name for name in COMPANIONS if name in names and names[name] in (None, NAME))]]


def convert(source: Source, declared: Declared) -> Iterator[dict[str, Any]]:
    if not source.files:
        yield from _export(source.path, "", declared)
        return
    exports = [path for path in source.files if path.name == EXPORT_FILE]
    if not exports:
        raise FormatError(f"no {EXPORT_FILE} in the directory", source.path.name)
    for path in exports:  # an artifact directory each; GenAI-Perf's own aggregates beside it are not read
        name = str(path.relative_to(source.path)) if path.is_relative_to(source.path) else path.name
        yield from _export(path, f"{name}: ", declared)


def _export(path: Path, prefix: str, declared: Declared) -> Iterator[dict[str, Any]]:
    """One profile_export.json's runs; prefix names the file within a directory ("" for a file alone)."""
    where = prefix.removesuffix(": ") or path.name
    try:
        with path.open("rb") as handle:
            data = bounded_parse.read_capped(handle).removeprefix(UTF8_BOM)  # a byte-order mark is not content
        document = bounded_parse.loads(data)
    except bounded_parse.Refused as exc:
        raise FormatError(str(exc), where) from None
    except orjson.JSONDecodeError as exc:
        raise FormatError(f"not valid JSON: {exc}", where) from None
    if not isinstance(document, dict) or not isinstance(document.get("experiments"), list):
        raise FormatError("missing or not a list", f"{prefix}experiments")
    if not document["experiments"]:
        raise FormatError("no experiments: nothing to import", f"{prefix}experiments")
    for index, experiment in enumerate(document["experiments"]):
        yield from _experiment(document, experiment, f"{prefix}experiments[{index}]", declared)


def _ns(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise FormatError(f"not a time in nanoseconds: {value!r}", where)
    return value


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat()


def _experiment(document: dict[str, Any], experiment: Any, where: str, declared: Declared) -> Iterator[dict[str, Any]]:
    if not isinstance(experiment, dict):
        raise FormatError("not an object", where)
    point = experiment.get("experiment")
    if not isinstance(point, dict) or point.get("mode") not in ("concurrency", "request_rate"):
        raise FormatError("missing, or mode is neither concurrency nor request_rate", f"{where}.experiment")
    value = point.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise FormatError(f"not a positive number: {value!r}", f"{where}.experiment.value")
    requests = experiment.get("requests")
    if not isinstance(requests, list) or not requests:
        raise FormatError("missing or empty", f"{where}.requests")

    starts = [
        _ns(r.get("timestamp") if isinstance(r, dict) else None, f"{where}.requests[{i}].timestamp")
        for i, r in enumerate(requests)
    ]
    ends = [max([starts[i], *_timestamps(r, f"{where}.requests[{i}]")]) for i, r in enumerate(requests)]
    provenance: dict[str, str] = {"id": "derived", "started_at": "file", "wall_s": "derived"}
    workload: dict[str, Any]
    if point["mode"] == "concurrency":
        workload = {"concurrency": int(value)}
        provenance["concurrency"] = "file"
    else:
        workload = {"request_rate": float(value)}
        provenance["request_rate"] = "file"
    run: dict[str, Any] = {"source": "imported", "workload": workload}
    model = _model(requests[0])
    declare(run, provenance, declared, model=model)
    if "model" not in run:
        raise no_model("GenAI-Perf writes it in each request's payload (request_inputs.payload's \"model\")", where)
    run["started_at"] = _iso(min(starts))
    run["wall_s"] = (max(ends) - min(starts)) / 1e9
    version = document.get("version")
    run["tool"] = {
        "name": "genai-perf",
        "version": version if isinstance(version, str) and version else None,
        "format": "profile_export.json (perf_analyzer)",
    }
    run["provenance"] = provenance
    digest = hashlib.sha256(orjson.dumps(experiment, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))
    digest.update(f"{document.get('service_kind')}|{document.get('endpoint')}".encode())
    moment = datetime.fromtimestamp(min(starts) / 1e9, tz=UTC).strftime("%Y%m%dT%H%M%S")
    label = f"c{int(value)}" if point["mode"] == "concurrency" else f"r{float(value):g}"
    run["id"] = f"genai-perf-{moment}-{label}-{digest.hexdigest()[:12]}"

    run_extra = {key: document.get(key) for key in ("service_kind", "endpoint") if isinstance(document.get(key), str)}
    for index, request in enumerate(requests):
        yield _request(run, request, starts[index], f"{where}.requests[{index}]", run_extra)


def _timestamps(request: dict[str, Any], where: str) -> list[int]:
    stamps = request.get("response_timestamps", [])
    if not isinstance(stamps, list):
        raise FormatError("not a list", f"{where}.response_timestamps")
    return [_ns(stamp, f"{where}.response_timestamps[{i}]") for i, stamp in enumerate(stamps)]


def _payload(request: dict[str, Any]) -> dict[str, Any]:
    inputs = request.get("request_inputs")
    payload = inputs.get("payload") if isinstance(inputs, dict) else None
    if isinstance(payload, str) and payload.startswith("{"):
        try:
            parsed = bounded_parse.loads(payload)
        except ValueError:  # not JSON, or past kvlab's bounds: nothing known of the payload
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _model(request: Any) -> str:
    model = _payload(request).get("model") if isinstance(request, dict) else None
    return model if isinstance(model, str) else ""


def _responses(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON objects in the responses ("data: {...}" server-sent events or bare JSON)."""
    objects: list[dict[str, Any]] = []
    for output in request.get("response_outputs") or []:
        text = output.get("response") if isinstance(output, dict) else None
        if not isinstance(text, str):
            continue
        for chunk in text.split("\n"):
            chunk = chunk.strip()
            if chunk.startswith("data:"):
                chunk = chunk[5:].strip()
            if chunk.startswith("{"):
                try:
                    parsed = bounded_parse.loads(chunk)
                except ValueError:  # not JSON, or past kvlab's bounds: not a response object
                    continue
                if isinstance(parsed, dict):
                    objects.append(parsed)
    return objects


def _request(
    run: dict[str, Any], request: dict[str, Any], start: int, where: str, run_extra: dict[str, Any]
) -> dict[str, Any]:
    stamps = _timestamps(request, where)
    fields: dict[str, Any] = {"ts": _iso(start)}
    if stamps:
        if any(stamp < start for stamp in stamps):
            raise FormatError("a response before its request", f"{where}.response_timestamps")
        fields["ttft_s"] = (stamps[0] - start) / 1e9
        fields["elapsed_s"] = (stamps[-1] - start) / 1e9
        fields["itl_s"] = [(later - earlier) / 1e9 for earlier, later in zip(stamps, stamps[1:], strict=False)]
    payload = _payload(request)
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(payload.get(key), int) and not isinstance(payload[key], bool) and payload[key] > 0:
            fields["n_predict"] = payload[key]
            break
    responses = _responses(request)
    error = next((obj["error"] for obj in responses if obj.get("error")), None)
    usage = next((obj["usage"] for obj in reversed(responses) if isinstance(obj.get("usage"), dict)), None)
    if usage:
        for key, name in (("prompt_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
            if isinstance(usage.get(name), int) and not isinstance(usage[name], bool) and usage[name] >= 0:
                fields[key] = usage[name]
    if error is not None:
        fields["ok"] = False
        message = error.get("message") if isinstance(error, dict) else error
        fields["error"] = str(message or error)[:MAX_ERROR_CHARS]
        code = error.get("code") if isinstance(error, dict) else None
        if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
            fields["http_status"] = code
    elif not stamps:
        fields["ok"], fields["error"] = False, "no response recorded"
    else:
        fields["ok"] = True
    inputs = request.get("request_inputs")
    extra: dict[str, Any] = dict(run_extra)
    if request.get("sequence_id") is not None:
        extra["sequence_id"] = request["sequence_id"]
    extra["responses"] = len(stamps)
    if isinstance(inputs, dict):  # the prompt is not kept: its size is
        extra["request_inputs_chars"] = {
            name: len(item) if isinstance(item, str) else len(orjson.dumps(item)) for name, item in inputs.items()
        }
    outputs = request.get("response_outputs") or []
    extra["response_chars"] = sum(
        len(output.get("response", ""))
        for output in outputs
        if isinstance(output, dict) and isinstance(output.get("response"), str)
    )
    return {"schema": SCHEMA_V2, "run": run, "request": fields, "extra": extra}
