"""The canonical benchmark record (schemas kvlab.bench/1 and /2) and the mapping into it.

A record is one request of one run, or (kvlab.bench/2) one run's summary: the
aggregates a benchmark tool reported for it. Three shapes are accepted:

* canonical kvlab.bench/2: ``{"schema": "kvlab.bench/2", "run": {...}, "request": {...}
  | "summary": {...}, "extra": {...}}`` — the run also names its tool, engine, server
  flags, request rate, start time and the provenance of its values;
* canonical kvlab.bench/1: ``{"schema": "kvlab.bench/1", "run": {...}, "request": {...},
  "extra": {...}}``, read exactly as before kvlab.bench/2 existed;
* flat: the lab-script shape of bench_results.jsonl, one object with the run's
  context repeated, under the field names or any of their common aliases.

(documented in docs/record-schema.md, JSON Schema in docs/bench-record.schema.json)

Keys that are neither fields nor aliases are kept in ``extra``. Everything here is
pure: a dict in, a ``Record`` out, or a ``RecordError`` naming the problem. Writing a record
back out in the canonical shape is canonical.py's.
"""

from __future__ import annotations

import functools
import hashlib
import math
import operator
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from .errors import ERROR_TYPES, classify_error, error_type_from_server
from .jsonl import RecordError, decode_line, json_type_name
from .storable import MAX_JSON_INT, check_json

SCHEMA_V1 = "kvlab.bench/1"
SCHEMA_V2 = "kvlab.bench/2"
SCHEMA_VERSION = SCHEMA_V2  # what export_bench writes
SCHEMAS = (SCHEMA_V1, SCHEMA_V2)

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN_MODES = ("on", "off", "auto")
SOURCES = ("imported", "executed")
MAX_NAME_CHARS = 200
MAX_ERROR_CHARS = 10_000
MAX_INT = 2**31 - 1  # integer columns are 32-bit on PostgreSQL
MAX_TOK_S = 10**7  # a token rate above this is not a measurement
MAX_TOOL_CHARS = 40  # Run.tool, tool_version, engine
MAX_TOOL_FORMAT_CHARS = 60
MAX_FLAGS_CHARS = 10_000
MAX_ITL_VALUES = 1_000_000
PROVENANCE_KINDS = ("file", "declared", "derived")
MAX_PROVENANCE_FIELDS = 64

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
# kvlab.bench/2 adds these run fields (RUN_FIELDS stays the kvlab.bench/1 set).
RUN_FIELDS_V2_ONLY = {
    "server_flags": ("run", "server", "flags"),
    "request_rate": ("run", "workload", "request_rate"),
    "started_at": ("run", "started_at"),
    "tool": ("run", "tool", "name"),
    "tool_version": ("run", "tool", "version"),
    "tool_format": ("run", "tool", "format"),
    "engine": ("run", "engine"),
    "provenance": ("run", "provenance"),
}
RUN_FIELDS_V2 = {**RUN_FIELDS, **RUN_FIELDS_V2_ONLY}
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
REQUEST_ITL_PATH = ("request", "itl_s")  # kvlab.bench/2: kept apart from the v1 fields (their content hash)
RUN_FIELD_NAMES = tuple(RUN_FIELDS_V2)  # a Record's run tuple: the v1 fields, then the v2 ones
REQUEST_FIELD_NAMES = tuple(REQUEST_FIELDS)
# The summary of a run (kvlab.bench/2), as a tool reported it, in canonical units.
SUMMARY_COUNTS = ("n_requests", "n_ok", "n_failed", "n_incomplete")
SUMMARY_TOKENS = ("input_tokens", "output_tokens")
SUMMARY_NUMBERS = ("duration_s", "request_rate", "output_tok_s", "total_tok_s")
SUMMARY_STATS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
STAT_KEYS = ("mean", "median", "std", "min", "max", "p50", "p90", "p95", "p99")
SUMMARY_FIELDS = (*SUMMARY_COUNTS, "requests_sampled", *SUMMARY_NUMBERS, *SUMMARY_TOKENS, *SUMMARY_STATS)

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
    """One validated record, fields under their canonical names: a request, or a run's summary."""

    run: tuple[Any, ...]  # values in RUN_FIELD_NAMES order (provenance as sorted (field, kind) pairs)
    request: tuple[Any, ...] | None  # values in REQUEST_FIELD_NAMES order (ts as datetime); None: a summary
    extra: dict[str, Any]
    content_hash: str  # of a request ("" for a summary)
    itl: tuple[float, ...] | None = None  # a request's inter-token latencies, seconds (kvlab.bench/2)
    summary: dict[str, Any] | None = None  # a summary record's aggregates (check_summary's canonical dict)

    def run_dict(self) -> dict[str, Any]:
        return dict(zip(RUN_FIELD_NAMES, self.run, strict=True))

    def request_dict(self) -> dict[str, Any]:
        assert self.request is not None, "a summary record has no request"
        return dict(zip(REQUEST_FIELD_NAMES, self.request, strict=True))


_NO_V2_RUN_VALUES = (None,) * len(RUN_FIELDS_V2_ONLY)
_PROVENANCE = RUN_FIELD_NAMES.index("provenance")


def normalize(
    obj: dict[str, Any], run_cache: dict[Any, tuple[Any, ...]] | None = None, require_model: bool = True
) -> Record:
    """Map a decoded line (canonical or flat) to a validated Record.

    run_cache, when given, remembers validated run fields by their raw values (and
    types), so the run context that a flat file repeats on every line is checked once.
    require_model=False lets a line lack the model (the importer then takes a declared one).
    """
    if "schema" in obj:
        if obj["schema"] == SCHEMA_V2:
            record = _normalize_v2_laid_out(obj, run_cache, require_model)
            return record if record is not None else _normalize_v2_strictly(obj, run_cache, require_model)
        fields, extra = _from_canonical(obj)
        run_raw = tuple(map(fields.get, RUN_FIELD_NAMES))
        request_raw = tuple(map(fields.get, REQUEST_FIELD_NAMES))
    else:
        plan = _flat_plan(obj)
        values = (*obj.values(), None)
        run_raw = plan.run_of(values)
        request_raw = plan.request_of(values)
        extra = {key: obj[key] for key in plan.extra_keys} if plan.extra_keys else {}
        if plan.inverted:
            run_raw = _invert(run_raw, plan.inverted)
        if type(request_raw[_ERROR]) is dict:
            request_raw = _from_error_object(request_raw)
    if extra:
        check_json(extra, "extra")
    request = _request_values(*request_raw)
    return Record(_run_values(run_raw, run_cache, require_model), request, extra, content_hash(request, extra))


class LineReader:
    """The lines of one file, in order, each read as normalize(jsonl.decode_line(raw)) reads it: the same
    Record, or the same RecordError.

    A kvlab.bench/2 export that orjson wrote (kvlab's own) starts every line of a run with the same
    text, the schema and the run object: a line that starts with the text of the line before, up to
    its run object's end, has the same run, whose values that line validated. Only the rest of such
    a line is decoded (then written back, to find that it is exactly what orjson writes, as
    decode_line does for a whole line), and what follows it is read as any laid-out record's.
    """

    def __init__(self, require_model: bool = True, run_cache_size: int = 256) -> None:
        self.require_model = require_model
        self.run_cache: dict[Any, tuple[Any, ...]] = {}  # normalize's, cleared past run_cache_size
        self.run_cache_size = run_cache_size
        self._head = b""  # b'{"schema":"kvlab.bench/2","run":<the run object, as orjson writes it>,'
        self._run: tuple[Any, ...] = ()  # the validated values of that run

    def read(self, raw: bytes) -> Record:
        head = self._head
        if head and raw.startswith(head):
            record = self._read_rest(raw, len(head))
            if record is not None:
                return record
        if len(self.run_cache) > self.run_cache_size:
            self.run_cache.clear()
        obj = decode_line(raw)
        run = obj.get("run")
        if not (type(run) is dict and raw.startswith(_V2_HEAD)):
            return normalize(obj, self.run_cache, self.require_model)
        # The line's first key is "schema" and holds SCHEMA_V2 (decode_line found no duplicate key).
        try:
            run_text = orjson.dumps(run)
        except orjson.JSONEncodeError:
            return normalize(obj, self.run_cache, self.require_model)
        record = _normalize_v2_laid_out(obj, self.run_cache, self.require_model, run_text)
        if record is None:
            record = _normalize_v2_strictly(obj, self.run_cache, self.require_model)
        # A line that starts with this head holds this run object (its text is the object's, as
        # orjson writes it, and a JSON object's text ends where it ends): its values are these.
        self._head, self._run = b"".join((_V2_HEAD, run_text, b",")), record.run
        return record

    def _read_rest(self, raw: bytes, start: int) -> Record | None:
        """The record of a line that starts with the head of the line before; None when the rest is not
        a laid-out record's exactly as orjson writes it (read() then reads the whole line)."""
        rest = b"{" + raw[start:]
        try:
            obj = orjson.loads(rest)
            if type(obj) is not dict or not obj or orjson.dumps(obj) != rest:
                return None  # not one object (the line's) or not orjson's text (or '{...,}': no member)
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):
            return None
        # No "schema" or "run" again (a duplicate key), nothing but what a laid-out record holds.
        if not obj.keys() <= _V2_REST_OF_TOP_LEVEL:
            return None
        request = obj.get("request")
        extra = obj.get("extra")
        if request is not None and (type(request) is not dict or not request.keys() <= _V2_REQUEST_KEYS):
            return None
        if extra is not None and type(extra) is not dict:
            return None
        return _v2_rest(self._run, obj, request, extra)


_V2_HEAD = b'{"schema":"kvlab.bench/2","run":'  # how orjson writes a kvlab.bench/2 record's start
assert orjson.dumps({"schema": SCHEMA_V2, "run": {}}).startswith(_V2_HEAD)


def _normalize_v2_strictly(
    obj: dict[str, Any], run_cache: dict[Any, tuple[Any, ...]] | None, require_model: bool
) -> Record:
    """Any kvlab.bench/2 record, each field found by its path (the reference _normalize_v2_laid_out follows)."""
    fields, extra = _from_canonical(obj)
    provenance = fields.get("provenance")
    if provenance is not None:
        fields["provenance"] = _provenance_pairs(provenance)
    run = _run_values(tuple(map(fields.get, RUN_FIELD_NAMES)), run_cache, require_model)
    return _v2_record(obj, run, extra, fields.get)


def _v2_record(obj: dict[str, Any], run: tuple[Any, ...], extra: dict[str, Any], field: Callable[[str], Any]) -> Record:
    """The rest of a kvlab.bench/2 record once its run is validated; field(name): a request field's raw value."""
    if extra:
        check_json(extra, "extra")
    has_request, has_summary = obj.get("request") is not None, obj.get("summary") is not None
    if has_request == has_summary:
        raise RecordError(f"a {SCHEMA_V2} record holds exactly one of 'request' and 'summary'")
    if has_summary:
        return Record(run, None, extra, "", None, check_summary(obj["summary"]))
    request = _request_values(*map(field, REQUEST_FIELD_NAMES))
    itl = field("itl_s")
    return Record(run, request, extra, content_hash(request, extra), None if itl is None else _itl_values(itl))


def _paths(schema: str) -> dict[str, tuple[str, ...]]:
    if schema == SCHEMA_V1:
        return {**RUN_FIELDS, **REQUEST_FIELDS}
    return {**RUN_FIELDS_V2, **REQUEST_FIELDS, "itl_s": REQUEST_ITL_PATH}


# For each schema: its field paths, the objects that hold them, and the paths that are leaves.
_LAYOUTS = {
    schema: (
        paths,
        sorted({path[:i] for path in paths.values() for i in range(1, len(path))}),
        set(paths.values()),
        {path[:i] for path in paths.values() for i in range(1, len(path))},
    )
    for schema in SCHEMAS
    for paths in [_paths(schema)]
}
_TOP_LEVEL = {
    SCHEMA_V1: {"schema", "run", "request", "extra"},
    SCHEMA_V2: {"schema", "run", "request", "summary", "extra"},
}


def _from_canonical(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = obj["schema"]
    if type(schema) is not str or schema not in _LAYOUTS:
        raise RecordError(f"unsupported schema {_short(schema)}; this kvlab reads {' and '.join(map(repr, SCHEMAS))}")
    unknown = set(obj) - _TOP_LEVEL[schema]
    if unknown:
        raise RecordError(
            f"unknown top-level field {sorted(unknown)[0]!r} in a {schema} record; put custom fields under 'extra'"
        )
    fields: dict[str, Any] = {}
    paths, known_containers, leaf_paths, known_paths = _LAYOUTS[schema]
    for name, path in paths.items():
        node: Any = obj
        for part in path:
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            fields[name] = node
    # Reject misplaced keys, so a typo is not silently read as "absent".
    for container in known_containers:
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


# --- kvlab.bench/2 laid out as the schema says: the common line, read without walking each path ----------
# A line is read this way only when every object in it holds only the schema's keys (anything else is
# read by _from_canonical, which names the problem); the values are then exactly what it would find.

_V2_TOP_LEVEL = frozenset(_TOP_LEVEL[SCHEMA_V2])
_V2_REST_OF_TOP_LEVEL = _V2_TOP_LEVEL - {"schema", "run"}
_V2_REQUEST_KEYS = frozenset(path[1] for path in _LAYOUTS[SCHEMA_V2][2] if path[0] == "request")
_V2_RUN_OBJECTS = tuple(sorted({path[1] for path in RUN_FIELDS_V2.values() if len(path) == 3}))
assert _V2_RUN_OBJECTS == ("server", "tool", "workload"), "_v2_run_fields reads these three"
_V2_RUN_PLANS: dict[tuple[Any, ...], Callable[[tuple[Any, ...]], tuple[Any, ...]] | None] = {}


def _normalize_v2_laid_out(
    obj: dict[str, Any],
    run_cache: dict[Any, tuple[Any, ...]] | None,
    require_model: bool,
    run_text: bytes | None = None,
) -> Record | None:
    """A kvlab.bench/2 record whose objects hold only the schema's keys, as _normalize_v2_strictly reads it;
    None for any other (which may be valid: _from_canonical reads it). A run's lines repeat its run object:
    with run_cache, its validated values are remembered under its JSON text (exact: true, 1 and 1.0
    are written apart; run_text, when the caller has it, is orjson.dumps(obj["run"])), so each of a
    run's lines after the first costs one orjson.dumps of it."""
    run = obj.get("run")
    request = obj.get("request")
    extra = obj.get("extra")
    if type(run) is not dict or not obj.keys() <= _V2_TOP_LEVEL:
        return None
    if request is not None and (type(request) is not dict or not request.keys() <= _V2_REQUEST_KEYS):
        return None
    if extra is not None and type(extra) is not dict:
        return None
    key: Any = None
    values = None
    if run_cache is not None:
        try:
            key = (SCHEMA_V2, orjson.dumps(run) if run_text is None else run_text)
        except orjson.JSONEncodeError:  # an integer beyond 64 bits: checked, not remembered
            key = None
        else:
            values = run_cache.get(key)
    if values is None:
        raw = _v2_run_fields(run)
        if raw is None:
            return None
        if raw[_PROVENANCE] is not None:
            raw = (*raw[:_PROVENANCE], _provenance_pairs(raw[_PROVENANCE]), *raw[_PROVENANCE + 1 :])
        if key is None:
            values = _run_values(raw, run_cache, require_model)
        else:
            values = run_cache[key] = _checked_run_values(raw, require_model)  # type: ignore[index]
    return _v2_rest(values, obj, request, extra)


def _v2_rest(
    run: tuple[Any, ...], obj: dict[str, Any], request: dict[str, Any] | None, extra: dict[str, Any] | None
) -> Record:
    """What _v2_record does, in the same order, for a laid-out record (request and extra: its objects)."""
    if extra:
        check_json(extra, "extra")
    summary = obj.get("summary")
    if (request is None) == (summary is None):
        raise RecordError(f"a {SCHEMA_V2} record holds exactly one of 'request' and 'summary'")
    if extra is None:
        extra = {}
    if request is None:
        return Record(run, None, extra, "", None, check_summary(summary))
    request_values = _request_values(*map(request.get, REQUEST_FIELD_NAMES))
    itl = request.get("itl_s")
    return Record(
        run, request_values, extra, content_hash(request_values, extra), None if itl is None else _itl_values(itl)
    )


def _v2_run_fields(run: dict[str, Any]) -> tuple[Any, ...] | None:
    """A v2 run object's raw field values in RUN_FIELD_NAMES order, or None when it holds a key the
    schema does not (or an object where the schema has one is not an object)."""
    server, tool, workload = run.get("server"), run.get("tool"), run.get("workload")  # _V2_RUN_OBJECTS
    if (
        (server is not None and type(server) is not dict)
        or (tool is not None and type(tool) is not dict)
        or (workload is not None and type(workload) is not dict)
    ):
        return None
    shape = (
        tuple(run),
        None if server is None else tuple(server),
        None if tool is None else tuple(tool),
        None if workload is None else tuple(workload),
    )
    try:
        plan = _V2_RUN_PLANS[shape]
    except KeyError:
        plan = _make_v2_run_plan(shape)
        if len(_V2_RUN_PLANS) > 1024:
            _V2_RUN_PLANS.clear()
        _V2_RUN_PLANS[shape] = plan
    if plan is None:
        return None
    return plan(
        (
            *run.values(),
            *(() if server is None else server.values()),
            *(() if tool is None else tool.values()),
            *(() if workload is None else workload.values()),
            None,
        )
    )


def _make_v2_run_plan(shape: tuple[Any, ...]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]] | None:
    """For a run object's keys (and its inner objects' keys, in _V2_RUN_OBJECTS order), where each
    run field's value sits in (*run.values(), *each inner object's values, None); None when a key is
    not the schema's."""
    _paths_, _containers, leaf_paths, known_paths = _LAYOUTS[SCHEMA_V2]
    position: dict[tuple[str, ...], int] = {}
    run_keys, *inner_keys = shape
    for key in run_keys:
        if ("run", key) not in leaf_paths and ("run", key) not in known_paths:
            return None
        position[("run", key)] = len(position)
    for name, keys in zip(_V2_RUN_OBJECTS, inner_keys, strict=True):
        for key in keys or ():
            if ("run", name, key) not in leaf_paths:
                return None
            position[("run", name, key)] = len(position)
    absent = len(position)
    return operator.itemgetter(*(position.get(RUN_FIELDS_V2[name], absent) for name in RUN_FIELD_NAMES))


class _FlatPlan(NamedTuple):
    """Where each field sits in a flat object with a given set of keys."""

    run_keys: tuple[str, ...]  # the key holding each run field, or _ABSENT
    request_keys: tuple[str, ...]
    extra_keys: tuple[str, ...]
    inverted: tuple[int, ...]  # run field positions given by an inverted alias
    # From (*obj.values(), None), in the plan's key order: the run's and the request's raw
    # values (None for an absent field), each in one C call.
    run_of: Callable[[tuple[Any, ...]], tuple[Any, ...]]
    request_of: Callable[[tuple[Any, ...]], tuple[Any, ...]]


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
    position = {key: i for i, key in enumerate(keys)}
    absent = len(keys)  # the None after the values
    return _FlatPlan(
        run_keys=tuple(source.get(name, _ABSENT) for name in RUN_FIELD_NAMES),
        request_keys=tuple(source.get(name, _ABSENT) for name in REQUEST_FIELD_NAMES),
        extra_keys=tuple(extra),
        inverted=tuple(inverted),
        run_of=operator.itemgetter(*(position.get(source.get(name, _ABSENT), absent) for name in RUN_FIELD_NAMES)),
        request_of=operator.itemgetter(
            *(position.get(source.get(name, _ABSENT), absent) for name in REQUEST_FIELD_NAMES)
        ),
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


def _run_values(
    raw: tuple[Any, ...], cache: dict[Any, tuple[Any, ...]] | None, require_model: bool = True
) -> tuple[Any, ...]:
    if cache is None:
        return _checked_run_values(raw, require_model)
    key: Any
    if len(raw) <= _PROVENANCE or raw[_PROVENANCE] is None:
        # The JSON text of the values: exact for what a line holds (true, 1 and 1.0 differ,
        # though equal in Python), and cheaper than pairing the values with their types.
        # (Not with a provenance, which may be pairs or a list that read alike.)
        try:
            key = orjson.dumps(raw)
        except orjson.JSONEncodeError:  # an integer beyond 64 bits: checked, not remembered
            return _checked_run_values(raw, require_model)
    else:
        key = (raw, tuple(map(type, raw)))  # types too: 1 == True and 1 == 1.0 in Python
    try:
        return cache[key]
    except KeyError:
        cache[key] = values = _checked_run_values(raw, require_model)
        return values
    except TypeError:  # an unhashable value (a list or object) in a run field
        return _checked_run_values(raw, require_model)


def _checked_run_values(raw: tuple[Any, ...], require_model: bool) -> tuple[Any, ...]:
    if len(raw) < len(RUN_FIELD_NAMES):  # a v1 or flat record: no v2 fields
        raw = (*raw, *_NO_V2_RUN_VALUES)
    return _check_run_values(*raw, require_model=require_model)


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
    server_flags: Any,
    request_rate: Any,
    started_at: Any,
    tool: Any,
    tool_version: Any,
    tool_format: Any,
    engine: Any,
    provenance: Any,
    *,
    require_model: bool = True,
) -> tuple[Any, ...]:
    # Checked once per run: in a file of one-request runs, once per two lines. Each value has an
    # inline test of the common well-formed value (what its field check returns unchanged); any
    # other value goes to its field check, in the fields' order, which gives the same value or the
    # same error as it would for every value.
    if not (type(run_id) is str and 0 < len(run_id) <= MAX_NAME_CHARS and run_id.isascii() and "\x00" not in run_id):
        if isinstance(run_id, int) and not isinstance(run_id, bool):
            run_id = str(run_id)
        run_id = _text(run_id, "run", required=True)
    if source is not None and not (type(source) is str and source in _SOURCE_SET):
        source = _choice(source, "source", SOURCES)  # absent: "imported" when the run is stored
    if label is not None and not (
        type(label) is str and 0 < len(label) <= MAX_NAME_CHARS and label.isascii() and "\x00" not in label
    ):
        label = _text(label, "label")
    if not (type(model) is str and 0 < len(model) <= MAX_NAME_CHARS and model.isascii() and "\x00" not in model):
        model = _text(model, "model", required=require_model)
    if gpu is not None and not (
        type(gpu) is str and 0 < len(gpu) <= MAX_NAME_CHARS and gpu.isascii() and "\x00" not in gpu
    ):
        gpu = _text(gpu, "gpu")
    if vram_total_mib is not None and not (type(vram_total_mib) is int and 1 <= vram_total_mib <= MAX_INT):
        vram_total_mib = _int(vram_total_mib, "vram_total_mib", minimum=1)
    if vram_used_mib is not None and not (type(vram_used_mib) is int and 0 <= vram_used_mib <= MAX_INT):
        vram_used_mib = _int(vram_used_mib, "vram_used_mib", minimum=0)
    if wall_s is not None and not (type(wall_s) is float and 0.0 <= wall_s < math.inf):
        wall_s = _number(wall_s, "wall_s")
    if ctx_size is not None and not (type(ctx_size) is int and 0 <= ctx_size <= MAX_INT):
        ctx_size = _int(ctx_size, "ctx_size", minimum=0)
    if parallel is not None and not (type(parallel) is int and 1 <= parallel <= MAX_INT):
        parallel = _int(parallel, "parallel", minimum=1)
    if kv_unified is not None and type(kv_unified) is not bool:
        kv_unified = _bool(kv_unified, "kv_unified")
    if cache_type_k is not None and not (type(cache_type_k) is str and cache_type_k in _CACHE_TYPE_SET):
        cache_type_k = _choice(cache_type_k, "cache_type_k", CACHE_TYPES)
    if cache_type_v is not None and not (type(cache_type_v) is str and cache_type_v in _CACHE_TYPE_SET):
        cache_type_v = _choice(cache_type_v, "cache_type_v", CACHE_TYPES)
    if kv_offload is not None and type(kv_offload) is not bool:
        kv_offload = _bool(kv_offload, "kv_offload")
    if flash_attn is not None and not (type(flash_attn) is str and flash_attn in _FLASH_ATTN_SET):
        flash_attn = _flash_attn(flash_attn)
    if concurrency is not None and not (type(concurrency) is int and 1 <= concurrency <= MAX_INT):
        concurrency = _int(concurrency, "concurrency", minimum=1)
    if server_flags is not None and not (
        type(server_flags) is str
        and 0 < len(server_flags) <= MAX_FLAGS_CHARS
        and server_flags.isascii()
        and "\x00" not in server_flags
    ):
        server_flags = _text(server_flags, "run.server.flags", limit=MAX_FLAGS_CHARS)
    if request_rate is not None and not (type(request_rate) is float and 0.0 <= request_rate < math.inf):
        request_rate = _number(request_rate, "run.workload.request_rate")
    if started_at is not None:
        started_at = _timestamp(started_at, "run.started_at")
    if tool is not None and not (
        type(tool) is str and 0 < len(tool) <= MAX_TOOL_CHARS and tool.isascii() and "\x00" not in tool
    ):
        tool = _text(tool, "run.tool.name", limit=MAX_TOOL_CHARS)
    if tool_version is not None and not (
        type(tool_version) is str
        and 0 < len(tool_version) <= MAX_TOOL_CHARS
        and tool_version.isascii()
        and "\x00" not in tool_version
    ):
        tool_version = _text(tool_version, "run.tool.version", limit=MAX_TOOL_CHARS)
    if tool_format is not None and not (
        type(tool_format) is str
        and 0 < len(tool_format) <= MAX_TOOL_FORMAT_CHARS
        and tool_format.isascii()
        and "\x00" not in tool_format
    ):
        tool_format = _text(tool_format, "run.tool.format", limit=MAX_TOOL_FORMAT_CHARS)
    if engine is not None and not (
        type(engine) is str and 0 < len(engine) <= MAX_TOOL_CHARS and engine.isascii() and "\x00" not in engine
    ):
        engine = _text(engine, "run.engine", limit=MAX_TOOL_CHARS)
    if provenance is not None:
        provenance = _check_provenance(provenance)
    return (
        run_id,
        source,
        label,
        model,
        gpu,
        vram_total_mib,
        vram_used_mib,
        wall_s,
        ctx_size,
        parallel,
        kv_unified,
        cache_type_k,
        cache_type_v,
        kv_offload,
        flash_attn,
        concurrency,
        server_flags,
        request_rate,
        started_at,
        tool,
        tool_version,
        tool_format,
        engine,
        provenance,
    )


_SOURCE_SET = frozenset(SOURCES)
_CACHE_TYPE_SET = frozenset(CACHE_TYPES)
_FLASH_ATTN_SET = frozenset(FLASH_ATTN_MODES)


def _is_plain_text(value: Any, limit: int) -> bool:
    """What _text returns unchanged: a non-empty ASCII string without NUL, at most limit characters."""
    return type(value) is str and 0 < len(value) <= limit and value.isascii() and "\x00" not in value


# A provenance key may name a run field by its place in the record ("server.flags",
# "workload.concurrency") or by its name ("server_flags", "concurrency"): both are stored by name,
# the key the pipeline's own marks (declared, file) and the pages use.
_PROVENANCE_FIELD_OF_PATH = {".".join(path[1:]): name for name, path in RUN_FIELDS_V2.items() if len(path) > 2}


def _provenance_pairs(value: Any) -> Any:
    """A run's provenance object as sorted (field, kind) pairs: hashable, so the run cache keeps it."""
    if not isinstance(value, dict):
        raise _wrong_type("run.provenance", "an object", value)
    named = {_PROVENANCE_FIELD_OF_PATH.get(key, key): kind for key, kind in value.items()}
    return tuple(sorted(named.items()))


def _check_provenance(pairs: Any) -> tuple[tuple[str, str], ...] | None:
    if pairs is None:
        return None
    try:
        if pairs in _CHECKED_PROVENANCE:
            return pairs  # type: ignore[no-any-return]
    except TypeError:  # a kind that is an array or an object: refused below
        pass
    if len(pairs) > MAX_PROVENANCE_FIELDS:
        raise RecordError(f"'run.provenance' names more than {MAX_PROVENANCE_FIELDS} fields")
    for name, kind in pairs:
        _text(name, "run.provenance key", required=True, limit=64)
        if kind not in PROVENANCE_KINDS:
            raise RecordError(
                f"'run.provenance.{name}' must be one of {', '.join(PROVENANCE_KINDS)}; got {_short(kind)}"
            )
    if pairs:
        if len(_CHECKED_PROVENANCE) >= 1024:
            _CHECKED_PROVENANCE.clear()
        _CHECKED_PROVENANCE.add(pairs)
    return pairs or None


# Provenances found valid (non-empty tuples of string pairs): a file's runs mostly share one. Only an
# equal tuple of the same strings is found here (a string never equals another JSON value).
_CHECKED_PROVENANCE: set[tuple[tuple[str, str], ...]] = set()


def _itl_values(value: Any) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise _wrong_type("request.itl_s", "an array of numbers", value)
    if len(value) > MAX_ITL_VALUES:
        raise RecordError(f"'request.itl_s' holds more than {MAX_ITL_VALUES:,} values")
    try:
        itl = tuple(v if type(v) is float and 0.0 <= v < math.inf else _number(v, "request.itl_s[]") for v in value)
    except RecordError as exc:
        raise RecordError(f"{exc} (every inter-token latency is a finite number of seconds, at least 0)") from None
    if None in itl:
        raise RecordError("'request.itl_s' holds a null; every inter-token latency is a number of seconds")
    return itl  # type: ignore[return-value]


def check_summary(value: Any) -> dict[str, Any]:
    """A kvlab.bench/2 summary, validated, in its canonical form (absent and null values left out)."""
    if type(value) is dict and value.keys() <= _SUMMARY_FIELD_SET:
        common = _common_summary(value)
        if common is not None:
            return common
    return _check_summary_fields(value)


def _common_summary(value: dict[str, Any]) -> dict[str, Any] | None:
    """check_summary's result for a summary of known fields whose every value is one its field's check
    returns unchanged (a file of one-request runs reads as many summaries as requests); None for any
    other summary, which _check_summary_fields reads (it gives the same result, or names what is wrong)."""
    out: dict[str, Any] = {}
    get = value.get
    for name in SUMMARY_COUNTS:
        v = get(name)
        if v is not None:
            if not (type(v) is int and 0 <= v <= MAX_INT):
                return None
            out[name] = v
    for name in SUMMARY_TOKENS:
        v = get(name)
        if v is not None:
            if not (type(v) is int and 0 <= v <= MAX_JSON_INT):
                return None
            out[name] = v
    v = get("requests_sampled")
    if v is not None:
        if type(v) is not bool:
            return None
        out["requests_sampled"] = v
    for name in SUMMARY_NUMBERS:
        v = get(name)
        if v is not None:
            if not (type(v) is float and 0.0 <= v < math.inf):
                return None
            out[name] = v
    for name in SUMMARY_STATS:
        stats = get(name)
        if stats is None:
            continue
        if type(stats) is not dict:
            return None
        keys = tuple(stats)
        order = _STAT_ORDERS.get(keys)
        if order is None:
            if not stats.keys() <= _STAT_KEY_SET:
                return None
            if len(_STAT_ORDERS) > 1024:
                _STAT_ORDERS.clear()
            order = _STAT_ORDERS[keys] = tuple(key for key in STAT_KEYS if key in stats)
        for v in stats.values():
            if not (type(v) is float and 0.0 <= v < math.inf):
                return None
        if order:  # an empty statistic is left out, as a null one is
            out[name] = dict(stats) if order == keys else {key: stats[key] for key in order}
    n_requests, n_ok = out.get("n_requests"), out.get("n_ok")
    if (n_requests is None) != (n_ok is None):
        return None
    if n_requests is not None and n_ok + out.get("n_failed", 0) + out.get("n_incomplete", 0) > n_requests:
        return None  # (n_ok more than n_requests among them)
    return out


_STAT_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}  # a statistic's keys -> them in STAT_KEYS order


def _check_summary_fields(value: Any) -> dict[str, Any]:
    """check_summary field by field, naming the first field that is wrong."""
    if not isinstance(value, dict):
        raise _wrong_type("summary", "an object", value)
    if not value.keys() <= _SUMMARY_FIELD_SET:
        unknown = set(value) - _SUMMARY_FIELD_SET
        raise RecordError(f"unknown field 'summary.{sorted(unknown)[0]}'; put custom fields under 'extra'")
    out: dict[str, Any] = {}
    get = value.get
    for name in SUMMARY_COUNTS:
        v = get(name)
        out[name] = v if v is None or (type(v) is int and 0 <= v <= MAX_INT) else _int(v, f"summary.{name}", minimum=0)
    for name in SUMMARY_TOKENS:
        v = get(name)
        out[name] = v if v is None or (type(v) is int and 0 <= v <= MAX_JSON_INT) else _big_int(v, f"summary.{name}")
    v = get("requests_sampled")
    out["requests_sampled"] = v if v is None or type(v) is bool else _bool(v, "summary.requests_sampled")
    for name in SUMMARY_NUMBERS:
        v = get(name)
        out[name] = v if v is None or (type(v) is float and 0.0 <= v < math.inf) else _number(v, f"summary.{name}")
    for name in SUMMARY_STATS:
        stats = value.get(name)
        if stats is None:
            continue
        if type(stats) is dict and stats.keys() <= _STAT_KEY_SET and _all_finite_floats(stats.values()):
            # the common statistic: floats a tool wrote, each already what _number returns
            out[name] = {key: stats[key] for key in STAT_KEYS if key in stats} or None
            continue
        if not isinstance(stats, dict):
            raise _wrong_type(f"summary.{name}", "an object", stats)
        unknown = set(stats) - set(STAT_KEYS)
        if unknown:
            raise RecordError(f"unknown field 'summary.{name}.{sorted(unknown)[0]}' (one of {', '.join(STAT_KEYS)})")
        checked = {key: _number(stats.get(key), f"summary.{name}.{key}") for key in STAT_KEYS}
        out[name] = {key: v for key, v in checked.items() if v is not None} or None
    # The counts are optional (llama-bench's CSV/SQL do not print them), but come together:
    # n_ok alone would say how many succeeded out of an unknown number.
    if (out["n_requests"] is None) != (out["n_ok"] is None):
        given, missing = ("n_requests", "n_ok") if out["n_ok"] is None else ("n_ok", "n_requests")
        raise RecordError(f"'summary.{given}' without 'summary.{missing}': give both counts or neither")
    if out["n_requests"] is not None:
        if out["n_ok"] > out["n_requests"]:
            raise RecordError(f"'summary.n_ok' ({out['n_ok']}) is more than 'summary.n_requests' ({out['n_requests']})")
        accounted = out["n_ok"] + (out["n_failed"] or 0) + (out["n_incomplete"] or 0)
        if accounted > out["n_requests"]:
            raise RecordError(
                f"'summary.n_ok' + 'n_failed' + 'n_incomplete' ({accounted}) is more than "
                f"'summary.n_requests' ({out['n_requests']})"
            )
    return {name: v for name, v in out.items() if v is not None}


_STAT_KEY_SET = frozenset(STAT_KEYS)
_SUMMARY_FIELD_SET = frozenset(SUMMARY_FIELDS)


def _all_finite_floats(values: Iterable[Any]) -> bool:
    """Every value a float, at least 0 and finite (what _number accepts and returns unchanged)."""
    return all(type(v) is float and 0.0 <= v < math.inf for v in values)


def _big_int(value: object, name: str) -> int | None:
    """A non-negative integer that a JSON column holds (64-bit), e.g. a run's token total."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong_type(name, "an integer", value)
    if value < 0:
        raise RecordError(f"{name!r} must not be negative, got {value}")
    if value > MAX_JSON_INT:
        raise RecordError(f"{name!r} is too large: {_short(value)} (at most {MAX_JSON_INT:,})")
    return value


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
    """A request's identity within its run (with its occurrence): a digest of its fields and extra.

    Identical records share it. Its inter-token latencies are not part of it: a request is the
    same request in a kvlab.bench/1 export (which has no ITL) and a kvlab.bench/2 one, and the
    same whether an import, a job or a sweep stored it (each stores what request_identity gives).
    """
    try:
        payload = orjson.dumps((request, extra), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:
        # Python's json reads what orjson (and the database) cannot hold.
        raise RecordError(
            f"a value cannot be stored: {exc} (an integer beyond 64 bits, a lone surrogate, or nesting)"
        ) from None
    digest = _CONTENT_DIGEST.copy()  # a copy of a made one: a third less than making one
    digest.update(payload)
    return digest.hexdigest()


_CONTENT_DIGEST = hashlib.blake2b(digest_size=16)


def request_identity(request: dict[str, Any], extra: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A request checked as an import checks it (its values as the import would store them: an
    error's kind classified, times in UTC) and its content hash: what a job or a sweep stores, so
    that the import of its own export finds the same request. RecordError where an import would
    refuse it."""
    if extra:
        check_json(extra, "extra")
    values = _request_values(*map(request.get, REQUEST_FIELD_NAMES))
    return dict(zip(REQUEST_FIELD_NAMES, values, strict=True)), content_hash(values, extra)


# --- field checks ---------------------------------------------------------------


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


def _timestamp(value: object, name: str = "ts") -> datetime | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _wrong_type(name, "an ISO 8601 time or epoch seconds", value)
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise RecordError(f"{name!r} is out of range: {value}") from None
    if not isinstance(value, str):
        raise _wrong_type(name, "an ISO 8601 time", value)
    return _parse_iso_time(value, name)


@functools.lru_cache(maxsize=4096)  # the requests of a run often share their timestamps
def _parse_iso_time(value: str, name: str = "ts") -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise RecordError(f"{name!r} is not an ISO 8601 time: {_short(value)}") from None
    if parsed.tzinfo is None:  # documented: times without an offset are UTC
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise RecordError(f"{name!r} is out of range: {_short(value)}") from None
