"""Reading a line costs less without checking less.

Each cheaper way to read a line, check a run's values or summarize a run gives exactly what the
plain reading gives: the same values (compared by repr: 1, 1.0 and True, 0.0 and -0.0 told apart),
or the same error message. The plain readings are kvlab's own where they still serve (the strict
JSON parser, the field checks), and otherwise the code as it was before, kept here as the reference.
"""

from __future__ import annotations

import json
import math
from array import array
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from benchmarks.records import jsonl, metrics, summaries
from benchmarks.records import schema as records
from benchmarks.records.jsonl import RecordError, decode_line
from benchmarks.records.metrics import RunSummary
from benchmarks.records.schema import SCHEMA_V2, LineReader

from .v2_records import REQUEST, SUMMARY, outcome, v2_lines, v2_run

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- a line: decode_line ------------------------------------------------------------------------------

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.sampled_from([0, -1, 2**63 - 1, 2**63, 2**64 - 1, 10**18, 10**19]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e16, 1e-7, 5e-324, 1.7976931348623157e308]),
    st.text(max_size=8),
    st.sampled_from(["", ":", '"', "\\", "\x00", "\x1f", "\x7f", "é", "\u2028", "💡", "a:b", '":1,"']),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def raw_lines(draw: st.DrawFn) -> bytes:
    """A line as orjson writes an object, or that text changed: a duplicate key, a long integer, an
    escape orjson would not write, spaces, a trailing comma."""
    value = draw(st.dictionaries(st.sampled_from(["a", "b", "ts", "a:b", "é", ""]), JSON_VALUES, max_size=4))
    raw = compact(value)
    change = draw(st.sampled_from(["none", "none", "duplicate", "long", "escape", "space", "comma", "python"]))
    if change == "duplicate" and value:
        key = orjson.dumps(next(iter(value)))
        raw = raw[:-1] + b"," + key + b":" + compact(draw(JSON_LEAVES)) + b"}"
    elif change == "long":
        raw = raw[:-1] + (b"," if value else b"") + b'"n":' + str(draw(st.integers(10**18, 10**30))).encode() + b"}"
    elif change == "escape":
        raw = raw.replace(b"a", b"\\u0061", 1)
    elif change == "space":
        raw = raw.replace(b":", b": ", 1)
    elif change == "comma":
        raw = raw[:-1] + b",}"
    elif change == "python":
        raw = json.dumps(value).encode()
    return raw


def compact(value: Any) -> bytes:
    """value as orjson writes it, or (an integer beyond 64 bits) as a compact writer of its own does."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def strict_outcome(raw: bytes) -> str:
    try:
        return repr(jsonl._decode_strictly(raw))
    except RecordError as exc:
        return f"RecordError: {exc}"


@SETTINGS
@given(raw_lines())
def test_a_line_decodes_as_the_strict_parser_reads_it(raw: bytes) -> None:
    assert outcome(lambda: decode_line(raw)) == strict_outcome(raw)


def test_a_line_exactly_as_orjson_writes_it_is_read_as_written() -> None:
    """The escapes orjson writes itself (a NUL, a control character) and 64-bit unsigned integers."""
    for raw in (b'{"a":"\\u0000"}', b'{"a":"x\\u001fy","b":18446744073709551615}', b'{"s":"\\"\\\\\\n"}'):
        assert orjson.dumps(orjson.loads(raw)) == raw
        assert repr(decode_line(raw)) == strict_outcome(raw)


# --- the lines of a file: LineReader -------------------------------------------------------------------


@st.composite
def files(draw: st.DrawFn) -> list[bytes]:
    """Lines of a few runs as kvlab's export writes them (the schema, the run object, then the rest),
    some changed as text after their run object: a second "run" or "schema", no member at all,
    a trailing comma, spaces, another writer; and flat lines between them."""
    lines: list[bytes] = []
    for _ in range(draw(st.integers(1, 3))):
        try:  # a copy (v2_lines may share one object between two places, even inside itself)
            record = orjson.loads(orjson.dumps(draw(v2_lines())))
        except TypeError:
            assume(False)
        for _ in range(draw(st.integers(1, 4))):
            line = {"schema": record["schema"], "run": record.get("run")}
            if draw(st.booleans()):
                line["request"] = {**REQUEST, "prompt_tokens": draw(st.integers(-1, 3)), "ok": draw(st.booleans())}
            else:
                line.update({k: v for k, v in record.items() if k not in ("schema", "run")})
            raw = orjson.dumps(line)
            head = b'{"schema":"kvlab.bench/2","run":' + orjson.dumps(line["run"]) + b","
            change = draw(
                st.sampled_from(["none"] * 6 + ["run", "schema", "empty", "comma", "space", "python", "unknown"])
            )
            if change in ("run", "schema"):
                raw = raw[:-1] + b',"' + change.encode() + b'":' + compact(draw(JSON_LEAVES)) + b"}"
            elif change == "empty":
                raw = head + b"}"
            elif change == "comma":
                raw = raw[:-1] + b",}"
            elif change == "space":
                raw = raw[: len(head)] + b" " + raw[len(head) :]
            elif change == "python":
                raw = json.dumps(line).encode()
            elif change == "unknown":
                raw = raw[:-1] + b',"stray":1}'
            lines.append(raw)
        if draw(st.booleans()):
            lines.append(orjson.dumps({"run": "flat", "model": "m.gguf", "ok": True, "ts": "2026-10-01T12:00:00Z"}))
    return lines


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files(), st.booleans())
def test_the_lines_of_a_file_read_in_order_as_each_reads_alone(lines: list[bytes], require_model: bool) -> None:
    reader = LineReader(require_model)
    got = [outcome(lambda raw=raw: reader.read(raw)) for raw in lines]
    expected = [outcome(lambda raw=raw: records.normalize(decode_line(raw), None, require_model)) for raw in lines]
    assert got == expected


def test_a_runs_later_lines_are_read_from_what_follows_their_run_object(monkeypatch: Any) -> None:
    """kvlab's own export: each run's first line is decoded whole, the others after the run's text only,
    and the run's values are checked once."""
    decoded: list[bytes] = []
    checked: list[Any] = []
    decode, check = records.decode_line, records._checked_run_values
    monkeypatch.setattr(records, "decode_line", lambda raw: decoded.append(raw) or decode(raw))
    monkeypatch.setattr(records, "_checked_run_values", lambda *a: checked.append(a) or check(*a))
    reader = LineReader()
    lines = []
    for key in ("a", "b"):
        lines.append(orjson.dumps({"schema": SCHEMA_V2, "run": v2_run(id=key), "summary": SUMMARY}))
        for i in range(3):
            request = {**REQUEST, "prompt_tokens": i}
            lines.append(orjson.dumps({"schema": SCHEMA_V2, "run": v2_run(id=key), "request": request}))

    read = [reader.read(raw) for raw in lines]

    assert decoded == [lines[0], lines[4]]
    assert [args[0][0] for args in checked] == ["a", "b"]
    assert [r.request[5] for r in read if r.request] == [0, 1, 2, 0, 1, 2]
    assert read[1].run is read[0].run and read[5].run is read[4].run
    assert [repr(r) for r in read] == [repr(records.normalize(orjson.loads(raw))) for raw in lines]


def test_a_line_that_repeats_the_run_key_after_the_run_object_is_still_refused() -> None:
    reader = LineReader()
    first = orjson.dumps({"schema": SCHEMA_V2, "run": v2_run(), "request": REQUEST})
    again = first[:-1] + b',"run":{"id":"other"}}'

    reader.read(first)
    try:
        reader.read(again)
    except RecordError as exc:
        assert str(exc) == "duplicate key 'run' in one object"
    else:
        raise AssertionError("a duplicate key was read")


# --- a run's values: _check_run_values against the field checks one by one -----------------------------


def run_values_field_by_field(raw: tuple[Any, ...], require_model: bool) -> tuple[Any, ...]:
    """records._check_run_values before its inline tests (the reference)."""
    (run_id, source, label, model, gpu, vram_total_mib, vram_used_mib, wall_s, ctx_size, parallel, kv_unified,
     cache_type_k, cache_type_v, kv_offload, flash_attn, concurrency, server_flags, request_rate, started_at,
     tool, tool_version, tool_format, engine, provenance) = raw  # fmt: skip
    r = records
    if isinstance(run_id, int) and not isinstance(run_id, bool):
        run_id = str(run_id)
    return (
        r._text(run_id, "run", required=True),
        r._choice(source, "source", r.SOURCES),
        r._text(label, "label"),
        r._text(model, "model", required=require_model),
        r._text(gpu, "gpu"),
        r._int(vram_total_mib, "vram_total_mib", minimum=1),
        r._int(vram_used_mib, "vram_used_mib", minimum=0),
        r._number(wall_s, "wall_s"),
        r._int(ctx_size, "ctx_size", minimum=0),
        r._int(parallel, "parallel", minimum=1),
        r._bool(kv_unified, "kv_unified"),
        r._choice(cache_type_k, "cache_type_k", r.CACHE_TYPES),
        r._choice(cache_type_v, "cache_type_v", r.CACHE_TYPES),
        r._bool(kv_offload, "kv_offload"),
        r._flash_attn(flash_attn),
        r._int(concurrency, "concurrency", minimum=1),
        r._text(server_flags, "run.server.flags", limit=r.MAX_FLAGS_CHARS),
        r._number(request_rate, "run.workload.request_rate"),
        None if started_at is None else r._timestamp(started_at, "run.started_at"),
        r._text(tool, "run.tool.name", limit=r.MAX_TOOL_CHARS),
        r._text(tool_version, "run.tool.version", limit=r.MAX_TOOL_CHARS),
        r._text(tool_format, "run.tool.format", limit=r.MAX_TOOL_FORMAT_CHARS),
        r._text(engine, "run.engine", limit=r.MAX_TOOL_CHARS),
        r._check_provenance(provenance),
    )


def texts(limit: int) -> st.SearchStrategy[Any]:
    return st.sampled_from(["x", "", "f16", "on", "imported", "é", "\x00", "a\ud800", "a" * limit, "a" * (limit + 1)])


FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, -1, 7, 2**31 - 1, 2**31, 2**63]),
    st.sampled_from([0.0, -0.0, 2.5, -1.5, 1e308, math.inf, math.nan]),
    texts(40),
    texts(60),
    texts(200),
    st.sampled_from(["auto", "q8_0", "executed", "2026-10-01T12:00:00Z", "yesterday", [], {}]),
)
PROVENANCES = st.one_of(
    st.none(),
    st.just(()),
    st.lists(
        st.tuples(st.sampled_from(["model", "gpu", "", "x" * 65, "é"]), st.sampled_from(["file", "declared", "x", 1])),
        max_size=3,
    ).map(tuple),
    st.just((("model", ["file"]),)),  # unhashable
    st.just(tuple((f"f{i}", "file") for i in range(65))),
)


VALID_RUN = (
    "r1", "imported", "base", "tiny.gguf", "RTX 4090", 24564, 1000, 12.5, 8192, 2, True, "f16", "q8_0", False,
    "on", 2, "-c 8192", 2.0, "2026-10-01T12:00:00Z", "vllm", "0.10.1", "vllm-bench-serve", "llama.cpp",
    (("model", "file"),),
)  # fmt: skip


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, 22), FIELD_VALUES), max_size=3),
    st.one_of(st.just(VALID_RUN[-1]), PROVENANCES),
    st.booleans(),
)
def test_a_runs_values_are_checked_as_each_field_check_checks_them(
    changes: list[tuple[int, Any]], provenance: Any, require_model: bool
) -> None:
    """A valid run with a few of its values changed, so that each field's check is reached."""
    values = list(VALID_RUN[:-1])
    for i, value in changes:
        values[i] = value
    raw = (*values, provenance)
    for _ in range(2):  # the second time with what the first found valid remembered
        got = outcome(lambda: records._check_run_values(*raw, require_model=require_model))
        assert got == outcome(lambda: run_values_field_by_field(raw, require_model))


HOSTILE_FIELD_VALUES = (
    None, True, False, 0, 1, -1, 2**31 - 1, 2**31, 0.0, -0.0, 2.5, -1.5, math.inf, math.nan, "", "x", "é",
    "\x00", "a\ud800", "a" * 40, "a" * 41, "a" * 60, "a" * 61, "a" * 200, "a" * 201, "a" * 10_001, "f16",
    "on", "auto", "imported", "2026-10-01T12:00:00Z", "yesterday", [], {},
)  # fmt: skip


def test_each_field_takes_each_hostile_value_as_its_field_check_does() -> None:
    for i in range(len(VALID_RUN) - 1):
        for value in HOSTILE_FIELD_VALUES:
            raw = (*VALID_RUN[:i], value, *VALID_RUN[i + 1 :])
            for require_model in (True, False):
                got = outcome(lambda raw=raw, rm=require_model: records._check_run_values(*raw, require_model=rm))
                assert got == outcome(lambda raw=raw, rm=require_model: run_values_field_by_field(raw, rm)), (i, value)


def test_the_common_run_takes_the_inline_tests_and_reads_as_its_field_checks_read_it() -> None:
    line = {"schema": SCHEMA_V2, "run": v2_run(started_at="2026-10-01T12:00:00Z"), "request": REQUEST}
    raw = records._v2_run_fields(line["run"])
    assert raw is not None
    raw = (*raw[:-1], records._provenance_pairs(raw[-1]))
    assert repr(records._check_run_values(*raw)) == repr(run_values_field_by_field(raw, True))


# --- a run's summary: the common one against the field-by-field check ----------------------------------

GOOD_SUMMARY_VALUES = {
    "n_requests": st.sampled_from([None, 0, 2, 5, 2**31 - 1]),
    "n_ok": st.sampled_from([None, 0, 2, 3]),
    "n_failed": st.sampled_from([None, 0, 1, 4]),
    "n_incomplete": st.sampled_from([None, 0, 1]),
    "requests_sampled": st.sampled_from([None, False, True]),
    "input_tokens": st.sampled_from([None, 0, 2000, 2**63 - 1, 2**63]),
    "output_tokens": st.sampled_from([None, 400, -1]),
    "duration_s": st.sampled_from([None, 12.5, 0.0, -0.0, 12, math.inf, -1.0]),
    "output_tok_s": st.sampled_from([None, 32.0, 1e308]),
    "ttft_ms": st.one_of(
        st.none(),
        st.dictionaries(st.sampled_from(["p99", "mean", "median", "p42"]), st.sampled_from([1.5, 0.0, 2, None, -1.0])),
    ),
    "e2e_ms": st.sampled_from([None, {}, {"p50": 6000.0, "max": 6400.0}, {"max": 1.0, "p50": 2.0}, [], {"p50": "x"}]),
}


@SETTINGS
@given(st.fixed_dictionaries({}, optional=GOOD_SUMMARY_VALUES))
def test_a_common_summary_reads_as_it_is_checked_field_by_field(summary: dict[str, Any]) -> None:
    common = records._common_summary(summary)
    expected = outcome(lambda: records._check_summary_fields(summary))
    assert common is None or repr(common) == expected
    assert outcome(lambda: records.check_summary(summary)) == expected


# --- a run's aggregates: summarize and with_tool_summary against the code before ---------------------


def summarize_before(requests: Any, reported_wall_s: float | None, itl: Any = None) -> RunSummary:
    """metrics.summarize before its one-pass loop and its one-request path (the reference)."""
    OK, TS, PROMPT, PREDICT, OUTPUT, TOK_S, ELAPSED, TTFT = 1, 0, 5, 6, 7, 8, 9, 10
    rows = list(requests)
    gaps = array("d")
    if itl is not None:
        for row, latencies in zip(rows, itl, strict=True):
            if latencies and row[OK]:
                gaps.extend(latencies)
    if not rows:
        empty: dict[str, Any] = dict.fromkeys(RunSummary._fields)
        empty.update(n_requests=0, n_ok=0, effective_wall_s=reported_wall_s)
        empty["effective_wall_source"] = metrics._wall_source(reported_wall_s, None)
        return RunSummary(**empty)
    columns = list(zip(*rows, strict=True))
    ok_rows = [r for r in rows if r[OK]]
    started = [t for t in columns[TS] if t is not None]
    prompts = [n for n in columns[PROMPT] if n is not None]
    predicts = [n for n in columns[PREDICT] if n is not None]
    elapsed = [e for e in columns[ELAPSED] if e is not None]
    rates = [r[TOK_S] for r in ok_rows if r[TOK_S] is not None]
    outputs = [r[OUTPUT] for r in ok_rows]
    ttfts = sorted(r[TTFT] for r in ok_rows if r[TTFT] is not None)
    wall = reported_wall_s if reported_wall_s is not None else (max(elapsed) if elapsed else None)
    output_tokens_total = sum(outputs) if ok_rows and None not in outputs else None
    throughput = output_tokens_total / wall if output_tokens_total is not None and wall else None
    e2es = sorted(r[ELAPSED] for r in ok_rows if r[ELAPSED] is not None)
    tpots = (
        sorted(t for r in ok_rows if (t := metrics.tpot(r[ELAPSED], r[TTFT], r[OUTPUT])) is not None) if ttfts else []
    )
    ordered_gaps = sorted(gaps)
    rank = metrics.nearest_rank
    return RunSummary(
        started_at=min(started) if started else None,
        n_requests=len(rows),
        n_ok=len(ok_rows),
        prompt_tokens_max=max(prompts) if prompts else None,
        n_predict_max=max(predicts) if predicts else None,
        output_tokens_total=output_tokens_total,
        tok_s_mean=metrics.mean(rates) if rates else None,
        tok_s_min=min(rates) if rates else None,
        tok_s_max=max(rates) if rates else None,
        effective_wall_s=wall,
        effective_wall_source=metrics._wall_source(reported_wall_s, wall),
        throughput_tok_s=throughput,
        ttft_p50=rank(ttfts, 50),
        ttft_p95=rank(ttfts, 95),
        e2e_p95=rank(e2es, 95),
        e2e_p50=rank(e2es, 50),
        itl_p50=rank(ordered_gaps, 50),
        itl_p95=rank(ordered_gaps, 95),
        tpot_p50=rank(tpots, 50),
        tpot_p95=rank(tpots, 95),
    )


T0 = datetime(2026, 10, 1, 12, tzinfo=UTC)
SECONDS = st.one_of(st.none(), st.sampled_from([0.0, -0.0, 0.5, 2.0, 7.25, 1.7e308]), st.floats(0, 100))
ROWS = st.tuples(
    st.one_of(st.none(), st.integers(0, 3).map(lambda s: T0 + timedelta(seconds=s))),  # ts
    st.booleans(),  # ok
    st.sampled_from([None, 200, 500]),
    st.sampled_from([None, "boom"]),
    st.sampled_from([None, "server_error"]),
    st.one_of(st.none(), st.integers(0, 5)),  # prompt_tokens
    st.one_of(st.none(), st.integers(-1, 5)),  # n_predict
    st.one_of(st.none(), st.integers(0, 5)),  # output_tokens
    SECONDS,  # tok_s
    SECONDS,  # elapsed_s
    SECONDS,  # ttft_s
)
LATENCIES = st.one_of(st.none(), st.just(()), st.lists(st.sampled_from([0.0, -0.0, 0.01, 0.5, 1]), max_size=4))


@SETTINGS
@given(st.lists(st.tuples(ROWS, LATENCIES), max_size=12), st.one_of(st.none(), SECONDS), st.booleans())
def test_a_run_is_summarized_as_before(rows: list[Any], wall_s: float | None, with_itl: bool) -> None:
    requests = [row for row, _ in rows]
    itl = [latencies for _, latencies in rows] if with_itl else None
    got = outcome(lambda: metrics.summarize(iter(requests), wall_s, None if itl is None else iter(itl)))
    assert got == outcome(lambda: summarize_before(requests, wall_s, itl))


@SETTINGS
@given(ROWS, LATENCIES, st.one_of(st.none(), SECONDS))
def test_a_run_of_one_request_is_summarized_as_before(row: Any, latencies: Any, wall_s: float | None) -> None:
    got = outcome(lambda: metrics.summarize([row], wall_s, [latencies]))
    assert got == outcome(lambda: summarize_before([row], wall_s, [latencies]))


def test_latencies_not_one_per_request_are_refused_as_before() -> None:
    row = (T0, True, 200, None, None, 1, 1, 1, 1.0, 1.0, 0.5)
    for requests, itl in (([row], []), ([row], [None, None]), ([row, row], [None])):
        try:
            metrics.summarize(requests, None, itl)
        except ValueError as exc:
            assert "zip()" in str(exc)
        else:
            raise AssertionError("latencies not aligned with their requests were accepted")


def with_tool_summary_before(
    aggregates: RunSummary, summary: dict[str, Any] | None, *, started_at: datetime | None = None
) -> tuple[RunSummary, dict[str, str]]:
    """summaries.with_tool_summary before it kept equal counts without a replace (the reference)."""
    if started_at is not None:
        aggregates = aggregates._replace(started_at=started_at)
    if summary is None:
        return aggregates, {}
    values: dict[str, Any] = {}
    provenance: dict[str, str] = {}
    if summaries.counts_reported(summary):
        values.update(n_requests=summary["n_requests"], n_ok=summary["n_ok"])
        provenance.update(n_requests="file", n_ok="file")
    if not summaries.has_every_request(aggregates, summary):
        values.update(dict.fromkeys(summaries._FROM_ROWS))
        if summary.get("n_ok") != 0:
            figures = summaries._figures(summary)
            values.update(figures)
            provenance.update(dict.fromkeys(figures, "file"))
            if "tok_s_mean" in figures:
                provenance["tok_s_mean"] = "derived"
        duration = summary.get("duration_s")
        if duration is not None and aggregates.effective_wall_source != summaries.WALL_REPORTED:
            values.update(effective_wall_s=duration, effective_wall_source=summaries.WALL_REPORTED)
            provenance["effective_wall_s"] = "file"
    return aggregates._replace(**values), provenance


@SETTINGS
@given(
    st.lists(ROWS, max_size=4),
    st.one_of(st.none(), SECONDS),
    st.one_of(st.none(), st.fixed_dictionaries({}, optional=GOOD_SUMMARY_VALUES)),
    st.sampled_from([0, 1, 2, 3, True, 2.0]),
    st.one_of(st.none(), st.just(T0)),
)
def test_a_tools_summary_applies_as_before(
    rows: list[Any], wall_s: float | None, summary: dict[str, Any] | None, n: Any, started_at: Any
) -> None:
    aggregates = summarize_before(rows, wall_s)
    if summary is not None:  # a checked summary with counts, often the rows' own (or 1.0 and true for 1)
        try:
            summary = records.check_summary(summary)
        except RecordError:
            assume(False)
        summary.update(n_requests=n, n_ok=min(n, aggregates.n_ok))
    got = outcome(lambda: summaries.with_tool_summary(aggregates, summary, started_at=started_at))
    assert got == outcome(lambda: with_tool_summary_before(aggregates, summary, started_at=started_at))


def test_counts_equal_to_the_rows_but_not_integers_are_still_the_summarys() -> None:
    aggregates = summarize_before([(T0, True, 200, None, None, 1, 1, 1, 1.0, 1.0, 0.5)], None)
    for n_requests, n_ok in ((True, True), (1.0, 1), (1, 1)):
        summary = {"n_requests": n_requests, "n_ok": n_ok}
        got = summaries.with_tool_summary(aggregates, summary)
        assert repr(got) == repr(with_tool_summary_before(aggregates, summary))
        assert type(got[0].n_requests) is type(n_requests)
