"""kvlab's CPU buffer types and --fit against llama-fit-params on a host whose CPU has AMX.

sizing/tests/data/amx-host/ holds 50 `llama-fit-params -v` logs of llama.cpp b11434 on a Xeon with
AMX (copied from the team's shared data; README.md there says how they were made): the oracle
tests' own sparse models, each as llama.cpp chooses (`_native`: the quantized and f16 matmul
weights in an AMX buffer) and with `-nr`. These tests need no AMX: they check, on any machine,
that kvlab predicts every breakdown row's weights, the KV, and the context the fit chose (or its
failure) for that host — its CPU read from its /proc/cpuinfo flags, its memory from the log.
"""

from __future__ import annotations

import gzip
import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from sizing.cmdline import parse_command
from sizing.fit_params import parse_fit_log, whole_mib
from sizing.gguf import read_gguf_head
from sizing.hparams import model_params
from sizing.kv import kv_layout
from sizing.placement import breakdown, fit
from sizing.placement.cpu import from_cpuinfo, parse_cpu
from sizing.placement.server import params_of
from sizing.placement.tensors import from_gguf
from sizing.placement.types import Host, MiB
from sizing.sparse_gguf import write_sparse
from sizing.tests.fit_cases import MODELS
from sizing.tests.placement.sparse_llamas import SHAPES, write_sparse_llama

DATA = Path(__file__).parents[1] / "data" / "amx-host"
LOGS = sorted(DATA.glob("fit_*.log.gz"))
TOTAL_RE = re.compile(r"vs\. (\d+) MiB of total host memory")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sparse GGUFs the logs were made with, written the same way."""
    directory = tmp_path_factory.mktemp("amx-models")
    paths = {name: write_sparse_llama(directory / f"{name}.gguf", **shape) for name, shape in SHAPES.items()}
    for name, (metadata, weight_type) in MODELS.items():
        paths[f"cpu_{name}"] = write_sparse(directory / f"cpu_{name}.gguf", metadata, weight_type=weight_type)
    return paths


def case_of(log: Path, names: list[str]) -> tuple[str, str, bool]:
    """(model, flags, native) from a file name like fit_llama-2-7b_-c_4096_-np_1_-fa_on_no-repack.log.gz."""
    stem = log.name.removeprefix("fit_").removesuffix(".log.gz")
    rest, mode = stem.rsplit("_", 1)
    model = next(m for m in sorted(names, key=len, reverse=True) if rest.startswith(m + "_"))
    flags = rest[len(model) + 1 :].replace("_", " ")
    native = mode == "native"
    return model, flags + ("" if native else " -nr"), native


def host_cpu() -> object:
    return from_cpuinfo((DATA / "cpuinfo-flags.txt").read_text(), "the AMX host's /proc/cpuinfo")


def test_the_amx_hosts_cpuinfo_reads_as_llama_cpp_sees_it() -> None:
    cpu = host_cpu()
    assert cpu.amx and cpu.has("AVX2", "AVX512", "AVX512_VNNI", "AMX_INT8")  # type: ignore[attr-defined]
    assert cpu.features == parse_cpu("avx512+amx").features | {  # type: ignore[attr-defined]
        "AVX_VNNI",
        "AVX512_VBMI",
        "AVX512_BF16",
    }


def test_every_log_is_read() -> None:
    assert len(LOGS) == 50  # 25 cases, each native and with -nr


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name.removesuffix(".log.gz"))
def test_kvlab_predicts_the_amx_hosts_breakdown_and_fit(models: dict[str, Path], log: Path) -> None:
    name, flags_text, native = case_of(log, list(models))
    text = gzip.decompress(log.read_bytes()).decode()
    report = parse_fit_log(text)
    total_match = TOTAL_RE.search(text)
    assert total_match, log.name
    total = int(total_match[1]) * MiB
    with models[name].open("rb") as fh:
        head = read_gguf_head(fh)
    model, tensors = model_params(head.metadata), from_gguf(head.tensors)
    parsed = parse_command("llama-server " + flags_text)
    assert parsed.errors == [] and parsed.flags.repack == native
    params = params_of(parsed.flags, kv_layout(model, parsed.flags), 0)
    host = Host(total, total, cpu=host_cpu())  # type: ignore[arg-type]

    measured = breakdown.measure(model, tensors, [], host, params)
    ours = {"Host": whole_mib(measured[-1].model), **{k: whole_mib(v) for k, v in measured.extra.items()}}
    assert ours == {row: r.model for row, r in report.devices.items()}
    assert whole_mib(measured[-1].context) == report.host.context
    assert ("AMX" in ours) == native

    result = fit.fit_params(
        breakdown.make_measure(model, tensors, [], host),
        [],
        host,
        params,
        n_layer=model.n_layer,
        n_ctx_train=model.n_ctx_train,
        n_expert=model.n_expert,
        margins=fit.expand_fit_target(parsed.flags.fit_target_mib or (1024,)),
        n_ctx_min=parsed.flags.fit_ctx,
        via_common_init=False,
    )
    printed = [line.strip() for line in text.splitlines() if line.startswith("-c ")]
    theirs = printed[-1] if printed else "failure"
    assert (fit.cli_args(result.params) if result.status == "success" else result.status) == theirs
    # the fit's own log, replayed: its first breakdown table's rows of the extra types (the Host row's
    # compute column is an estimate, checked within its bound elsewhere), character for character
    logged = [line.split(" I ", 1)[1] for line in text.splitlines() if "common_memory_breakdown_print: |" in line]
    replayed = [line for _, line in result.log if line.startswith("common_memory_breakdown_print: |")]
    extra_rows = slice(2, len(ours) + 1)
    assert replayed[extra_rows] == logged[extra_rows] and len(logged[extra_rows]) == len(ours) - 1


# The README's table of what the fit chose (../shared/data/amx-host/README.md), reproduced by kvsize.
TABLE = [
    ("cpu_dense", "-fa off", "-c 131072", "-c 91392"),
    ("cpu_dense", "-fa off -fitt 18151", "-c 35840", "fail"),
    ("cpu_dense-q8", "-fa off", "-c 131072", "-c 116736"),
    ("cpu_dense-q8", "-fa off -fitt 18151", "-c 36608", "-c 8448"),
    ("cpu_moe", "-fa off -fitt 18151", "-c 53504", "-c 49920"),
]


def kvsize(path: Path, flags: str, *extra: str) -> dict[str, object]:
    out = StringIO()
    args = ["--gguf", str(path), "--command", f"llama-server -np 1 {flags}", "--ram-mib", "24151", "--json", *extra]
    call_command("kvsize", *args, stdout=out)
    result: dict[str, object] = json.loads(out.getvalue())
    return result


def chose(result: dict[str, object]) -> str:
    fitted, effective = result["fit"], result["effective"]
    assert isinstance(fitted, dict) and isinstance(effective, dict)
    if fitted["status"] != "success":
        return "fail"
    return f"-c {effective['n_ctx']}"


@pytest.mark.parametrize(("name", "flags", "native", "no_repack"), TABLE)
def test_kvsize_reproduces_the_amx_table(
    models: dict[str, Path], name: str, flags: str, native: str, no_repack: str
) -> None:
    amx = kvsize(models[name], flags, "--cpu", "avx512+amx")
    assert chose(amx) == native
    assert chose(kvsize(models[name], flags, "--cpu", "avx512+amx", "-nr")) == no_repack
    memory = amx["host_memory"]
    assert isinstance(memory, dict)
    assert memory["cpu_buffers"]["AMX"] > 0
    assert memory["needs_bytes"] == memory["counted_bytes"] + memory["cpu_buffers"]["AMX"]
    assert any("--fit does not count" in note for note in memory["notes"])


# --- explain a llama-server log from that host -----------------------------------------------------


@pytest.fixture(scope="module")
def moe_q4_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    metadata = MODELS["moe"][0]
    return write_sparse(tmp_path_factory.mktemp("moe-q4_0") / "moe-q4_0.gguf", metadata, weight_type="q4_0")


def explained(log_name: str, model_path: Path, *, with_tensors: bool) -> dict[str, tuple[str, str, str]]:
    from sizing.explain_log import explain, model_metadata
    from sizing.server_log import parse_startup_log

    log = parse_startup_log((DATA / log_name).read_text())
    with model_path.open("rb") as fh:
        head = read_gguf_head(fh)
    model = model_params(model_metadata(log) or head.metadata)
    explanation = explain(
        log, model, weights_bytes=head.weights_bytes, tensors=from_gguf(head.tensors) if with_tensors else None
    )
    return {f.name: (f.logged, f.predicted, f.verdict) for f in explanation.figures if f.group == "buffers"}


@pytest.mark.parametrize(
    ("log_name", "plain"),
    [("server_moe-q4_0_mmap.log", "CPU_Mapped"), ("server_moe-q4_0_load-none.log", "CPU")],
)
def test_a_log_whose_weights_are_split_over_the_cpus_buffer_types_is_explained_buffer_by_buffer(
    moe_q4_0: Path, log_name: str, plain: str
) -> None:
    figures = explained(log_name, moe_q4_0, with_tensors=True)
    for name in ("AMX model buffer", "CPU_REPACK model buffer", f"{plain} model buffer"):
        assert figures[name][2] == "equal", figures
    assert figures["AMX model buffer"][:2] == ("125.16 MiB", "125.16 MiB")
    # mapped: the file's span from the first to the last plain weight, far more than their own 39 MiB
    expected = "1379.59 MiB" if plain == "CPU_Mapped" else "39.43 MiB"
    assert figures[f"{plain} model buffer"][1] == expected
    assert not any(name.startswith("CUDA") or "GPU" in name for name in figures)  # AMX is no GPU


def test_without_the_tensor_table_the_split_weights_are_not_predicted_and_it_says_why(moe_q4_0: Path) -> None:
    figures = explained("server_moe-q4_0_mmap.log", moe_q4_0, with_tensors=False)
    assert {v[2] for k, v in figures.items() if "model buffer" in k} == {"not predicted"}
    assert "AMX model buffer" in figures and "model buffer" not in figures  # never one wrong total


def test_the_plan_names_the_mapped_span_the_servers_log_prints(moe_q4_0: Path) -> None:
    out = kvsize(moe_q4_0, "-c 4096", "--cpu", "avx512+amx")
    memory = out["host_memory"]
    assert isinstance(memory, dict)
    assert memory["cpu_buffers"] == {"CPU_REPACK": 1296 * MiB, "AMX": 131_235_840}  # the log: 1296.00 and 125.16 MiB
    assert any("CPU_Mapped buffer spans 1,379 MiB" in note for note in memory["notes"])  # the log: 1379.59 MiB
