"""kvlab's KV-cache predictions against the real llama-server (the oracle).

Each case writes a tiny GGUF (tiny_gguf.py), starts the pinned llama-server on it with a
flag set, and compares kv_layout() with what the server logs at -lv 4. The regexes follow
the format strings of the llama.cpp tree the server is built from:
* src/llama-context.cpp: "%s: n_seq_max             = %u", "n_ctx", "n_ctx_seq", "kv_unified";
* src/llama-kv-cache.cpp: "%s: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs),
  K (%s): %7.2f MiB, V (%s): %7.2f MiB" (n_seq_max/n_stream; the MiB figures are
  (float)bytes / (1024.0f * 1024.0f));
* src/llama-memory-recurrent.cpp: "%s: size = %7.2f MiB (%6u cells, %3d layers, %2u seqs
  %2u rs_seq), R (%s): %7.2f MiB, S (%s): %7.2f MiB, P (%s): %7.2f MiB";
* tools/server/server-context.cpp: "srv  %12.*s: initializing, n_slots = %d, n_ctx_slot = %d,
  kv_unified = '%s'".
Beyond the five hand-written models, every architecture of tiny_gguf.SPECS is written from its
hyperparameters with the tensors its loader asks for (tiny_gguf.learn_tensors), and checked
with the flag sets of its KV rule (FAMILY_FLAGS).
Run: pytest sizing/tests/test_oracle_llama_server.py -m llama_server
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from sizing.gguf import read_gguf_head
from sizing.hparams import ModelParams, model_params
from sizing.kv import KVLayout, ServerFlags, kv_layout
from sizing.server_log import CONTEXT_RE, KV_RE, RECURRENT_RE, SLOTS_RE, KVLine, mib
from sizing.tests.support import ServerRun
from sizing.tiny_gguf import SPECS, WRITERS

pytestmark = pytest.mark.llama_server

# (architecture, llama-server flags)
CASES = [
    ("llama", "-c 2048 -np 3"),
    ("llama", "-c 1024"),  # no -np: 4 slots, unified
    ("llama", "-c 4096 -np 2 -kvu"),
    ("llama", "-c 2048 -np 1 -ctk q8_0 -ctv q8_0 -fa on"),
    ("llama", "-c 2048 -np 2 -ctk q4_0 -ctv q4_0 -fa on"),
    ("llama", "-c 3000 -np 3"),  # n_ctx padded to 3072, 1024 cells per slot
    ("gemma3", "-c 4096 -np 1"),
    ("gemma3", "-c 4096 -np 1 --swa-full"),
    ("gemma3", "-c 4096 -np 2 -kvu"),
    ("gemma3", "-c 4096 -np 2"),
    ("deepseek2", "-c 2048 -np 1"),
    ("deepseek2", "-c 2048 -np 2 -ctk q8_0 -ctv q8_0 -fa on"),
    ("mamba", "-c 1024 -np 3"),
    ("granitehybrid", "-c 2048 -np 2"),
    ("granitehybrid", "-c 1024"),
]


def server_flags(args: list[str]) -> ServerFlags:
    """The ServerFlags of a llama-server argument list (only the flags these cases use)."""
    kw: dict[str, object] = {}
    it = iter(args)
    for arg in it:
        if arg == "-c":
            kw["ctx_size"] = int(next(it))
        elif arg == "-np":
            kw["parallel"] = int(next(it))
        elif arg == "-kvu":
            kw["kv_unified"] = True
        elif arg == "-ctk":
            kw["type_k"] = next(it)
        elif arg == "-ctv":
            kw["type_v"] = next(it)
        elif arg == "-fa":
            kw["flash_attn"] = next(it)
        elif arg == "--swa-full":
            kw["swa_full"] = True
        elif arg == "-ub":
            kw["n_ubatch"] = int(next(it))
        elif arg == "-b":
            kw["n_batch"] = int(next(it))
        else:
            raise ValueError(f"no ServerFlags mapping for {arg!r}")
    return ServerFlags(**kw)  # type: ignore[arg-type]


class RecurrentLine(NamedTuple):
    size_mib: str
    cells: int
    layers: int
    n_seq_max: int
    n_rs_seq: int
    r_mib: str
    s_mib: str
    p_mib: str


def parse_kv(log: str) -> list[KVLine]:
    return [
        KVLine(m[1], int(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6], m[7], m[8], m[9]) for m in KV_RE.finditer(log)
    ]


def parse_recurrent(log: str) -> list[RecurrentLine]:
    return [
        RecurrentLine(m[1], int(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6], m[7], m[8])
        for m in RECURRENT_RE.finditer(log)
    ]


def parse_context(log: str) -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in CONTEXT_RE.finditer(log)]


def parse_slots(log: str) -> list[tuple[int, int, str]]:
    return [(int(m[1]), int(m[2]), m[3]) for m in SLOTS_RE.finditer(log)]


def expected_kv(layout: KVLayout) -> list[KVLine]:
    return [
        KVLine(
            mib(c.k_bytes + c.v_bytes),
            c.cells,
            c.layers,
            layout.n_parallel,
            c.streams,
            c.type_k,
            mib(c.k_bytes),
            c.type_v,
            mib(c.v_bytes),
        )
        for c in layout.caches
    ]


def expected_recurrent(model: ModelParams, layout: KVLayout) -> list[RecurrentLine]:
    r = layout.recurrent
    if r is None:
        return []
    # The "layers" the server prints is hparams.n_layer(), every layer of the model, even in a
    # hybrid where only some hold a state (llama-memory-recurrent.cpp: `n_layer = hparams.n_layer()`,
    # then `if (filter && !filter(i)) continue;`). The R/S MiB figures count only the state layers.
    return [
        RecurrentLine(
            mib(r.r_bytes + r.s_bytes),
            r.cells,
            model.n_layer,
            layout.n_parallel,
            0,
            mib(r.r_bytes),
            mib(r.s_bytes),
            mib(0),
        )
    ]


def expected_context(layout: KVLayout) -> list[tuple[str, str]]:
    return [
        ("n_seq_max", str(layout.n_parallel)),
        ("n_ctx", str(layout.n_ctx)),
        ("n_ctx_seq", str(layout.n_ctx_seq)),
        ("kv_unified", "true" if layout.kv_unified else "false"),
    ]


def predict(path: Path, args: list[str]) -> tuple[ModelParams, KVLayout]:
    with path.open("rb") as f:
        head = read_gguf_head(f)
    model = model_params(head.metadata)
    return model, kv_layout(model, server_flags(args))


def log_tail(log: str, n: int = 60) -> str:
    return "\n".join(log.splitlines()[-n:])


@pytest.mark.parametrize(("arch", "flags"), CASES, ids=[f"{a} {f}" for a, f in CASES])
def test_kv_layout_matches_server(arch, flags, tiny_models, llama_server):
    assert_server_agrees(tiny_models[arch], flags.split(), llama_server)


# The flag sets each KV rule is checked with: the slot/stream split for every model; -fa off
# (a transposed V cache, padded to the widest layer) where layers differ; for sliding windows
# --swa-full, -kvu (the window per slot), -ub and -b (the window plus one micro-batch).
_SWA_FLAGS = ["-c 4096 -np 1", "-c 4096 -np 2 -kvu", "-c 4096 -np 2 --swa-full", "-c 4096 -np 1 -ub 256 -fa off"]
FAMILY_FLAGS: dict[str, list[str]] = {
    "standard": ["-c 2048 -np 3", "-c 1024 -fa off"],
    "nextn": ["-c 2048 -np 2", "-c 1024"],
    "per-layer KV heads": ["-c 2048 -np 2", "-c 1024 -fa off", "-c 1024 -np 1 -ctk q8_0 -ctv q8_0 -fa on"],
    "shared KV": [*_SWA_FLAGS, "-c 2048 -np 1 -b 128"],
    "SWA period": ["-c 4096 -np 1", "-c 4096 -np 2 -kvu -ub 256"],
    "SWA dense-first": _SWA_FLAGS,
    "SWA if a window": ["-c 4096 -np 1", "-c 2048 -np 2 -kvu"],
    "SWA array": ["-c 4096 -np 1", "-c 4096 -np 2 --swa-full"],
    "chunked": ["-c 8192 -np 1", "-c 4096 -np 1 --swa-full", "-c 8192 -np 2 -kvu -b 256"],
    "recurrent": ["-c 1024 -np 3", "-c 2048"],
    "hybrid": ["-c 2048 -np 2", "-c 1024"],
    "hybrid SWA": ["-c 2048 -np 2", "-c 4096 -np 1 -ub 256", "-c 4096 -np 1 --swa-full"],
}
SPEC_CASES = [(name, flags) for name, spec in SPECS.items() for flags in FAMILY_FLAGS[spec.family]]


@pytest.mark.parametrize(("name", "flags"), SPEC_CASES, ids=[f"{n} {f}" for n, f in SPEC_CASES])
def test_every_kv_rule_matches_the_server(name, flags, spec_models, llama_server):
    assert_server_agrees(spec_models(name), flags.split(), llama_server)


def test_the_oracle_covers_every_kv_rule_and_25_architectures():
    families = {spec.family for spec in SPECS.values()}
    assert families == set(FAMILY_FLAGS)
    archs = {spec.arch for spec in SPECS.values()} | set(WRITERS)
    assert len(archs) >= 25, sorted(archs)


def assert_server_agrees(path: Path, args: list[str], llama_server: Callable[..., ServerRun]) -> None:
    """The server's context, KV, recurrent and slot lines equal kvlab's prediction for this model and flags."""
    model, layout = predict(path, args)
    assert layout.errors == [], f"kvlab refuses a flag set the server accepts: {layout.errors}"

    run = llama_server(path, args)
    assert run.healthy, f"{run.describe()} did not become healthy; log tail:\n{log_tail(run.log)}"

    server = {
        "context": parse_context(run.log),
        "kv": parse_kv(run.log),
        "recurrent": parse_recurrent(run.log),
        "slots": parse_slots(run.log),
    }
    kvlab = {
        "context": expected_context(layout),
        "kv": expected_kv(layout),
        "recurrent": expected_recurrent(model, layout),
        "slots": [(layout.n_parallel, layout.n_ctx_seq, "true" if layout.kv_unified else "false")],
    }
    assert server == kvlab


def test_quantized_v_without_flash_attention_fails(tiny_models, llama_server):
    args = ["-c", "1024", "-np", "1", "-ctv", "q8_0", "-fa", "off"]
    _, layout = predict(tiny_models["llama"], args)
    assert layout.errors, "kvlab accepts -ctv q8_0 -fa off, which the server refuses"

    run = llama_server(tiny_models["llama"], args)
    assert not run.healthy, f"{run.describe()} started, but a quantized V cache without flash attention must fail"
    assert run.returncode not in (None, 0), f"{run.describe()}; log tail:\n{log_tail(run.log)}"
    assert "quantized V cache requires flash_attn to be enabled" in run.log, log_tail(run.log)
