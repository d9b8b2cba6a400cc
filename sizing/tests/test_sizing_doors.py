"""The sizing page and `kvsize` are two doors to one sizing: the same inputs, fed to
the page as its shareable query string (`?format=json`) and to `kvsize --json`, give the same JSON —
the same result, or the same refusal of the same field. Each case also says what it must give, so
that two doors refusing alike for a wrong reason fail too."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from benchmarks.management.commands.kvsize import OPTION_OF_FIELD, Command
from benchmarks.models import Run
from sizing.forms import SizingForm
from sizing.tests.support import TINY

from .gguf_writer import write_gguf_head
from .sizing_page import form_values, results, size_it_again

pytestmark = pytest.mark.django_db

OK = None  # the case sizes
LONG = "9" * 5000  # past Python's 4,300-digit int conversion limit
MODEL = "llama-3.2-3b"
TINY_SPEC = json.dumps(TINY)

# (id, the page's query, kvsize's arguments, OK or (the field refused, a phrase of its message)).
# Without a model in the query, `model=llama-3.2-3b` / `--model llama-3.2-3b` is added to both.
CASES: list[tuple[str, list[tuple[str, str]], list[str], Any]] = [
    # The weights' size: one parser, GiB or GB or bytes.
    ("weights-gib", [("weights", "13.35GiB")], ["--weights", "13.35GiB"], OK),
    ("weights-gb-spaced", [("weights", "13.35 GB")], ["--weights", "13.35 GB"], OK),
    ("weights-bytes", [("weights", "14334000000")], ["--weights", "14334000000"], OK),
    ("weights-bare-gib", [("weights", "6.5")], ["--weights", "6.5"], OK),
    ("weights-1-pib", [("weights", "1024 TiB")], ["--weights", "1024 TiB"], OK),
    ("weights-over-1-pib", [("weights", "1025 TiB")], ["--weights", "1025 TiB"], ("weights", "at most 1 PiB")),
    ("weights-zero", [("weights", "0")], ["--weights", "0"], ("weights", "above 0")),
    ("weights-unit", [("weights", "13 PiB")], ["--weights", "13 PiB"], ("weights", "Unknown unit 'PiB'")),
    ("weights-words", [("weights", "big")], ["--weights", "big"], ("weights", "Give the weights' size")),
    ("weights-nul", [("weights", "13 GiB\0")], ["--weights", "13 GiB\0"], ("weights", "Null characters")),
    ("weights-huge", [("weights", "9" * 40)], ["--weights", "9" * 40], ("weights", "at most 1 PiB")),
    ("weights-too-long", [("weights", "9" * 41)], ["--weights", "9" * 41], ("weights", "at most 40 characters")),
    # The weights from the catalogue, and their tensors (the same guard on both doors).
    ("quant", [("quant", "Q4_K_M")], ["--quant", "Q4_K_M"], OK),
    ("quant-unknown", [("quant", "Q9_X")], ["--quant", "Q9_X"], ("quant", "has no Q9_X weights in the catalogue")),
    ("model-unknown", [("model", "no-such")], ["--model", "no-such"], ("model", "Unknown model 'no-such'")),
    ("model-nul", [("model", "llama\0")], ["--model", "llama\0"], ("model", "Unknown model")),
    # GPU memory: 256 MiB to 4 TiB, at each bound and just outside.
    ("gpu-mib-min", [("gpu_mib", "256")], ["--gpu", "256"], OK),
    ("gpu-mib-under", [("gpu_mib", "255")], ["--gpu", "255"], ("gpu_mib", "from 256 to 4,194,304")),
    ("gpu-mib-gib", [("gpu_mib", "24")], ["--gpu", "24"], ("gpu_mib", "(24 looks like GiB: 24 GiB is 24,576 MiB)")),
    ("gpu-mib-max", [("gpu_mib", "4194304")], ["--gpu", "4194304"], OK),
    ("gpu-mib-over", [("gpu_mib", "4194305")], ["--gpu", "4194305"], ("gpu_mib", "from 256 to 4,194,304")),
    ("gpu-mib-commas", [("gpu_mib", "16,311")], ["--gpu-mib", "16,311"], OK),
    ("gpu-mib-huge", [("gpu_mib", LONG)], ["--gpu", LONG], ("gpu_mib", "whole number of MiB")),
    ("gpu-mib-nul", [("gpu_mib", "8192\0")], ["--gpu-mib", "8192\0"], ("gpu_mib", "NUL character")),
    ("gpu-nul", [("gpu", "rtx-4090\0")], ["--gpu", "rtx-4090\0"], ("gpu", "NUL character")),
    ("gpu-unknown", [("gpu", "rtx-9999")], ["--gpu", "rtx-9999"], ("gpu", "'rtx-9999' is not a GPU of the catalogue")),
    ("gpu-used-max", [("gpu", "rtx-4090"), ("gpu_used", "24563")], ["--gpu", "rtx-4090:24563"], OK),
    ("gpu-used-all", [("gpu", "rtx-4090"), ("gpu_used", "24564")], ["--gpu", "rtx-4090:24564"], ("gpu_used", "below")),
    ("gpu-used-words", [("gpu_mib", "8192"), ("gpu_used", "x")], ["--gpu", "8192:x"], ("gpu_used", "whole MiB")),
    (
        "two-gpus",
        [("gpu", "rtx-3060-12gb"), ("gpu", "rtx-3060-12gb"), ("gpu_used", ""), ("gpu_used", "2048")]
        + [("quant", "Q4_K_M"), ("ctx_size", "32768")],
        ["--gpu", "rtx-3060-12gb", "--gpu", "rtx-3060-12gb:2048", "--quant", "Q4_K_M", "-c", "32768"],
        OK,
    ),
    ("seventeen-gpus", [("gpu", "rtx-4090")] * 17, ["--gpu", "rtx-4090"] * 17, ("gpu", "At most 16 GPUs")),
    # GPU bandwidth, once per GPU in order: 0.1 to 100,000 GB/s.
    (
        "gpu-gbps-per-gpu",
        [("gpu", "rtx-4090"), ("gpu", ""), ("gpu_mib", ""), ("gpu_mib", "8192"), ("gpu_gbps", ""), ("gpu_gbps", "448")]
        + [("quant", "Q8_0")],
        ["--gpu", "rtx-4090", "--gpu", "8192", "--gpu-gbps", "", "--gpu-gbps", "448", "--quant", "Q8_0"],
        OK,
    ),
    ("gpu-gbps-min", [("gpu_mib", "8192"), ("gpu_gbps", "0.1")], ["--gpu", "8192", "--gpu-gbps", "0.1"], OK),
    (
        "gpu-gbps-under",
        [("gpu_mib", "8192"), ("gpu_gbps", "0.09")],
        ["--gpu", "8192", "--gpu-gbps", "0.09"],
        ("gpu_gbps", "GPU 1: the bandwidth must be a number of GB/s from 0.1 to 100,000"),
    ),
    ("gpu-gbps-max", [("gpu_mib", "8192"), ("gpu_gbps", "100000")], ["--gpu", "8192", "--gpu-gbps", "100000"], OK),
    (
        "gpu-gbps-over",
        [("gpu_mib", "8192"), ("gpu_gbps", "100000.5")],
        ["--gpu", "8192", "--gpu-gbps", "100000.5"],
        ("gpu_gbps", "from 0.1 to 100,000"),
    ),
    (
        "gpu-gbps-exponent",
        [("gpu_mib", "8192"), ("gpu_gbps", "1e3")],
        ["--gpu-mib", "8192", "--gpu-gbps", "1e3"],
        ("gpu_gbps", "a number of GB/s"),
    ),  # fmt: skip
    (
        "gpu-gbps-nan",
        [("gpu_mib", "8192"), ("gpu_gbps", "nan")],
        ["--gpu", "8192", "--gpu-gbps", "nan"],
        ("gpu_gbps", "a number of GB/s"),
    ),  # fmt: skip
    ("gpu-gbps-no-gpu", [("gpu_gbps", "448")], ["--gpu-gbps", "448"], ("gpu", "GPU 1: pick a GPU")),
    # System RAM: 256 MiB to 16 TiB; bandwidth 0.1 to 100,000 GB/s (the GPUs' rule).
    ("ram-min", [("ram_mib", "256")], ["--ram-mib", "256"], OK),
    ("ram-under", [("ram_mib", "255")], ["--ram-mib", "255"], ("ram_mib", "from 256 to 16,777,216")),
    ("ram-gib", [("ram_mib", "64")], ["--ram-mib", "64"], ("ram_mib", "64 GiB is 65,536 MiB")),
    ("ram-max", [("ram_mib", "16777216")], ["--ram-mib", "16777216"], OK),
    ("ram-over", [("ram_mib", "16777217")], ["--ram-mib", "16777217"], ("ram_mib", "from 256 to 16,777,216")),
    ("ram-negative", [("ram_mib", "-1")], ["--ram-mib", "-1"], ("ram_mib", "whole number of MiB")),
    ("ram-huge", [("ram_mib", LONG)], ["--ram-mib", LONG], ("ram_mib", "at most 64 characters")),
    ("ram-gbps-min", [("ram_mib", "65536"), ("ram_gbps", "0.1")], ["--ram-mib", "65536", "--ram-gbps", "0.1"], OK),
    ("ram-gbps-under", [("ram_gbps", "0.09")], ["--ram-gbps", "0.09"], ("ram_gbps", "from 0.1 to 100,000")),
    ("ram-gbps-zero", [("ram_gbps", "0")], ["--ram-gbps", "0"], ("ram_gbps", "from 0.1 to 100,000")),
    ("ram-gbps-max", [("ram_gbps", "100000")], ["--ram-gbps", "100000"], OK),
    ("ram-gbps-over", [("ram_gbps", "100001")], ["--ram-gbps", "100001"], ("ram_gbps", "from 0.1 to 100,000")),
    ("ram-gbps-inf", [("ram_gbps", "inf")], ["--ram-gbps", "inf"], ("ram_gbps", "a number of GB/s")),
    ("ram-gbps-nul", [("ram_gbps", "5\0")], ["--ram-gbps", "5\0"], ("ram_gbps", "Null characters")),
    (
        "cpu-amx",
        [("quant", "Q8_0"), ("ctx_size", "4096"), ("ram_mib", "65536"), ("cpu", "avx512+amx")],
        ["--quant", "Q8_0", "-c", "4096", "--ram-mib", "65536", "--cpu", "avx512+amx"],
        OK,
    ),
    ("cpu-unknown", [("cpu", "pentium")], ["--cpu", "pentium"], ("cpu", "Host CPU: unknown CPU 'pentium'")),
    # The flag fields, read as llama-server reads the flag.
    ("ctx", [("ctx_size", "16384")], ["-c", "16384"], OK),
    ("ctx-max", [("ctx_size", "16777216")], ["-c", "16777216"], OK),
    ("ctx-over", [("ctx_size", "16777217")], ["-c", "16777217"], ("ctx_size", "-c 16777217: must be 0")),
    ("ctx-negative", [("ctx_size", "-1")], ["-c", "-1"], ("ctx_size", "-c -1: must be 0 (the model's context)")),
    ("ctx-words", [("ctx_size", "lots")], ["-c", "lots"], ("ctx_size", "-c lots: not a whole number")),
    ("ctx-huge", [("ctx_size", LONG)], ["-c", LONG], ("ctx_size", "at most 64 characters")),
    ("ctx-nul", [("ctx_size", "4096\0")], ["-c", "4096\0"], ("ctx_size", "Null characters")),
    (
        # -c 0 is the model's whole context, which --fit may not shrink: on the page as in a command
        "ctx-0-keeps-fit-off-the-context",
        [("model", "devstral-small-2-24b"), ("quant", "Q4_K_M"), ("gpu", "rtx-5060-ti-16gb"), ("ctx_size", "0")],
        ["--model", "devstral-small-2-24b", "--quant", "Q4_K_M", "--gpu", "rtx-5060-ti-16gb", "-c", "0"],
        OK,
    ),
    ("np-auto", [("parallel", "-1")], ["-np", "-1"], OK),
    ("np-max", [("parallel", "256")], ["-np", "256"], OK),
    ("np-zero", [("parallel", "0")], ["-np", "0"], ("parallel", "-np 0: must be -1 (auto) or 1 to 256")),
    ("np-over", [("parallel", "257")], ["-np", "257"], ("parallel", "-np 257: must be -1 (auto) or 1 to 256")),
    ("kvu", [("parallel", "2"), ("kv_unified", "on")], ["-np", "2", "-kvu"], OK),
    ("no-kvu", [("parallel", "2"), ("kv_unified", "off")], ["-np", "2", "--no-kv-unified"], OK),
    (
        "ctk-q8",
        [("type_k", "q8_0"), ("type_v", "q8_0"), ("flash_attn", "on")],
        ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"],
        OK,
    ),  # fmt: skip
    ("ctk-unknown", [("type_k", "q3_k")], ["-ctk", "q3_k"], ("type_k", "-ctk q3_k: unknown cache type")),
    ("fa-unknown", [("flash_attn", "maybe")], ["-fa", "maybe"], ("flash_attn", "-fa maybe: give on, off or auto")),
    # A quantized V cache without flash attention: sized, and said not to start (kvsize exits non-zero).
    ("will-not-start", [("type_v", "q8_0"), ("flash_attn", "off")], ["-ctv", "q8_0", "-fa", "off"], OK),
    ("swa-full-no-offload", [("swa_full", "on"), ("no_kv_offload", "on")], ["--swa-full", "--no-kv-offload"], OK),
    ("ub-min", [("n_ubatch", "1")], ["-ub", "1"], OK),
    ("ub-zero", [("n_ubatch", "0")], ["-ub", "0"], ("n_ubatch", "-ub 0: must be 1 to")),
    ("ngl-all", [("gpu", "rtx-4090"), ("n_gpu_layers", "all")], ["--gpu", "rtx-4090", "-ngl", "all"], OK),
    ("ngl-auto", [("gpu", "rtx-4090"), ("n_gpu_layers", "auto")], ["--gpu", "rtx-4090", "-ngl", "auto"], OK),
    ("ngl-n", [("gpu", "rtx-4090"), ("n_gpu_layers", "10")], ["--gpu", "rtx-4090", "-ngl", "10"], OK),
    ("ngl-under", [("n_gpu_layers", "-3")], ["-ngl", "-3"], ("n_gpu_layers", "-ngl -3: must be -1 (auto), -2")),
    # Flags only a command sets: kvsize adds its options to the command, as the page reads it.
    ("batch", [("command", "llama-server -b 4096")], ["-b", "4096"], OK),
    ("sm-unknown", [("command", "llama-server -sm x")], ["-sm", "x"], ("command", "-sm x: must be one of")),
    (
        "command",
        [("command", "llama-server -c 8192 -np 2 -ctk q8_0 -fa on")],
        ["--command", "llama-server -c 8192 -np 2 -ctk q8_0 -fa on"],
        OK,
    ),
    (
        # kvsize's flags over its --command are the page's fields over the command it showed
        "fields-over-the-command",
        [
            ("command", "llama-server -c 4096 -np 2"),
            ("command_synced", "llama-server -c 4096 -np 2"),
            ("ctx_size", "8192"),
            ("parallel", "2"),
        ],
        ["--command", "llama-server -c 4096 -np 2", "-c", "8192"],
        OK,
    ),  # fmt: skip
    (
        "command-refused",
        [("command", "llama-server -np 0")],
        ["--command", "llama-server -np 0"],
        ("command", "The command line: -np 0: must be"),
    ),  # fmt: skip
    # The workload.
    (
        "workload",
        [("prompt_tokens", "4362"), ("output_tokens", "1738"), ("concurrency", "3")],
        ["--prompt-tokens", "4362", "--output-tokens", "1738", "--concurrency", "3"],
        OK,
    ),  # fmt: skip
    (
        "workload-min",
        [("prompt_tokens", "1"), ("output_tokens", "0")],
        ["--prompt-tokens", "1", "--output-tokens", "0"],
        OK,
    ),  # fmt: skip
    (
        "prompt-zero",
        [("prompt_tokens", "0"), ("output_tokens", "1")],
        ["--prompt-tokens", "0", "--output-tokens", "1"],
        ("prompt_tokens", "greater than or equal to 1"),
    ),  # fmt: skip
    (
        "prompt-over",
        [("prompt_tokens", "16777217"), ("output_tokens", "1")],
        ["--prompt-tokens", "16777217", "--output-tokens", "1"],
        ("prompt_tokens", "less than or equal to 16777216"),
    ),  # fmt: skip
    (
        "prompt-huge",
        [("prompt_tokens", LONG), ("output_tokens", "1")],
        ["--prompt-tokens", LONG, "--output-tokens", "1"],
        ("prompt_tokens", "Enter a whole number"),
    ),  # fmt: skip
    ("output-only", [("output_tokens", "10")], ["--output-tokens", "10"], ("prompt_tokens", "Give both")),
    (
        "concurrency-max",
        [("prompt_tokens", "10"), ("output_tokens", "10"), ("concurrency", "1024")],
        ["--prompt-tokens", "10", "--output-tokens", "10", "--concurrency", "1024"],
        OK,
    ),  # fmt: skip
    (
        "concurrency-over",
        [("prompt_tokens", "10"), ("output_tokens", "10"), ("concurrency", "1025")],
        ["--prompt-tokens", "10", "--output-tokens", "10", "--concurrency", "1025"],
        ("concurrency", "less than"),
    ),  # fmt: skip
    (
        "latency",
        [("prompt_tokens", "10"), ("output_tokens", "10"), ("prefer", "latency")],
        ["--prompt-tokens", "10", "--output-tokens", "10", "--prefer", "latency"],
        OK,
    ),  # fmt: skip
    ("prefer-unknown", [("prefer", "speed")], ["--prefer", "speed"], ("prefer", "throughput or latency, not 'speed'")),
    ("run-missing", [("run", "999")], ["--run", "999"], ("run", "Run #999 does not exist or has no prompt sizes")),
    ("run-zero", [("run", "0")], ["--run", "0"], ("run", "greater than or equal to 1")),
    ("run-huge", [("run", "9" * 30)], ["--run", "9" * 30], ("run", "less than or equal to 9223372036854775807")),
    # Pasted metadata is the --spec file's text.
    (
        "spec",
        [("source", "params"), ("params", TINY_SPEC), ("ctx_size", "2048")],
        ["--spec", "{spec}", "-c", "2048"],
        OK,
    ),
    (
        "spec-not-json",
        [("source", "params"), ("params", "{nope")],
        ["--spec", "{nope}"],
        ("params", "The metadata is not JSON"),
    ),  # fmt: skip
    (
        "spec-bert",
        [("source", "params"), ("params", '{"general.architecture": "bert"}')],
        ["--spec", "{bert}"],
        ("params", "architecture 'bert' is not one kvlab sizes"),
    ),  # fmt: skip
]


def page_json(client: Client, query: list[tuple[str, str]]) -> tuple[int, dict[str, Any]]:
    response = client.get("/sizing/?" + urlencode([*query, ("format", "json")]))
    assert response["Content-Type"] == "application/json"
    return response.status_code, response.json()


def kvsize_json(*args: str) -> tuple[bool, dict[str, Any]]:
    """kvsize --json's output, and whether it exited with an error (a refusal, or 'will not start')."""
    out = StringIO()
    try:
        call_command("kvsize", *args, "--json", stdout=out)
    except CommandError:
        return True, json.loads(out.getvalue())
    return False, json.loads(out.getvalue())


@pytest.fixture
def spec_files(tmp_path: Path) -> dict[str, str]:
    files = {"spec": TINY_SPEC, "nope": "{nope", "bert": '{"general.architecture": "bert"}'}
    for name, content in files.items():
        (tmp_path / f"{name}.json").write_text(content)
    return {"{" + name + "}": str(tmp_path / f"{name}.json") for name in files}


@pytest.mark.parametrize(("query", "args", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_page_and_kvsize_give_the_same_json(client, spec_files, query, args, expect):
    if not any(name in ("model", "source") for name, _ in query):
        query, args = [("model", MODEL), *query], ["--model", MODEL, *args]
    args = [spec_files.get(a, a) for a in args]
    status, page = page_json(client, query)
    failed, cli = kvsize_json(*args)
    assert cli == page
    if expect is OK:
        assert status == 200 and "kv_bytes" in page and "input_errors" not in page
        assert failed == bool(page["errors"])  # kvsize exits with an error when the server will not start
    else:
        field, phrase = expect
        assert status == 400 and failed and set(page) == {"input_errors"}
        assert any(phrase in message for message in page["input_errors"].get(field, [])), page["input_errors"]


def test_a_run_s_measured_prompts_are_the_same_workload_on_both_doors(client, investigation):
    run = Run.objects.get(key="c3p-queue2")  # p95 4,362 + 1,738 tokens, 2 at once (test_page_statements.py)
    query, args = [("model", "devstral-small-2-24b"), ("run", str(run.pk))], ["--model", "devstral-small-2-24b"]
    status, page = page_json(client, query)
    failed, cli = kvsize_json(*args, "--run", str(run.pk))
    assert status == 200 and not failed and cli == page
    assert page["prediction"]["message"].startswith("2 concurrent requests need 12,200 of the pool's")
    # a concurrency given wins over the run's, on both doors
    status, page = page_json(client, [*query, ("concurrency", "3")])
    assert kvsize_json(*args, "--run", str(run.pk), "--concurrency", "3")[1] == page
    assert page["prediction"]["message"].startswith("3 concurrent requests need 18,300 of the pool's")


def test_a_gguf_file_sizes_as_its_uploaded_head_does(tmp_path, client, user_client):
    path = tmp_path / "tiny-Q8_0.gguf"
    tensors = [("token_embd.weight", (256, 1000), 8), ("blk.0.attn_q.weight", (256, 256), 8)]
    write_gguf_head(path, {**TINY, "tokenizer.ggml.tokens": ["a"] * 1000}, tensors=tensors)
    with path.open("rb") as fh:
        response = user_client.post("/sizing/gguf/", {"head": fh})
    token = response.url.split("gguf=")[1].split("&")[0]
    status, page = page_json(client, [("source", "gguf"), ("gguf", token), ("ctx_size", "2048"), ("ram_mib", "4096")])
    failed, cli = kvsize_json("--gguf", str(path), "-c", "2048", "--ram-mib", "4096")
    assert status == 200 and cli == page
    assert page["memory"]["weights_source"] == "gguf tensors" and page["memory"]["weights_bytes"] > 0


def test_kvsize_has_an_option_for_every_field_of_the_form():
    assert set(OPTION_OF_FIELD) == set(SizingForm().fields)
    parser = Command().create_parser("manage.py", "kvsize")
    known = {s for action in parser._actions for s in action.option_strings}
    for option in OPTION_OF_FIELD.values():
        assert set(option.split("/")) <= known, option


def test_kvsize_names_the_option_each_refusal_is_about():
    with pytest.raises(CommandError) as raised:
        call_command("kvsize", "--model", MODEL, "-c", "-1", "--ram-mib", "12", stdout=StringIO())
    assert str(raised.value).splitlines() == [
        "-c -1: must be 0 (the model's context) to 16,777,216",
        "--ram-mib: System RAM: its size must be a whole number of MiB from 256 to 16,777,216 "
        "(12 looks like GiB: 12 GiB is 12,288 MiB).",
    ]
    with pytest.raises(CommandError) as raised:
        call_command("kvsize", "--model", MODEL, "--gpu", "8192", "--gpu-gbps", "0", stdout=StringIO())
    assert str(raised.value) == "--gpu-gbps: GPU 1: the bandwidth must be a number of GB/s from 0.1 to 100,000."
    with pytest.raises(CommandError) as raised:
        call_command("kvsize", "--model", MODEL, "-sm", "diagonal", stdout=StringIO())
    assert str(raised.value) == "The command line: -sm diagonal: must be one of none, layer, row, tensor"


def test_the_page_shows_the_same_bounds_as_it_checks(client):
    page = client.get("/sizing/", {"model": MODEL}).content.decode()
    assert 'name="gpu_mib" min="256" max="4194304"' in page
    assert 'name="ram_mib" min="256" max="16777216"' in page
    assert 'name="ram_gbps" min="0.1" max="100000" step="any"' in page


def test_the_c_field_at_0_is_llama_servers_c_0_on_both_doors(client):
    """-c 0 asks for the model's whole context, which --fit may then not shrink (it moves layers instead)."""
    devstral = [("model", "devstral-small-2-24b"), ("quant", "Q4_K_M"), ("gpu", "rtx-5060-ti-16gb")]
    field = page_json(client, [*devstral, ("ctx_size", "0")])[1]
    command = page_json(client, [*devstral, ("command", "llama-server -c 0")])[1]
    cli = kvsize_json("--model", "devstral-small-2-24b", "--quant", "Q4_K_M", "--gpu", "rtx-5060-ti-16gb", "-c", "0")[1]
    assert field == command == cli
    assert field["effective"]["n_ctx"] == 393216 and field["effective"]["n_gpu_layers"] < 41
    # blank, --fit chooses the context
    assert page_json(client, devstral)[1]["effective"]["n_ctx"] < 393216


def test_the_page_shows_c_0_and_ngl_all_as_it_used_them_and_size_it_again_changes_nothing(client):
    devstral = {"model": "devstral-small-2-24b", "quant": "Q4_K_M", "gpu": "rtx-5060-ti-16gb"}
    first = client.get("/sizing/", {**devstral, "ctx_size": 0, "n_gpu_layers": "all"})
    values = form_values(first)
    assert (values["ctx_size"], values["n_gpu_layers"]) == ("0", "all")
    assert results(size_it_again(client, first)) == results(first)


def test_a_field_blanked_under_a_command_with_c_0_lets_the_fit_choose_again(client):
    devstral = {"model": "devstral-small-2-24b", "quant": "Q4_K_M", "gpu": "rtx-5060-ti-16gb"}
    first = client.get("/sizing/", {**devstral, "command": "llama-server -c 0"})
    values = form_values(first)
    assert values["ctx_size"] == "0" and values["command"] == values["command_synced"]
    full = page_json(client, [*values.items()])[1]
    blanked = page_json(client, [*(values | {"ctx_size": ""}).items()])[1]
    assert full["effective"]["n_ctx"] == 393216 and blanked["effective"]["n_ctx"] < 393216


def test_the_json_door_without_a_model_says_what_to_give(client):
    response = client.get("/sizing/", {"ctx_size": 4096, "format": "json"})
    assert response.status_code == 400
    assert response.json() == {
        "input_errors": {"model": ["Nothing to size: pick a model, give its GGUF metadata or a GGUF head."]}
    }
    # the page itself is unchanged by the JSON door
    assert "Pick a model" in client.get("/sizing/", {"ctx_size": 4096}).content.decode()
