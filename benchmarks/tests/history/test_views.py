import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.files.uploadhandler import StopUpload
from django.test import Client
from django.urls import reverse

from benchmarks.models import FileImport, RequestResult, Run
from benchmarks.tests.builders import flat, jsonl
from benchmarks.tests.investigation import FILENAME, investigation_bytes
from kvlab.uploads import SizeLimitUploadHandler

pytestmark = pytest.mark.django_db


# --- run list -------------------------------------------------------------------


# --- run detail -----------------------------------------------------------------


def test_a_run_page_shows_its_configuration_requests_and_metrics(client, investigation):
    run = Run.objects.get(key="orig-x3")
    html = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert html.count("Context size has been exceeded.") == 3
    assert "context_exceeded: 3" in html
    assert "0 / 3 (0%)" in html
    assert "246.0 s" in html and "longest request elapsed" in html
    assert "<dt>ctx size (-c)</dt><dd>16384</dd>" in html
    assert "<dt>parallel (-np)</dt><dd>4</dd>" in html


def test_a_run_page_shows_speed_metrics_and_kept_fields(client, investigation):
    c2 = Run.objects.get(key="c2-x3")
    html = client.get(reverse("run-detail", args=[c2.pk])).content.decode()
    assert "3 / 3 (100%)" in html and "2.15 – 2.15 tok/s" in html and "615.0 s" in html
    c2_single = Run.objects.get(key="c2-single")
    html = client.get(reverse("run-detail", args=[c2_single.pk])).content.decode()
    assert "<tr><th><code>note</code></th><td>post: 9,216 tokens per slot (3 x 3,072)</td></tr>" in html


def test_an_unknown_run_is_404(client, db):
    assert client.get(reverse("run-detail", args=[999])).status_code == 404


def test_the_run_page_refuses_post(client, investigation):
    run = Run.objects.first()
    assert client.post(reverse("run-detail", args=[run.pk])).status_code == 405


# --- compare --------------------------------------------------------------------


def test_comparing_original_c2_and_c3p_highlights_what_differs(client, investigation):
    ids = [Run.objects.get(key=k).pk for k in ("orig-x3", "c2-x3", "c3p-queue2")]
    response = client.get(reverse("run-compare"), {"run": ids})
    html = response.content.decode()
    assert response.status_code == 200
    differs = {name: bool(diff) for diff, name in re.findall(r'<tr( class="diff")?><th>([^<]+)</th>', html)}
    assert differs["ok / total"] and differs["unified KV"] and differs["ctx size (-c)"]
    assert not differs["model"] and not differs["GPU"] and not differs["prompt tokens (max)"]
    assert "<th>ok / total</th><td>0 / 3</td><td>3 / 3</td><td>2 / 2</td>" in html
    assert "<th>unified KV</th><td>yes</td><td>no</td><td>yes</td>" in html
    assert "<th>K / V cache type</th><td>f16 / f16</td><td>f16 / f16</td><td>q8_0 / q8_0</td>" in html
    assert "<th>context_exceeded</th><td>3</td><td>0</td><td>0</td>" in html


def test_compare_says_not_recorded_for_what_a_run_does_not_hold(client, investigation):
    ids = [Run.objects.get(key=k).pk for k in ("c3p-single", "orig-x3")]  # in the order they were asked for
    html = client.get(reverse("run-compare"), {"run": ids}).content.decode()
    assert "<th>VRAM total / used (MiB)</th><td>16,311 / 15,097</td><td>16,311 / not recorded</td>" in html
    assert "<th>tok/s per request, min – max</th><td>25.70 – 25.70 tok/s</td><td>not recorded</td>" in html
    assert "<th>server flags</th><td>not recorded</td><td>not recorded</td>" in html
    table = html[html.index("<table") : html.index("</table>")]
    assert "<td>—</td>" not in table and "— – —" not in table and "?" not in table


@pytest.mark.parametrize("query", [{}, {"run": ["1"]}, {"run": ["x", "y"]}])
def test_comparing_fewer_than_two_runs_is_a_form_error(client, investigation, query):
    response = client.get(reverse("run-compare"), query)
    assert response.status_code == 400
    assert "Select" in response.content.decode()


def test_comparing_an_unknown_run_is_404(client, investigation):
    response = client.get(reverse("run-compare"), {"run": [Run.objects.first().pk, 987654]})
    assert response.status_code == 404 and "987654" in response.content.decode()


# --- import upload --------------------------------------------------------------


def upload(data: bytes, name: str = "lab.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


def test_anonymous_users_are_sent_to_log_in(client, db):
    for method in (client.get, client.post):
        response = method(reverse("import-upload"))
        assert response.status_code == 302 and response.url.startswith(reverse("login"))
    assert FileImport.objects.count() == 0


def test_an_upload_without_the_csrf_token_is_refused(csrf_client):
    response = csrf_client.post(reverse("import-upload"), {"file": upload(jsonl(flat()))})
    assert response.status_code == 403
    assert FileImport.objects.count() == 0 and Run.objects.count() == 0


def test_a_logged_in_user_imports_a_file_with_the_csrf_token(csrf_client, user):
    form = csrf_client.get(reverse("import-upload"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.content.decode()).group(1)
    response = csrf_client.post(
        reverse("import-upload"), {"file": upload(investigation_bytes()), "csrfmiddlewaretoken": token}
    )
    file_import = FileImport.objects.get()
    assert response.status_code == 302 and response.url == reverse("import-detail", args=[file_import.pk])
    assert (file_import.user, file_import.origin, file_import.n_imported) == (user, "upload", 11)
    page = csrf_client.get(response.url).content.decode()
    assert "Imported 11 records (0 duplicates) into 6 runs." in page


def test_a_rejected_upload_lists_each_line_and_stores_nothing(user_client):
    response = user_client.post(reverse("import-upload"), {"file": upload(jsonl(flat(), b"[]", flat(tok_s="x")))})
    html = response.content.decode()
    assert response.status_code == 422
    assert "Rejected: nothing from this file was stored." in html
    assert '<td class="num">2</td><td>a line must hold a JSON object, not an array</td>' in html
    assert "wrong type: &#x27;tok_s&#x27; must be a number" in html
    assert Run.objects.count() == 0 and FileImport.objects.get().n_rejected == 2


def test_an_upload_over_the_size_limit_is_refused_before_it_is_stored(user_client, settings):
    settings.KVLAB_UPLOAD_MAX_BYTES = 1024
    response = user_client.post(reverse("import-upload"), {"file": upload(b"x" * 5000)})
    assert response.status_code == 413
    assert "larger than the limit of 1.0" in response.content.decode()
    assert FileImport.objects.count() == 0


def test_the_streaming_size_limit_stops_an_upload_without_a_length(rf):
    request = rf.post(reverse("import-upload"), {"file": upload(b"y" * 5000)})
    handler = SizeLimitUploadHandler(request, 1024)
    handler.receive_data_chunk(b"a" * 1000, 0)
    with pytest.raises(StopUpload):
        handler.receive_data_chunk(b"a" * 100, 1000)
    assert request.upload_too_large is True


def test_an_upload_without_a_file_is_a_form_error(user_client):
    response = user_client.post(reverse("import-upload"), {})
    assert response.status_code == 400 and "This field is required." in response.content.decode()


def test_the_upload_page_refuses_put(user_client):
    assert user_client.put(reverse("import-upload")).status_code == 405


def test_the_import_pages_show_the_counts(client, investigation):
    html = client.get(reverse("import-list")).content.decode()
    assert FILENAME in html and "<td>command line</td>" in html
    html = client.get(reverse("import-detail", args=[investigation.pk])).content.decode()
    assert "<dt>read</dt><dd>11</dd>" in html and "<dt>runs</dt><dd>6</dd>" in html
    assert client.get(reverse("import-detail", args=[999])).status_code == 404


# --- export ---------------------------------------------------------------------


def test_the_export_download_writes_canonical_jsonl_of_the_filtered_runs(client, investigation):
    response = client.get(reverse("export"), {"label": "C2"})
    body = b"".join(response.streaming_content)
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="kvlab-runs-')
    lines = body.splitlines()
    assert len(lines) == 4 and all(line.startswith(b'{"schema":"kvlab.bench/2"') for line in lines)
    assert {b'"id":"c2-single"' in line or b'"id":"c2-x3"' in line for line in lines} == {True}


def test_the_export_download_reimports_to_the_same_runs(client, investigation, import_bytes):
    body = b"".join(client.get(reverse("export")).streaming_content)
    RequestResult.objects.all().delete()
    Run.objects.all().delete()
    assert import_bytes(body).n_imported == 11 and Run.objects.count() == 6


def test_pages_never_load_anything_from_a_cdn(client, investigation):
    for name in ("run-list", "import-list"):
        html = Client().get(reverse(name)).content.decode()
        assert not re.search(r"(src|href)=\"(https?:)?//", html)


def test_a_run_page_exports_that_run(client, investigation):
    run = Run.objects.get(key="c2-x3")
    html = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    link = re.search(r'href="(/runs/\d+/export\.jsonl)"', html).group(1)
    lines = b"".join(client.get(link).streaming_content).splitlines()
    assert len(lines) == 3 and all(b'"id":"c2-x3"' in line for line in lines)
    assert client.get(reverse("run-export", args=[9999])).status_code == 404


def test_a_long_run_pages_its_requests(client, import_bytes):
    import_bytes(jsonl(*[flat(tok_s=float(i)) for i in range(205)]))
    run = Run.objects.get()
    first = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    second = client.get(reverse("run-detail", args=[run.pk]), {"page": 2}).content.decode()
    assert first.count('<tr class="ok">') == 200 and "page 1 of 2" in first and "?page=2" in first
    assert second.count('<tr class="ok">') == 5 and ">204.0 tok/s<" in second


def test_a_run_page_shows_latency_and_decode_distributions(client, import_bytes):
    records = [flat(ttft_s=0.1 * (i + 1), elapsed_s=2.0 + i, tok_s=40.0 + i, client_tok_s=39.0 + i) for i in range(25)]
    import_bytes(jsonl(*records))
    page = client.get(reverse("run-detail", args=[Run.objects.get().pk])).content.decode()
    ttft_row = page[page.index("<th>TTFT</th>") :].split("</tr>")[0]
    assert ">25<" in ttft_row and ">1.300 s<" in ttft_row and ">2.300 s<" in ttft_row  # mean, p90
    assert "decode tok/s (client)" in page and "(output tokens − 1) / (E2E − TTFT)" in page


@pytest.mark.parametrize(
    ("fields", "detail", "cell"),
    [
        ({"gpu": "", "kv_offload": True}, "n/a (no GPU recorded)", "n/a"),  # a CPU-only llama-server's job
        ({"gpu": "RTX 4090", "kv_offload": True, "server_flags": "-ngl 0 -c 4096"}, "no (-ngl 0: every layer", "no"),
        ({"gpu": "RTX 4090", "kv_offload": False}, "no (--no-kv-offload)", "no"),
        ({"gpu": "RTX 4090", "kv_offload": True}, "yes", "yes"),
        ({"gpu": "RTX 4090", "kv_offload": None}, "not recorded", "not recorded"),
    ],
)
def test_kv_on_gpu_says_yes_only_for_a_run_on_a_gpu(client, fields, detail, cell):
    run = Run.objects.create(key="r", model="tiny.gguf", n_requests=1, n_ok=1, **fields)
    page = " ".join(client.get(reverse("run-detail", args=[run.pk])).content.decode().split())
    assert f"<dt>KV on GPU</dt><dd>{detail}" in page
    listed = " ".join(client.get(reverse("run-list")).content.decode().split())
    assert re.search(rf'<td title="{re.escape(run.kv_on_gpu)}">{re.escape(cell)}</td>', listed)
