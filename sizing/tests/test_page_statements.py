"""The sizing page says nothing wrong or half true where the user decides.

Each test names the item it pins. The browser side of the same behaviours is in
test_browser_sizing.py.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from benchmarks.models import RequestResult, Run
from sizing.cmdline import parse_command
from sizing.models import SizingSnapshot
from sizing.tests.support import TINY, text

from .gguf_writer import gguf_head_bytes
from .sizing_page import form_values, result_html, results, size_it_again

pytestmark = pytest.mark.django_db

GPU_16GB = "rtx-5060-ti-16gb"
WORKLOAD = {"prompt_tokens": 4362, "output_tokens": 1738, "concurrency": 3}
DEVSTRAL = {"model": "devstral-small-2-24b", "ctx_size": 16384, "gpu": GPU_16GB, **WORKLOAD}
# The investigation's published command.
PUBLISHED = "llama-server --model devstral.gguf --ctx-size 12288 --slots 1 -ctk q8_0 -ctv q8_0"
MiB = 1024 * 1024


# 1. Never "fits" without the weights.


def test_without_the_weights_nothing_is_called_fitting_and_the_page_asks_for_them(client: Client) -> None:
    page = text(client.get(reverse("sizing"), DEVSTRAL))
    assert "cannot judge the fit" in page
    assert "Each fits" not in page and "Recommended configurations" not in page
    assert 'class="ok">fits<' not in page
    # The recommendations are still there, but labelled as what they are.
    assert "KV-only candidates — not checked against the GPU" in page
    assert "none of these is known to fit" in page and "weights not counted" in page
    # And it asks for what it needs.
    assert "kvlab cannot judge whether this fits the GeForce RTX 5060 Ti 16GB: the weights' size is unknown" in page
    assert "or the weights&#x27; size (GiB, or bytes)" in page  # the field
    assert "<code>-m</code> file names its quantization" in page and "a GGUF file's head" in page


@pytest.mark.parametrize("weights", ["13.35 GiB", "13.35", "14,334,453,350", "14334453350 B"])
def test_given_the_weights_size_the_fit_is_judged_and_f16_kv_is_not_recommended(client: Client, weights: str) -> None:
    response = client.get(reverse("sizing"), {**DEVSTRAL, "weights": weights})
    page = text(response)
    assert "14,334,453,350 B (13,670.40 MiB) <small>(the size you gave)</small>" in page
    assert "Recommended configurations" in page and "Each fits, starts, and cannot overflow" in page
    # The issue's example: 2,880 MiB of f16 KV cannot fit beside ~13.35 GiB of weights on 16 GB.
    first = re.search(r'<ol class="recommendations">\s*<li><code>([^<]+)</code>', response.content.decode())
    assert first and first.group(1) != "llama-server -m devstral-small-2-24b.gguf -c 18432 -np 3 -fa on"
    assert "-ctk q8_0" in first.group(1) or "--no-kv-offload" in first.group(1)
    assert "KV-only candidates" not in page


def test_the_quantization_in_the_commands_model_file_gives_the_weights(client: Client) -> None:
    command = "llama-server -m /models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf -c 8192 -np 2"
    response = client.get(reverse("sizing"), {"model": "llama-3.1-8b", "gpu": "rtx-4090", "command": command})
    page = text(response)
    assert "4,920,739,232 B" in page and "catalogue Q4_K_M: a published GGUF&#x27;s file size" in page
    assert 'class="ok">fits<' in page
    assert form_values(response)["quant"] == "Q4_K_M"  # the form shows the quantization that counted


def test_a_quantization_the_catalogue_lacks_lists_the_ones_it_has(client: Client) -> None:
    response = client.get(reverse("sizing"), {"model": "llama-3.1-8b", "quant": "Q3_K_S"})
    assert response.status_code == 400
    assert "has no Q3_K_S weights in the catalogue (it has: Q4_K_M, IQ4_XS, Q5_K_M, Q6_K, Q8_0)." in text(response)


def test_without_a_quantization_the_page_links_each_one_the_catalogue_has(client: Client) -> None:
    response = client.get(reverse("sizing"), {"model": "llama-3.1-8b", "gpu": "rtx-4090", "ctx_size": 8192})
    page = response.content.decode()
    assert "cannot judge the fit" in page
    links = re.findall(r'<a href="(/sizing/\?[^"]*quant=([A-Z0-9_]+)[^"]*)">\2</a>', page)
    assert [q for _, q in links] == ["Q4_K_M", "IQ4_XS", "Q5_K_M", "Q6_K", "Q8_0"]
    followed = text(client.get(links[0][0].replace("&amp;", "&")))
    assert "4,920,739,232 B" in followed and 'class="ok">fits<' in followed


def test_kv_alone_over_the_gpu_does_not_fit_even_without_the_weights(client: Client) -> None:
    page = text(client.get(reverse("sizing"), {"model": "llama-3.1-8b", "gpu_mib": 1024, "ctx_size": 131072}))
    assert "does not fit</strong>, even without the weights" in page


# 2. The form shows what was computed.


def test_the_form_renders_the_values_the_result_used_so_size_it_again_changes_nothing(client: Client) -> None:
    first = client.get(reverse("sizing"), DEVSTRAL)
    values = form_values(first)
    flags = (values["type_k"], values["type_v"], values["flash_attn"], values["n_ubatch"])
    assert flags == ("f16", "f16", "auto", "512")
    assert (values["prompt_tokens"], values["output_tokens"], values["concurrency"]) == ("4362", "1738", "3")
    again = size_it_again(client, first)
    assert again.status_code == 200
    assert results(again) == results(first)
    assert "2,684,354,560 B (2,560.00 MiB)" in results(again)  # f16 KV, not f32's 5,120 MiB


def test_the_measure_my_prompts_style_url_keeps_f16_on_the_second_press(client: Client) -> None:
    # Only a model and a GPU, as the job form's "Size the KV cache" link gives.
    first = client.get(reverse("sizing"), {"model": "devstral-small-2-24b", "gpu": GPU_16GB})
    assert "2,560.00 MiB" not in text(first)  # no -c: the model's context
    again = size_it_again(client, first)
    assert results(again) == results(first)


def test_a_run_s_measured_workload_is_shown_in_the_fields(client: Client, investigation: object) -> None:
    run = Run.objects.get(key="c3p-queue2")
    first = client.get(reverse("sizing"), {"model": "devstral-small-2-24b", "run": run.pk})
    values = form_values(first)
    assert (values["prompt_tokens"], values["output_tokens"], values["concurrency"]) == ("4362", "1738", "2")
    assert results(size_it_again(client, first)) == results(first)


# 3. One source of truth for flags.


def test_a_pasted_command_sets_the_fields_and_says_so(client: Client) -> None:
    command = "llama-server -m x.gguf -c 12288 -np 1 -ctk q8_0 -ctv q8_0 -fa on"
    response = client.get(reverse("sizing"), {**DEVSTRAL, "command": command, "parallel": 3, "type_k": "f16"})
    values = form_values(response)
    assert (values["ctx_size"], values["parallel"], values["type_k"], values["type_v"], values["flash_attn"]) == (
        "12288",
        "1",
        "q8_0",
        "q8_0",
        "on",
    )
    assert "The flags come from the pasted command; the fields show them." in text(response)
    assert values["command_synced"] == command  # so that a later field edit wins


def test_a_field_edited_after_the_command_changes_the_result_and_rewrites_the_command(client: Client) -> None:
    command = "llama-server -m x.gguf -c 18432 --port 8080"
    pasted = client.get(reverse("sizing"), {**DEVSTRAL, "command": command})
    assert "4 (automatic: no -np)" in text(pasted)
    # The issue's case: -np 3 and q8_0 set in the fields with a command pasted.
    edited = size_it_again(client, pasted, parallel="3", type_k="q8_0", type_v="q8_0")
    page = text(edited)
    assert "4 (automatic: no -np)" not in page and "<dt>slots</dt><dd>3</dd>" in page
    assert "q8_0: " in page
    assert "The flags come from the fields; the pasted command was rewritten to match them." in page
    values = form_values(edited)
    assert values["command"] == "llama-server -m x.gguf -c 18432 -np 3 -ctk q8_0 -ctv q8_0 --port 8080"
    assert values["command_synced"] == values["command"]
    # And pressing "Size it" once more changes nothing.
    assert results(size_it_again(client, edited)) == results(edited)


def test_uploading_a_gguf_head_keeps_the_command_and_the_workload(user_client: Client, settings: Any) -> None:
    settings.KVLAB_GGUF_HEAD_MAX_BYTES = 4096
    head = gguf_head_bytes(TINY, [("token_embd.weight", (256, 3), 0)])
    query = "model=llama-3.1-8b&quant=Q4_K_M&command=llama-server+-c+2048+-np+3&prompt_tokens=300&output_tokens=300"
    response = user_client.post(
        reverse("sizing-gguf"), {"head": SimpleUploadedFile("tiny.gguf", head), "query": query + "&concurrency=3"}
    )
    assert response.status_code == 302
    page = user_client.get(response.url)
    values = form_values(page)
    assert values["command"] == "llama-server -c 2048 -np 3"
    assert (values["prompt_tokens"], values["output_tokens"], values["concurrency"]) == ("300", "300", "3")
    assert values["source"] == "gguf" and values["model"] == "" and values["quant"] == ""
    assert "tiny.gguf" in text(page) and "768 cells per slot, 3 streams" in text(page)


# 4. Flags llama-server would refuse.


def test_the_investigations_command_is_refused_for_the_value_after_slots(client: Client) -> None:
    page = text(client.get(reverse("sizing"), {**DEVSTRAL, "command": PUBLISHED}))
    assert "llama-server will not start with this command" in page
    assert "<code>--slots 1</code>: --slots takes no value" in page and "write -np 1" in page
    parsed = parse_command(PUBLISHED)
    [note] = parsed.notes
    assert (note.arg, note.refused) == ("--slots 1", True)
    assert "error: invalid argument: 1" in note.says and "write -np 1" in note.says


@pytest.mark.parametrize(
    ("args", "arg", "refused", "says"),
    [
        ("--port 8080", "--port 8080", False, "runs with it: port to listen (default: 8080)"),
        ("--metrics", "--metrics", False, "enable prometheus compatible metrics endpoint"),
        ("--no-slots", "--no-slots", False, "switched off — expose slots monitoring endpoint"),
        ("--slots", "--slots", False, "expose slots monitoring endpoint (default: enabled)"),
        ("--no-such-flag", "--no-such-flag", True, "has no option --no-such-flag"),
        ("--port=8080", "--port=8080", True, "error: invalid argument: --port=8080"),
        ("--parallel=2", "--parallel=2", True, "does not read --name=value: it exits with 'error: invalid argument"),
        ("--metrics 1", "--metrics 1", True, "--metrics takes no value"),
        ("--port", "--port", True, "expected value for argument"),
        ("model.gguf", "model.gguf", True, "takes no positional arguments"),
    ],
)
def test_each_unmodelled_argument_says_what_llama_server_does(args: str, arg: str, refused: bool, says: str) -> None:
    parsed = parse_command(f"llama-server -m x.gguf -c 4096 {args}")
    assert [(n.arg, n.refused) for n in parsed.notes] == [(arg, refused)]
    assert says in parsed.notes[0].says
    assert parsed.flags.ctx_size == 4096 and parsed.errors == []


def test_ngl_all_is_every_layer_set_by_the_user_and_auto_is_the_fits_choice() -> None:
    # arg.cpp: `all` is -2, `auto` -1; --fit leaves the layers alone unless -ngl is -1 (fit.cpp)
    assert parse_command("llama-server -ngl all").flags.n_gpu_layers == -2
    assert parse_command("llama-server -ngl auto").flags.n_gpu_layers is None
    assert parse_command("llama-server -ngl -1").flags.n_gpu_layers is None
    assert parse_command("llama-server -ngl auto").errors == []


# 5. "Explain this run" flags contradictions.


def test_explaining_c2_x3_says_the_record_and_the_prediction_disagree(client: Client, investigation: object) -> None:
    run = Run.objects.get(key="c2-x3")
    response = client.get(reverse("sizing-explain-run", args=[run.pk]))
    page = text(client.get(response.url))
    assert "Will fail:" in page and "HTTP 400 exceed_context_size_error" in page
    assert "The record and the prediction disagree: the run measured 3/3 ok" in page
    # The README's explanation: the post's "9,216 tokens per slot" means -c 27648.
    assert "the recorded -c 9,216 read as the context of each slot" in page
    assert "with -c 27,648 (3 × 9,216) each slot has 9,216 cells" in page


def test_explaining_orig_x3_says_the_record_agrees(client: Client, investigation: object) -> None:
    run = Run.objects.get(key="orig-x3")
    page = text(client.get(client.get(reverse("sizing-explain-run", args=[run.pk])).url))
    assert "The record agrees with the prediction: measured 0/3 ok (HTTP 500)." in page
    assert "disagree" not in page


def test_explaining_a_run_of_a_model_kvlab_cannot_size_says_so(client: Client) -> None:
    run = Run.objects.create(key="mystery", model="mystery-model-7b-Q4_K_M.gguf", ctx_size=4096, n_requests=1, n_ok=1)
    RequestResult.objects.create(run=run, seq=0, ok=True, http_status=200, prompt_tokens=300, n_predict=100)
    response = client.get(reverse("sizing-explain-run", args=[run.pk]))
    page = client.get(response.url)
    assert page.status_code == 200
    body = text(page)
    assert "Pick a model" not in body
    assert "kvlab cannot size run" in body and "<code>mystery-model-7b-Q4_K_M.gguf</code>" in body
    assert "is not in kvlab's catalogue" in body and "upload its GGUF file's head" in body
    values = form_values(page)
    assert (values["ctx_size"], values["prompt_tokens"], values["run"]) == ("4096", "", str(run.pk))


# 6. The shared snapshot looks like the page.


def test_a_snapshot_renders_the_result_through_the_pages_own_partial(user_client: Client, client: Client) -> None:
    query = "model=devstral-small-2-24b&ctx_size=16384&gpu=rtx-5060-ti-16gb&weights=13.35+GiB&" + "&".join(
        f"{k}={v}" for k, v in WORKLOAD.items()
    )
    live = client.get(f"{reverse('sizing')}?{query}")
    response = user_client.post(reverse("sizing-share"), {"query": query})
    snapshot = SizingSnapshot.objects.get()
    shared = client.get(response.url)  # a teammate, not logged in
    html = shared.content.decode()
    assert result_html(html) == result_html(live.content.decode())
    # Tables, units with thousands separators, the recommendations with their commands.
    assert '<table class="caches">' in html and "2,684,354,560 B (2,560.00 MiB)" in html
    assert '<ol class="recommendations">' in html and "<li><code>llama-server -m devstral-small-2-24b.gguf -c " in html
    assert "2684354560 bytes" not in html and "<pre" not in html.split("<details>")[0]
    assert snapshot.view["layout"]["kv_bytes"] == 2560 * MiB


def test_a_snapshot_of_a_pasted_command_says_it_is_read_only(user_client: Client, client: Client) -> None:
    query = "model=devstral-small-2-24b&gpu=rtx-5060-ti-16gb&" + urlencode(
        {"command": "llama-server -m x.gguf -c 12288 -np 1 -ctk q8_0 -ctv q8_0 -fa on"}
    )
    live = text(client.get(f"{reverse('sizing')}?{query}"))
    assert "The flags come from the pasted command; the fields show them. Edit a field to change the command." in live
    shared = text(client.get(user_client.post(reverse("sizing-share"), {"query": query}).url))
    assert "Edit a field" not in shared
    assert "The flags came from the pasted command. This snapshot is read-only: open its inputs on the live" in shared


def test_a_snapshot_stored_before_the_view_still_opens(client: Client) -> None:
    snapshot = SizingSnapshot.objects.create(
        inputs={"model": ["llama-3.1-8b"]},
        title="old",
        result={"n_parallel": 4, "kv_unified": True, "n_ctx_seq": 4096, "kv_bytes": 512 * MiB, "bytes_per_token": 1},
        report_text="the report",
        formula_version="kvlab-sizing/1",
    )
    page = text(client.get(reverse("sizing-snapshot", args=[snapshot.slug])))
    assert "536,870,912 B (512.00 MiB)" in page and "the report" in page
