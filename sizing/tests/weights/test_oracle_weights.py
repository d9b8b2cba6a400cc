"""kvlab's computed tensor table (sizing/weights) against the real llama.cpp loader (the oracle).

For every architecture that both tiny_gguf writes and sizing/weights computes, the tiny model's
tensors are the ones the loader requires (learnt from its "missing tensor" / "wrong shape"
messages, or written by hand and loaded by the KV oracle). kvlab's table for the same metadata
must hold each of them with the same shape (ggml order), and a model written with exactly kvlab's
table must load: the loader checks the shape of every tensor it creates, optional ones included,
and refuses a file with a tensor it did not create ("done_getting_tensors: wrong number of
tensors"), so the tensors kvlab adds (biases, an untied output, NextN layers the loader skips)
are ones it accepts. The F32 total of the table is the file's tensor data as read_gguf_head
reads it.
Run: pytest sizing/tests/weights/test_oracle_weights.py -m llama_server
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sizing import weights
from sizing.gguf import read_gguf_head
from sizing.tests.support import loader_log
from sizing.tiny_gguf import LOADED, SPECS, WRITERS, write_model

pytestmark = pytest.mark.llama_server

COMPUTED = set(weights.computed_architectures())
CASES = sorted(
    [name for name in WRITERS if name in COMPUTED] + [name for name, spec in SPECS.items() if spec.arch in COMPUTED]
)
# Keys _Model writes itself for every tiny model; vocab_size is read_gguf_head's stand-in for the vocab.
_OWN_KEYS = ("context_length", "attention.layer_norm_rms_epsilon", "vocab_size")


def _read(path: Path) -> tuple[dict[str, Any], dict[str, tuple[int, ...]], int]:
    with path.open("rb") as f:
        head = read_gguf_head(f)
    return head.metadata_without_vocab(), {t.name: t.shape for t in head.tensors}, sum(t.n_bytes for t in head.tensors)


def _rewrite(path: Path, metadata: dict[str, Any], tensors: dict[str, tuple[int, ...]]) -> Path:
    """A tiny model with the same hyperparameters and the given tensors."""
    arch = metadata["general.architecture"]
    keys = {
        key.removeprefix(f"{arch}."): value
        for key, value in metadata.items()
        if key.startswith(f"{arch}.") and key.removeprefix(f"{arch}.") not in _OWN_KEYS
    }
    return write_model(path, arch, keys, tensors)


def _refusal(log: str) -> str:
    lines = [line for line in log.splitlines() if "error loading model" in line or "GGML_ASSERT" in line]
    return " | ".join(lines[:2]) or "\n".join(log.splitlines()[-5:])


@pytest.fixture
def loads(llama_server_binary: Path) -> Callable[[Path], str]:
    """path -> "" if the real loader takes the model, else why it refused it."""

    def check(path: Path) -> str:
        log = loader_log(llama_server_binary, path)
        return "" if LOADED in log else _refusal(log)

    return check


@pytest.mark.parametrize("name", CASES)
def test_the_tensor_table_is_what_the_loader_requires_and_accepts(
    name: str, tiny_models: dict[str, Path], spec_models: Callable[[str], Path], loads, tmp_path: Path
) -> None:
    loaded = tiny_models[name] if name in WRITERS else spec_models(name)
    metadata, required, _ = _read(loaded)

    table = weights.tensor_table(metadata, tied_embeddings="output.weight" not in required)
    computed = {t.name: t.shape for t in table}
    assert len(computed) == len(table), "a tensor is written twice"
    missing = {n: s for n, s in required.items() if n not in computed}
    wrong = {n: (computed[n], s) for n, s in required.items() if n in computed and computed[n] != s}
    assert (missing, wrong) == ({}, {}), "kvlab's table lacks (name: shape) / misshapes (name: (kvlab, loader))"

    for tied in (True, False):
        table = weights.tensor_table(metadata, tied_embeddings=tied)
        path = _rewrite(tmp_path / f"{name}-tied-{tied}.gguf", metadata, {t.name: t.shape for t in table})
        assert loads(path) == "", f"the loader refuses kvlab's table (tied_embeddings={tied})"
        _, _, data_bytes = _read(path)
        f32 = weights.tensor_types(table, metadata, "F32")
        assert weights.tensor_data_bytes(table, f32) == data_bytes


def test_the_loader_refuses_a_table_with_a_wrong_shape_or_an_extra_tensor(tiny_models, loads, tmp_path) -> None:
    # What the acceptance check above rests on: a misshapen or unknown tensor does not load.
    metadata, tensors, _ = _read(tiny_models["llama"])
    assert loads(_rewrite(tmp_path / "same.gguf", metadata, tensors)) == ""
    wrong = {**tensors, "blk.0.attn_k.weight": (256, 128)}
    assert "wrong shape" in loads(_rewrite(tmp_path / "wrong.gguf", metadata, wrong))
    extra = {**tensors, "blk.0.ffn_gate_exps.weight": (256, 256, 2)}
    assert "wrong number of tensors" in loads(_rewrite(tmp_path / "extra.gguf", metadata, extra))


def test_the_check_covers_every_architecture_both_sides_know() -> None:
    generated = {spec.arch for spec in SPECS.values()} | set(WRITERS)
    assert {n if n in WRITERS else SPECS[n].arch for n in CASES} == generated & COMPUTED
    assert len(generated & COMPUTED) >= 25
