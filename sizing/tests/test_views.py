import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from benchmarks.models import Run
from sizing.models import GgufHead, SizingSnapshot
from sizing.tests.support import DEVSTRAL_16GB as DEMO_QUERY
from sizing.tests.support import TINY, text

from .gguf_writer import gguf_head_bytes

pytestmark = pytest.mark.django_db


def test_the_page_without_inputs_asks_for_a_model(client):
    response = client.get(reverse("sizing"))
    assert response.status_code == 200 and "Pick a model" in text(response)


def test_the_demo_original_is_predicted_to_overflow_the_shared_pool(client):
    page = text(client.get(reverse("sizing"), DEMO_QUERY))
    assert "4 (automatic: no -np)" in page
    assert "one unified pool of 16,384 cells shared by all slots" in page
    assert "163,840 B (160.00 KiB)" in page and "0.16 MiB" not in page  # KV per token, f16: KiB, not 0.16 MiB
    assert "need 18,300 cells; the unified pool has 16,384" in page
    assert "HTTP 500 &#x27;Context size has been exceeded&#x27;" in page
    # The catalogue is not told which weights file: nothing is called fitting.
    assert "Recommended configurations" not in page and "KV-only candidates — not checked against the GPU" in page
    assert "-c 18432 -np 3" in page


def test_a_pasted_command_line_overrides_the_fields_and_names_ignored_flags(client):
    query = {**DEMO_QUERY, "command": "llama-server -m x.gguf -c 12288 -np 1 -ctk q8_0 -ctv q8_0 -fa on --port 8080"}
    page = text(client.get(reverse("sizing"), query))
    assert "87,040 B" in page  # 85 KiB per token in q8_0, block scales included
    assert "<code>--port 8080</code>" in page
    assert "2 more requests wait in the server" in page


def test_the_htmx_update_returns_only_the_results(client):
    response = client.get(reverse("sizing"), DEMO_QUERY, headers={"HX-Request": "true"})
    body = response.content.decode()
    assert "<html" not in body and body.strip().startswith('<section id="results"')
    assert "18,300 cells" in body


def test_pasted_metadata_is_sized(client):
    import json

    page = text(
        client.get(reverse("sizing"), {"source": "params", "params": json.dumps(TINY), "ctx_size": 2048, "parallel": 3})
    )
    assert "768 cells per slot, 3 streams" in page and "tiny-llama" in page


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"model": "no-such"}, "Unknown model &#x27;no-such&#x27;; the catalogue has: "),
        ({"model": "llama-3.1-8b", "ctx_size": -1}, "-c -1: must be 0 (the model&#x27;s context) to 16,777,216"),
        ({"model": "llama-3.1-8b", "ctx_size": 10**9}, "-c 1000000000: must be 0 (the model&#x27;s context) to"),
        ({"model": "llama-3.1-8b", "prompt_tokens": -5, "output_tokens": 1}, "greater than or equal to 1"),
        ({"model": "llama-3.1-8b", "prompt_tokens": 100}, "Give both the p95 prompt tokens"),
        ({"model": "llama-3.1-8b", "command": "llama-server -np 0"}, "must be -1 (auto) or 1 to 256"),
        ({"source": "params", "params": "{nope"}, "The metadata is not JSON"),
        (
            {"source": "params", "params": '{"general.architecture": "bert"}'},
            "architecture &#x27;bert&#x27; is not one",
        ),
        ({"source": "params", "params": '{"general.architecture": "llama", "llama.block_count": 0}'}, "lacks"),
        ({"model": "llama-3.1-8b", "quant": "Q9_X"}, "has no Q9_X weights in the catalogue (it has: Q4_K_M, IQ4_XS"),
        ({"model": "llama-3.1-8b", "run": 999}, "Run #999 does not exist"),
        ({"source": "gguf", "gguf": 12345}, "no longer exists"),
    ],
)
def test_bad_inputs_are_form_errors_not_500s(client, query, message):
    response = client.get(reverse("sizing"), query)
    assert response.status_code == 400 and message in text(response)


def test_an_invalid_combination_says_the_server_will_not_start(client):
    query = {"model": "llama-3.1-8b", "ctx_size": 4096, "type_v": "q8_0", "flash_attn": "off"}
    page = text(client.get(reverse("sizing"), query))
    assert "Will not start:" in page and "needs flash attention" in page


def test_explain_this_run_opens_the_sizing_of_the_demo_original(client, investigation):
    run = Run.objects.get(key="orig-x3")
    response = client.get(reverse("sizing-explain-run", args=[run.pk]))
    assert response.status_code == 302
    page = text(client.get(response.url))
    assert "Devstral" in page and "need 18,300 cells; the unified pool has 16,384" in page
    assert "all in-flight requests will fail together with HTTP 500" in page
    assert client.get(reverse("sizing-explain-run", args=[9999])).status_code == 404


def test_measured_runs_of_the_same_model_and_gpu_are_shown(client, investigation):
    page = text(client.get(reverse("sizing"), {**DEMO_QUERY, "gpu": "", "gpu_mib": 16311}))
    assert "Measured runs of this model and GPU" in page and "c3p-single" in page


def test_sharing_needs_a_login_and_a_csrf_token(client, csrf_client):
    query = "model=llama-3.1-8b&ctx_size=4096"
    response = client.post(reverse("sizing-share"), {"query": query})
    assert response.status_code == 302 and reverse("login") in response.url
    assert csrf_client.post(reverse("sizing-share"), {"query": query}).status_code == 403
    assert SizingSnapshot.objects.count() == 0


def test_a_share_link_is_an_immutable_snapshot_anyone_can_open(user_client, client):
    query = "model=llama-3.1-8b&ctx_size=4096&parallel=1&gpu=rtx-4090"
    response = user_client.post(reverse("sizing-share"), {"query": query})
    snapshot = SizingSnapshot.objects.get()
    assert response.status_code == 302 and response.url == reverse("sizing-snapshot", args=[snapshot.slug])
    assert len(snapshot.slug) >= 12 and snapshot.result["kv_bytes"] == 512 * 1024 * 1024
    page = text(client.get(response.url))  # a teammate, not logged in
    assert "Llama 3.1 8B" in page and "kvlab-sizing/1" in page and "536,870,912 B" in page
    assert client.post(response.url).status_code == 405
    assert client.get(reverse("sizing-snapshot", args=["nope"])).status_code == 404


def test_uploading_a_gguf_head_stores_its_metadata_only(user_client, settings):
    settings.KVLAB_GGUF_HEAD_MAX_BYTES = 4096
    head = gguf_head_bytes({**TINY, "tokenizer.ggml.tokens": ["<s>", "a", "b"]}, [("token_embd.weight", (256, 3), 0)])
    upload = SimpleUploadedFile("tiny.gguf", head + b"\0" * 20000)  # tensor data beyond the cap is never kept
    response = user_client.post(reverse("sizing-gguf"), {"head": upload})
    stored = GgufHead.objects.get()
    assert response.status_code == 302 and f"gguf={stored.token}" in response.url
    assert stored.size_bytes == 4096 and stored.weights_bytes == 256 * 3 * 4
    assert stored.metadata["tokenizer.ggml.tokens.count"] == 3 and "tokenizer.ggml.tokens" not in stored.metadata
    page = text(user_client.get(response.url))
    assert "tiny.gguf" in page and "3,072 B" in page


def test_a_file_that_is_not_gguf_is_refused_with_the_reason(user_client):
    response = user_client.post(reverse("sizing-gguf"), {"head": SimpleUploadedFile("x.gguf", b"PK\x03\x04 not gguf")})
    assert response.status_code == 400 and "not a GGUF file" in text(response)
    assert GgufHead.objects.count() == 0


def test_uploads_need_a_login(client):
    response = client.post(reverse("sizing-gguf"), {"head": SimpleUploadedFile("x.gguf", b"GGUF")})
    assert response.status_code == 302 and GgufHead.objects.count() == 0
    assert client.get(reverse("sizing-gguf")).status_code in (302, 405)


def test_past_server_reports_calibrate_the_compute_estimate_and_mark_measured_flags(client):
    from benchmarks.models import CalibrationPoint
    from sizing.kv import ServerFlags, flags_key

    query = {"model": "llama-3.1-8b", "ctx_size": 4096, "parallel": 1}
    before = text(client.get(reverse("sizing"), query))
    assert "calibrated" not in before and ">measured<" not in before
    from sizing import catalogue

    name = catalogue.models()["llama-3.1-8b"].metadata.get("general.name", "llama")
    estimate = 10 * 1024 * 1024
    CalibrationPoint.objects.create(
        model_name=name,
        arch="llama",
        flags_key=flags_key(ServerFlags(ctx_size=4096, parallel=1)),
        predicted_kv_bytes=512 * 1024 * 1024,
        reported_kv_mib=512.0,
        predicted_compute_bytes=estimate,
        reported_compute_mib=20.0,
        reported_model_mib=4685.3,
    )
    page = text(client.get(reverse("sizing"), query))
    assert 'class="badge">measured<' in page and "reported KV 512.00 MiB" in page
    assert 'class="badge">calibrated<' in page and "the estimate × 2.00" in page


def test_staff_can_verify_recommendations_with_a_sweep(client, db):
    from django.contrib.auth.models import User

    staff = User.objects.create_user("ops", password="a-long-test-password", is_staff=True)
    client.force_login(staff)
    page = client.get(reverse("sizing"), DEMO_QUERY).content.decode()
    link = re.search(r'href="(/sweeps/new/\?[^"]+)"', page).group(1)
    form = client.get(link.replace("&amp;", "&")).content.decode()
    assert "-c 18432 -np 3" in form


def test_add_a_gpu_without_javascript_renders_one_more_row(client):
    page = text(client.get(reverse("sizing"), {**DEMO_QUERY, "add_gpu": "1"}))
    assert page.count('class="row gpu-row"') == 2 and "GPU 1</span>" in page
    assert "add_gpu" not in page.split('id="sizing-effective"')[1]  # not an input the result used


def test_an_invalid_gpu_row_is_shown_as_typed_beside_its_error(client):
    response = client.get(reverse("sizing"), {"model": "llama-3.1-8b", "gpu_mib": "100"})
    page = text(response)
    assert response.status_code == 400 and "GPU 1: its memory must be a whole number of MiB from 256" in page
    assert 'name="gpu_mib" min="256" max="4194304" value="100"' in page


def test_an_explained_runs_gpu_memory_link_still_sizes_on_one_gpu(client, investigation):
    run = Run.objects.get(key="c3p-single")
    page = text(client.get(client.get(reverse("sizing-explain-run", args=[run.pk])).url))
    assert "What llama-server will do on this GPU" in page and "CUDA0 <small>GeForce RTX 5060 Ti 16GB</small>" in page


def test_explaining_a_run_picks_its_gpu_from_the_catalogue_for_the_speed(client, investigation):
    run = Run.objects.get(key="c3p-single")
    url = client.get(reverse("sizing-explain-run", args=[run.pk])).url
    assert parse_qs(urlsplit(url).query)["gpu"] == ["rtx-5060-ti-16gb"]
    assert parse_qs(urlsplit(url).query)["gpu_mib"] == ["16311"]  # the run's own reading still counts
    response = client.get(url)
    assert '<option value="rtx-5060-ti-16gb" selected>' in response.content.decode()
    page = text(response)
    assert "<strong>24.0 tok/s</strong> per request" in page and "CUDA0 448.0 GB/s" in page
    assert "Unknown:" not in page


def test_per_token_figures_are_in_kib_and_a_quantized_cache_says_why_it_is_above_its_bits(client):
    page = text(client.get(reverse("sizing"), {**DEMO_QUERY, "ctx_size": 12288, "type_k": "q8_0", "type_v": "q8_0"}))
    # the investigation's rule of thumb, "80 KB per token, 983 MB", is 85 KiB and 1,020 MiB
    assert "<dt>KV per token</dt><dd>87,040 B (85.00 KiB)<br>" in page
    assert "1,069,547,520 B (1,020.00 MiB)" in page
    assert (
        "q8_0 stores each 32 values in 34 bytes, their scale included: 8.5 bits a value, not 8, "
        "so its bytes are 6.25 % above a count of 8 bits." in page
    )
    f16 = text(client.get(reverse("sizing"), DEMO_QUERY))
    assert "<dt>KV per token</dt><dd>163,840 B (160.00 KiB)</dd>" in f16 and "bits a value" not in f16
