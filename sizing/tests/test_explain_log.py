# ruff: noqa: E501, W291  (real log lines are long; print_info ends one with a space)
"""Explain a llama-server start-up log: the parser (sizing.server_log.parse_startup_log), the comparison
(sizing.explain_log) and the page (/sizing/explain-log/).

The public excerpts below are a few lines each of logs posted in llama.cpp issues (the URL above each),
retyped here to pin the formats of other builds, GPUs and log prefixes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from sizing.cmdline import parse_command
from sizing.explain_log import DIFFERS, EQUAL, WITHIN, explain, flags_from_log, model_metadata
from sizing.gguf import read_gguf_head
from sizing.hparams import model_params
from sizing.models import GgufHead
from sizing.placement.tensors import from_gguf
from sizing.placement.types import Host, MiB
from sizing.server_log import MAX_LOG_CHARS, LogError, parse_startup_log
from sizing.sparse_gguf import write_sparse
from sizing.tests.support import REPACK, text

from .tiny_llama_log import TINY_LLAMA, TINY_WEIGHTS


def _unprefixed(log: str) -> str:
    """The same log as --no-log-prefix --no-log-timestamps prints it."""
    return "\n".join(line[15:] if line[:1].isdigit() else line for line in log.splitlines())


def test_the_parser_reads_every_figure_of_a_start_up_log():
    log = parse_startup_log(TINY_LLAMA)
    assert log.build == {"number": 0, "commit": "unknown", "compiler": "GNU 12.2.0", "target": "Linux x86_64"}
    assert (log.model_path, log.model_name, log.model_arch) == ("/tmp/tiny-llama.gguf", "kvlab tiny llama", "llama")
    assert (log.n_ctx, log.n_ctx_seq, log.n_seq_max, log.n_batch, log.n_ubatch) == (2304, 768, 3, 2048, 512)
    assert (log.kv_unified, log.flash_attn, log.flash_attn_resolved, log.cache_types) == (
        False,
        "auto",
        True,
        ("f16", "f16"),
    )
    assert (log.n_slots, log.n_ctx_slot) == (3, 768)
    assert log.slots == [{"id": 0, "n_ctx": 768}, {"id": 1, "n_ctx": 768}, {"id": 2, "n_ctx": 768}]
    (kv,) = log.kv_caches
    assert (kv.size_mib, kv.cells, kv.layers, kv.n_seq_max, kv.n_stream, kv.k_mib, kv.v_mib) == (
        "2.25",
        768,
        4,
        3,
        3,
        "1.12",
        "1.12",
    )
    assert [(b.kind, b.device, b.mib) for b in log.buffers] == [
        ("model", "CPU_Mapped", "6.05"), ("output", "CPU", "0.00"), ("kv", "CPU", "2.25"), ("compute", "CPU", "3.78"),
    ]  # fmt: skip
    assert log.devices == [{"name": "CPU", "description": "AMD EPYC", "total_mib": 24105, "free_mib": 24105}]
    assert log.memory_breakdowns == [
        [
            {
                "name": "Host",
                "description": None,
                "total": None,
                "free": None,
                "self": 12,
                "model": 6,
                "context": 2,
                "compute": 3,
                "unaccounted": None,
            }
        ]
    ]
    assert any("no changes needed" in line for line in log.fit)
    assert log.metadata["llama.attention.head_count_kv"] == 2 and log.metadata_truncated == ["tokenizer.ggml.tokens"]
    assert log.array_lengths == {"tokenizer.ggml.tokens": 275} and log.missing == []
    assert log.to_dict()["kv_caches"][0]["cells"] == 768


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda s: s, id="prefix and timestamps"),
        pytest.param(_unprefixed, id="no prefix"),
        pytest.param(lambda s: s.replace("\n", "\r\n"), id="windows line endings"),
        pytest.param(
            lambda s: "\n".join(
                f"\x1b[34m{ln[:12]}\x1b[0m \x1b[32m{ln[13:15]}\x1b[0m{ln[15:]}" for ln in s.splitlines()
            ),
            id="colours",
        ),
        pytest.param(
            lambda s: "\n".join(f"llama-server    | [41123] {ln}" for ln in s.splitlines()), id="docker and router"
        ),
        pytest.param(
            lambda s: "\n".join(f"Jan 05 10:00:00 gpu1 llama-server[812]: {ln[15:]}" for ln in s.splitlines()),
            id="journald",
        ),
    ],
)
def test_the_parser_reads_the_same_figures_whatever_the_prefix(variant):
    read, expected = parse_startup_log(variant(TINY_LLAMA)).to_dict(), parse_startup_log(TINY_LLAMA).to_dict()
    assert abs(read.pop("n_lines") - expected.pop("n_lines")) <= 1  # a trailing newline or not
    assert read == expected


def test_a_log_cut_short_reports_what_it_has_and_says_what_is_missing():
    cut = TINY_LLAMA[: TINY_LLAMA.index("llama_kv_cache: ")]
    log = parse_startup_log(cut)
    assert log.n_ctx == 2304 and log.kv_caches == []
    assert {"KV cache lines", "compute buffers", "slots"} <= set(log.missing)
    assert "n_ctx" not in log.missing


def test_bytes_are_read_as_utf8():
    assert parse_startup_log(TINY_LLAMA.encode()).n_ctx == 2304


def test_ten_megabytes_of_garbage_is_refused_quickly_with_a_clear_message():
    start = time.monotonic()
    with pytest.raises(LogError, match=r"at most 2 MiB"):
        parse_startup_log("x" * (10 * 1024 * 1024))
    with pytest.raises(LogError, match=r"at most 2 MiB"):
        parse_startup_log(b"\xff" * (10 * 1024 * 1024))
    assert time.monotonic() - start < 1


def test_garbage_under_the_cap_is_refused_in_bounded_time():
    garbage = ("llama_context: " + "a" * 5000 + "\n" + "( " * 3000 + "\n") * 100 + "=" * (MAX_LOG_CHARS - 2_000_000)
    start = time.monotonic()
    with pytest.raises(LogError, match="No line of a llama-server start-up log"):
        parse_startup_log(garbage)
    assert time.monotonic() - start < 5


def test_nul_bytes_are_refused():
    with pytest.raises(LogError, match="NUL"):
        parse_startup_log(TINY_LLAMA + "\0\0\0")


def test_a_json_file_is_not_a_log():
    with pytest.raises(LogError):
        parse_startup_log('{"ttft_ms": 12.5, "model": "llama"}')


# https://github.com/ggml-org/llama.cpp/pull/8035 — an older build: llm_load_tensors "buffer size" lines,
# llama_new_context_with_model, llama_kv_cache_init, two CUDA devices from ggml_cuda_init.
OLD_TWO_GPUS = """\
ggml_cuda_init: found 2 CUDA devices:
  Device 0: NVIDIA GeForce RTX 4060 Ti, compute capability 8.9, VMM: yes
  Device 1: NVIDIA GeForce RTX 3060, compute capability 8.6, VMM: yes
llm_load_tensors: offloaded 78/81 layers to GPU
llm_load_tensors:        CPU buffer size = 22994.45 MiB
llm_load_tensors:      CUDA0 buffer size = 12633.25 MiB
llm_load_tensors:      CUDA1 buffer size =  8652.00 MiB
llama_new_context_with_model: n_ctx      = 8192
llama_new_context_with_model: n_batch    = 2048
llama_new_context_with_model: n_ubatch   = 512
llama_new_context_with_model: flash_attn = 0
llama_kv_cache_init:  CUDA_Host KV buffer size =    64.00 MiB
llama_kv_cache_init:      CUDA0 KV buffer size =  1472.00 MiB
llama_kv_cache_init:      CUDA1 KV buffer size =  1024.00 MiB
llama_new_context_with_model:      CUDA0 compute buffer size =  1108.50 MiB
"""


def test_an_older_builds_names_and_two_gpus_are_read():
    log = parse_startup_log(OLD_TWO_GPUS)
    assert [(d["name"], d["compute_capability"]) for d in log.devices] == [("CUDA0", 8.9), ("CUDA1", 8.6)]
    assert log.offloaded_layers == (78, 81) and log.n_ctx == 8192
    assert (log.flash_attn, log.flash_attn_resolved) == ("disabled", False)
    assert log.buffers_of("model") == {"CPU": 22994.45, "CUDA0": 12633.25, "CUDA1": 8652.0}
    assert log.buffers_of("kv") == {"CUDA_Host": 64.0, "CUDA0": 1472.0, "CUDA1": 1024.0}
    assert log.buffers_of("compute") == {"CUDA0": 1108.5}


# https://github.com/ggml-org/llama.cpp/issues/27680 — a recent build with coloured timestamps and an SWA cache on CUDA.
COLOURED_CUDA = """\
\x1b[34m1.14.608.512\x1b[0m \x1b[32mI \x1b[0mllama_context: n_ctx_seq (64000) < n_ctx_train (1048576) -- the full capacity of the model will not be utilized
\x1b[34m1.14.608.918\x1b[0m \x1b[32mI \x1b[0mllama_context:  CUDA_Host  output buffer size =     0.49 MiB
\x1b[34m1.14.609.492\x1b[0m \x1b[32mI \x1b[0mllama_kv_cache_iswa: creating     SWA KV cache, size = 4352 cells
\x1b[34m1.14.610.021\x1b[0m \x1b[32mI \x1b[0mllama_kv_cache:      CUDA0 KV buffer size =   182.75 MiB
"""


def test_coloured_timestamps_and_cuda_buffers_are_read():
    log = parse_startup_log(COLOURED_CUDA)
    assert [(b.kind, b.device, b.mib) for b in log.buffers] == [
        ("output", "CUDA_Host", "0.49"),
        ("kv", "CUDA0", "182.75"),
    ]
    assert log.notes[0].startswith("n_ctx_seq (64000)")


# https://github.com/ggml-org/llama.cpp/pull/25465 — the memory breakdown of a CUDA GPU, without a timestamp.
BREAKDOWN_5090 = """\
I common_memory_breakdown_print: | memory breakdown [MiB] | total    free     self   model   context   compute    unaccounted |
I common_memory_breakdown_print: |   - CUDA0 (RTX 5090)   | 32111 = 31605 + (18058 = 16386 +    1024 +     648) +      -17552 |
I common_memory_breakdown_print: |   - Host               |                   1234 =   682 +       0 +     552                |
"""


def test_the_memory_breakdown_table_is_read_per_device():
    (table,) = parse_startup_log(BREAKDOWN_5090).memory_breakdowns
    assert table[0] == {
        "name": "CUDA0", "description": "RTX 5090", "total": 32111, "free": 31605, "self": 18058,
        "model": 16386, "context": 1024, "compute": 648, "unaccounted": -17552,
    }  # fmt: skip
    assert table[1]["name"] == "Host" and table[1]["compute"] == 552


# https://github.com/ggml-org/llama.cpp/issues/24608 — eight GPUs' rows (two shown) with timestamps.
BREAKDOWN_3090 = """\
0.13.594.200 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |
0.13.594.200 I common_memory_breakdown_print: |   - CUDA0 (RTX 3090)   | 24123 = 23832 + (26252 = 24402 +     296 +    1553) +      -25960 |
0.13.594.200 I common_memory_breakdown_print: |   - CUDA1 (RTX 3090)   | 24123 = 23832 + (26316 = 24402 +     296 +    1617) +      -26024 |
"""


def test_several_gpus_rows_are_read():
    (table,) = parse_startup_log(BREAKDOWN_3090).memory_breakdowns
    assert [(r["name"], r["compute"]) for r in table] == [("CUDA0", 1553), ("CUDA1", 1617)]


# https://github.com/ggml-org/llama.cpp/pull/14363 — a Windows build's build line and the device it loads on.
WINDOWS_BUILD = """\
build: 0 (unknown) with MSVC 19.44.35207.1 for x64\r
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4070 SUPER) - 11053 MiB free\r
"""


def test_a_windows_build_line_and_device_are_read():
    log = parse_startup_log(WINDOWS_BUILD)
    assert log.build == {"number": 0, "commit": "unknown", "compiler": "MSVC 19.44.35207.1", "target": "x64"}
    assert log.devices == [{"name": "CUDA0", "description": "NVIDIA GeForce RTX 4070 SUPER", "free_mib": 11053}]


# https://github.com/ggml-org/llama.cpp/pull/16653 — the fit reducing the context.
FIT_REDUCED = """\
llama_params_fit: context size reduced from 65536 to 4096 -> need 13440 MiB less memory
llama_context: n_ctx                 = 4096
"""


def test_the_fit_reducing_the_context_is_said():
    log = parse_startup_log(FIT_REDUCED)
    assert log.fit_context == (65536, 4096)
    explanation = explain(log, None)
    assert "The fit reduced the context from 65,536 to 4,096 tokens" in explanation.adjustments[0]
    assert explanation.problems and explanation.figures == []


# --- the comparison ---------------------------------------------------------------------------------


def test_the_tiny_log_is_explained_with_every_figure_equal_but_the_compute_estimate():
    log = parse_startup_log(TINY_LLAMA)
    model = model_params(model_metadata(log))
    explanation = explain(log, model, weights_bytes=TINY_WEIGHTS)
    verdicts = {(f.group, f.name): f.verdict for f in explanation.figures}
    assert verdicts.pop(("buffers", "CPU compute buffer")) == WITHIN
    assert set(verdicts.values()) == {EQUAL}
    assert ("KV cache 1", "K (f16)") in verdicts and ("slots", "slot 2 n_ctx") in verdicts
    assert ("buffers", "model buffer") in verdicts
    assert any("rounded the context" in a for a in explanation.adjustments)
    assert "-fa auto resolved to on." in explanation.adjustments


def test_the_flags_are_those_the_server_ran_with():
    flags = flags_from_log(parse_startup_log(TINY_LLAMA))
    assert (flags.ctx_size, flags.parallel, flags.kv_unified, flags.flash_attn) == (2304, 3, False, "on")


def test_what_the_user_asked_for_is_compared_with_what_ran():
    from sizing.cmdline import parse_command

    log = parse_startup_log(TINY_LLAMA)
    model = model_params(model_metadata(log))
    intended = parse_command("llama-server -m m.gguf -c 4096 -np 3 -ctk q8_0 -ctv q8_0 -fa on").flags
    adjustments = explain(log, model, intended=intended).adjustments
    assert "You asked for context per slot 1,536; the server ran with 768." in adjustments
    assert any("q8_0/q8_0" in a and "f16/f16" in a for a in adjustments)


def test_a_different_model_makes_the_figures_differ():
    log = parse_startup_log(TINY_LLAMA)
    metadata = dict(model_metadata(log) or {}, **{"llama.attention.head_count_kv": 4})
    explanation = explain(log, model_params(metadata))
    assert any(f.verdict == DIFFERS and f.name == "size" for f in explanation.figures)


def test_a_cut_per_layer_array_asks_for_the_model():
    log = parse_startup_log(
        TINY_LLAMA
        + "llama_model_loader: - kv  18:   llama.attention.head_count_kv arr[i32,40]  = [8, 8, 0, 8, 8, 0, 8, 8, 0, 8, 8, ...\n"
    )
    assert model_metadata(log) is None
    assert "the model is unknown" in explain(log, None).problems[0]


# --- the page -----------------------------------------------------------------------------------------

URL = "/sizing/explain-log/"


def test_the_url_is_named():
    assert reverse("sizing-explain-log") == URL


@pytest.mark.django_db
def test_the_sizing_page_links_to_it(client):
    assert f'href="{URL}"' in text(client.get("/sizing/"))


@pytest.mark.django_db
def test_the_page_shows_the_form_logged_out(client):
    page = text(client.get(URL))
    assert "Explain a llama-server log" in page and 'name="log"' in page and "csrfmiddlewaretoken" in page


@pytest.mark.django_db
def test_a_pasted_log_is_explained_figure_by_figure(client):
    response = client.post(URL, {"log": TINY_LLAMA, "weights": str(TINY_WEIGHTS)})
    page = text(response)
    assert response.status_code == 200
    assert "kvlab tiny llama" in page and "the GGUF metadata the log printed" in page
    assert (
        '<tr class="verdict-equal"><td>KV cache 1</td><td>size</td><td class="num">2.25 MiB</td><td class="num">2.25 MiB</td><td>equal'
        in page
    )
    assert '<td>slots</td><td>slot 2 n_ctx</td><td class="num">768</td><td class="num">768</td><td>equal' in page
    assert (
        '<td>buffers</td><td>model buffer</td><td class="num">6.05 MiB</td><td class="num">6.05 MiB</td><td>equal'
        in page
    )
    assert "CPU compute buffer" in page and "within" in page
    assert "rounding down to 2304" in page and "-fa auto resolved to on." in page
    assert "0 (unknown) with GNU 12.2.0 for Linux x86_64" in page


@pytest.mark.django_db
def test_the_htmx_request_gets_only_the_explanation(client):
    response = client.post(URL, {"log": TINY_LLAMA}, headers={"HX-Request": "true"})
    page = text(response)
    assert page.lstrip().startswith('<section id="explanation"') and "<form" not in page
    assert "model buffer" in page and "not predicted" in page


@pytest.mark.django_db
def test_the_model_may_be_given_when_the_log_lacks_it(client):
    cut = "\n".join(line for line in TINY_LLAMA.splitlines() if "llama_model_loader: - kv" not in line)
    page = text(client.post(URL, {"log": cut}))
    assert "the model is unknown" in page
    metadata = '{"general.architecture": "llama", "llama.block_count": 4, "llama.embedding_length": 256, "llama.attention.head_count": 8, "llama.attention.head_count_kv": 2, "llama.context_length": 8192, "llama.vocab_size": 275}'
    page = text(client.post(URL, {"log": cut, "params": metadata}))
    assert (
        "the pasted GGUF metadata" in page
        and '<td class="num">2.25 MiB</td><td class="num">2.25 MiB</td><td>equal' in page
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("log", "message"),
    [
        ("", "This field is required."),
        ("just some text\nwith no llama-server lines\n", "No line of a llama-server start-up log"),
        (TINY_LLAMA + "\0", "Null characters are not allowed"),
        ("x" * (MAX_LOG_CHARS + 1), "at most 2 MiB"),
    ],
    ids=["empty", "not a log", "NUL", "too long"],
)
def test_an_invalid_log_gets_a_message_and_a_400(client, log, message):
    response = client.post(URL, {"log": log})
    assert response.status_code == 400 and message in text(response)


@pytest.mark.django_db
def test_a_bad_command_or_metadata_gets_a_message(client):
    response = client.post(URL, {"log": TINY_LLAMA, "command": "llama-server -c 'unclosed"})
    assert response.status_code == 400 and "The command line" in text(response)
    response = client.post(URL, {"log": TINY_LLAMA, "params": "{not json"})
    assert response.status_code == 400 and "The metadata is not JSON" in text(response)


@pytest.mark.django_db
def test_a_body_beyond_djangos_limit_is_a_4xx_not_a_500(client):
    response = client.post(URL, {"log": "y" * (3 * 1024 * 1024)})
    assert 400 <= response.status_code < 500


@pytest.mark.django_db
def test_a_post_without_the_csrf_token_is_refused():
    response = Client(enforce_csrf_checks=True).post(URL, {"log": TINY_LLAMA})
    assert response.status_code == 403


@pytest.mark.django_db
def test_other_methods_are_refused(client):
    assert client.put(URL).status_code == 405


# --- the real server (marker llama_server) ----------------------------------------------------------------

SERVER_CASES = [
    ("llama", "-c 2048 -np 3"),
    ("llama", "-c 1024 -ctk q8_0 -ctv q8_0 -fa on --no-log-prefix --no-log-timestamps"),
    ("gemma3", "-c 4096 -np 2 -kvu"),
    ("deepseek2", "-c 2048 -np 1"),
    ("mamba", "-c 1024 -np 3"),
]


@pytest.mark.llama_server
@pytest.mark.django_db
@pytest.mark.parametrize("repack", REPACK)  # as llama.cpp chooses on this CPU, and every weight plain
@pytest.mark.parametrize(("arch", "flags"), SERVER_CASES, ids=[f"{a} {f}" for a, f in SERVER_CASES])
def test_the_real_servers_log_is_explained_with_every_figure_equal(
    arch, flags, repack, tiny_models, llama_server, client
):
    path: Path = tiny_models[arch]
    run = llama_server(path, (flags + REPACK[repack]).split())
    assert run.healthy, run.describe()
    log = parse_startup_log(run.log)
    assert log.model_arch == arch and log.n_slots and (log.kv_caches or log.recurrent)
    with path.open("rb") as f:
        head = read_gguf_head(f)
    explanation = explain(
        log, model_params(model_metadata(log) or {}), weights_bytes=head.weights_bytes, tensors=from_gguf(head.tensors)
    )
    verdicts = {(f.group, f.name): (f.logged, f.predicted, f.verdict) for f in explanation.figures}
    compute = verdicts.pop(("buffers", "CPU compute buffer"))
    assert compute[2] in (EQUAL, WITHIN), compute
    assert all(v[2] == EQUAL for v in verdicts.values()), {k: v for k, v in verdicts.items() if v[2] != EQUAL}
    assert any(name.endswith("model buffer") for _, name in verdicts) and ("context", "n_ctx_seq") in verdicts

    # The page says the same, from the GGUF head uploaded by the user.
    stored = GgufHead.objects.create(
        filename=path.name, sha256="0" * 64, size_bytes=path.stat().st_size, metadata=head.metadata_without_vocab(),
        weights_bytes=head.weights_bytes, n_tensors=len(head.tensors), tensors=GgufHead.table_of(head.tensors),
    )  # fmt: skip
    page = text(client.post(URL, {"log": run.log, "gguf": stored.token}))
    assert f"{len(verdicts) + (compute[2] == EQUAL)} equal" in page, page[-3000:]
    assert "0 differ" in page


def _on_a_gpu(log: str) -> str:
    """The tiny log as if the weights, KV and compute were on a CUDA GPU (the figures are the CPU run's)."""
    return (
        log.replace("CPU_Mapped model buffer size =     6.05 MiB", "CUDA0 model buffer size =     6.05 MiB")
        .replace("llama_kv_cache:        CPU KV", "llama_kv_cache:      CUDA0 KV")
        .replace("sched_reserve:        CPU compute", "sched_reserve:      CUDA0 compute")
        + "0.00.030.000 I load_tensors: offloaded 5/5 layers to GPU\n"
    )


def test_gpu_buffers_are_compared_per_device_by_replaying_the_placement():
    log = parse_startup_log(
        _on_a_gpu(TINY_LLAMA) + "cmn  common_param:   - CUDA0   : NVIDIA H200 (143000 MiB, 142000 MiB free)\n"
    )
    explanation = explain(log, model_params(model_metadata(log)), weights_bytes=TINY_WEIGHTS)
    buffers = {f.name: f for f in explanation.figures if f.group == "buffers"}
    assert buffers["CUDA0 context"].verdict == EQUAL and buffers["CUDA0 compute"].verdict in (EQUAL, WITHIN)
    assert "CUDA kernels may differ" in buffers["CUDA0 compute"].note
    assert explanation.flags.n_gpu_layers == 5 and explanation.flags.kv_offload


@pytest.mark.django_db
def test_a_gpu_log_without_the_devices_memory_says_so(client):
    page = text(client.post(URL, {"log": _on_a_gpu(TINY_LLAMA)}))
    assert "the log does not say CUDA0&#x27;s memory" in page
    assert '<td>KV cache 1</td><td>size</td><td class="num">2.25 MiB</td><td class="num">2.25 MiB</td><td>equal' in page


# A small llama-shaped model whose every matmul a CPU's extra types can take: on a CPU with AMX they go
# to AMX (q4_0 and f16), with AVX2 (or ARM dotprod) q4_0 to CPU_REPACK, elsewhere they stay plain; with
# -nr always plain. The real server's log is explained buffer by buffer for the CPU it reports.
SMALL_Q4 = {
    "general.architecture": "llama",
    "llama.block_count": 2,
    "llama.embedding_length": 256,
    "llama.feed_forward_length": 512,
    "llama.attention.head_count": 4,
    "llama.attention.head_count_kv": 2,
    "llama.vocab_size": 1024,
    "llama.context_length": 4096,
    "llama.attention.layer_norm_rms_epsilon": 1e-5,
    "llama.rope.dimension_count": 64,
}


@pytest.mark.llama_server
@pytest.mark.django_db
@pytest.mark.parametrize("repack", REPACK)
@pytest.mark.parametrize("load_mode", ["auto", "none"])
@pytest.mark.parametrize("weight_type", ["q4_0", "f16"])
def test_a_small_models_weights_are_explained_in_the_buffers_this_cpu_gives_them(
    weight_type, repack, load_mode, llama_server, llama_cpu, tmp_path
):
    from sizing.placement.cpu import AMX_QUANTIZED_CRASH, extra_buffer_type
    from sizing.placement.server import plan_server

    path = write_sparse(tmp_path / f"small-{weight_type}.gguf", SMALL_Q4, weight_type=weight_type)
    no_repack = bool(REPACK[repack])
    flags = ["-c", "1024", "-np", "1", "-lm", load_mode] + (["-nr"] if no_repack else [])
    run = llama_server(path, flags)
    with path.open("rb") as f:
        head = read_gguf_head(f)
    tensors = from_gguf(head.tensors)
    plan = plan_server(
        model_params(head.metadata),
        parse_command("llama-server " + " ".join(flags)).flags,
        devices=[],
        host=Host(64 * 1024 * MiB, 64 * 1024 * MiB, cpu=llama_cpu),
        tensors=tensors,
    )
    if llama_cpu.amx and not no_repack and weight_type != "f16":
        # b11434's AMX kernels crash on quantized weights: the server dies in its warm-up, as kvlab warns
        assert not run.healthy and run.returncode == -11, run.describe()
        assert AMX_QUANTIZED_CRASH in plan.host_notes
        return
    assert AMX_QUANTIZED_CRASH not in plan.host_notes
    assert run.healthy, run.describe()
    log = parse_startup_log(run.log)
    explanation = explain(log, model_params(head.metadata), weights_bytes=head.weights_bytes, tensors=tensors)
    weights = {f.name: f for f in explanation.figures if f.name.endswith("model buffer")}
    assert weights and all(f.verdict == EQUAL for f in weights.values()), weights
    expected_extra = (
        set() if no_repack else {extra_buffer_type(t.name, t.type_name, t.shape, llama_cpu) for t in tensors} - {None}
    )
    shown = {name.removesuffix(" model buffer") for name in weights} - {"CPU", "CPU_Mapped", "model buffer"}
    assert shown == expected_extra
