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
        (["--model", "no-such-model"], "--model: Unknown model 'no-such-model'; the catalogue has: deepseek-r1, "),
        (["-np", "0"], r"-np 0: must be -1 \(auto\) or 1 to 256"),
        (["-ctk", "q3_k"], "unknown cache type"),
        (["-ctv", "q8_0", "-fa", "off", "-c", "4096"], "will not start"),
        (["--prompt-tokens", "10"], "--output-tokens: Give both the p95 prompt tokens and the p95 output tokens"),
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
    # The page's words for the same figure, with its source
    assert memory["weights_source"].startswith("catalogue Q4_K_M: a published GGUF's file size — https://")
    with pytest.raises(
        CommandError, match=r"--quant: Llama 3.1 8B Instruct has no IQ1_S weights in the catalogue \(it has: Q4_K_M, "
    ):
        call_command("kvsize", "--model", "llama-3.1-8b", "--quant", "IQ1_S", stdout=StringIO())


# What llama-server's --fit does on the given GPUs (sizing.placement).
DEVSTRAL = ("--model", "devstral-small-2-24b", "--quant", "Q4_K_M")


def fitted(*args):
    return json.loads(kvsize(*DEVSTRAL, *args, "--json"))


def test_without_c_the_fit_picks_the_largest_context_that_leaves_the_target_free():
    data = fitted("--gpu", "rtx-5060-ti-16gb")
    assert data["fit"]["status"] == "success"
    n_ctx = data["effective"]["n_ctx"]
    # not the model's 393,216: the largest multiple of 256 that leaves 1,024 MiB of the 16,311 free
    assert 4096 < n_ctx < 393216 and n_ctx % 256 == 0 and data["n_ctx"] == n_ctx
    assert data["fit"]["changes"] == [
        f"`-c` unset → {n_ctx:,}: the largest context that leaves 1,024 MiB free on CUDA0"
    ]
    gpu, host = data["devices"]
    assert (gpu["name"], host["name"]) == ("CUDA0", "Host")
    assert gpu["free_after_bytes"] >= 1024 * 2**20 and gpu["counted_bytes"] == (
        gpu["model_bytes"] + gpu["context_bytes"] + gpu["compute_bytes"]
    )
    # token_embd stays in system RAM; every other weight is on the GPU
    assert host["model_bytes"] > 0 and gpu["model_bytes"] + host["model_bytes"] >= data["memory"]["weights_bytes"]
    assert data["decode_tok_s_estimate"]["tok_s"] > 0
    assert "estimate" in data["decode_tok_s_estimate"]["label"]


def test_a_context_that_does_not_fit_moves_layers_to_system_ram_instead_of_failing():
    data = fitted("--gpu", "rtx-5060-ti-16gb", "-c", "16384", "-np", "1")
    (change,) = data["fit"]["changes"]
    ngl = data["effective"]["n_gpu_layers"]
    assert change == f"`-ngl` auto → {ngl}: {41 - ngl} of 41 layers in system RAM" and 0 < ngl < 41
    assert data["effective"]["n_ctx"] == 16384 and data["loads"] is True
    assert "-ngl" in data["effective"]["command"]
    full = fitted("--gpu", "rtx-5060-ti-16gb", "-c", "8192", "-np", "1")["decode_tok_s_estimate"]["tok_s"]
    assert data["decode_tok_s_estimate"]["tok_s"] < full  # layers in RAM decode slower


def test_fit_off_and_c_0_are_honoured():
    off = fitted("--gpu", "rtx-5060-ti-16gb", "--fit", "off")
    assert off["fit"]["status"] == "off" and off["effective"]["n_ctx"] == 393216
    assert off["loads"] is False  # 393,216 cells of f16 KV do not fit a 16 GB card
    full = fitted("--gpu", "rtx-5060-ti-16gb", "--command", "llama-server -c 0")
    assert full["effective"]["n_ctx"] == 393216  # -c 0 turns context reduction off
    assert full["effective"]["n_gpu_layers"] < 41
    again = fitted("--gpu", "rtx-5060-ti-16gb", "--command", "llama-server -c 0 -fitc 8192")
    assert again["effective"]["n_ctx"] < 393216  # -fitc after -c 0 turns it back on


def test_a_user_set_ngl_stops_the_fit_with_llama_servers_message():
    data = fitted("--gpu", "rtx-5060-ti-16gb", "-c", "65536", "-np", "1", "-ngl", "41")
    assert data["fit"]["status"] == "failure"
    assert data["fit"]["message"] == "n_gpu_layers already set by user to 41, abort"
    assert [
        "WRN",
        "common_fit_params: failed to fit params to free device memory: n_gpu_layers already set by user to 41, abort",
    ] in data["fit"]["log"]
    assert data["loads"] is False


def test_two_gpus_each_get_a_row_and_a_split():
    data = fitted("--gpu", "rtx-3060-12gb", "--gpu", "rtx-3060-12gb:2048", "-c", "32768", "-np", "1")
    names = [d["name"] for d in data["devices"]]
    assert names == ["CUDA0", "CUDA1", "Host"]
    cuda0, cuda1, _ = data["devices"]
    assert cuda1["free_bytes"] == cuda0["free_bytes"] - 2048 * 2**20
    assert cuda0["model_bytes"] > 0 and cuda1["model_bytes"] > 0


def test_cpu_moe_puts_the_experts_in_system_ram():
    args = ("--model", "qwen3-30b-a3b", "--quant", "Q4_K_M", "--gpu", "rtx-4090", "-c", "8192", "-np", "1")
    plain = json.loads(kvsize(*args, "--fit", "off", "--json"))
    moe = json.loads(kvsize(*args, "--fit", "off", "--cpu-moe", "--json"))
    gpu_plain, gpu_moe = plain["devices"][0]["model_bytes"], moe["devices"][0]["model_bytes"]
    assert gpu_moe < gpu_plain / 4  # the routed experts are most of a 30B-A3B's weights
    # the same tensors, moved: only their alignment differs (CUDA 128 bytes and row padding, host 32)
    moved_to_ram = moe["devices"][-1]["model_bytes"] - plain["devices"][-1]["model_bytes"]
    assert abs(moved_to_ram - (gpu_plain - gpu_moe)) < 2**20


@pytest.mark.parametrize(
    "args, message",
    [
        (("--gpu", "no-such-gpu"), "--gpu: GPU 1: 'no-such-gpu' is not a GPU of the catalogue"),
        (("--gpu", "99999999999"), "--gpu: GPU 1: its memory must be a whole number of MiB from 256 to 4,194,304"),
        (("--gpu", "1024:4096"), "--gpu: GPU 1: the memory already in use must be whole MiB below its 1,024 MiB"),
        (("--gpu", "1024:x"), "must be whole MiB"),
        (("-ot", "exps=GPU7"), "unknown buffer type"),
        (("-ts", "a,b"), "-ts a,b: not a number"),
        (("--ram-mib", "0"), "--ram-mib: System RAM: its size must be a whole number of MiB from 256"),
    ],
)
def test_bad_placement_input_gets_a_clear_error(args, message):
    with pytest.raises(CommandError, match=message):
        kvsize(*DEVSTRAL, *args)


def test_sm_row_cannot_load_on_cuda():
    data = fitted("--gpu", "rtx-3090", "--gpu", "rtx-3090", "-sm", "row", "-c", "8192")
    assert "does not support split buffers" in data["placement_error"] and data["loads"] is False
    assert data["fit"]["status"] == "error"


def test_a_catalogue_gpu_gives_the_cuda_context_from_its_sm_count():
    out = kvsize(
        "--model", "devstral-small-2-24b", "--quant", "Q4_K_M", "--gpu", "rtx-5060-ti-16gb",
        "-c", "12288", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "--json",
    )  # fmt: skip
    (device,) = [d for d in json.loads(out)["devices"] if d["name"] == "CUDA0"]
    items = {item["name"]: item for item in device["outside_llama_cpp"]}
    # The RTX 5060 Ti has 36 SMs (gpus.json, with its source) at 3.05 MiB each.
    assert items["CUDA context"]["bytes"] == round(36 * 3.05 * 1024 * 1024)
    # Compute capability 12.0: cuBLAS's workspace is the 32 MiB of 9.0 and up (at most).
    assert items["cuBLAS workspace"]["bytes"] == 32 * 1024 * 1024 and items["cuBLAS workspace"]["upper_bound"]


def test_a_gpu_given_in_mib_has_no_sm_count():
    out = kvsize(
        "--model", "devstral-small-2-24b", "--quant", "Q4_K_M", "--gpu", "16311", "-c", "12288", "-np", "1", "--json"
    )
    (device,) = [d for d in json.loads(out)["devices"] if d["name"] == "CUDA0"]
    items = {item["name"]: item for item in device["outside_llama_cpp"]}
    assert items["CUDA context"]["bytes"] is None  # unknown, not guessed


def test_cpu_host_reads_this_machines_cpuinfo_as_a_native_build_sees_it():
    from pathlib import Path

    from sizing.placement.cpu import from_cpuinfo

    expected = from_cpuinfo(Path("/proc/cpuinfo").read_text(errors="replace"))
    result = json.loads(
        kvsize("--model", "devstral-small-2-24b", "--quant", "Q8_0", "-c", "4096", "--ram-mib", "65536",
               "--cpu", "host", "--json")
    )  # fmt: skip
    assert result["cpu"] == {"label": expected.label, "source": "this machine's /proc/cpuinfo"}
    buffers = result["host_memory"]["cpu_buffers"]
    assert ("AMX" in buffers and buffers["AMX"] > 0) == expected.amx  # Q8_0 matmuls go to AMX where it exists


def test_an_unknown_cpu_is_refused_with_what_kvsize_accepts(spec):
    with pytest.raises(
        CommandError, match="--cpu: Host CPU: unknown CPU 'pentium': give one of avx2, avx512, avx512\\+amx"
    ):
        kvsize("--spec", spec, "--cpu", "pentium")


def test_no_repack_turns_the_cpus_buffer_types_off():
    args = ["--model", "devstral-small-2-24b", "--quant", "Q8_0", "-c", "4096", "--ram-mib", "65536", "--json"]
    amx = json.loads(kvsize(*args, "--cpu", "avx512+amx"))
    off = json.loads(kvsize(*args, "--cpu", "avx512+amx", "-nr"))
    assert amx["host_memory"]["cpu_buffers"]["AMX"] > 0 and off["host_memory"]["cpu_buffers"] == {}
    assert off["host_memory"]["counted_bytes"] > amx["host_memory"]["counted_bytes"]  # the fit counts them again
    assert "-nr" in off["effective"]["command"]


def test_a_spec_file_is_read_as_the_pages_pasted_metadata_and_no_further(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**SPEC, "tokenizer.ggml.tokens": ["tok"] * 100_000}))  # ~700,000 characters
    with pytest.raises(CommandError, match=r"--spec .*big.json: over 200,000 characters"):
        kvsize("--spec", str(big))
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"general.name": "caf\xe9"}')
    with pytest.raises(CommandError, match="not UTF-8 text"):
        kvsize("--spec", str(latin))
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(CommandError, match="--spec: Give the model's GGUF metadata as a JSON object."):
        kvsize("--spec", str(empty))


def test_the_three_gpu_figures_say_what_each_is_to_be_compared_with():
    out = kvsize(
        "--model", "devstral-small-2-24b", "--quant", "Q4_K_M", "--gpu", "rtx-5060-ti-16gb",
        "-c", "12288", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on",
    )  # fmt: skip
    lines = out.splitlines()
    plain = next(line for line in lines if line.startswith("GPU"))
    assert plain == (
        "GPU, kvlab's plain sum (every weight + KV + compute, before llama.cpp places them): "
        "15,000.38 MiB of 16,311.00 MiB with a 512.00 MiB margin: fits"
    )
    counted = lines.index(next(line for line in lines if line.startswith("memory as llama.cpp counts it")))
    assert "the figures of llama-server's memory breakdown in its log" in lines[counted]
    assert "14,640.38 MiB" in lines[counted + 1]
    smi = next(line for line in lines if "as nvidia-smi would show" in line)
    assert smi.strip() == (
        "as nvidia-smi would show: 14,770.18 MiB–14,802.18 MiB of 16,311.00 MiB"
        " (compare with its memory.used while the server runs)"
    )


def test_the_json_carries_the_prompts_prefill_estimate_and_each_recommendations_first_token():
    data = fitted("--gpu", "rtx-5060-ti-16gb", "-c", "12288", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0",
                  "-fa", "on", "--prompt-tokens", "4362", "--output-tokens", "1738", "--concurrency", "3")  # fmt: skip
    pre = data["prefill_tok_s_estimate"]
    assert pre["prompt_tokens"] == 4362 and pre["n_ubatch"] == 512 and pre["unknown"] == []
    assert pre["tok_s"] == pytest.approx(4362 / pre["seconds"]) and 300 < pre["tok_s"] < 3000
    assert pre["label"].startswith("estimate, not a measurement") and pre["efficiency"]["CUDA0"].startswith("cuda: ")
    for r in data["recommendations"]:
        assert r["ttft"].startswith("first token ≈ ") and r["ttft_s"] > 0 and r["prefill_tok_s"] > 0
    slots = {r["ttft_s"]: r["command"][r["command"].index("-np") + 1] for r in data["recommendations"]}
    assert set(slots.values()) == {"2", "3"}
    for r in data["recommendations"]:  # three on two slots: the third waits for a whole request, then prefills
        np = r["command"][r["command"].index("-np") + 1]
        assert ("1 queued for a slot" in r["ttft"]) == (np == "2") and ("sharing the prefill" in r["ttft"]) == (
            np == "3"
        )
    assert min(t for t, np in slots.items() if np == "2") > 3 * max(t for t, np in slots.items() if np == "3")


@pytest.mark.parametrize("backend", ["vulkan", "metal"])
def test_backend_sets_the_factors_every_gpu_is_estimated_with(backend):
    cuda = fitted(
        "--gpu", "rtx-5060-ti-16gb", "-c", "8192", "-np", "1", "--prompt-tokens", "4000", "--output-tokens", "100"
    )
    other = fitted(
        "--gpu",
        "rtx-5060-ti-16gb",
        "-c",
        "8192",
        "-np",
        "1",
        "--prompt-tokens",
        "4000",
        "--output-tokens",
        "100",
        "--backend",
        backend,
    )
    assert other["prefill_tok_s_estimate"]["efficiency"]["CUDA0"].startswith(f"{backend}")
    assert other["decode_tok_s_estimate"]["tok_s"] != cuda["decode_tok_s_estimate"]["tok_s"]
    assert cuda["prefill_tok_s_estimate"]["efficiency"]["CUDA0"].startswith("cuda: ")


def test_without_a_workload_there_is_no_prompt_to_estimate():
    assert fitted("--gpu", "rtx-5060-ti-16gb", "-c", "8192")["prefill_tok_s_estimate"] is None


def test_an_unknown_backend_is_refused_with_the_ones_kvsize_knows():
    with pytest.raises(CommandError, match="--backend: The backend: cuda, rocm, vulkan, metal or sycl, not 'opencl'"):
        kvsize(*DEVSTRAL, "--gpu", "rtx-5060-ti-16gb", "--backend", "opencl")
