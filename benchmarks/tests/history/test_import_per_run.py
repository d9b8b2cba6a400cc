"""What an import does once per run, and once per line, for a kvlab.bench/2 export.

A kvlab.bench/2 line repeats its run's object; a laid-out line (every object holding only the
schema's keys) is read without walking each field's path, and its run is validated once per run
(remembered under the run object's JSON text). Whatever the line, the result is exactly the
strict reading's: the same Record, or the same RecordError message.
"""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.history import importer, importer_rows
from benchmarks.models import RequestResult, Run
from benchmarks.records import schema as records
from benchmarks.records.jsonl import RecordError
from benchmarks.records.schema import SCHEMA_V2, check_summary
from benchmarks.tests.builders import jsonl

from .v2_records import ANY_VALUE, REQUEST, STAT_KEYS, SUMMARY, SUMMARY_KEYS, outcome, v2_lines, v2_run


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v2_lines(), st.booleans())
def test_a_v2_line_reads_exactly_as_the_strict_reading_reads_it(line: dict[str, Any], require_model: bool) -> None:
    expected = outcome(lambda: records._normalize_v2_strictly(line, None, require_model))
    cache: dict[Any, Any] = {}

    first = outcome(lambda: records.normalize(line, cache, require_model))
    again = outcome(lambda: records.normalize(line, cache, require_model))  # its run remembered, if valid
    without_cache = outcome(lambda: records.normalize(line, None, require_model))

    assert first == again == without_cache == expected


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(SUMMARY_KEYS, ANY_VALUE, max_size=6), st.dictionaries(STAT_KEYS, ANY_VALUE, max_size=4))
def test_a_summary_is_checked_as_each_of_its_fields_is_checked_alone(summary: dict[str, Any], stats: Any) -> None:
    summary = {**summary, "ttft_ms": stats}
    got = outcome(lambda: check_summary(summary))
    expected = outcome(lambda: _check_summary_field_by_field(summary))
    assert got == expected


def _check_summary_field_by_field(value: dict[str, Any]) -> dict[str, Any]:
    """check_summary's rule, written out field by field with the field checks (the reference)."""
    unknown = set(value) - set(records.SUMMARY_FIELDS)
    if unknown:
        raise RecordError(f"unknown field 'summary.{sorted(unknown)[0]}'; put custom fields under 'extra'")
    out: dict[str, Any] = {}
    for name in records.SUMMARY_COUNTS:
        out[name] = records._int(value.get(name), f"summary.{name}", minimum=0)
    for name in records.SUMMARY_TOKENS:
        out[name] = records._big_int(value.get(name), f"summary.{name}")
    out["requests_sampled"] = records._bool(value.get("requests_sampled"), "summary.requests_sampled")
    for name in records.SUMMARY_NUMBERS:
        out[name] = records._number(value.get(name), f"summary.{name}")
    for name in records.SUMMARY_STATS:
        stats = value.get(name)
        if stats is None:
            continue
        if not isinstance(stats, dict):
            raise records._wrong_type(f"summary.{name}", "an object", stats)
        unknown = set(stats) - set(records.STAT_KEYS)
        if unknown:
            keys = ", ".join(records.STAT_KEYS)
            raise RecordError(f"unknown field 'summary.{name}.{sorted(unknown)[0]}' (one of {keys})")
        checked = {key: records._number(stats.get(key), f"summary.{name}.{key}") for key in records.STAT_KEYS}
        out[name] = {key: v for key, v in checked.items() if v is not None} or None
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


def test_the_same_run_values_stay_apart_in_the_run_cache_by_their_json_text() -> None:
    cache: dict[Any, Any] = {}
    as_int = records.normalize({"schema": SCHEMA_V2, "run": v2_run(wall_s=12), "request": REQUEST}, cache)
    as_float = records.normalize({"schema": SCHEMA_V2, "run": v2_run(wall_s=12.0), "request": REQUEST}, cache)
    as_bool = outcome(
        lambda: records.normalize({"schema": SCHEMA_V2, "run": v2_run(wall_s=True), "request": REQUEST}, cache)
    )

    assert as_int.run == as_float.run and type(as_int.run[7]) is type(as_float.run[7]) is float
    assert as_bool == "RecordError: wrong type: 'wall_s' must be a number, got a boolean true"


def test_a_runs_object_is_validated_once_however_many_lines_repeat_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-run cost of a v2 export: each run's values checked once, no line's fields found by walking
    their paths (the strict reading, _from_canonical, is for lines not laid out as the schema says)."""
    walked: list[Any] = []
    checked: list[Any] = []
    from_canonical, checked_run_values = records._from_canonical, records._checked_run_values
    monkeypatch.setattr(records, "_from_canonical", lambda obj: walked.append(obj) or from_canonical(obj))
    monkeypatch.setattr(records, "_checked_run_values", lambda *a: checked.append(a) or checked_run_values(*a))
    cache: dict[Any, Any] = {}
    for key in ("a", "b", "c"):
        run = v2_run(id=key)
        records.normalize({"schema": SCHEMA_V2, "run": run, "summary": SUMMARY}, cache)
        for i in range(4):
            records.normalize({"schema": SCHEMA_V2, "run": run, "request": {**REQUEST, "prompt_tokens": i}}, cache)

    assert walked == []
    assert [args[0][0] for args in checked] == ["a", "b", "c"]


@pytest.mark.django_db
def test_a_later_lines_value_that_conflicts_names_the_line_that_gave_it() -> None:
    first = {"schema": SCHEMA_V2, "run": v2_run(gpu=...), "request": REQUEST}
    data = jsonl(
        first,
        {**first, "run": v2_run(gpu="RTX 3090")},
        {**first, "run": v2_run(gpu="RTX 4090")},
    )
    result = importer.import_bench_file(io.BytesIO(data), filename="g.jsonl", origin="command")

    assert result.status == "rejected"
    reason = result.rejected_lines.get().reason
    assert reason.startswith("run 'r1': 'gpu' is 'RTX 4090' here but 'RTX 3090' on line 2;")


@pytest.mark.django_db
def test_the_json_columns_of_new_runs_hold_their_values_exactly() -> None:
    hard = {
        "ratio": 0.1 + 0.2,
        "tiny": 5e-324,
        "big": 1.7976931348623157e308,
        "text": 'ünï "q" \u2028\\',
        "n": 2**63 - 1,
    }
    data = jsonl(
        {"schema": SCHEMA_V2, "run": v2_run(), "summary": SUMMARY, "extra": hard},
        {"schema": SCHEMA_V2, "run": v2_run(), "request": REQUEST},
    )
    result = importer.import_bench_file(io.BytesIO(data), filename="j.jsonl", origin="command")

    assert result.status == "imported", list(result.rejected_lines.values_list("reason", flat=True))
    run = Run.objects.get()
    assert run.summary == check_summary(SUMMARY)
    # PostgreSQL's jsonb writes the largest double without an exponent, so it reads back as an int of equal value.
    assert {**run.summary_extra, "big": float(run.summary_extra["big"])} == hard
    assert type(run.summary_extra["n"]) is int
    assert run.provenance.items() >= {"model": "file", "n_ok": "file", "n_requests": "file"}.items()
    assert RequestResult.objects.get().extra == {}


@pytest.mark.skipif(connection.vendor != "sqlite", reason="elsewhere the backend's own adapter is used")
def test_what_orjson_refuses_is_adapted_by_djangos_own_encoder() -> None:
    adapt = importer_rows.json_adapter(Run._meta.get_field("summary_extra"))
    lone = {"text": "\ud800"}

    assert adapt(lone) == connection.ops.adapt_json_value(lone, None)
    assert orjson.loads(adapt({"a": [1, 2.5], "b": "ü"})) == {"a": [1, 2.5], "b": "ü"}


@pytest.mark.django_db
def test_each_spans_buckets_are_merged_from_the_next_finer_spans() -> None:
    """A week's buckets from its seven days, not its 168 hours (the same minima, maxima and counts)."""
    from django.db import connection as db
    from django.test.utils import CaptureQueriesContext

    from benchmarks.history import rollups
    from benchmarks.models.rollups import DAY, HOUR, WEEK, TimelineBucket

    data = jsonl(
        *(
            {
                "schema": SCHEMA_V2,
                "run": v2_run(id=f"r{i}"),
                "request": {**REQUEST, "ts": f"2026-10-{1 + i:02d}T12:00:00Z"},
            }
            for i in range(9)
        )
    )
    assert importer.import_bench_file(io.BytesIO(data), filename="w.jsonl", origin="command").status == "imported"
    with CaptureQueriesContext(db) as queries:
        rollups.rebuild_all()

    merges = [q["sql"] for q in queries if "INSERT INTO" in q["sql"] and 'FROM "benchmarks_timelinebucket"' in q["sql"]]
    reads = [sql.rsplit('"span_s" = ', 1)[1].split()[0] for sql in merges]
    assert reads == [str(HOUR), str(6 * HOUR), str(DAY)]
    weeks = TimelineBucket.objects.filter(span_s=WEEK)
    assert sum(weeks.values_list("runs", flat=True)) == 9 and weeks.count() == 2
