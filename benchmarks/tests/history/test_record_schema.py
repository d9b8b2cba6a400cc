"""The published record schema (docs/bench-record.schema.json, docs/record-schema.md) matches the code.

The JSON Schema is what other tools validate against, records.normalize is what the
importer applies: these tests keep the two, the exporter and the documentation in step.
"""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from jsonschema import Draft202012Validator

from benchmarks.history.exporter import export_lines
from benchmarks.history.importer import import_bench_file
from benchmarks.models import FileImport, Run
from benchmarks.records import canonical
from benchmarks.records import schema as records
from benchmarks.records.jsonl import RecordError
from benchmarks.tests.investigation import FILENAME, investigation_bytes

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_PATH = ROOT / "docs" / "bench-record.schema.json"
DOC_PATH = ROOT / "docs" / "record-schema.md"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]) -> Draft202012Validator:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _import_investigation() -> FileImport:
    return import_bench_file(io.BytesIO(investigation_bytes()), filename=FILENAME, origin="command")


def _leaf_paths(node: dict[str, Any], prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
    """Every field path the schema describes under `node`, descending into nested objects."""
    paths: set[tuple[str, ...]] = set()
    for name, prop in node["properties"].items():
        if "properties" in prop:
            paths |= _leaf_paths(prop, (*prefix, name))
        else:
            paths.add((*prefix, name))
    return paths


def _all_properties(node: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, prop in node.get("properties", {}).items():
        found.append((prefix + name, prop))
        found += _all_properties(prop, f"{prefix}{name}.")
    return found


# --- the exporter writes what the schema describes -------------------------------------


@pytest.mark.django_db
def test_every_exported_record_validates_against_the_json_schema(validator: Draft202012Validator) -> None:
    assert _import_investigation().status == FileImport.Status.IMPORTED
    lines = list(export_lines(Run.objects.all()))

    assert len(lines) == 11
    for line in lines:
        record = orjson.loads(line)
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(record)]
        assert errors == [], line


@pytest.mark.django_db
def test_exported_records_carry_every_key_and_a_boolean_outcome(schema: dict[str, Any]) -> None:
    _import_investigation()
    v1_paths = set(records.RUN_FIELDS.values()) | set(records.REQUEST_FIELDS.values())
    v2_paths = set(records.RUN_FIELDS_V2_ONLY.values()) | {records.REQUEST_ITL_PATH}

    for line in export_lines(Run.objects.all()):
        record = orjson.loads(line)
        assert record["schema"] == records.SCHEMA_VERSION == records.SCHEMA_V2
        exported = _leaf_paths_of_value(record["run"], ("run",)) | _leaf_paths_of_value(record["request"], ("request",))
        assert v1_paths <= exported <= v1_paths | v2_paths
        assert record["run"]["provenance"] == {"label": "file", "model": "file", "gpu": "file"}
        assert isinstance(record["request"]["ok"], bool)
        assert "extra" not in record or record["extra"]


def _leaf_paths_of_value(value: dict[str, Any], prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    for key, child in value.items():
        if isinstance(child, dict) and (*prefix, key) != ("run", "provenance"):
            paths |= _leaf_paths_of_value(child, (*prefix, key))
        else:
            paths.add((*prefix, key))
    return paths


@pytest.mark.django_db
def test_the_documented_example_line_is_what_the_exporter_writes() -> None:
    _import_investigation()
    exported = b"".join(export_lines(Run.objects.filter(key="c2-single"))).decode().strip()

    assert exported in DOC_PATH.read_text(encoding="utf-8")


# --- the schema and the documentation cannot drift from records.py ----------------------


def test_schema_fields_are_exactly_the_canonical_fields_of_records_py(schema: dict[str, Any]) -> None:
    described = _leaf_paths(schema, ())
    summary_paths = {("summary", name) for name in records.SUMMARY_FIELDS if name not in records.SUMMARY_STATS}
    summary_paths |= {("summary", stat, key) for stat in records.SUMMARY_STATS for key in records.STAT_KEYS}

    assert (
        described - {("schema",), ("extra",)}
        == set(records.RUN_FIELDS_V2.values())
        | set(records.REQUEST_FIELDS.values())
        | {records.REQUEST_ITL_PATH}
        | summary_paths
    )
    assert set(schema["properties"]) == {"schema", "run", "request", "summary", "extra"}
    assert schema["properties"]["schema"]["enum"] == [records.SCHEMA_V2, records.SCHEMA_V1]


def test_schema_enums_and_limits_are_those_of_records_py(schema: dict[str, Any]) -> None:
    run = schema["properties"]["run"]["properties"]
    server = run["server"]["properties"]
    request = schema["properties"]["request"]["properties"]

    assert server["cache_type_k"]["enum"] == [*records.CACHE_TYPES, None]
    assert server["cache_type_v"]["enum"] == [*records.CACHE_TYPES, None]
    assert server["flash_attn"]["enum"] == [*records.FLASH_ATTN_MODES, True, False, None]
    assert run["source"]["enum"] == [*records.SOURCES, None]
    assert request["error_type"]["enum"] == [*records.ERROR_TYPES, None]
    for name in ("id", "label", "model", "gpu"):
        assert run[name]["maxLength"] == records.MAX_NAME_CHARS
    assert request["error"]["maxLength"] == records.MAX_ERROR_CHARS


def test_every_schema_property_has_a_description(schema: dict[str, Any]) -> None:
    missing = [name for name, prop in _all_properties(schema) if not prop.get("description")]

    assert missing == []


def test_the_documentation_lists_every_field_and_alias() -> None:
    doc = DOC_PATH.read_text(encoding="utf-8")
    documented = set(re.findall(r"`([a-z0-9_.]+)`", doc))
    names = {*records.RUN_FIELD_NAMES, *records.REQUEST_FIELD_NAMES, *records.ALIAS_TO_FIELD}
    names |= set(records.INVERTED_ALIASES) | set(records.ERROR_TYPES) | set(records.CACHE_TYPES)

    assert names - documented == set()


# --- the schema and records.normalize agree on what is a valid record -------------------


_DELETE = object()


def _canonical(**changes: Any) -> dict[str, Any]:
    """A valid canonical record; `changes` maps dotted paths to new values (None deletes)."""
    record: dict[str, Any] = {
        "schema": "kvlab.bench/1",
        "run": {
            "id": "c3p-single",
            "source": "imported",
            "label": "C3P",
            "model": "Devstral-Small-2-24B-Q4_K_M.gguf",
            "gpu": "RTX 5060 Ti 16GB",
            "vram_total_mib": 16311,
            "vram_used_mib": 15097,
            "wall_s": None,
            "server": {
                "ctx_size": 12288,
                "parallel": 1,
                "kv_unified": True,
                "cache_type_k": "q8_0",
                "cache_type_v": "q8_0",
                "kv_offload": True,
                "flash_attn": "on",
            },
            "workload": {"concurrency": 1},
        },
        "request": {
            "ts": "2026-09-18T21:03:00Z",
            "ok": True,
            "http_status": 200,
            "error": None,
            "error_type": None,
            "prompt_tokens": 4362,
            "n_predict": 1738,
            "output_tokens": None,
            "tok_s": 25.7,
            "elapsed_s": 72.0,
            "ttft_s": None,
        },
    }
    record = copy.deepcopy(record)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = record
        for part in parents:
            node = node[part]
        if value is _DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return record


REJECTED_BY_BOTH = {
    "wrong type for an integer": _canonical(**{"run.server.ctx_size": "12288"}),
    "a boolean for an integer": _canonical(**{"run.server.parallel": True}),
    "a string for a number": _canonical(**{"request.tok_s": "25.7"}),
    "a string for a boolean": _canonical(**{"run.server.kv_unified": "true"}),
    "negative prompt tokens": _canonical(**{"request.prompt_tokens": -1}),
    "negative output tokens": _canonical(**{"request.output_tokens": -5}),
    "n_predict below -1": _canonical(**{"request.n_predict": -2}),
    "negative elapsed time": _canonical(**{"request.elapsed_s": -0.5}),
    "zero parallel slots": _canonical(**{"run.server.parallel": 0}),
    "zero VRAM": _canonical(**{"run.vram_total_mib": 0}),
    "an integer beyond 2**62": _canonical(**{"run.server.ctx_size": 2**62 + 1}),
    "unknown cache type": _canonical(**{"run.server.cache_type_k": "q3_k"}),
    "unknown flash attention mode": _canonical(**{"run.server.flash_attn": "yes"}),
    "unknown error type": _canonical(**{"request.ok": False, "request.http_status": 500, "request.error_type": "oom"}),
    "unknown source": _canonical(**{"run.source": "lab"}),
    "an empty string for an enum": _canonical(**{"run.server.cache_type_v": ""}),
    "unknown key in run": _canonical(**{"run.ctx_size": 12288}),
    "unknown key in run.server": _canonical(**{"run.server.ctx": 12288}),
    "unknown key in request": _canonical(**{"request.status": 200}),
    "unknown top-level key": _canonical(note="x"),
    "server not an object": _canonical(**{"run.server": [12288]}),
    "extra not an object": _canonical(extra="note"),
    "other schema version": _canonical(schema="kvlab.bench/3"),
    "a v2 field in a v1 record": _canonical(**{"run.engine": "vllm"}),
    "a v2 server field in a v1 record": _canonical(**{"run.server.flags": "-c 1"}),
    "itl_s in a v1 record": _canonical(**{"request.itl_s": [0.1]}),
    "a summary in a v1 record": _canonical(summary={"n_requests": 1, "n_ok": 1}),
    "v2 with neither request nor summary": _canonical(schema="kvlab.bench/2", request=_DELETE),
    "v2 with both request and summary": _canonical(schema="kvlab.bench/2", summary={"n_requests": 1, "n_ok": 1}),
    "v2 summary without n_ok": _canonical(schema="kvlab.bench/2", request=_DELETE, summary={"n_requests": 1}),
    "v2 summary with an unknown statistic": _canonical(
        schema="kvlab.bench/2", request=_DELETE, summary={"n_requests": 1, "n_ok": 1, "ttft_ms": {"p999": 1}}
    ),
    "v2 summary with a negative duration": _canonical(
        schema="kvlab.bench/2", request=_DELETE, summary={"n_requests": 1, "n_ok": 1, "duration_s": -1}
    ),
    "v2 unknown provenance kind": _canonical(schema="kvlab.bench/2", **{"run.provenance": {"gpu": "guess"}}),
    "v2 tool name over 40 characters": _canonical(schema="kvlab.bench/2", **{"run.tool": {"name": "x" * 41}}),
    "v2 unknown tool key": _canonical(schema="kvlab.bench/2", **{"run.tool": {"nom": "vllm"}}),
    "v2 negative inter-token latency": _canonical(schema="kvlab.bench/2", **{"request.itl_s": [-0.1]}),
    "missing run id": _canonical(**{"run.id": _DELETE}),
    "empty run id": _canonical(**{"run.id": ""}),
    "missing model": _canonical(**{"run.model": _DELETE}),
    "null model": _canonical(**{"run.model": None}),
    "missing run": _canonical(run=_DELETE),
    "missing outcome": _canonical(**{"request.ok": _DELETE, "request.http_status": _DELETE}),
    "null outcome": _canonical(**{"request.ok": None, "request.http_status": None}),
    "ok contradicts the status": _canonical(**{"request.http_status": 500}),
    "status above 599": _canonical(**{"request.ok": _DELETE, "request.http_status": 600}),
    "status below 100": _canonical(**{"request.ok": _DELETE, "request.http_status": 99}),
    "label over 200 characters": _canonical(**{"run.label": "x" * 201}),
    "error over 10,000 characters": _canonical(
        **{"request.ok": False, "request.http_status": 500, "request.error": "x" * 10_001}
    ),
    "NUL in a name": _canonical(**{"run.gpu": "RTX\u00005060"}),
    "an error object in the canonical shape": _canonical(
        **{"request.ok": False, "request.http_status": 400, "request.error": {"code": 400}}
    ),
    "ts as a boolean": _canonical(**{"request.ts": True}),
    "ts not a time": _canonical(**{"request.ts": "yesterday"}),
    "ts beyond year 9999": _canonical(**{"request.ts": 253402300800}),
}

ACCEPTED_BY_BOTH = {
    # a request that failed after its headers: an error event, a cut stream, a deadline
    "failure with a 2xx status": _canonical(**{"request.ok": False, "request.http_status": 200}),
    "the full example": _canonical(),
    "only the required fields": {
        "schema": "kvlab.bench/1",
        "run": {"id": "r1", "model": "m.gguf"},
        "request": {"ok": True},
    },
    "outcome from the status alone": _canonical(**{"request.ok": _DELETE, "request.http_status": 503}),
    "outcome from ok alone": _canonical(**{"request.http_status": _DELETE}),
    "a failure with its error": _canonical(
        **{
            "request.ok": False,
            "request.http_status": 500,
            "request.error": "Context size has been exceeded.",
            "request.error_type": "context_exceeded",
            "request.tok_s": None,
        }
    ),
    "a failure without a response": _canonical(
        **{"request.ok": False, "request.http_status": None, "request.error": "timed out"}
    ),
    "nulls everywhere optional": _canonical(
        **{
            "run.source": None,
            "run.label": None,
            "run.gpu": None,
            "run.vram_total_mib": None,
            "run.server": {k: None for k in ("ctx_size", "parallel", "kv_unified", "cache_type_k", "cache_type_v")},
            "run.workload": {"concurrency": None},
            "request.ts": None,
            "request.tok_s": None,
            "request.elapsed_s": None,
        }
    ),
    "no server or workload": _canonical(**{"run.server": _DELETE, "run.workload": _DELETE}),
    "null server and workload": _canonical(**{"run.server": None, "run.workload": None}),
    "an executed run": _canonical(**{"run.source": "executed", "run.wall_s": 615}),
    "an integer run id": _canonical(**{"run.id": 42}),
    "empty optional names": _canonical(**{"run.label": "", "run.gpu": ""}),
    "flash attention as a boolean": _canonical(**{"run.server.flash_attn": False}),
    "n_predict -1": _canonical(**{"request.n_predict": -1}),
    "zero tokens": _canonical(**{"request.prompt_tokens": 0, "request.output_tokens": 0, "run.server.ctx_size": 0}),
    "integers for numbers": _canonical(**{"request.tok_s": 26, "request.elapsed_s": 0, "request.ttft_s": 1}),
    "ts with an offset": _canonical(**{"request.ts": "2026-09-18T23:03:00+02:00"}),
    "ts without an offset": _canonical(**{"request.ts": "2026-09-18 21:03:00.250"}),
    "ts as epoch seconds": _canonical(**{"request.ts": 1789765380.5}),
    "names at the length limit": _canonical(**{"run.label": "x" * 200, "run.id": "é" * 200}),
    "extra with anything": _canonical(extra={"note": "post", "timings": {"predicted_n": 1738}, "tags": [1, None]}),
    "null extra": _canonical(extra=None),
    "a v2 request with every v2 field": _canonical(
        schema="kvlab.bench/2",
        **{
            "run.server.flags": "-c 12288 -np 1",
            "run.workload.request_rate": 2.5,
            "run.started_at": "2026-09-18T21:00:00Z",
            "run.tool": {"name": "vllm", "version": "0.9.1", "format": "vllm bench serve"},
            "run.engine": "vllm",
            "run.provenance": {"gpu": "declared", "model": "file", "ttft_p50": "derived"},
            "request.itl_s": [0.04, 0.05, 0],
        },
    ),
    "a v2 summary": _canonical(
        schema="kvlab.bench/2",
        request=_DELETE,
        summary={
            "n_requests": 10,
            "n_ok": 8,
            "n_failed": 1,
            "n_incomplete": 1,
            "requests_sampled": True,
            "duration_s": 12.5,
            "request_rate": 0.8,
            "output_tok_s": 120,
            "total_tok_s": 900.5,
            "input_tokens": 40000,
            "output_tokens": 1500,
            "ttft_ms": {
                "mean": 120,
                "median": 100,
                "std": 10,
                "min": 80,
                "max": 300,
                "p50": 100,
                "p90": 200,
                "p95": 250,
                "p99": 290,
            },  # fmt: skip
            "itl_ms": {"mean": 20},
            "tpot_ms": None,
            "e2e_ms": {"p95": 9000},
        },
    ),
    "a v2 summary without counts (llama-bench CSV/SQL)": _canonical(
        schema="kvlab.bench/2", request=_DELETE, summary={"e2e_ms": {"mean": 1.5}, "n_failed": 0}
    ),
    "a v2 summary with the required counts only": _canonical(
        schema="kvlab.bench/2", request=_DELETE, summary={"n_requests": 0, "n_ok": 0}
    ),
    "a v2 request without v2 fields": _canonical(schema="kvlab.bench/2"),
}


@pytest.mark.parametrize("record", REJECTED_BY_BOTH.values(), ids=REJECTED_BY_BOTH.keys())
def test_records_the_json_schema_rejects_are_rejected_by_the_importer(
    validator: Draft202012Validator, record: dict[str, Any]
) -> None:
    assert not validator.is_valid(record)
    with pytest.raises(RecordError):
        records.normalize(record)


@pytest.mark.parametrize("record", ACCEPTED_BY_BOTH.values(), ids=ACCEPTED_BY_BOTH.keys())
def test_records_the_json_schema_accepts_are_accepted_by_the_importer(
    validator: Draft202012Validator, record: dict[str, Any]
) -> None:
    errors = [e.message for e in validator.iter_errors(record)]
    assert errors == []
    records.normalize(record)


@pytest.mark.parametrize("record", ACCEPTED_BY_BOTH.values(), ids=ACCEPTED_BY_BOTH.keys())
def test_an_accepted_record_reexported_still_validates(validator: Draft202012Validator, record: dict[str, Any]) -> None:
    normalized = records.normalize(record)
    if record["schema"] == records.SCHEMA_V1:
        exported = canonical.to_canonical(normalized.run_dict(), normalized.request_dict(), normalized.extra)
    elif normalized.summary is not None:
        exported = canonical.to_canonical_v2(normalized.run_dict(), summary=normalized.summary, extra=normalized.extra)
    else:
        exported = canonical.to_canonical_v2(
            normalized.run_dict(), request=normalized.request_dict(), itl=normalized.itl, extra=normalized.extra
        )

    assert validator.is_valid(orjson.loads(orjson.dumps(exported)))
    assert records.normalize(exported) == normalized
