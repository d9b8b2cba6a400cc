import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

SPEC = {
    "general.architecture": "llama",
    "llama.block_count": 40,
    "llama.embedding_length": 5120,
    "llama.context_length": 393216,
    "llama.attention.head_count": 32,
    "llama.attention.head_count_kv": 8,
    "llama.attention.key_length": 128,
    "llama.attention.value_length": 128,
}


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))
    return str(path)


def kvsize(*args):
    out = StringIO()
    call_command("kvsize", *args, stdout=out)
    return out.getvalue()


def test_json_output_has_exact_integer_bytes(spec):
    data = json.loads(kvsize("--spec", spec, "-c", "12288", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0", "--json"))
    assert (data["n_ctx"], data["n_ctx_seq"], data["n_stream"], data["n_parallel"], data["kv_unified"]) == (
        12288,
        12288,
        1,
        1,
        False,
    )
    (cache,) = data["caches"]
    assert cache == {
        "name": "full",
        "cells": 12288,
        "streams": 1,
        "layers": 40,
        "type_k": "q8_0",
        "type_v": "q8_0",
        "k_bytes": 40 * 12288 * 1088,
        "v_bytes": 40 * 12288 * 1088,
    }
    assert data["kv_bytes"] == 2 * 40 * 12288 * 1088 and data["recurrent_bytes"] == 0
    assert data["bytes_per_token"] == 87040 and data["warnings"] == []


def test_the_text_report_explains_the_original_failure(spec):
    out = kvsize(
        "--spec", spec, "-c", "16384", "--prompt-tokens", "4362", "--output-tokens", "1738", "--concurrency", "3"
    )
    assert "4 slots (auto: no -np), one unified pool of 16,384 cells" in out
    assert "KV per token: 163,840 B (160.00 KiB)" in out
    assert "need 18,300 cells; the unified pool has 16,384" in out
    # No GPU and no weights: the configurations are sized for the workload, never called fitting.
    assert "KV-only candidate 1" in out and "NOT checked against the GPU" in out


def test_a_gguf_without_tensor_data_is_enough(tmp_path):
    from .gguf_writer import write_gguf_head

    path = tmp_path / "head.gguf"
    write_gguf_head(path, SPEC, tensors=[("token_embd.weight", (5120, 1000), 1)], truncate_after_tensors=True)
    data = json.loads(kvsize("--gguf", str(path), "-c", "4096", "-np", "1", "--json"))
    assert data["kv_bytes"] == 40 * 4096 * 2048 * 2
    assert data["memory"]["weights_bytes"] == 5120 * 1000 * 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--spec", "/nonexistent.json"], "No such file"),
        (["--gguf", "__file__"], "not a GGUF file"),
        (["--model", "no-such-model"], "unknown model"),
        (["-np", "0"], r"-np 0: must be -1 \(auto\) or 1 to 256"),
        (["-ctk", "q3_k"], "unknown cache type"),
        (["-ctv", "q8_0", "-fa", "off", "-c", "4096"], "will not start"),
        (["--prompt-tokens", "10"], "give both --prompt-tokens and --output-tokens"),
    ],
)
def test_bad_input_is_a_clear_error(spec, args, message):
    args = [__file__ if a == "__file__" else a for a in args]
    if "--spec" not in args and "--gguf" not in args and "--model" not in args:
        args = ["--spec", spec, *args]
    with pytest.raises(CommandError, match=message):
        kvsize(*args)


def test_a_refused_architecture_says_why(tmp_path):
    path = tmp_path / "bert.json"
    path.write_text(json.dumps({"general.architecture": "bert"}))
    with pytest.raises(CommandError, match="architecture 'bert' is not one kvlab sizes: an embedding/encoder model"):
        kvsize("--spec", str(path))


def test_kvsize_takes_no_default_quantization_and_names_the_weights_it_used():
    out = StringIO()
    call_command("kvsize", "--model", "llama-3.1-8b", "-c", "16384", "--gpu", "rtx-5060-ti-16gb", stdout=out)
    assert "weights: unknown" in out.getvalue() and "cannot judge the fit without the weights" in out.getvalue()
    out = StringIO()
    call_command("kvsize", "--model", "llama-3.1-8b", "-c", "16384", "--gpu", "rtx-5060-ti-16gb", "--quant", "q4_k_m",
                 "--json", stdout=out)  # fmt: skip
    memory = json.loads(out.getvalue())["memory"]
    assert (memory["weights_bytes"], memory["fits"]) == (4_920_739_232, True)
    assert memory["weights_source"] == "catalogue Q4_K_M: published file size"
    with pytest.raises(CommandError, match=r"llama-3.1-8b has no IQ1_S weights in the catalogue; known: Q4_K_M, "):
        call_command("kvsize", "--model", "llama-3.1-8b", "--quant", "IQ1_S", stdout=StringIO())
