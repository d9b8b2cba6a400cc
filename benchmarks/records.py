"""The canonical benchmark record (schema kvlab.bench/1) and the mapping into it.

One record is one request of one run. Two shapes are accepted:

* canonical: ``{"schema": "kvlab.bench/1", "run": {...}, "request": {...}, "extra": {...}}``
  (documented in docs/record-schema.md, JSON Schema in docs/bench-record.schema.json);
* flat: the lab-script shape of bench_results.jsonl, one object with the run's
  context repeated, under the field names or any of their common aliases.

Keys that are neither fields nor aliases are kept in ``extra``. Everything here is
pure: a dict in, a ``Record`` out, or a ``RecordError`` naming the problem.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from .jsonl import RecordError, json_type_name

SCHEMA_VERSION = "kvlab.bench/1"

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN_MODES = ("on", "off", "auto")
SOURCES = ("imported", "executed")
MAX_NAME_CHARS = 200
MAX_ERROR_CHARS = 10_000
MAX_INT = 2**31 - 1  # integer columns are 32-bit on PostgreSQL

# Canonical field name -> where it lives in the nested canonical record.
RUN_FIELDS = {
    "run_id": ("run", "id"),
    "source": ("run", "source"),
    "label": ("run", "label"),
    "model": ("run", "model"),
    "gpu": ("run", "gpu"),
    "vram_total_mib": ("run", "vram_total_mib"),
    "vram_used_mib": ("run", "vram_used_mib"),
    "wall_s": ("run", "wall_s"),
    "ctx_size": ("run", "server", "ctx_size"),
    "parallel": ("run", "server", "parallel"),
    "kv_unified": ("run", "server", "kv_unified"),
    "cache_type_k": ("run", "server", "cache_type_k"),
    "cache_type_v": ("run", "server", "cache_type_v"),
    "kv_offload": ("run", "server", "kv_offload"),
    "flash_attn": ("run", "server", "flash_attn"),
    "concurrency": ("run", "workload", "concurrency"),
}
REQUEST_FIELDS = {
    "ts": ("request", "ts"),
    "ok": ("request", "ok"),
    "http_status": ("request", "http_status"),
    "error": ("request", "error"),
    "error_type": ("request", "error_type"),
    "prompt_tokens": ("request", "prompt_tokens"),
    "n_predict": ("request", "n_predict"),
    "output_tokens": ("request", "output_tokens"),
    "tok_s": ("request", "tok_s"),
    "elapsed_s": ("request", "elapsed_s"),
    "ttft_s": ("request", "ttft_s"),
}
RUN_FIELD_NAMES = tuple(RUN_FIELDS)
REQUEST_FIELD_NAMES = tuple(REQUEST_FIELDS)

# Flat-shape aliases: what lab scripts commonly call each field.
ALIASES: dict[str, tuple[str, ...]] = {
    "run_id": ("run", "run_id", "run_name"),
    "source": ("source",),
    "label": ("label", "config_label", "config_name"),
    "model": ("model", "model_name", "model_file"),
    "gpu": ("gpu", "gpu_name"),
    "vram_total_mib": ("vram_total_mib", "vram_mib"),
    "vram_used_mib": ("vram_used_mib",),
    "wall_s": ("run_wall_s", "wall_s", "wall_time_s"),
    "ctx_size": ("ctx_size", "ctx", "n_ctx", "context_size"),
    "parallel": ("parallel", "np", "n_parallel", "slots"),
    "kv_unified": ("kv_unified", "kvu", "unified_kv"),
    "cache_type_k": ("cache_type_k", "ctk", "type_k"),
    "cache_type_v": ("cache_type_v", "ctv", "type_v"),
    "kv_offload": ("kv_offload", "offload_kqv"),
    "flash_attn": ("flash_attn", "fa", "flash_attention"),
    "concurrency": ("concurrency", "n_concurrent", "clients"),
    "ts": ("ts", "timestamp", "time", "started_at"),
    "ok": ("ok", "success"),
    "http_status": ("status", "http_status", "status_code"),
    "error": ("error", "error_message", "err"),
    "error_type": ("error_type",),
    "prompt_tokens": ("prompt_tokens", "n_prompt", "n_prompt_tokens", "prompt_n"),
    "n_predict": ("n_predict", "max_tokens"),
    "output_tokens": ("output_tokens", "completion_tokens", "predicted_n", "tokens_predicted"),
    "tok_s": ("tok_s", "tokens_per_second", "tps", "tok_per_s", "predicted_per_second"),
    "elapsed_s": ("elapsed_s", "elapsed", "latency_s", "e2e_s", "duration_s"),
    "ttft_s": ("ttft_s", "ttft"),
}
ALIAS_TO_FIELD = {alias: field for field, aliases in ALIASES.items() for alias in aliases}
INVERTED_ALIASES = {"no_kv_offload": "kv_offload"}  # true here means kv_offload false

ERROR_TYPES = (
    "context_exceeded",  # HTTP 500 "Context size has been exceeded." (unified pool full)
    "exceed_context_size",  # HTTP 400 exceed_context_size_error (prompt too long for the slot)
    "timeout",
    "disconnect",
    "http_error",
    "other",
)


@dataclass(frozen=True, slots=True)
class Record:
    """One validated request record, fields under their canonical names."""

    run: tuple[Any, ...]  # values in RUN_FIELD_NAMES order
    request: tuple[Any, ...]  # values in REQUEST_FIELD_NAMES order (ts as datetime)
    extra: dict[str, Any]
    content_hash: str

    def run_dict(self) -> dict[str, Any]:
        return dict(zip(RUN_FIELD_NAMES, self.run, strict=True))

    def request_dict(self) -> dict[str, Any]:
        return dict(zip(REQUEST_FIELD_NAMES, self.request, strict=True))


def normalize(obj: dict[str, Any]) -> Record:
    """Map a decoded line (canonical or flat) to a validated Record."""
    if "schema" in obj:
        fields, extra = _from_canonical(obj)
    else:
        fields, extra = _from_flat(obj)
    return _validate(fields, extra)


def _from_canonical(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    if obj["schema"] != SCHEMA_VERSION:
        raise RecordError(f"unsupported schema {obj['schema']!r}; this kvlab reads {SCHEMA_VERSION!r}")
    unknown = set(obj) - {"schema", "run", "request", "extra"}
    if unknown:
        raise RecordError(
            f"unknown top-level field {sorted(unknown)[0]!r} in a {SCHEMA_VERSION} record; "
            "put custom fields under 'extra'"
        )
    fields: dict[str, Any] = {}
    paths = {**RUN_FIELDS, **REQUEST_FIELDS}
    known_paths = {path[:i] for path in paths.values() for i in range(1, len(path))}
    for name, path in paths.items():
        node: Any = obj
        for part in path:
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            fields[name] = node
    # Reject misplaced keys, so a typo is not silently read as "absent".
    leaf_paths = set(paths.values())
    for container in sorted(known_paths):
        node = obj
        for part in container:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            continue
        dotted = ".".join(container)
        if not isinstance(node, dict):
            raise RecordError(f"wrong type: {dotted!r} must be an object, got {json_type_name(node)}")
        for key in node:
            child = (*container, key)
            if child not in leaf_paths and child not in known_paths:
                raise RecordError(f"unknown field '{dotted}.{key}'; put custom fields under 'extra'")
    extra = obj.get("extra")
    if extra is None:
        extra = {}
    elif not isinstance(extra, dict):
        raise RecordError(f"wrong type: 'extra' must be an object, got {json_type_name(extra)}")
    return fields, extra


def _from_flat(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    fields: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    extra: dict[str, Any] = {}
    for key, value in obj.items():
        name = ALIAS_TO_FIELD.get(key)
        if name is None and key in INVERTED_ALIASES:
            name = INVERTED_ALIASES[key]
            if isinstance(value, bool):
                value = not value
        if name is None:
            extra[key] = value
            continue
        if name in given_as:
            raise RecordError(f"both {given_as[name]!r} and {key!r} given; they name the same field ({name})")
        given_as[name] = key
        fields[name] = value
    error = fields.get("error")
    if isinstance(error, dict):  # a llama-server error object: {"code", "type", "message"}
        fields["error"] = error.get("message")
        fields.setdefault("error_type", _error_type_from_server(error.get("type")))
        if fields.get("http_status") is None and isinstance(error.get("code"), int):
            fields["http_status"] = error["code"]
    return fields, extra


def _error_type_from_server(server_type: object) -> str | None:
    if server_type == "exceed_context_size_error":
        return "exceed_context_size"
    return None


def _validate(fields: dict[str, Any], extra: dict[str, Any]) -> Record:
    get = fields.get
    run_id = get("run_id")
    if isinstance(run_id, int) and not isinstance(run_id, bool):
        run_id = str(run_id)
    run = (
        _text(run_id, "run", required=True),
        _choice(get("source"), "source", SOURCES),  # absent: "imported" when the run is stored
        _text(get("label"), "label"),
        _text(get("model"), "model", required=True),
        _text(get("gpu"), "gpu"),
        _int(get("vram_total_mib"), "vram_total_mib", minimum=1),
        _int(get("vram_used_mib"), "vram_used_mib", minimum=0),
        _number(get("wall_s"), "wall_s"),
        _int(get("ctx_size"), "ctx_size", minimum=0),
        _int(get("parallel"), "parallel", minimum=1),
        _bool(get("kv_unified"), "kv_unified"),
        _choice(get("cache_type_k"), "cache_type_k", CACHE_TYPES),
        _choice(get("cache_type_v"), "cache_type_v", CACHE_TYPES),
        _bool(get("kv_offload"), "kv_offload"),
        _flash_attn(get("flash_attn")),
        _int(get("concurrency"), "concurrency", minimum=1),
    )
    ok = _bool(get("ok"), "ok")
    http_status = _int(get("http_status"), "status", minimum=0)
    if http_status is not None and not 100 <= http_status <= 599:
        raise RecordError(f"'status' must be an HTTP status code (100-599), got {http_status}")
    if ok is None:
        if http_status is None:
            raise RecordError("missing required field: 'ok' or 'status' (the request's outcome)")
        ok = 200 <= http_status < 300
    elif http_status is not None and ok != (200 <= http_status < 300):
        raise RecordError(f"'ok' is {str(ok).lower()} but 'status' is {http_status}")
    error = _text(get("error"), "error", limit=MAX_ERROR_CHARS)
    error_type = _choice(get("error_type"), "error_type", ERROR_TYPES)
    if not ok and error_type is None:
        error_type = classify_error(http_status, error)
    request = (
        _timestamp(get("ts")),
        ok,
        http_status,
        error,
        error_type,
        _int(get("prompt_tokens"), "prompt_tokens", minimum=0),
        _int(get("n_predict"), "n_predict", minimum=-1),
        _int(get("output_tokens"), "output_tokens", minimum=0),
        _number(get("tok_s"), "tok_s"),
        _number(get("elapsed_s"), "elapsed_s"),
        _number(get("ttft_s"), "ttft_s"),
    )
    return Record(run=run, request=request, extra=extra, content_hash=content_hash(request, extra))


def classify_error(http_status: int | None, error: str | None) -> str:
    """Name the failure the way DESIGN.md counts them."""
    message = (error or "").lower()
    if http_status == 500 and "context size has been exceeded" in message:
        return "context_exceeded"
    if http_status == 400 and ("exceed_context_size" in message or "exceeds the available context" in message):
        return "exceed_context_size"
    if "timeout" in message or "timed out" in message:
        return "timeout"
    if "disconnect" in message or "connection" in message:
        return "disconnect"
    if http_status is not None:
        return "http_error"
    return "other"


def content_hash(request: tuple[Any, ...], extra: dict[str, Any]) -> str:
    """A stable digest of a request's content: identical records share it."""
    values = [v.isoformat() if isinstance(v, datetime) else v for v in request]
    try:
        payload = orjson.dumps([values, extra], option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError as exc:
        # Python's json reads what orjson (and the database) cannot hold.
        raise RecordError(
            f"a value cannot be stored: {exc} (an integer beyond 64 bits, a lone surrogate, or nesting)"
        ) from None
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


# --- field checks ---------------------------------------------------------------


def _wrong_type(name: str, expected: str, value: object) -> RecordError:
    return RecordError(f"wrong type: {name!r} must be {expected}, got {json_type_name(value)} {_short(value)}")


def _short(value: object) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _text(value: object, name: str, *, required: bool = False, limit: int = MAX_NAME_CHARS) -> str | None:
    if value is None or value == "":
        if required:
            raise RecordError(f"missing required field: {name!r}")
        return None
    if not isinstance(value, str):
        raise _wrong_type(name, "a string", value)
    if len(value) > limit:
        raise RecordError(f"{name!r} is longer than {limit} characters")
    if "\x00" in value:
        raise RecordError(f"{name!r} contains a NUL character")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise RecordError(f"{name!r} contains a lone surrogate (an invalid \\uXXXX escape)") from None
    return value


def _int(value: object, name: str, *, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong_type(name, "an integer", value)
    if value < minimum:
        if minimum == 0:
            raise RecordError(f"{name!r} must not be negative, got {value}")
        raise RecordError(f"{name!r} must be at least {minimum}, got {value}")
    if value > MAX_INT:
        raise RecordError(f"{name!r} is too large: {_short(value)} (at most {MAX_INT:,})")
    return value


def _number(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong_type(name, "a number", value)
    try:
        result = float(value)
    except OverflowError:
        raise RecordError(f"{name!r} is too large") from None
    if not math.isfinite(result):
        raise RecordError(f"{name!r} must be a finite number")
    if result < 0:
        raise RecordError(f"{name!r} must not be negative, got {value}")
    return result


def _bool(value: object, name: str) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _wrong_type(name, "true or false", value)
    return value


def _choice(value: object, name: str, choices: tuple[str, ...]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _wrong_type(name, "a string", value)
    if value not in choices:
        raise RecordError(f"{name!r} must be one of {', '.join(choices)}; got {_short(value)}")
    return value


def _flash_attn(value: object) -> str | None:
    if isinstance(value, bool):
        return "on" if value else "off"
    return _choice(value, "flash_attn", FLASH_ATTN_MODES)


def _timestamp(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _wrong_type("ts", "an ISO 8601 time or epoch seconds", value)
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise RecordError(f"'ts' is out of range: {value}") from None
    if not isinstance(value, str):
        raise _wrong_type("ts", "an ISO 8601 time", value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise RecordError(f"'ts' is not an ISO 8601 time: {_short(value)}") from None
    if parsed.tzinfo is None:  # documented: times without an offset are UTC
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise RecordError(f"'ts' is out of range: {_short(value)}") from None


def to_canonical(run: dict[str, Any], request: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Build the nested canonical record from canonical field values."""
    record: dict[str, Any] = {"schema": SCHEMA_VERSION, "run": {}, "request": {}}
    for name, path in {**RUN_FIELDS, **REQUEST_FIELDS}.items():
        value = run[name] if name in RUN_FIELDS else request[name]
        if isinstance(value, datetime):
            value = value.astimezone(UTC).isoformat().replace("+00:00", "Z")
        node = record
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    if extra:
        record["extra"] = extra
    return record
