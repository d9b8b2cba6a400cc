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

import functools
import hashlib
import math
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from .errors import ERROR_TYPES, classify_error, error_type_from_server
from .jsonl import RecordError, json_type_name

SCHEMA_VERSION = "kvlab.bench/1"

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN_MODES = ("on", "off", "auto")
SOURCES = ("imported", "executed")
MAX_NAME_CHARS = 200
MAX_ERROR_CHARS = 10_000
MAX_INT = 2**31 - 1  # integer columns are 32-bit on PostgreSQL
# What a JSON column holds on every engine: 64-bit integers, finite floats, no NUL
# (PostgreSQL's text and jsonb refuse "\u0000"), and a nesting depth that cannot
# exhaust a recursive reader or writer.
MIN_JSON_INT, MAX_JSON_INT = -(2**63), 2**63 - 1
MAX_JSON_DEPTH = 32
MAX_TOK_S = 10**7  # a token rate above this is not a measurement

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


class Record(NamedTuple):
    """One validated request record, fields under their canonical names."""

    run: tuple[Any, ...]  # values in RUN_FIELD_NAMES order
    request: tuple[Any, ...]  # values in REQUEST_FIELD_NAMES order (ts as datetime)
    extra: dict[str, Any]
    content_hash: str

    def run_dict(self) -> dict[str, Any]:
        return dict(zip(RUN_FIELD_NAMES, self.run, strict=True))

    def request_dict(self) -> dict[str, Any]:
        return dict(zip(REQUEST_FIELD_NAMES, self.request, strict=True))


def normalize(obj: dict[str, Any], run_cache: dict[Any, tuple[Any, ...]] | None = None) -> Record:
    """Map a decoded line (canonical or flat) to a validated Record.

    run_cache, when given, remembers validated run fields by their raw values (and
    types), so the run context that a flat file repeats on every line is checked once.
    """
    if "schema" in obj:
        fields, extra = _from_canonical(obj)
        run_raw = tuple(map(fields.get, RUN_FIELD_NAMES))
        request_raw = tuple(map(fields.get, REQUEST_FIELD_NAMES))
    else:
        plan = _flat_plan(obj)
        run_raw = tuple(map(obj.get, plan.run_keys))
        request_raw = tuple(map(obj.get, plan.request_keys))
        extra = {key: obj[key] for key in plan.extra_keys} if plan.extra_keys else {}
        if plan.inverted:
            run_raw = _invert(run_raw, plan.inverted)
        if type(request_raw[_ERROR]) is dict:
            request_raw = _from_error_object(request_raw)
    if extra:
        check_json(extra, "extra")
    request = _request_values(*request_raw)
    return Record(_run_values(run_raw, run_cache), request, extra, content_hash(request, extra))


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


class _FlatPlan(NamedTuple):
    """Where each field sits in a flat object with a given set of keys."""

    run_keys: tuple[str, ...]  # the key holding each run field, or _ABSENT
    request_keys: tuple[str, ...]
    extra_keys: tuple[str, ...]
    inverted: tuple[int, ...]  # run field positions given by an inverted alias


_ABSENT = "\x00absent"  # a key no JSON object of a valid file holds
_PLANS: dict[tuple[str, ...], _FlatPlan] = {}
_ERROR = REQUEST_FIELD_NAMES.index("error")


def _flat_plan(obj: dict[str, Any]) -> _FlatPlan:
    # Lab files repeat one set of keys on every line: map them to fields once.
    keys = tuple(obj)
    plan = _PLANS.get(keys)
    if plan is None:
        plan = _make_flat_plan(keys)
        if len(_PLANS) > 1024:
            _PLANS.clear()
        _PLANS[keys] = plan
    return plan


def _make_flat_plan(keys: tuple[str, ...]) -> _FlatPlan:
    source: dict[str, str] = {}
    inverted: list[int] = []
    extra: list[str] = []
    for key in keys:
        name = ALIAS_TO_FIELD.get(key) or INVERTED_ALIASES.get(key)
        if name is None:
            extra.append(key)
            continue
        if name in source:
            raise RecordError(f"both {source[name]!r} and {key!r} given; they name the same field ({name})")
        source[name] = key
        if key in INVERTED_ALIASES:
            inverted.append(RUN_FIELD_NAMES.index(name))
    return _FlatPlan(
        run_keys=tuple(source.get(name, _ABSENT) for name in RUN_FIELD_NAMES),
        request_keys=tuple(source.get(name, _ABSENT) for name in REQUEST_FIELD_NAMES),
        extra_keys=tuple(extra),
        inverted=tuple(inverted),
    )


def _invert(run_raw: tuple[Any, ...], positions: tuple[int, ...]) -> tuple[Any, ...]:
    values = list(run_raw)
    for i in positions:
        if isinstance(values[i], bool):
            values[i] = not values[i]
    return tuple(values)


def _from_error_object(request_raw: tuple[Any, ...]) -> tuple[Any, ...]:
    """A llama-server error object in "error": {"code", "type", "message"}."""
    fields = dict(zip(REQUEST_FIELD_NAMES, request_raw, strict=True))
    error = fields["error"]
    fields["error"] = error.get("message")
    if fields["error_type"] is None:
        fields["error_type"] = error_type_from_server(error.get("type"))
    if fields["http_status"] is None and isinstance(error.get("code"), int):
        fields["http_status"] = error["code"]
    return tuple(fields.values())


def _run_values(raw: tuple[Any, ...], cache: dict[Any, tuple[Any, ...]] | None) -> tuple[Any, ...]:
    if cache is None:
        return _check_run_values(*raw)
    key = (raw, tuple(map(type, raw)))  # types too: 1 == True and 1 == 1.0 in Python
    try:
        return cache[key]
    except KeyError:
        cache[key] = values = _check_run_values(*raw)
        return values
    except TypeError:  # an unhashable value (a list or object) in a run field
        return _check_run_values(*raw)


def _check_run_values(
    run_id: Any,
    source: Any,
    label: Any,
    model: Any,
    gpu: Any,
    vram_total_mib: Any,
    vram_used_mib: Any,
    wall_s: Any,
    ctx_size: Any,
    parallel: Any,
    kv_unified: Any,
    cache_type_k: Any,
    cache_type_v: Any,
    kv_offload: Any,
    flash_attn: Any,
    concurrency: Any,
) -> tuple[Any, ...]:
    if isinstance(run_id, int) and not isinstance(run_id, bool):
        run_id = str(run_id)
    return (
        _text(run_id, "run", required=True),
        _choice(source, "source", SOURCES),  # absent: "imported" when the run is stored
        _text(label, "label"),
        _text(model, "model", required=True),
        _text(gpu, "gpu"),
        _int(vram_total_mib, "vram_total_mib", minimum=1),
        _int(vram_used_mib, "vram_used_mib", minimum=0),
        _number(wall_s, "wall_s"),
        _int(ctx_size, "ctx_size", minimum=0),
        _int(parallel, "parallel", minimum=1),
        _bool(kv_unified, "kv_unified"),
        _choice(cache_type_k, "cache_type_k", CACHE_TYPES),
        _choice(cache_type_v, "cache_type_v", CACHE_TYPES),
        _bool(kv_offload, "kv_offload"),
        _flash_attn(flash_attn),
        _int(concurrency, "concurrency", minimum=1),
    )


def _request_values(
    ts: Any,
    ok: Any,
    http_status: Any,
    error: Any,
    error_type: Any,
    prompt_tokens: Any,
    n_predict: Any,
    output_tokens: Any,
    tok_s: Any,
    elapsed_s: Any,
    ttft_s: Any,
) -> tuple[Any, ...]:
    # The hot path of a large import: each check has an inline fast path for the
    # common well-formed value and falls back to the full check (and its message).
    if ok is not None and type(ok) is not bool:
        _bool(ok, "ok")
    if http_status is not None and not (type(http_status) is int and 100 <= http_status <= 599):
        http_status = _int(http_status, "status", minimum=0)
        raise RecordError(f"'status' must be an HTTP status code (100-599), got {http_status}")
    if ok is None:
        if http_status is None:
            raise RecordError("missing required field: 'ok' or 'status' (the request's outcome)")
        ok = 200 <= http_status < 300
    elif ok and http_status is not None and not 200 <= http_status < 300:
        # ok false with a 2xx status is legitimate: the request failed after its headers.
        raise RecordError(f"'ok' is true but 'status' is {http_status}")
    if error is not None:
        error = _text(error, "error", limit=MAX_ERROR_CHARS)
    if error_type is not None:
        error_type = _choice(error_type, "error_type", ERROR_TYPES)
    elif not ok:
        error_type = classify_error(http_status, error)
    if ts is not None:
        ts = _parse_iso_time(ts) if type(ts) is str else _timestamp(ts)
    if prompt_tokens is not None and not (type(prompt_tokens) is int and 0 <= prompt_tokens <= MAX_INT):
        prompt_tokens = _int(prompt_tokens, "prompt_tokens", minimum=0)
    if n_predict is not None and not (type(n_predict) is int and -1 <= n_predict <= MAX_INT):
        n_predict = _int(n_predict, "n_predict", minimum=-1)
    if output_tokens is not None and not (type(output_tokens) is int and 0 <= output_tokens <= MAX_INT):
        output_tokens = _int(output_tokens, "output_tokens", minimum=0)
    if tok_s is not None:
        tok_s = tok_s if type(tok_s) is float and 0.0 <= tok_s <= MAX_TOK_S else _rate(tok_s)
    if elapsed_s is not None:
        elapsed_s = (
            elapsed_s if type(elapsed_s) is float and 0.0 <= elapsed_s < math.inf else _number(elapsed_s, "elapsed_s")
        )
    if ttft_s is not None:
        ttft_s = ttft_s if type(ttft_s) is float and 0.0 <= ttft_s < math.inf else _number(ttft_s, "ttft_s")
    return (ts, ok, http_status, error, error_type, prompt_tokens, n_predict, output_tokens, tok_s, elapsed_s, ttft_s)


def content_hash(request: tuple[Any, ...], extra: dict[str, Any]) -> str:
    """A stable digest of a request's content: identical records share it."""
    try:
        payload = orjson.dumps((request, extra), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:
        # Python's json reads what orjson (and the database) cannot hold.
        raise RecordError(
            f"a value cannot be stored: {exc} (an integer beyond 64 bits, a lone surrogate, or nesting)"
        ) from None
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


# --- field checks ---------------------------------------------------------------


def check_json(value: Any, name: str) -> None:
    """Raise RecordError unless value is JSON that a JSON column stores on every engine."""
    found = _json_problem(value, 0)
    if found is not None:
        path, reason = found
        where = "".join([name, *reversed(path)])
        where = where if len(where) <= 80 else where[:77] + "…"
        raise RecordError(f"a value cannot be stored: {where!r} {reason}")


def storable_json(value: Any, depth: int = 0) -> Any:
    """value with what check_json refuses replaced, for a server's answers: kept, not refused.

    NUL and lone surrogates become replacement characters, a non-finite float or an
    integer beyond 64 bits None, and anything nested past MAX_JSON_DEPTH None.
    """
    kind = type(value)
    if kind is str:
        return storable_text(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
        return value if MIN_JSON_INT <= value <= MAX_JSON_INT else None
    if value is None or kind is bool or depth >= MAX_JSON_DEPTH:
        return value if value is None or kind is bool else None
    if isinstance(value, dict):
        return {storable_text(str(k)): storable_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable_json(v, depth + 1) for v in value]
    return None


def storable_text(value: str) -> str:
    """value without what a text column refuses: NUL (PostgreSQL) and lone surrogates (UTF-8)."""
    if not value.isascii():
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\x00", "\ufffd")


def _json_problem(value: Any, depth: int) -> tuple[list[str], str] | None:
    """(the path to the first unstorable value, innermost part first, and why), or None."""
    kind = type(value)
    if kind is str:
        return ([], "contains a NUL character") if "\x00" in value else None
    if kind is float:
        return None if math.isfinite(value) else ([], "must be a finite number (it is past the float range)")
    if kind is int:
        if MIN_JSON_INT <= value <= MAX_JSON_INT:
            return None
        return [], "is an integer beyond 64-bit"
    if value is None or kind is bool:
        return None
    if kind is dict or kind is list:
        if depth >= MAX_JSON_DEPTH:
            return [], f"is nested more than {MAX_JSON_DEPTH} levels deep"
        items = value.items() if kind is dict else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and "\x00" in key:
                return [f".{key!r}"], "has a key with a NUL character"
            found = _json_problem(item, depth + 1)
            if found is not None:
                found[0].append(f".{key}" if kind is dict else f"[{key}]")
                return found
        return None
    return [], f"is not a JSON value ({kind.__name__})"


def _wrong_type(name: str, expected: str, value: object) -> RecordError:
    return RecordError(f"wrong type: {name!r} must be {expected}, got {json_type_name(value)} {_short(value)}")


def _short(value: object) -> str:
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = orjson.dumps(value).decode()
        except TypeError:  # what orjson will not write (an integer beyond 64 bits): still quote it
            text = repr(value)
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


def _rate(value: object) -> float | None:
    rate = _number(value, "tok_s")
    if rate is not None and rate > MAX_TOK_S:
        raise RecordError(f"'tok_s' is {rate:g}: not a measurement (at most {MAX_TOK_S:,} tok/s)")
    return rate


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
    return _parse_iso_time(value)


@functools.lru_cache(maxsize=4096)  # the requests of a run often share their timestamps
def _parse_iso_time(value: str) -> datetime:
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
