"""The sizing page's "What llama-server will do": the fit replayed on the user's GPUs, the
effective command, memory per device, what lies outside llama.cpp's count, the decode speed and the
measured runs beside it, in the page, a shared snapshot and the plain-text report."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from benchmarks.models import Run
from sizing import catalogue
from sizing.forms import SizingForm
from sizing.hparams import model_params
from sizing.models import GgufHead, SizingSnapshot
from sizing.render import page_data, text_report
from sizing.tests.support import TINY, text

from .gguf_writer import gguf_head_bytes

pytestmark = pytest.mark.django_db

# The investigation's model and card, with the catalogue's Q4_K_M tensor shapes.
DEVSTRAL = {"model": "devstral-small-2-24b", "quant": "Q4_K_M", "gpu": "rtx-5060-ti-16gb"}


def visible(response: Any) -> str:
    """The page's text without its scripts (the effective inputs' JSON may say null)."""
    html = re.sub(r"<script.*?</script>", "", response.content.decode(), flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def page(client: Any, query: dict[str, Any] | str) -> str:
    response = client.get(
        reverse("sizing") + ("?" + query if isinstance(query, str) else ""), query if isinstance(query, dict) else None
    )
    assert response.status_code == 200, text(response)[-2000:]
    shown = visible(response)
    leak = re.search(r".{80}\b(None|nan|undefined)\b.{40}", shown)
    assert leak is None, f"a missing value leaked onto the page: {leak and leak[0]}"
    return html.unescape(text(response))


def test_without_c_the_page_names_the_context_the_fit_chooses(client):
    body = page(client, DEVSTRAL)
    assert "You typed no -c; llama-server will run with -c 10,496" in body
    # the fit's changes name the flags as code, never with Markdown's backticks
    assert "<li><code>-c</code> unset → 10,496: the largest context that leaves 1,024 MiB free on CUDA0</li>" in body
    assert "`" not in body.split('<ul class="fit-changes">')[1].split("</ul>")[0]
    assert "llama-server -m devstral-small-2-24b-Q4_K_M.gguf -c 10496</code>" in body  # the effective command
    assert "What llama-server will do on this GPU" in body
    # the per-device table: llama.cpp's count on the GPU and in system RAM, free before and after, the target
    assert "13,302.36 MiB" in body and "1,640.00 MiB" in body and "1,024.00 MiB" in body
    assert "system RAM" in body and "16,311.00 MiB" in body
    # outside llama.cpp's count, labelled, with sources and nvidia-smi's view
    assert "Outside llama.cpp's count (estimate)" in body
    assert "as nvidia-smi would show, about" in body and "https://github.com/ggml-org/llama.cpp/pull/23604" in body
    # the speed, labelled, with its parts and bandwidths
    assert "Decode speed" in body and "24.7 tok/s</strong> per request" in body
    assert "Estimate, not a measurement" in body and "CUDA0 448 GB/s (the catalogue:" in body
    # the fit's log, folded, with what llama-server prints by default
    assert '<details class="fit-log"><summary>The fit\'s log' in body
    assert "llama-server prints these with -lv 4; WRN/ERR by default" in body
    assert "context size reduced from 393216 to 10496" in body


def test_c_16384_with_one_slot_keeps_four_layers_in_system_ram(client):
    body = page(client, {**DEVSTRAL, "ctx_size": 16384, "parallel": 1})
    assert "<li><code>-ngl</code> auto → 37: 4 of 41 layers in system RAM</li>" in body
    assert "You typed no -ngl; llama-server will run with -ngl 37" in body
    assert "-c 16384 -np 1 -ngl 37</code>" in body
    assert "weights on system RAM" in body and "13.1 tok/s" in body  # the layers in RAM slow decoding


def test_two_gpus_get_a_row_each_and_an_unknown_bandwidth_says_so(client):
    query = (
        "model=devstral-small-2-24b&quant=Q4_K_M&ctx_size=65536"
        "&gpu=rtx-5060-ti-16gb&gpu_mib=&gpu_used=&gpu_gbps="
        "&gpu=&gpu_mib=12288&gpu_used=500&gpu_gbps="
    )
    body = page(client, query)
    assert "What llama-server will do on these 2 GPUs" in body
    assert "CUDA0 <small>GeForce RTX 5060 Ti 16GB</small>" in body
    assert "CUDA1 <small>a GPU of 12,288 MiB</small>" in body and "(500.00 MiB already in use)" in body
    assert "the memory bandwidth of CUDA1 is unknown" in body and "Give the GPU's bandwidth" in body
    # Its bandwidth given, the estimate is made.
    body = page(client, query + "288")
    assert "tok/s</strong> per request" in body and "CUDA1 288 GB/s (given)" in body
    # The form shows both GPUs as the result used them.
    assert (
        '<option value="rtx-5060-ti-16gb" selected>' in body
        and 'name="gpu_mib" min="256" max="4194304" value="12288"' in body
    )


def test_cpu_moe_puts_the_experts_of_a_moe_model_in_system_ram(client):
    query = {**DEVSTRAL, "model": "qwen3-30b-a3b", "command": "llama-server -m qwen3.gguf --cpu-moe -c 8192"}
    body = page(client, query)
    assert (
        "MoE experts matching" in body
        and "in system RAM (-ot" in body
        and "exps=CPU)" in body
        and "--cpu-moe</code>" in body
    )
    host = re.search(r"system RAM</th>\s*<td class=\"num\">([\d,.]+) MiB", body)
    gpu = re.search(r"CUDA0 <small>[^<]*</small></th>\s*<td class=\"num\">([\d,.]+) MiB", body)
    assert host and gpu and float(host[1].replace(",", "")) > 10 * float(gpu[1].replace(",", ""))


def test_split_mode_row_cannot_load_and_the_page_says_what_llama_server_prints(client):
    body = page(client, {**DEVSTRAL, "command": "llama-server -m devstral.gguf -sm row"})
    assert "llama-server cannot load this:</strong> -sm row cannot load" in body
    assert "does not support split buffers" in body
    assert "What llama-server prints:" in body
    assert "<code>ERR common_fit_params: encountered an error while trying to fit params" in body
    assert "It then loads with the flags as they stand." in body


def test_old_single_gpu_links_size_the_same_as_before(client):
    by_id = page(client, {**DEVSTRAL, "ctx_size": 8192})
    by_mib = page(client, {**DEVSTRAL, "gpu": "", "gpu_mib": 16311, "ctx_size": 8192})
    for body in (by_id, by_mib):
        assert "What llama-server will do on this GPU" in body and "16,311.00 MiB" in body
        assert "KV total</dt><dd><strong>1,342,177,280 B" in body
    # A link with both: the catalogue GPU wins, as it always did, and the form shows only it.
    both = page(client, {**DEVSTRAL, "gpu_mib": 8000, "ctx_size": 8192})
    assert "GeForce RTX 5060 Ti 16GB" in both and "a GPU of 8,000 MiB" not in both
    assert 'name="gpu_mib" min="256" max="4194304" value=""' in both


def test_system_ram_size_and_bandwidth_are_used_and_shown(client):
    body = page(client, {**DEVSTRAL, "ctx_size": 16384, "parallel": 1, "ram_mib": 65536, "ram_gbps": 89.6})
    assert "system RAM 89.6 GB/s (given)" in body
    assert "65,536.00 MiB" in body  # system RAM's free memory before
    assert 'name="ram_gbps" value="89.6"' in body


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("gpu_mib=" + "9" * 40, "GPU 1: its memory must be a whole number of MiB from 256 to 4,194,304"),
        ("gpu_mib=100", "GPU 1: its memory must be a whole number of MiB from 256"),
        ("&".join(["gpu=rtx-4090"] * 17), "At most 16 GPUs (llama.cpp's llama_max_devices), not 17"),
        ("&".join(["gpu_mib=8192"] * 100), "At most 16 GPUs"),
        ("gpu=rtx-4090%00", "holds a NUL character"),
        ("gpu_mib=8192&gpu_used=%00", "holds a NUL character"),
        ("gpu=no-such-gpu", "GPU 1: 'no-such-gpu' is not a GPU of the catalogue"),
        ("gpu=rtx-4090&gpu_used=30000", "GPU 1: the memory already in use must be whole MiB below its 24,564 MiB"),
        ("gpu_used=100", "GPU 1: pick a GPU from the catalogue or give its memory in MiB"),
        ("gpu_mib=8192&gpu_gbps=nan", "GPU 1: the bandwidth must be a number of GB/s from 0.1 to 100,000"),
        ("gpu_mib=8192&gpu_gbps=1e400", "the bandwidth must be a number of GB/s"),
        ("gpu_mib=8192&gpu_gbps=0", "the bandwidth must be a number of GB/s"),
        ("ram_mib=-1", "System RAM: its size must be a whole number of MiB from 256 to 16,777,216."),
        ("ram_mib=" + "9" * 30, "System RAM: its size must be a whole number of MiB from 256"),
        ("ram_mib=64", "(64 looks like GiB: 64 GiB is 65,536 MiB)"),
        ("ram_mib=" + "9" * 65, "Ensure this value has at most 64 characters (it has 65)."),
        ("ram_gbps=inf", "System RAM: the bandwidth must be a number of GB/s from 0.1 to 100,000."),
        ("ram_gbps=0.05", "System RAM: the bandwidth must be a number of GB/s from 0.1 to 100,000."),
        ("ram_gbps=nan", "System RAM: the bandwidth must be a number of GB/s"),
    ],
)
def test_hostile_gpu_and_ram_values_are_form_errors(client, query, message):
    response = client.get(f"{reverse('sizing')}?model=devstral-small-2-24b&{query}")
    assert response.status_code == 400
    assert message in html.unescape(text(response))


def test_a_snapshot_shows_the_same_section_and_its_text_too(user_client, client):
    query = "model=devstral-small-2-24b&quant=Q4_K_M&gpu=rtx-5060-ti-16gb&prompt_tokens=4362&output_tokens=1738"
    live = page(client, query)
    response = user_client.post(reverse("sizing-share"), {"query": query})
    snapshot = SizingSnapshot.objects.get()
    assert snapshot.view["version"] == 2 and snapshot.view["server"]["status"] == "success"
    shared = html.unescape(text(client.get(response.url)))
    for phrase in (
        "You typed no -c; llama-server will run with -c 10,496",
        "What llama-server will do on this GPU",
        "Outside llama.cpp's count (estimate)",
        "The fit's log",
    ):
        assert phrase in live and phrase in shared
    section = re.compile(r'<section class="server-plan".*?</section>', re.S)
    assert section.search(live)[0] == section.search(shared)[0]
    report = snapshot.report_text
    assert (
        "WHAT LLAMA-SERVER WILL DO" in report
        and "NOTE: You typed no -c; llama-server will run with -c 10,496" in report
    )
    assert "CUDA0 (GeForce RTX 5060 Ti 16GB): 13,302.36 MiB" in report and "decode speed (estimate):" in report


def test_snapshots_saved_before_the_server_section_still_render(client, user):
    entry = catalogue.models()["llama-3.1-8b"]
    form = SizingForm({"model": "llama-3.1-8b", "ctx_size": 4096})
    assert form.is_valid()
    result = form.inputs.size()
    old_view = page_data(result, title="Llama 3.1 8B", command_line="llama-server -m x.gguf -c 4096")
    old_view.pop("server")
    old_view["version"] = 1
    v1 = SizingSnapshot.objects.create(
        inputs={"model": ["llama-3.1-8b"]},
        title=entry.name,
        result={"kv_bytes": 1},
        report_text="old text",
        view=old_view,
        formula_version="kvlab-sizing/1",
    )
    v0 = SizingSnapshot.objects.create(
        inputs={"model": ["llama-3.1-8b"]},
        title=entry.name,
        report_text="older text",
        view=None,
        result={
            "kv_bytes": 536870912,
            "n_parallel": 4,
            "kv_unified": True,
            "n_ctx_seq": 4096,
            "bytes_per_token": 131072,
        },
        formula_version="kvlab-sizing/0",
    )
    body = html.unescape(text(client.get(reverse("sizing-snapshot", args=[v1.slug]))))
    assert "Llama 3.1 8B" in body and "KV total" in body and "What llama-server will do" not in body
    body = text(client.get(reverse("sizing-snapshot", args=[v0.slug])))
    assert "536,870,912 B" in body and "older text" in body


def test_measured_runs_of_the_same_model_and_gpu_sit_beside_the_estimate(
    client, investigation, django_assert_max_num_queries
):
    query = {
        **DEVSTRAL,
        "command": "llama-server -m Devstral-Small-2-24B-Q4_K_M.gguf -c 12288 -np 1 -ctk q8_0 -ctv q8_0",
    }
    with django_assert_max_num_queries(12):
        body = page(client, query)
    assert "Measured beside the estimate" in body
    assert re.search(r"c3p-single</small></td><td>decode</td><td>on the GPU</td><td class=\"num\">25.70</td>", body)
    assert re.search(r"orig-single</small></td><td>decode</td><td>in system RAM</td><td class=\"num\">5.84</td>", body)
    assert "Calibrated:" in body and "the median ratio of 2 runs with the KV on the GPU" in body


def llama_bench_line(n_prompt: int, n_gen: int, samples_ns: list[int], test_time: str) -> str:
    """One test as llama-bench b5163 prints it with -o jsonl (the fields its README example has)."""
    tokens = n_prompt + n_gen
    ts = [1e9 * tokens / ns for ns in samples_ns]
    mean_ns = sum(samples_ns) // len(samples_ns)
    return json.dumps({
        "build_commit": "8cf427ff", "build_number": 5163, "cpu_info": "AMD Ryzen 7 7800X3D 8-Core Processor",
        "gpu_info": "NVIDIA GeForce RTX 4080", "backends": "CUDA",
        "model_filename": "models/Qwen2.5-7B-Instruct-Q4_K_M.gguf", "model_type": "qwen2 7B Q4_K - Medium",
        "model_size": 4677120000, "model_n_params": 7615616512, "n_batch": 2048, "n_ubatch": 512, "n_threads": 8,
        "type_k": "f16", "type_v": "f16", "n_gpu_layers": 99, "split_mode": "layer", "main_gpu": 0,
        "no_kv_offload": False, "flash_attn": False, "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": 0,
        "test_time": test_time, "avg_ns": mean_ns, "stddev_ns": 0, "avg_ts": sum(ts) / len(ts), "stddev_ts": 0.0,
        "samples_ns": samples_ns, "samples_ts": ts,
    })  # fmt: skip


def test_a_llama_bench_prompt_test_sits_beside_the_prefill_estimate_and_calibrates_it(client, user_client, tmp_path):
    from benchmarks.history.importer import import_path

    results = tmp_path / "bench.jsonl"
    results.write_text(
        llama_bench_line(512, 0, [70_000_000, 71_000_000], "2025-04-24T11:58:50Z") + "\n"
        + llama_bench_line(0, 128, [1_067_000_000, 1_069_000_000], "2025-04-24T11:58:53Z") + "\n"
    )  # fmt: skip
    assert import_path(results, origin="command").status == "imported"
    body = page(client, {"model": "qwen2.5-7b", "quant": "Q4_K_M", "gpu": "rtx-4080", "ctx_size": 4096,
                         "parallel": 1, "prompt_tokens": 2048, "output_tokens": 100})  # fmt: skip
    number = r'<td class="num">([\d.]+)</td>'
    row = r"pp512</a> <small>[^<]*</small></td><td>prefill, 512-token prompt</td><td>on the GPU</td>"
    pp = re.search(row + number * 3, body)
    assert pp, body[body.find("Measured beside") :][:1500]
    measured, estimate, ratio = (float(g) for g in pp.groups())
    assert measured == pytest.approx(512e9 / 70_500_000, rel=1e-3)  # llama-bench's mean of the two rates
    assert ratio == pytest.approx(measured / estimate, abs=0.01)
    tg = re.search(
        r"tg128</a> <small>[^<]*</small></td><td>decode</td><td>on the GPU</td><td class=\"num\">([\d.]+)", body
    )
    assert tg and float(tg.group(1)) == pytest.approx(128e9 / 1_068_000_000, rel=2e-3)
    # the decode calibration rests on the tg run alone, the prefill's on the pp run alone
    assert "the median ratio of 1 run with the KV on the GPU" in body
    page_prefill = float(re.search(r'<p class="prefill"><strong>([\d,.]+) tok/s', body).group(1).replace(",", ""))
    calibrated = float(re.search(r"Prefill calibrated: ([\d,]+) tok/s", body).group(1).replace(",", ""))
    assert calibrated == pytest.approx(page_prefill * ratio, rel=0.01)
    assert "the median ratio of 1 prompt-processing run." in body
    # a shared snapshot's text says the same
    query = "model=qwen2.5-7b&quant=Q4_K_M&gpu=rtx-4080&ctx_size=4096&parallel=1&prompt_tokens=2048&output_tokens=100"
    user_client.post(reverse("sizing-share"), {"query": query})
    report = SizingSnapshot.objects.get().report_text
    assert f"measured: pp512 (prefill, 512-token prompt) {measured:,.2f} tok/s" in report
    assert (
        f"prefill calibrated: {calibrated:,.0f} tok/s (the prefill estimate × {ratio:.2f}, 1 prompt-processing run)"
        in report
    )


def test_the_page_costs_the_same_however_long_the_history(client, investigation, django_assert_num_queries):
    query = {**DEVSTRAL, "ctx_size": 12288, "parallel": 1}
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as before:
        page(client, query)
    Run.objects.bulk_create(
        Run(key=f"other-{i}", model="Devstral-Small-2-24B-Q4_K_M.gguf", vram_total_mib=16311, tok_s_mean=20.0)
        for i in range(300)
    )
    with CaptureQueriesContext(connection) as after:
        body = page(client, query)
    assert len(after) == len(before)
    assert body.count('<td><a href="/runs/') <= 2 * 10  # at most ten runs in each table


def test_a_gguf_head_keeps_its_tensor_table_and_an_old_head_is_approximate(user_client):
    head = gguf_head_bytes(TINY, [("token_embd.weight", (256, 32000), 0), ("blk.0.attn_q.weight", (256, 256), 0)])
    response = user_client.post(reverse("sizing-gguf"), {"head": SimpleUploadedFile("tiny.gguf", head)})
    stored = GgufHead.objects.get()
    assert stored.tensors == [["token_embd.weight", "f32", [256, 32000]], ["blk.0.attn_q.weight", "f32", [256, 256]]]
    body = page(user_client, response.url.split("?", 1)[1] + "&gpu_mib=8192&ctx_size=2048")
    assert "tensor by tensor: the uploaded head's tensor table" in body and "Approximate:" not in body
    # A head stored before tables were kept: the weights are spread, and the page says so.
    GgufHead.objects.filter(pk=stored.pk).update(tensors=None)
    body = page(user_client, response.url.split("?", 1)[1] + "&gpu_mib=8192&ctx_size=2048")
    assert "Approximate: the weights' total spread evenly over the layers" in body
    assert "stored without its tensor table" in body


def test_pasted_metadata_with_a_weights_size_is_placed_approximately(client):
    import json

    body = page(
        client,
        {"source": "params", "params": json.dumps(TINY), "weights": "2 GiB", "gpu_mib": 4096, "ctx_size": 2048},
    )
    assert "Approximate: the weights' total spread evenly over the layers (no tensor table)" in body
    assert "CUDA0 <small>a GPU of 4,096 MiB</small>" in body


def test_the_text_report_says_what_llama_server_will_do(client):
    form = SizingForm({**DEVSTRAL, "ctx_size": 16384, "parallel": 1})
    assert form.is_valid()
    report = text_report(form.inputs.size())
    assert "WHAT LLAMA-SERVER WILL DO" in report
    assert "  - `-ngl` auto → 37: 4 of 41 layers in system RAM" in report
    assert "NOTE: You typed no -ngl; llama-server will run with -ngl 37" in report
    assert "effective command: llama-server -m MODEL.gguf -c 16384 -np 1 -ngl 37" in report
    assert "system RAM (system RAM): 1,722.81 MiB" in report or "Host (system RAM): 1,722.81 MiB" in report
    assert "outside llama.cpp's count (estimate):" in report and "as nvidia-smi would show:" in report
    assert "the fit's log (llama-server prints these with -lv 4; WRN/ERR by default):" in report
    assert "None" not in report and "nan" not in report
    assert model_params(catalogue.models()["devstral-small-2-24b"].metadata).n_layer == 40


CPU_ONLY = {"model": "devstral-small-2-24b", "quant": "Q8_0", "ctx_size": 8192, "parallel": 1, "ram_mib": 65536}


def test_on_a_cpu_with_amx_the_page_shows_the_amx_buffer_the_fit_leaves_out(client):
    body = page(client, {**CPU_ONLY, "cpu": "avx512+amx"})
    assert "AMX system RAM, not counted by --fit" in re.sub(r"<[^>]+>", "", body)
    assert "Host CPU: AVX-512 + AMX (--cpu avx512+amx)" in body
    assert "--fit does not count as host memory" in body and "The host's RAM in all:" in body
    assert 'name="cpu" value="avx512+amx"' in body  # the form shows what the result used


def test_without_the_cpu_the_page_says_the_answer_depends_on_it(client):
    body = page(client, CPU_ONLY)
    assert "This answer depends on the host's CPU, which was not given" in body
    assert "cpu-buffer" not in body


def test_an_unknown_cpu_is_refused_with_what_is_accepted(client):
    response = client.get(reverse("sizing"), {**CPU_ONLY, "cpu": "pentium"})
    assert response.status_code == 400
    assert "Host CPU: unknown CPU &#x27;pentium&#x27;" in text(response)


def test_on_the_cpu_alone_the_plan_speaks_of_the_cpu_not_of_gpus(client):
    body = page(client, {**CPU_ONLY, "cpu": "avx2"})
    assert "What llama-server will do on the CPU alone" in body
    assert "each GPU's --fit target" not in body and "What nvidia-smi shows" not in body
    unset = page(client, {**CPU_ONLY, "ctx_size": "", "cpu": "avx2"})
    assert "it sets what you leave unset to fit system memory" in unset and "GPUs' free memory" not in unset


def test_a_host_short_of_ram_for_the_amx_buffer_is_told_by_how_much_not_a_negative_free(client):
    body = page(client, {**CPU_ONLY, "ram_mib": 24105, "cpu": "avx512+amx"})
    found = re.search(r"The host's RAM in all: <strong>([\d,.]+) MiB</strong>.*?<strong>([\d,.]+) MiB more than", body)
    assert found, body[-3000:]
    needs, short = (float(x.replace(",", "")) for x in found.groups())
    assert short == pytest.approx(needs - 24105, abs=0.005) and short > 0
    assert "leaving -" not in body
