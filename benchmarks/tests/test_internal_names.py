"""Strangers see no internal name: registered servers are login-only because they name
internal hosts, so no page anyone may browse shows a server's name or address, a launch host's or a
worker's name, the GPU host's paths, who imported a file, or the web host's temporary upload paths.
Each page is read anonymously and logged in: the names are absent from one and present in the other."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from benchmarks.history import derived
from benchmarks.models import FileImport, Job, LaunchHost, RequestResult, Run, Server, Sweep, SweepConfig
from benchmarks.tests.builders import flat, jsonl
from kvlab import visibility

pytestmark = pytest.mark.django_db

SERVER_NAME = "internal-gpu-host"
SERVER_URL = "http://gpu-box-7.lab.internal:8080"
CLI_URL = "http://10.20.0.5:8081/internal-cli-host"
WORKER = "celery@gpu-box-9"
HOST_NAME = "gpu-box-9"
MODELS_DIR = "/srv/secret-models"
BINARY = "/opt/secret-build/bin/llama-server"
PARAMS = {"requests": 3, "repeats": 1, "concurrency": 1, "n_predict": 8, "prompt_tokens": 16}


@pytest.fixture
def stranger() -> Client:
    return Client()


@pytest.fixture
def jobs(db, user):
    server = Server.objects.create(name=SERVER_NAME, base_url=SERVER_URL)
    refused = f"ClientConnectorError: Cannot connect to host gpu-box-7.lab.internal:8080 ssl:default ({SERVER_NAME})"
    on_server = Job.objects.create(
        server=server,
        base_url=SERVER_URL,
        label="on-a-server",
        params=PARAMS,
        created_by=user,
        worker=WORKER,
        state="failed",
        error=refused,
        recent_errors=[{"status": None, "type": "other", "error": refused}],
    )
    from_cli = Job.objects.create(
        base_url=CLI_URL, label="from-the-cli", params=PARAMS, error=f"HTTP 503 from {CLI_URL}/completion"
    )
    return on_server, from_cli


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_the_job_list_names_no_server_to_strangers(stranger, user_client, jobs):
    anonymous = page(stranger, reverse("job-list"))
    assert SERVER_NAME not in anonymous and "internal-cli-host" not in anonymous and "10.20.0.5" not in anonymous
    assert f"<td>{visibility.SERVER}</td><td>on-a-server</td>" in anonymous
    assert f"<td>{visibility.URL}</td><td>from-the-cli</td>" in anonymous
    logged_in = page(user_client, reverse("job-list"))
    assert f"<td>{SERVER_NAME}</td><td>on-a-server</td>" in logged_in
    assert f"<td>{CLI_URL}</td><td>from-the-cli</td>" in logged_in


def test_the_job_page_names_no_server_worker_or_address_to_strangers(stranger, user_client, jobs):
    on_server, from_cli = jobs
    anonymous = page(stranger, reverse("job-detail", args=[on_server.pk]))
    for secret in (SERVER_NAME, "gpu-box-7", "gpu-box-9", WORKER, reverse("server-detail", args=[on_server.server_id])):
        assert secret not in anonymous
    assert f"on {visibility.SERVER} ·" in anonymous
    assert f"Cannot connect to host {visibility.SERVER} ssl:default ({visibility.SERVER})" in anonymous
    logged_in = page(user_client, reverse("job-detail", args=[on_server.pk]))
    assert f">{SERVER_NAME}</a>" in logged_in and f"on {WORKER}" in logged_in
    assert "Cannot connect to host gpu-box-7.lab.internal:8080 ssl:default" in logged_in

    anonymous = page(stranger, reverse("job-detail", args=[from_cli.pk]))
    assert "internal-cli-host" not in anonymous and "10.20.0.5" not in anonymous
    assert f"on {visibility.URL} ·" in anonymous and f"HTTP 503 from {visibility.URL}/completion" in anonymous
    assert f"<code>{CLI_URL}</code>" in page(user_client, reverse("job-detail", args=[from_cli.pk]))


def test_the_job_page_refreshed_by_htmx_hides_them_too(stranger, jobs):
    on_server, _ = jobs
    partial = stranger.get(reverse("job-detail", args=[on_server.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert 'id="progress"' in partial and WORKER not in partial and "gpu-box-7" not in partial


def test_a_run_page_shows_strangers_no_address_in_a_requests_error(stranger, user_client, jobs):
    on_server, _ = jobs
    run = Run.objects.create(key="job-run", model="m.gguf", job=on_server, n_requests=1, n_ok=0)
    RequestResult.objects.create(
        run=run, seq=0, ok=False, error=f"Cannot connect to host {SERVER_URL}/completion", content_hash="x"
    )
    anonymous = page(stranger, reverse("run-detail", args=[run.pk]))
    assert "gpu-box-7" not in anonymous and f"Cannot connect to host {visibility.SERVER}/completion" in anonymous
    assert f"Cannot connect to host {SERVER_URL}/completion" in page(user_client, reverse("run-detail", args=[run.pk]))


def _server_runs(server: Server, n: int) -> list[Run]:
    """n runs of one configuration and workload measured on this server, one a day, the last far slower."""
    job = Job.objects.create(server=server, base_url=server.base_url, params=PARAMS)
    start = timezone.now() - timedelta(days=n + 1)
    return [
        Run.objects.create(
            key=f"server{server.pk}-run{i}",
            model="m.gguf",
            job=job,
            started_at=start + timedelta(days=i),
            n_requests=10,
            n_ok=10,
            concurrency=1,
            tok_s_mean=1.0 if i == n - 1 else 50.0 + i % 2,
        )
        for i in range(n)
    ]


def test_the_timeline_grouped_by_server_names_no_server_to_strangers(stranger, user_client, db):
    servers = [Server.objects.create(name=f"{SERVER_NAME}-{i}", base_url=f"http://10.0.0.{i}:8080") for i in (1, 2)]
    for server in servers:
        _server_runs(server, 3)
    url = reverse("chart-timeline") + "?group=server"
    anonymous = page(stranger, url)
    assert SERVER_NAME not in anonymous
    tags = {visibility.server_line(s.name) for s in servers}
    assert len(tags) == 2 and all(tag in anonymous for tag in tags)  # two lines, told apart
    logged_in = page(user_client, url)
    assert all(s.name in logged_in for s in servers)


def test_the_regressions_grouped_by_server_name_no_server_to_strangers(stranger, user_client, db):
    server = Server.objects.create(name=SERVER_NAME, base_url=SERVER_URL)
    derived.runs_changed([r.pk for r in _server_runs(server, 5)])
    url = reverse("chart-regressions") + "?group=server"
    anonymous = page(stranger, url)
    assert SERVER_NAME not in anonymous and f"<td>{visibility.server_line(SERVER_NAME)}</td>" in anonymous
    assert f"<td>{SERVER_NAME}</td>" in page(user_client, url)


@pytest.fixture
def sweep(db):
    host = LaunchHost.objects.create(name=HOST_NAME, binaries=[BINARY], models_dirs=[MODELS_DIR], worker=WORKER)
    sweep = Sweep.objects.create(
        host=host,
        model_file="m.gguf",
        label="a-sweep",
        params={"requests": 1, "prompt_tokens": 16, "n_predict": 8, "concurrencies": [1]},
        worker=WORKER,
        state="failed",
        error=f"the worker on {HOST_NAME} could not start {BINARY}",
    )
    SweepConfig.objects.create(
        sweep=sweep,
        position=0,
        command="-c 1024",
        outcome=SweepConfig.Outcome.FAILED_TO_START,
        error=f"{BINARY} exited with status 1",
        log_tail=f"llama_model_load: loading model from {MODELS_DIR}/m.gguf\nhostname {HOST_NAME}",
    )
    return sweep


def test_sweep_pages_name_no_launch_host_worker_or_path_to_strangers(stranger, user_client, sweep):
    anonymous = page(stranger, reverse("sweep-list"))
    assert HOST_NAME not in anonymous and f"<td>{visibility.HOST}</td>" in anonymous
    assert f"<td>{HOST_NAME}</td>" in page(user_client, reverse("sweep-list"))

    anonymous = page(stranger, reverse("sweep-detail", args=[sweep.pk]))
    for secret in (HOST_NAME, WORKER, MODELS_DIR, "secret-build"):
        assert secret not in anonymous
    assert f"on {visibility.HOST}" in anonymous and f"from {visibility.MODELS_DIR}/m.gguf" in anonymous
    assert f"{visibility.BINARY} exited with status 1" in anonymous
    logged_in = page(user_client, reverse("sweep-detail", args=[sweep.pk]))
    assert f"on {HOST_NAME}" in logged_in and f"{MODELS_DIR}/m.gguf" in logged_in and f"on {WORKER}" in logged_in


def test_the_imports_name_no_uploader_to_strangers(stranger, user_client, user, import_bytes):
    done = import_bytes(jsonl(flat()), filename="bench.jsonl", user=user)
    anonymous = page(stranger, reverse("import-list"))
    assert "bench.jsonl" in anonymous and "(ana)" not in anonymous
    assert "command line (ana)" in page(user_client, reverse("import-list"))
    anonymous = page(stranger, reverse("import-detail", args=[done.pk]))
    assert "by ana" not in anonymous and "command line" in anonymous
    assert "command line by ana" in page(user_client, reverse("import-detail", args=[done.pk]))


def test_a_sizing_snapshot_names_who_saved_it_to_the_logged_in_only(stranger, user_client):
    saved = user_client.post(reverse("sizing-share"), {"query": "model=llama-3.1-8b&ctx_size=4096"})
    assert saved.status_code == 302
    anonymous = page(stranger, saved.url)  # a share link is for anyone; who saved it is not
    assert "Saved " in anonymous and "by ana" not in anonymous and "Llama 3.1 8B" in anonymous
    assert "by ana" in page(user_client, saved.url)


AIPERF_DEEP = b'{"aiperf_version": "1", "unit": "ms", "records": ' + b"[" * 5000 + b"]" * 5000 + b"}"


def test_a_rejected_upload_is_named_as_it_was_uploaded_not_by_its_temporary_path(stranger, user_client):
    upload = SimpleUploadedFile("aiperf_deep.json", AIPERF_DEEP)
    response = user_client.post(reverse("import-upload"), {"file": upload})
    assert response.status_code == 422
    file_import = FileImport.objects.get()
    reasons = [line.reason for line in file_import.rejected_lines.all()]
    assert reasons and all(r.startswith("aiperf_deep.json (aiperf): ") for r in reasons), reasons
    assert not any("kvlab-upload-" in r for r in reasons)  # stored without it, not only shown without it
    for client in (stranger, user_client):
        shown = page(client, reverse("import-detail", args=[file_import.pk]))
        assert "kvlab-upload-" not in shown and "aiperf_deep.json (aiperf): " in shown


def test_files_given_together_are_named_as_they_were_uploaded(user_client):
    deep = SimpleUploadedFile("profile_export_aiperf.json", AIPERF_DEEP)
    other = SimpleUploadedFile("inputs.json", b'{"data": []}')
    user_client.post(reverse("import-upload"), {"file": [deep, other]})
    reasons = [line.reason for fi in FileImport.objects.all() for line in fi.rejected_lines.all()]
    assert reasons and not any("kvlab-upload-" in r for r in reasons), reasons


@pytest.mark.parametrize(
    "reason, named",
    [
        ("/tmp/kvlab-upload-1f16h2oo/upload/aiperf_deep.json (aiperf): bad", "aiperf_deep.json (aiperf): bad"),
        ("/var/tmp/x/kvlab-upload-ab_c/upload-2/a b.json: bad", "a b.json: bad"),
        ("/tmp/kvlab-upload-q/upload (vllm): no run", f"{visibility.GIVEN_TOGETHER} (vllm): no run"),
        ("/tmp/kvlab-upload-q/upload/run1/results.json, record 3: bad", "run1/results.json, record 3: bad"),
        ("'/tmp/kvlab-upload-q/upload/a.json' and /tmp/kvlab-upload-q/upload/b.json", "'a.json' and b.json"),
        ("no path here, kvlab-upload- mentioned alone", "no path here, kvlab-upload- mentioned alone"),
    ],
)
def test_as_uploaded_names_each_temporary_path_by_its_file(reason, named):
    assert visibility.as_uploaded(reason) == named


def test_as_uploaded_costs_linear_time_on_hostile_text():
    import time

    unmatched = "x" * 50_000 + "kvlab-upload-" * 50_000
    matched = ("y" * 1_000 + " /tmp/kvlab-upload-a/upload/f.json") * 2_000
    started = time.process_time()
    assert visibility.as_uploaded(unmatched) == unmatched
    assert visibility.as_uploaded(matched) == ("y" * 1_000 + " f.json") * 2_000
    assert time.process_time() - started < 0.5


def test_a_stored_reason_from_before_is_shown_by_its_name(stranger, db):
    file_import = FileImport.objects.create(
        filename="old.json", sha256="0" * 64, size_bytes=1, origin="upload", status="rejected", n_rejected=1
    )
    file_import.rejected_lines.create(line_no=1, reason="/tmp/kvlab-upload-zz/upload/old.json (aiperf): bad")
    shown = page(stranger, reverse("import-detail", args=[file_import.pk]))
    assert "kvlab-upload-" not in shown and "old.json (aiperf): bad" in shown


def test_a_logged_in_user_who_is_not_staff_sees_the_names(jobs, db):
    client = Client()
    client.force_login(User.objects.create_user("bo", password="a-long-test-password"))
    assert SERVER_NAME in page(client, reverse("job-list"))
