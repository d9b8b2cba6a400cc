import pytest

from benchmarks.records.errors import classify_error
from benchmarks.records.jsonl import RecordError
from benchmarks.records.schema import SCHEMA_VERSION, normalize
from benchmarks.tests.builders import flat


def test_a_flat_record_maps_to_canonical_fields():
    record = normalize(flat(note="kept"))
    run, request = record.run_dict(), record.request_dict()
    assert run["run_id"] == "r1" and run["ctx_size"] == 8192 and run["flash_attn"] == "on"
    assert request["ok"] is True and request["http_status"] == 200 and request["tok_s"] == 40.0
    assert request["ts"].isoformat() == "2026-10-01T12:00:00+00:00"
    assert record.extra == {"note": "kept"}


def test_common_aliases_are_accepted():
    record = normalize(
        {
            "run_id": "a",
            "model_name": "m.gguf",
            "np": 3,
            "ctk": "q8_0",
            "ctv": "q4_0",
            "fa": "auto",
            "no_kv_offload": True,
            "status_code": 500,
            "n_prompt": 12,
            "completion_tokens": 7,
            "tokens_per_second": 3.5,
            "latency_s": 1.25,
        }
    )
    run, request = record.run_dict(), record.request_dict()
    assert (run["run_id"], run["model"], run["parallel"]) == ("a", "m.gguf", 3)
    assert (run["cache_type_k"], run["cache_type_v"], run["flash_attn"]) == ("q8_0", "q4_0", "auto")
    assert run["kv_offload"] is False
    assert request["ok"] is False and request["http_status"] == 500
    assert (request["prompt_tokens"], request["output_tokens"], request["tok_s"], request["elapsed_s"]) == (
        12,
        7,
        3.5,
        1.25,
    )


def test_a_llama_server_error_object_is_understood():
    error = {"code": 400, "type": "exceed_context_size_error", "message": "request (900 tokens) exceeds..."}
    record = normalize(flat(status=..., ok=..., error=error)).request_dict()
    assert record["ok"] is False and record["http_status"] == 400
    assert record["error_type"] == "exceed_context_size" and record["error"].startswith("request (900")


def test_a_canonical_record_is_read():
    record = normalize(
        {
            "schema": SCHEMA_VERSION,
            "run": {"id": "c", "model": "m", "server": {"ctx_size": 4096}, "workload": {"concurrency": 4}},
            "request": {"ok": False, "http_status": 500, "error": "Context size has been exceeded."},
            "extra": {"host": "gpu-1"},
        }
    )
    assert record.run_dict()["ctx_size"] == 4096 and record.run_dict()["concurrency"] == 4
    assert record.request_dict()["error_type"] == "context_exceeded"
    assert record.extra == {"host": "gpu-1"}


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (flat(run=...), "missing required field: 'run'"),
        (flat(model=...), "missing required field: 'model'"),
        (flat(model=""), "missing required field: 'model'"),
        (flat(ok=..., status=...), "missing required field: 'ok' or 'status'"),
        (flat(tok_s="40.0"), "wrong type: 'tok_s' must be a number, got a string '40.0'"),
        (flat(prompt_tokens="1000"), "wrong type: 'prompt_tokens' must be an integer, got a string"),
        (flat(prompt_tokens=1000.5), "wrong type: 'prompt_tokens' must be an integer, got a number"),
        (flat(ctx_size=True), "wrong type: 'ctx_size' must be an integer, got a boolean"),
        (flat(prompt_tokens=-1), "'prompt_tokens' must not be negative, got -1"),
        (flat(output_tokens=-5), "'output_tokens' must not be negative, got -5"),
        (flat(n_predict=-2), "'n_predict' must be at least -1, got -2"),
        (flat(tok_s=-1.0), "'tok_s' must not be negative"),
        (flat(status="ok"), "wrong type: 'status' must be an integer"),
        (flat(status=999), "'status' must be an HTTP status code (100-599), got 999"),
        (flat(ok=True, status=500), "'ok' is true but 'status' is 500"),
        (flat(kv_unified="yes"), "wrong type: 'kv_unified' must be true or false"),
        (flat(ok=-(2**63) - 1), "wrong type: 'ok' must be true or false, got a number -9223372036854775809"),
        (flat(cache_type_k="q3_k"), "'cache_type_k' must be one of f32, f16"),
        (flat(ts="yesterday"), "'ts' is not an ISO 8601 time"),
        (flat(parallel=0), "'parallel' must be at least 1, got 0"),
        (flat(run="r", run_id="r"), "both 'run' and 'run_id' given"),
        (flat(model="x" * 201), "'model' is longer than 200 characters"),
        ({"schema": "kvlab.bench/9", "run": {}}, "unsupported schema 'kvlab.bench/9'"),
        ({"schema": SCHEMA_VERSION, "run": {"id": "a", "modle": "m"}}, "unknown field 'run.modle'"),
        ({"schema": SCHEMA_VERSION, "run": [], "request": {}}, "wrong type: 'run' must be an object"),
        ({"schema": SCHEMA_VERSION, "note": 1}, "unknown top-level field 'note'"),
    ],
)
def test_it_rejects_invalid_records_with_the_reason(record, reason):
    with pytest.raises(RecordError) as excinfo:
        normalize(record)
    assert str(excinfo.value).startswith(reason)


def test_identical_records_share_a_content_hash_and_different_ones_do_not():
    assert normalize(flat()).content_hash == normalize(flat()).content_hash
    assert normalize(flat()).content_hash != normalize(flat(tok_s=41.0)).content_hash
    assert normalize(flat()).content_hash != normalize(flat(extra_field=1)).content_hash


def test_the_content_hash_ignores_how_a_value_was_spelled():
    assert normalize(flat(elapsed_s=246)).content_hash == normalize(flat(elapsed_s=246.0)).content_hash
    assert normalize(flat(ts="2026-10-01T14:00:00+02:00")).content_hash == normalize(flat()).content_hash


def test_times_without_an_offset_are_utc_and_epoch_seconds_are_accepted():
    assert normalize(flat(ts="2026-10-01T12:00:00")).request_dict()["ts"].isoformat() == "2026-10-01T12:00:00+00:00"
    assert normalize(flat(ts=1_790_000_000)).request_dict()["ts"].year == 2026


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (500, "Context size has been exceeded.", "context_exceeded"),
        (400, "request (900 tokens) exceeds the available context size (768 tokens)", "exceed_context_size"),
        (None, "read timed out", "timeout"),
        (None, "server disconnected", "disconnect"),
        (503, "Loading model", "http_error"),
        (None, None, "other"),
    ],
)
def test_failures_are_classified_by_type(status, message, expected):
    assert classify_error(status, message) == expected


@pytest.mark.parametrize("extra", [False, 0, "", []])
def test_a_canonical_extra_that_is_not_an_object_is_rejected(extra):
    with pytest.raises(RecordError, match="'extra' must be an object"):
        normalize({"schema": SCHEMA_VERSION, "run": {"id": "a", "model": "m"}, "request": {"ok": True}, "extra": extra})


@pytest.mark.parametrize("status", [99, 600])
def test_an_out_of_range_status_gets_one_message(status):
    with pytest.raises(RecordError, match=rf"^'status' must be an HTTP status code \(100-599\), got {status}$"):
        normalize(flat(status=status, ok=...))


@pytest.mark.parametrize(("first", "second"), [(True, 1), (1, 1.0), (4, 4.0), (4, "4")])
def test_the_run_cache_tells_apart_values_that_python_finds_equal(first, second):
    # A validated run context is remembered by its values; true, 1 and 1.0 are equal in
    # Python but not the same JSON, and only one of each pair is a valid value.
    cache: dict = {}
    for field in ("kv_unified", "parallel"):
        results = []
        for value in (first, second):
            try:
                results.append(normalize(flat(**{field: value}), cache).run)
            except RecordError as exc:
                results.append(str(exc))
        fresh = []
        for value in (first, second):
            try:
                fresh.append(normalize(flat(**{field: value})).run)
            except RecordError as exc:
                fresh.append(str(exc))
        assert results == fresh
