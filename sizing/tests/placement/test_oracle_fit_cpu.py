"""The fit replica (sizing/placement/fit.py) against llama.cpp's own `--fit` on this CPU-only machine.

Without a GPU `common_fit_params` has no device (nd == 0): it compares the host memory a
configuration needs with the host's TOTAL memory (`sysconf(_SC_PHYS_PAGES) * _SC_PAGE_SIZE`,
ggml-cpu.cpp:365-380; fit.cpp:313-322), reduces the context by linear interpolation if it must,
and fails when even the minimum context does not fit ("was unable to fit model into system memory
by reducing context, abort", fit.cpp:459-461). llama-fit-params prints the result as `-c N -ngl M`
(tools/fit-params/fit-params.cpp:38-68) or exits 1.

The replica is fed llama.cpp's OWN measurements, read from the breakdown table it prints after
each no-alloc load (`common_memory_breakdown_print`, whole MiB), so that the algorithm is tested
alone. A whole MiB hides up to 1 MiB - 1 byte, so each test picks a `-fitt` for which the
replica reaches the same context at both ends of that uncertainty, and llama.cpp must print it.
The model: 4 llama layers whose KV cache is large (4 KV heads of 256) and a 262,144-token training
context, written as a sparse file (llama-fit-params never reads the weights).
Run: pytest sizing/tests/placement/test_oracle_fit_cpu.py -m llama_server
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import pytest

from sizing.placement.fit import context_after_fit, expand_fit_target, fit_ctx_min, fit_params
from sizing.placement.types import UINT32_MAX, FitResult, Host, MiB, Params, Usage
from sizing.tests.support import FORCED_FLAGS
from sizing.tiny_gguf import _vocab, close_sparse

pytestmark = pytest.mark.llama_server

N_LAYER, N_CTX_TRAIN, N_EMBD, N_HEAD_KV, HEAD_DIM, N_FF = 4, 262144, 64, 4, 256, 128
HOST_TOTAL = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")  # what ggml-cpu reports as total and free

ATTEMPTS = 10
FAILED_LAST_LINE = "llama_fit_params: failed to fit CLI arguments to free memory, exiting..."
_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ ([DIWE]) (.*)$")  # "0.00.002.307 I common_params_fit_impl: ..."
_HOST_ROW = re.compile(r"^common_memory_breakdown_print: \|\s+- Host\s+\|\s+(\d+) =\s+(\d+) \+\s+(\d+) \+\s+(\d+)")
_FIT_FUNCS = ("common_params_fit_impl:", "common_fit_params:", "common_memory_breakdown_print:")
_LEVEL = {"I": "TRC", "W": "WRN", "E": "ERR"}  # LOG_TRC prints at INFO level once -v lets it through


def write_model(path: Path) -> Path:
    """A llama GGUF with a large KV cache per token and no tensor data (a sparse hole)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("kvlab fit oracle")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, scores, types = _vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_context_length(N_CTX_TRAIN)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD_KV)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    data_bytes = 0

    def tensor(name: str, ne: tuple[int, ...]) -> None:
        nonlocal data_bytes
        shape = tuple(reversed(ne))
        n_bytes = int(np.prod(shape)) * 4
        w.add_tensor_info(name, shape, np.dtype(np.float32), n_bytes)
        data_bytes += n_bytes

    qkv = N_HEAD_KV * HEAD_DIM
    tensor("token_embd.weight", (N_EMBD, len(tokens)))
    tensor("output_norm.weight", (N_EMBD,))
    tensor("output.weight", (N_EMBD, len(tokens)))
    for i in range(N_LAYER):
        tensor(f"blk.{i}.attn_norm.weight", (N_EMBD,))
        for t in ("q", "k", "v"):
            tensor(f"blk.{i}.attn_{t}.weight", (N_EMBD, qkv))
        tensor(f"blk.{i}.attn_output.weight", (qkv, N_EMBD))
        tensor(f"blk.{i}.ffn_norm.weight", (N_EMBD,))
        tensor(f"blk.{i}.ffn_gate.weight", (N_EMBD, N_FF))
        tensor(f"blk.{i}.ffn_up.weight", (N_EMBD, N_FF))
        tensor(f"blk.{i}.ffn_down.weight", (N_FF, N_EMBD))
    close_sparse(w, path, data_bytes)
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("fit-oracle") / "fit-oracle.gguf")


@dataclass
class Run:
    """One llama-fit-params run: its exit status, stdout, fit log lines and measurements."""

    returncode: int
    stdout: str
    fit_log: list[tuple[str, str]]  # (level, line) of the fit and its breakdown tables
    host_mib: list[tuple[int, int, int, int]]  # each table's Host row: self, model, context, compute (MiB)


def fit_params_cli(binary: Path, model: Path, flags: list[str]) -> Run:
    args = [
        str(binary),
        "-m",
        str(model),
        "-lv",
        "4",
        *flags,
        *FORCED_FLAGS,
    ]  # TRACE: the fit lines, not the debug flood
    for _ in range(ATTEMPTS):
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
        # llama.cpp logs from a worker thread and exit(1) does not wait for it (common/log.cpp:456: "logs
        # may be lost if not flushed before the program exits"); the success path flushes before printing
        if proc.returncode == 0 or FAILED_LAST_LINE in proc.stderr:
            break
    fit_log, host_mib = [], []
    for raw in proc.stderr.splitlines():
        m = _PREFIX.match(raw)
        if not m:
            continue
        level, line = m[1], m[2]
        if line.startswith(_FIT_FUNCS) and "took" not in line:
            fit_log.append((_LEVEL[level], line))
        if row := _HOST_ROW.match(line):
            host_mib.append((int(row[1]), int(row[2]), int(row[3]), int(row[4])))
    assert host_mib, proc.stderr[-3000:]
    return Run(proc.returncode, proc.stdout, fit_log, host_mib)


def replica(
    run: Run, params: Params, *, fitt_mib: int, n_ctx_min: int, low_end: bool, asked: list[int] | None = None
) -> FitResult:
    """The replica fed run's measurements; low_end: each whole MiB as it stands, else + 1 MiB - 1 byte.
    asked: receives the n_ctx of each configuration the replica measures."""
    calls = iter(range(len(run.host_mib)))

    def measure(p: Params) -> list[Usage]:
        i = next(calls)
        if asked is not None:
            asked.append(p.n_ctx)
        return [host_usage(*run.host_mib[i], low_end=low_end)]

    result = fit_params(
        measure,
        [],
        Host(total=HOST_TOTAL, free=HOST_TOTAL),
        params,
        n_layer=N_LAYER,
        n_ctx_train=N_CTX_TRAIN,
        margins=expand_fit_target([fitt_mib]),
        n_ctx_min=n_ctx_min,
        via_common_init=False,
    )
    assert next(calls, None) is None, "the replica measured fewer times than llama.cpp"
    return result


def host_usage(self_mib: int, model: int, context: int, compute: int, *, low_end: bool) -> Usage:
    """Bytes that print as the row does: each column truncated to whole MiB, and in total self_mib
    (low_end) or one byte short of self_mib + 1 (give or take the two bytes three columns cannot hold)."""
    rest = self_mib * MiB + (0 if low_end else MiB - 1) - (model + context + compute) * MiB
    parts = []
    for _ in range(3):
        parts.append(min(rest, MiB - 1))
        rest -= parts[-1]
    assert 0 <= rest <= 2, (self_mib, model, context, compute)
    return Usage(model * MiB + parts[0], context * MiB + parts[1], compute * MiB + parts[2])


def same_lines(ours: list[tuple[str, str]], theirs: list[tuple[str, str]]) -> bool:
    """Line by line equal, except that a MiB figure derived from the hidden sub-MiB bytes may be 1 off."""
    if len(ours) != len(theirs):
        return False
    for (la, a), (lb, b) in zip(ours, theirs, strict=True):
        if la != lb or re.sub(r"\d+", "N", a) != re.sub(r"\d+", "N", b):
            return False
        if any(abs(int(x) - int(y)) > 1 for x, y in zip(re.findall(r"\d+", a), re.findall(r"\d+", b), strict=True)):
            return False
    return True


def unambiguous_fitt(probe: Run, params: Params) -> int:
    """A -fitt (MiB) between 'fits at full context' and 'does not fit at the minimum' for which the
    replica's context is the same whatever the hidden sub-MiB bytes, as near the middle as possible."""
    full, minimum = probe.host_mib[-2][0], probe.host_mib[-1][0]  # at n_ctx_max, then at the minimum context
    total_mib = HOST_TOTAL // MiB
    low, high = total_mib - full + 2, total_mib - minimum - 2
    middle = (low + high) // 2
    for fitt in sorted(range(low, high + 1), key=lambda x: abs(x - middle)):
        # a successful reduction measures the same configurations as the failed probe did
        a = replica(probe, params, fitt_mib=fitt, n_ctx_min=4096, low_end=True)
        b = replica(probe, params, fitt_mib=fitt, n_ctx_min=4096, low_end=False)
        if a.status == b.status == "success" and a.params.n_ctx == b.params.n_ctx:
            return fitt
    raise AssertionError("no -fitt gives the replica one answer")


@pytest.fixture(scope="module")
def probes(llama_fit_params_binary: Path, model: Path) -> dict[str, Run]:
    """For each -np: a run whose target exceeds the host total, so that it measures the full and
    the minimum context and then fails (fit.cpp:394-461)."""
    over = str(HOST_TOTAL // MiB + 1)
    return {np_: fit_params_cli(llama_fit_params_binary, model, ["-fitt", over, "-np", np_]) for np_ in ("1", "2")}


def test_it_fails_when_even_the_minimum_context_exceeds_the_host_total(probes: dict[str, Run]) -> None:
    # fit.cpp:459-461 and fit-params.cpp:29-32: WRN "failed to fit params to free device memory: was unable
    # to fit model into system memory by reducing context, abort", then exit 1 with nothing on stdout.
    run = probes["1"]
    assert run.returncode == 1 and run.stdout == ""
    fitt = HOST_TOTAL // MiB + 1
    ours = replica(run, Params(), fitt_mib=fitt, n_ctx_min=4096, low_end=True)
    assert ours.status == "failure"
    assert ours.message == "was unable to fit model into system memory by reducing context, abort"
    assert ours.params.n_ctx == 4096  # the server would go on with the minimum context it had set
    assert same_lines(ours.log, run.fit_log), (ours.log, run.fit_log)
    assert run.fit_log[-1] == (
        "WRN",
        "common_fit_params: failed to fit params to free device memory: "
        "was unable to fit model into system memory by reducing context, abort",
    )


@pytest.mark.parametrize("n_parallel", [1, 2])
def test_it_reduces_the_context_to_what_llama_cpp_chooses(
    llama_fit_params_binary: Path, model: Path, probes: dict[str, Run], n_parallel: int
) -> None:
    # fit.cpp:394-435: n_ctx = min + (max - min) * (target - used_min) / (used - used_min), aligned down to
    # 256 * n_streams; with -np 2 (no unified KV in llama-fit-params) the range is 2 x n_ctx_train and the
    # first measurement is repeated at that context (fit.cpp:271-278).
    params = Params(n_seq_max=n_parallel)
    fitt = unambiguous_fitt(probes[str(n_parallel)], params)
    run = fit_params_cli(llama_fit_params_binary, model, ["-fitt", str(fitt), "-np", str(n_parallel)])
    assert run.returncode == 0, run.fit_log
    asked: list[int] = []
    ours = replica(run, params, fitt_mib=fitt, n_ctx_min=4096, low_end=True, asked=asked)
    assert ours.status == "success"
    # measured at -c 0 (the training context), again at n_streams x that, then at the minimum (fit.cpp:263-415)
    assert asked == ([0] if n_parallel == 1 else [0, N_CTX_TRAIN * n_parallel]) + [4096 * n_parallel]
    # what llama_context then makes of it: per stream, a multiple of 256 (llama-context.cpp:292-308)
    ctx = context_after_fit(ours.params, n_ctx_train=N_CTX_TRAIN)
    assert (ctx.n_ctx, ctx.n_ctx_seq) == (ours.params.n_ctx, ours.params.n_ctx // n_parallel)
    assert run.stdout.strip() == f"-c {ours.params.n_ctx} -ngl -1"
    assert 4096 * n_parallel < ours.params.n_ctx < N_CTX_TRAIN * n_parallel
    assert ours.params.n_ctx % (256 * n_parallel) == 0
    assert same_lines(ours.log, run.fit_log), (ours.log, run.fit_log)
    assert ("TRC", "common_params_fit_impl: entire model can be fit by reducing context") in run.fit_log


def test_it_keeps_the_training_context_when_it_fits(llama_fit_params_binary: Path, model: Path) -> None:
    # fit.cpp:271-278 and 317-321: n_ctx auto becomes n_ctx_max even when nothing else changes.
    run = fit_params_cli(llama_fit_params_binary, model, ["-fitt", "0"])
    assert run.returncode == 0
    ours = replica(run, Params(), fitt_mib=0, n_ctx_min=4096, low_end=True)
    assert (
        run.stdout.strip() == f"-c {N_CTX_TRAIN} -ngl -1" == f"-c {ours.params.n_ctx} -ngl {ours.params.n_gpu_layers}"
    )
    # "will leave N MiB of system memory" is the host's total less the hidden sub-MiB bytes: 1 MiB off
    # where the total's own fraction of a MiB is smaller than them (it failed so on a host of 24,683,584 kB)
    assert same_lines(ours.log, run.fit_log), (ours.log, run.fit_log)
    assert ours.status == "success" and len(ours.log) == len(run.fit_log)


def test_c_0_turns_context_reduction_off(llama_fit_params_binary: Path, model: Path) -> None:
    # arg.cpp:1641-1651: -c 0 sets fit_params_min_ctx = UINT32_MAX, so fit.cpp:447-448 keeps the full
    # context ("user has requested full context size of %u -> no change") and then gives up on the CPU.
    fitt = HOST_TOTAL // MiB + 1
    run = fit_params_cli(llama_fit_params_binary, model, ["-fitt", str(fitt), "-c", "0"])
    assert run.returncode == 1
    n_ctx_min = fit_ctx_min(ctx_size_zero=True)
    assert n_ctx_min == UINT32_MAX
    ours = replica(run, Params(), fitt_mib=fitt, n_ctx_min=n_ctx_min, low_end=True)
    assert ours.status == "failure" and ours.params.n_ctx == N_CTX_TRAIN
    assert same_lines(ours.log, run.fit_log), (ours.log, run.fit_log)
    assert ("TRC", f"common_params_fit_impl: user has requested full context size of {N_CTX_TRAIN} -> no change") in (
        run.fit_log
    )
