"""Servers and jobs in the browser: who may do what, and what bad input gets."""

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from benchmarks.models import Job, Server
from kvlab.celery import app as celery_app

pytestmark = pytest.mark.django_db

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def staff_client(db):
    user = User.objects.create_user("root", password="a-long-test-password", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def server(db):
    return Server.objects.create(
        name="local", base_url="http://127.0.0.1:9", api_key=SECRET, launch_command="llama-server -c 1024"
    )


@pytest.fixture
def redis_down(settings):
    previous = celery_app.conf.broker_url
    celery_app.conf.broker_url = "redis://127.0.0.1:9/0"  # nothing listens on the discard port
    celery_app._after_fork()  # drop any pool built for another broker
    yield
    celery_app.conf.broker_url = previous
    celery_app._after_fork()


def test_only_staff_register_servers(client, user_client, staff_client):
    data = {"name": "gpu-1", "base_url": "http://127.0.0.1:9", "api_key": SECRET}
    assert client.post(reverse("server-new"), data).status_code == 302  # to the login page
    assert user_client.post(reverse("server-new"), data).status_code == 302  # to the admin login: not staff
    assert Server.objects.count() == 0
    response = staff_client.post(reverse("server-new"), data)
    server = Server.objects.get()
    assert response.status_code == 302 and response.url == reverse("server-detail", args=[server.pk])
    assert server.api_key == SECRET
    assert server.last_probe["reachable"] is False  # probed at once: nothing listens on port 9


def test_the_api_key_is_never_shown_back(staff_client, server):
    for url in (
        reverse("server-detail", args=[server.pk]),
        reverse("server-edit", args=[server.pk]),
        reverse("server-list"),
    ):
        body = staff_client.get(url).content.decode()
        assert SECRET not in body and SECRET[:8] not in body
    assert "••••cdef" in staff_client.get(reverse("server-detail", args=[server.pk])).content.decode()


def test_a_blank_key_on_edit_keeps_the_stored_one(staff_client, server):
    staff_client.post(
        reverse("server-edit", args=[server.pk]), {"name": "local", "base_url": "http://127.0.0.1:9", "api_key": ""}
    )
    server.refresh_from_db()
    assert server.api_key == SECRET


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://127.0.0.1/", "only http and https servers can be registered"),
        ("file:///etc/passwd", "Enter a valid URL"),
        ("http://10.1.2.3:8080", "outside KVLAB_SERVER_ALLOWLIST"),
        ("http://user:pw@127.0.0.1:8080", "credentials in the URL"),
        ("http://no-such-host.invalid:8080", "does not resolve"),
    ],
)
def test_servers_outside_the_allowlist_are_refused(staff_client, url, message):
    response = staff_client.post(reverse("server-new"), {"name": "x", "base_url": url})
    assert response.status_code == 400 and message in response.content.decode()
    assert Server.objects.count() == 0


def test_probe_needs_staff_and_post(user_client, staff_client, server):
    assert user_client.post(reverse("server-probe", args=[server.pk])).status_code == 302
    assert staff_client.get(reverse("server-probe", args=[server.pk])).status_code == 405
    assert staff_client.post(reverse("server-probe", args=[999])).status_code == 404


def test_jobs_need_a_login(client, server):
    response = client.post(reverse("job-new"), {"server": server.pk})
    assert response.status_code == 302 and reverse("login") in response.url
    assert Job.objects.count() == 0


def test_a_job_form_without_a_prompt_is_a_form_error(user_client, server):
    response = user_client.post(
        reverse("job-new"),
        {
            "server": server.pk,
            "prompt_source": "text",
            "n_predict": 8,
            "concurrency": 1,
            "requests": 1,
            "repeats": 1,
            "timeout_s": 5,
        },
    )
    assert response.status_code == 400 and "Paste the prompt to send." in response.content.decode()


def test_submitting_while_redis_is_down_says_so_and_stores_nothing(user_client, server, redis_down):
    response = user_client.post(
        reverse("job-new"),
        {
            "server": server.pk,
            "prompt_source": "synthetic",
            "prompt_tokens": 10,
            "n_predict": 8,
            "concurrency": 1,
            "requests": 1,
            "repeats": 1,
            "timeout_s": 5,
            "submit": "1",
        },
    )
    body = re.sub(r"\s+", " ", response.content.decode())
    assert response.status_code == 503 and "Nothing was submitted: the job queue (Redis) cannot be reached" in body
    assert Job.objects.count() == 0


def test_a_bad_prompt_file_names_the_line(user_client, server):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("p.jsonl", b'{"prompt": "ok"}\n{"text": "no prompt"}\n')
    response = user_client.post(
        reverse("job-new"),
        {
            "server": server.pk,
            "prompt_source": "file",
            "prompt_file": upload,
            "n_predict": 8,
            "concurrency": 1,
            "requests": 1,
            "repeats": 1,
            "timeout_s": 5,
        },
    )
    assert response.status_code == 400 and "Line 2 of the prompt file has no" in response.content.decode()


def test_cancelling_a_queued_job_ends_it_at_once(user, user_client, server, csrf_client):
    job = Job.objects.create(server=server, params={"requests": 1}, created_by=user)
    assert csrf_client.post(reverse("job-cancel", args=[job.pk])).status_code == 403  # no CSRF token
    assert user_client.get(reverse("job-cancel", args=[job.pk])).status_code == 405
    user_client.post(reverse("job-cancel", args=[job.pk]))
    job.refresh_from_db()
    assert job.state == "cancelled" and job.error == "cancelled before it ran"


def test_the_job_page_polls_until_the_job_ends(client, server):
    job = Job.objects.create(
        server=server, params={"requests": 2, "repeats": 1, "concurrency": 1, "n_predict": 4}, n_total=2
    )
    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    assert 'hx-trigger="every 1s"' in page and "0 of 2 done" in page
    Job.objects.filter(pk=job.pk).update(state="failed", error="the server is not reachable: refused")
    partial = client.get(reverse("job-detail", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()
    assert partial.strip().startswith('<section id="progress"') and "hx-trigger" not in partial
    assert "the server is not reachable: refused" in partial
    assert client.get(reverse("job-detail", args=[999])).status_code == 404


def test_the_job_page_says_how_requests_arrived_and_the_goodput_objectives(client, server):
    lengths = [100_003 + i for i in range(500)]  # a dataset's measured lengths: kept, not sent to the page
    params = {"requests": 40, "repeats": 2, "concurrency": 4, "n_predict": 64, "arrival": "poisson"}
    params |= {"rates": [0.5, 2.0], "seed": 7, "slo_ttft_ms": 250.0, "slo_tpot_ms": 40.5}
    params |= {"dataset": {"name": "chat.jsonl", "n": 40, "seed": 7, "lengths": lengths}}
    job = Job.objects.create(server=server, params=params, n_total=160)
    from benchmarks.models import Run

    for key in ("rate2.0", "rate0.5"):  # stored in the order they ran; the page keeps it
        Run.objects.create(key=f"job-{job.pk}-{key}", model="m.gguf", job=job)

    page = client.get(reverse("job-detail", args=[job.pk])).content.decode()
    text = re.sub(r"\s+", " ", page)
    assert "prompts sampled from <code>chat.jsonl</code>" in text
    assert "Poisson arrivals at 0.5, 2.0 req/s (one run per rate), seed 7, concurrency as the cap" in text
    assert "goodput objectives TTFT ≤ 250.0 ms TPOT ≤ 40.5 ms" in text
    assert "100003" not in page and "100,003" not in page
    assert page.index(f"job-{job.pk}-rate2.0") < page.index(f"job-{job.pk}-rate0.5")


def test_the_register_form_offers_the_catalogues_gpus_and_says_what_each_field_is_for(staff_client):
    from sizing import catalogue

    page = staff_client.get(reverse("server-new")).content.decode()
    assert '<label for="id_api_key">API key:</label>' in page and "Api key" not in page
    listed = re.search(r'<input[^>]*name="gpu"[^>]*list="([^"]+)"', page)
    assert listed, "the GPU box has no datalist"
    options = re.findall(
        r'<option value="([^"]*)">', page.split(f'<datalist id="{listed.group(1)}">')[1].split("</datalist>")[0]
    )
    assert options == [g.name for g in catalogue.gpus().values()]
    assert page.count('class="helptext"') == 7
    other = staff_client.post(
        reverse("server-new"), {"name": "box", "base_url": "http://127.0.0.1:9", "gpu": "MI300X (ours)"}
    )
    assert other.status_code == 302 and Server.objects.get().gpu == "MI300X (ours)"  # a name typed is kept as typed
